// The rendezvous service under abuse: calls without the job's token, made-up
// job ids, values and key counts past the limits, waits without end,
// connections that idle or never speak, and TLS. Real gRPC over loopback.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <grpcpp/grpcpp.h>

#include <climits>
#include <condition_variable>
#include <fstream>
#include <mutex>

#include "ddprun/v1/rendezvous.grpc.pb.h"
#include "rendezvous/client/client.h"
#include "rendezvous/server/handler.h"
#include "rendezvous/store/memory_store.h"
#include "rendezvous/server/server.h"
#include "support/test_certs.h"
#include "support/no_nccl.h"

namespace ddprun {
namespace {

using namespace std::chrono_literals;

using ddptest::no_nccl;

JoinArgs one_node(const std::string& job) {
  JoinArgs a;
  a.job_id = job;
  a.node.node_id = "n0";
  a.node.local_world_size = 1;
  a.timeout = 5s;
  return a;
}

// A server with a token whose job "job" an agent with the token has joined.
struct GuardedServer {
  explicit GuardedServer(ServiceLimits limits = {}, std::string token = "s3cret-token")
      : server(ServerOptions{"127.0.0.1", 0, {token, {}}, limits}, no_nccl) {
    RendezvousClient(server.address(), RendezvousAuth{token, {}}).join(one_node("job"));
  }
  RendezvousServer server;
};

int threads_in_this_process() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
  }
  return -1;
}

TEST(RendezvousAuth, CallsWithoutTheTokenOrWithAWrongOneAreRefusedAndChangeNothing) {
  GuardedServer g;
  auto& store = *g.server.registry().store("job");
  GrpcStore anonymous(g.server.address(), "job");
  GrpcStore wrong(g.server.address(), "job", std::nullopt, RendezvousAuth{"guess", {}});
  for (GrpcStore* s : {&anonymous, &wrong}) {
    try {
      s->set("gloo/addr/0", "junk");
      FAIL() << "set without the right token succeeded";
    } catch (const StoreError& e) {
      EXPECT_NE(std::string(e.what()).find("token"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("--rdzv-token"), std::string::npos) << e.what();
    }
    EXPECT_THROW(s->add("counter", 1), StoreError);
    EXPECT_THROW(s->get("gloo/addr/0", 50ms), StoreError);
  }
  EXPECT_EQ(store.size(), 0u);

  // Nor can a stranger join, keep a node alive, make it leave or create jobs.
  RendezvousClient stranger(g.server.address());
  try {
    stranger.join(one_node("other"));
    FAIL();
  } catch (const RendezvousCallError& e) {
    EXPECT_EQ(e.code(), grpc::StatusCode::UNAUTHENTICATED);
  }
  EXPECT_THROW(stranger.leave("job", "n0", LeaveKind::kFailed, "", 2s), RendezvousCallError);
  EXPECT_THROW(stranger.keep_alive("job", "n0", 2s), RendezvousCallError);
  EXPECT_EQ(g.server.registry().num_jobs(), 1u);
  EXPECT_EQ(g.server.registry().nodes_in_all_jobs(), 1u);

  GrpcStore member(g.server.address(), "job", std::nullopt, RendezvousAuth{"s3cret-token", {}});
  member.set("k", "v");
  EXPECT_EQ(member.get("k", 1s), "v");
}

TEST(RendezvousAuth, TokensCompareWholly) {
  EXPECT_TRUE(tokens_equal("abc", "abc"));
  EXPECT_FALSE(tokens_equal("abc", "abd"));
  EXPECT_FALSE(tokens_equal("abc", "ab"));
  EXPECT_FALSE(tokens_equal("abc", "abcd"));
  EXPECT_FALSE(tokens_equal("abc", ""));
  EXPECT_NE(random_token(), random_token());
  EXPECT_EQ(random_token().size(), 64u);
  EXPECT_THROW(check_token_form(""), AuthConfigError);
  EXPECT_THROW(check_token_form("has space"), AuthConfigError);
  EXPECT_THROW(check_token_form("new\nline"), AuthConfigError);
  EXPECT_NO_THROW(check_token_form(random_token()));
}

TEST(RendezvousLimits, StoresOfJobsNoAgentJoinedAreRefused) {
  GuardedServer g({}, "");
  GrpcStore made_up(g.server.address(), "made-up");
  try {
    made_up.set("k", "v");
    FAIL();
  } catch (const StoreError& e) {
    EXPECT_NE(std::string(e.what()).find("no job 'made-up'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(made_up.get("k", 10ms), StoreError);
  EXPECT_EQ(g.server.registry().num_jobs(), 1u);
}

TEST(RendezvousLimits, ValuesKeysAndBytesAreBoundedAndARefusedWriteChangesNothing) {
  ServiceLimits limits;
  limits.max_value_bytes = 1000;
  limits.max_job_keys = 3;
  limits.max_job_bytes = 2500;
  GuardedServer g(limits, "");
  GrpcStore s(g.server.address(), "job");
  try {
    s.set("big", std::string(1001, 'x'));
    FAIL();
  } catch (const StoreError& e) {
    EXPECT_NE(std::string(e.what()).find("max_value_bytes"), std::string::npos) << e.what();
  }
  try {
    s.set(std::string(5000, 'k'), "v");
    FAIL();
  } catch (const StoreError& e) {
    EXPECT_NE(std::string(e.what()).find("at most 4096"), std::string::npos) << e.what();
  }
  s.set("a", std::string(1000, 'a'));
  s.set("b", std::string(1000, 'b'));
  try {
    s.set("c", std::string(1000, 'c'));  // 3003 bytes in all
    FAIL();
  } catch (const StoreError& e) {
    EXPECT_NE(std::string(e.what()).find("max_job_bytes"), std::string::npos) << e.what();
  }
  s.set("a", "small");  // replacing a value frees its bytes
  s.set("c", std::string(1000, 'c'));
  try {
    s.set("d", "1");
    FAIL();
  } catch (const StoreError& e) {
    EXPECT_NE(std::string(e.what()).find("max_job_keys"), std::string::npos) << e.what();
  }
  EXPECT_EQ(g.server.registry().store("job")->size(), 3u);
  EXPECT_EQ(s.get("a", 1s), "small");
}

TEST(RendezvousLimits, AddRefusesToOverflow) {
  MemoryStore s;
  EXPECT_EQ(s.add("n", INT64_MAX), INT64_MAX);
  try {
    s.add("n", 1);
    FAIL();
  } catch (const StoreError& e) {
    EXPECT_NE(std::string(e.what()).find("overflow"), std::string::npos) << e.what();
  }
  EXPECT_EQ(s.add("n", 0), INT64_MAX);
  EXPECT_EQ(s.add("m", INT64_MIN), INT64_MIN);
  EXPECT_THROW(s.add("m", -1), StoreError);
}

TEST(RendezvousLimits, JobsAreBoundedAndFinishedOnesMakeRoom) {
  ServiceLimits limits;
  limits.max_jobs = 2;
  RendezvousServer server(ServerOptions{"127.0.0.1", 0, {}, limits}, no_nccl);
  RendezvousClient c(server.address());
  c.join(one_node("j1"));
  c.join(one_node("j2"));
  try {
    c.join(one_node("j3"));
    FAIL();
  } catch (const RendezvousCallError& e) {
    EXPECT_EQ(e.code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    EXPECT_NE(std::string(e.what()).find("max_jobs"), std::string::npos) << e.what();
  }
  c.leave("j1", "n0", LeaveKind::kSucceeded, "", 2s);
  EXPECT_NO_THROW(c.join(one_node("j3")));
}

// Many Get calls in flight at once, on a callback client.
struct PendingGets {
  std::mutex mu;
  std::condition_variable cv;
  int finished = 0;
  std::map<grpc::StatusCode, int> codes;
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<v1::GetResponse>> responses;

  void start(v1::Rendezvous::Stub& stub, const std::string& job, int n, int64_t timeout_ms) {
    for (int i = 0; i < n; ++i) {
      v1::GetRequest req;
      req.set_job_id(job);
      req.set_key("never-" + std::to_string(i));
      req.set_timeout_ms(timeout_ms);
      contexts.push_back(std::make_unique<grpc::ClientContext>());
      responses.push_back(std::make_unique<v1::GetResponse>());
      stub.async()->Get(contexts.back().get(), &req, responses.back().get(),
                        [this](grpc::Status s) {
                          std::lock_guard lock(mu);
                          ++finished;
                          ++codes[s.error_code()];
                          cv.notify_all();
                        });
    }
  }
  void await(int n) {
    std::unique_lock lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, 30s, [&] { return finished >= n; })) << finished << " of " << n;
  }
};

TEST(RendezvousLimits, ParkedWaitsHoldNoThreadAreBoundedPerClientAndCancellingFreesThem) {
  ServiceLimits limits;
  limits.max_waits_per_client = 300;
  GuardedServer g(limits, "");
  auto stub = v1::Rendezvous::NewStub(make_rendezvous_channel(g.server.address()));
  const int threads_before = threads_in_this_process();
  PendingGets gets;
  gets.start(*stub, "job", 400, 600000);
  gets.await(100);  // the 100 past the limit are refused at once
  EXPECT_EQ(gets.codes[grpc::StatusCode::RESOURCE_EXHAUSTED], 100);
  auto& store = *g.server.registry().store("job");
  // Every accepted wait is parked, none holds a thread of its own.
  for (int i = 0; i < 1000 && store.num_watches() < 300; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(store.num_watches(), 300u);
  EXPECT_EQ(g.server.handler().parked_waits(), 300u);
  EXPECT_LT(threads_in_this_process() - threads_before, 50);
  // Clients that give up take their waits back.
  for (auto& ctx : gets.contexts) ctx->TryCancel();
  gets.await(400);
  EXPECT_EQ(gets.codes[grpc::StatusCode::CANCELLED], 300);
  EXPECT_TRUE(g.server.handler().await_parked_waits_at_most(0, 30s));
  EXPECT_EQ(store.num_watches(), 0u);
  EXPECT_EQ(g.server.handler().parked_waits(), 0u);
}

TEST(RendezvousLimits, AParkedWaitTimesOutOrIsAnsweredBySet) {
  GuardedServer g({}, "");
  auto stub = v1::Rendezvous::NewStub(make_rendezvous_channel(g.server.address()));
  PendingGets gets;
  gets.start(*stub, "job", 2, 100);
  gets.await(2);
  EXPECT_EQ(gets.codes[grpc::StatusCode::DEADLINE_EXCEEDED], 2);
  GrpcStore s(g.server.address(), "job");
  std::thread setter([&] { s.set("late", "here"); });
  EXPECT_EQ(s.get("late", 10s), "here");
  setter.join();
  // Places are given back when gRPC is done with a call, just after the
  // client has its answer.
  EXPECT_TRUE(g.server.handler().await_parked_waits_at_most(0, 30s))
      << g.server.handler().parked_waits() << " still parked";
}

TEST(RendezvousLimits, IdleConnectionsAreClosed) {
  ServiceLimits limits;
  limits.idle_timeout = 300ms;
  limits.handshake_timeout = 300ms;
  GuardedServer g(limits, "");
  // A gRPC connection with no call in flight: the service says goodbye.
  auto channel = make_rendezvous_channel(g.server.address());
  GrpcStore(g.server.address(), "job").set("k", "v");
  auto stub = v1::Rendezvous::NewStub(channel);
  v1::AddRequest req;
  req.set_job_id("job");
  req.set_key("n");
  req.set_delta(1);
  v1::AddResponse resp;
  grpc::ClientContext ctx;
  ASSERT_TRUE(stub->Add(&ctx, req, &resp).ok());
  ASSERT_EQ(channel->GetState(false), GRPC_CHANNEL_READY);
  EXPECT_TRUE(channel->WaitForStateChange(GRPC_CHANNEL_READY, std::chrono::system_clock::now() + 20s));
  EXPECT_NE(channel->GetState(false), GRPC_CHANNEL_READY);

  // A TCP connection that never speaks gRPC is closed too.
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(g.server.port()));
  inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  pollfd p{fd, POLLIN, 0};
  ASSERT_EQ(poll(&p, 1, 20000), 1) << "the silent connection was not closed";
  char buf[256];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) {
  }
  EXPECT_EQ(n, 0);
  close(fd);
}

class TlsFixture : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { certs_ = std::make_unique<ddptest::TestCerts>(); }
  static void TearDownTestSuite() { certs_.reset(); }
  static std::string f(const std::string& name) { return certs_->file(name); }
  static TlsFiles pair(const std::string& who, const std::string& ca) {
    return TlsFiles{f(who + ".pem"), f(who + ".key"), ca.empty() ? "" : f(ca + ".pem")};
  }
  static inline std::unique_ptr<ddptest::TestCerts> certs_;
};

// One call, not waiting for a connection that TLS refuses.
bool can_call(const std::string& address, const TlsFiles& tls) {
  auto stub = v1::Rendezvous::NewStub(make_rendezvous_channel(address, tls));
  v1::KeepAliveRequest req;
  req.set_job_id("tls-job");
  req.set_node_id("n0");
  v1::KeepAliveResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 10s);
  return stub->KeepAlive(&ctx, req, &resp).ok();
}

TEST_F(TlsFixture, MutualTlsAdmitsOnlyClientsWithTheCasCertificate) {
  RendezvousServer server(ServerOptions{"127.0.0.1", 0, {"", pair("server", "ca")}, {}}, no_nccl);
  EXPECT_TRUE(can_call(server.address(), pair("client", "ca")));
  EXPECT_FALSE(can_call(server.address(), TlsFiles{"", "", f("ca.pem")}))
      << "a client without a certificate got in";
  EXPECT_FALSE(can_call(server.address(), pair("stranger", "ca")))
      << "a certificate from another CA got in";
  EXPECT_FALSE(can_call(server.address(), TlsFiles{})) << "a plain-text client got in";
}

TEST_F(TlsFixture, ClientsVerifyTheService) {
  RendezvousServer server(ServerOptions{"127.0.0.1", 0, {"", pair("server", "")}, {}}, no_nccl);
  EXPECT_TRUE(can_call(server.address(), TlsFiles{"", "", f("ca.pem")}));
  EXPECT_FALSE(can_call(server.address(), TlsFiles{"", "", f("other.pem")}))
      << "the client trusted a service its CA did not sign";
}

TEST_F(TlsFixture, UnusableFilesAreNamed) {
  try {
    RendezvousServer server(ServerOptions{"127.0.0.1", 0, {"", {f("nope.pem"), f("server.key"), ""}}, {}},
                            no_nccl);
    FAIL();
  } catch (const AuthConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("nope.pem"), std::string::npos) << e.what();
  }
  EXPECT_THROW(RendezvousServer(ServerOptions{"127.0.0.1", 0, {"", {f("server.pem"), "", ""}}, {}},
                                no_nccl),
               AuthConfigError);
  EXPECT_THROW(RendezvousServer(ServerOptions{"127.0.0.1", 0, {"", {f("server.ext"), f("server.key"), ""}}, {}},
                                no_nccl),
               AuthConfigError);
}

}  // namespace
}  // namespace ddprun
