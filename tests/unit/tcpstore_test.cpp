// The c10d TCPStore protocol: codec round trips for both generations, the
// server's limits and parked waits, and byte sequences of PyTorch 2.x.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <future>
#include <thread>

#include "tcpstore/client.h"
#include "tcpstore/codec.h"
#include "tcpstore/server.h"

namespace ddprun::tcpstore {
namespace {

using namespace std::chrono_literals;

std::vector<Request> every_request(Version v) {
  std::vector<Request> all;
  auto add = [&](Op op, std::vector<std::string> k, std::vector<std::string> vals = {},
                 int64_t delta = 0, uint32_t number = 0) {
    if (!op_code(v, op)) return;
    all.push_back(Request{op, std::move(k), std::move(vals), delta, number});
  };
  add(Op::kValidate, {}, {}, 0, kValidationMagic);
  add(Op::kPing, {}, {}, 0, 0xdeadbeef);
  add(Op::kSet, {"/k"}, {std::string("v\0w", 3)});
  add(Op::kCompareSet, {"/k"}, {"", "new"});
  add(Op::kGet, {"/k"});
  add(Op::kAdd, {"/n"}, {}, -7);
  add(Op::kCheck, {"/a", "/b"});
  add(Op::kWait, {"/a", "/b", "/c"});
  add(Op::kNumKeys, {});
  add(Op::kWatchKey, {"/w"});
  add(Op::kDeleteKey, {"/k"});
  add(Op::kAppend, {"/k"}, {"more"});
  add(Op::kMultiGet, {"/a", "/b"});
  add(Op::kMultiSet, {"/a", "/b"}, {"1", "2"});
  add(Op::kCancelWait, {});
  return all;
}

void expect_round_trip(Version v) {
  const WireLimits limits;
  for (const Request& r : every_request(v)) {
    SCOPED_TRACE(op_name(r.op));
    const std::string bytes = encode_request(v, r);
    // Every strict prefix needs more; the whole decodes to the same request.
    for (size_t n = 0; n < bytes.size(); ++n) {
      Request out;
      ASSERT_EQ(parse_request(v, std::string_view(bytes).substr(0, n), limits, out).status,
                Parse::kNeedMore)
          << "prefix of " << n << " bytes";
    }
    Request out;
    ParseResult p = parse_request(v, bytes + "trailing", limits, out);
    ASSERT_EQ(p.status, Parse::kDone);
    EXPECT_EQ(p.used, bytes.size());
    EXPECT_EQ(out.op, r.op);
    EXPECT_EQ(out.keys, r.keys);
    EXPECT_EQ(out.values, r.values);
    EXPECT_EQ(out.delta, r.delta);
    EXPECT_EQ(out.number, r.number);
  }
}

TEST(TcpStoreCodec, EveryRequestRoundTripsInV1) { expect_round_trip(Version::kV1); }
TEST(TcpStoreCodec, EveryRequestRoundTripsInV2) { expect_round_trip(Version::kV2); }

TEST(TcpStoreCodec, CommandNumbersFollowPyTorch) {
  // 1.13: SET=0 COMPARE_SET=1 GET=2 ADD=3 CHECK=4 WAIT=5 GETNUMKEYS=6 WATCH_KEY=7 DELETE_KEY=8.
  EXPECT_EQ(*op_code(Version::kV1, Op::kSet), 0);
  EXPECT_EQ(*op_code(Version::kV1, Op::kWait), 5);
  EXPECT_EQ(*op_code(Version::kV1, Op::kWatchKey), 7);
  EXPECT_EQ(*op_code(Version::kV1, Op::kDeleteKey), 8);
  EXPECT_EQ(*op_code(Version::kV1, Op::kCancelWait), 12);
  EXPECT_FALSE(op_code(Version::kV1, Op::kPing));
  // 2.x: VALIDATE=0 in front, WATCH_KEY gone, PING=13.
  EXPECT_EQ(*op_code(Version::kV2, Op::kValidate), 0);
  EXPECT_EQ(*op_code(Version::kV2, Op::kSet), 1);
  EXPECT_EQ(*op_code(Version::kV2, Op::kDeleteKey), 8);
  EXPECT_EQ(*op_code(Version::kV2, Op::kPing), 13);
  EXPECT_FALSE(op_code(Version::kV2, Op::kWatchKey));
}

TEST(TcpStoreCodec, VersionIsToldByTheFirstBytes) {
  EXPECT_FALSE(detect_version(""));
  EXPECT_EQ(detect_version(std::string("\x03", 1)), Version::kV1);  // 1.13 ADD
  EXPECT_FALSE(detect_version(std::string("\x00\xce\xf7", 3)));     // too short to tell
  EXPECT_EQ(detect_version(std::string("\x00\xce\xf7\x85\x3c", 5)), Version::kV2);
  // A 1.13 SET of a 2-byte key: command 0, then the length 2.
  EXPECT_EQ(detect_version(std::string("\x00\x02\x00\x00\x00\x00\x00\x00\x00", 9)), Version::kV1);
}

TEST(TcpStoreCodec, LengthsPastTheLimitsAreRefusedBeforeTheirBytes) {
  WireLimits limits;
  limits.max_value_bytes = 100;
  Writer w;
  w.u8(*op_code(Version::kV1, Op::kSet));
  w.u64(5000);  // a key of 5000 bytes: only its length has arrived
  Request out;
  ParseResult p = parse_request(Version::kV1, w.str(), limits, out);
  EXPECT_EQ(p.status, Parse::kBad);
  EXPECT_NE(p.error.find("key of 5000 bytes"), std::string::npos) << p.error;

  Writer v;
  v.u8(*op_code(Version::kV2, Op::kSet));
  v.bytes("/k");
  v.u64(101);
  p = parse_request(Version::kV2, v.str(), limits, out);
  EXPECT_EQ(p.status, Parse::kBad);
  EXPECT_NE(p.error.find("max_value_bytes"), std::string::npos) << p.error;

  p = parse_request(Version::kV2, std::string("\x2a", 1), limits, out);
  EXPECT_EQ(p.status, Parse::kBad);
  EXPECT_NE(p.error.find("unknown command 42"), std::string::npos) << p.error;
}

// --- Against a live server ------------------------------------------------

struct Logged {
  std::mutex mu;
  std::vector<std::string> lines;
  std::function<void(const std::string&)> sink() {
    return [this](const std::string& l) {
      std::lock_guard lock(mu);
      lines.push_back(l);
    };
  }
  std::string all() {
    std::lock_guard lock(mu);
    std::string s;
    for (auto& l : lines) s += l + "\n";
    return s;
  }
};

std::unique_ptr<Server> serve(Logged& log, ServiceLimits limits = {}) {
  ServerOptions o;
  o.host = "127.0.0.1";
  o.limits = limits;
  o.log = log.sink();
  return std::make_unique<Server>(o);
}

std::unique_ptr<Client> client(const Server& s, std::optional<Version> v) {
  ClientOptions o;
  o.port = s.port();
  o.version = v;
  o.connect_timeout = 5s;
  return std::make_unique<Client>(o);
}

size_t parked(Server& s) {
  size_t n = 0;
  s.inspect([&](const KeySpace& k) { n = k.parked(); });
  return n;
}

// Whether the server comes to hold n parked requests within 5 s (the
// requests are on their way through sockets).
bool parks(Server& s, size_t n) {
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (parked(s) != n) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::yield();
  }
  return true;
}
size_t num_keys(Server& s) {
  size_t n = 0;
  s.inspect([&](const KeySpace& k) { n = k.size(); });
  return n;
}

class TcpStoreBothVersions : public ::testing::TestWithParam<Version> {};

TEST_P(TcpStoreBothVersions, EveryOperation) {
  Logged log;
  auto server = serve(log);
  auto c = client(*server, GetParam());
  EXPECT_EQ(c->version(), GetParam());
  c->set("a", std::string("x\0y", 3));
  EXPECT_EQ(c->get("a", 1s), std::string("x\0y", 3));
  EXPECT_EQ(c->add("n", 5), 5);
  EXPECT_EQ(c->add("n", -2), 3);
  EXPECT_EQ(c->get("n", 1s), "3");
  EXPECT_EQ(c->compare_set("cs", "", "first"), "first");
  EXPECT_EQ(c->compare_set("cs", "wrong", "second"), "first");
  EXPECT_EQ(c->compare_set("cs", "first", "second"), "second");
  EXPECT_EQ(c->compare_set("absent", "x", "y"), "x");  // as PyTorch: the expectation back
  EXPECT_TRUE(c->check({"a", "n"}));
  EXPECT_FALSE(c->check({"a", "nothing"}));
  EXPECT_EQ(c->num_keys(), 3);
  EXPECT_TRUE(c->delete_key("cs"));
  EXPECT_FALSE(c->delete_key("cs"));
  c->append("ap", "12");
  c->append("ap", "34");
  EXPECT_EQ(c->get("ap", 1s), "1234");
  c->multi_set({"m1", "m2"}, {"one", "two"});
  EXPECT_EQ(c->multi_get({"m1", "m2"}, 1s), (std::vector<std::string>{"one", "two"}));
  if (GetParam() == Version::kV2) c->ping();
  EXPECT_EQ(log.all(), "");
}

TEST_P(TcpStoreBothVersions, WaitIsParkedAndAnsweredWhenTheLastKeyArrives) {
  Logged log;
  auto server = serve(log);
  auto waiter = client(*server, GetParam());
  auto writer = client(*server, GetParam());
  auto done = std::async(std::launch::async, [&] { waiter->wait({"k1", "k2"}, 10s); });
  ASSERT_TRUE(parks(*server, 2)) << parked(*server);
  writer->set("k1", "1");
  EXPECT_EQ(done.wait_for(50ms), std::future_status::timeout);
  EXPECT_EQ(parked(*server), 1u);
  writer->set("k2", "2");
  done.get();
  EXPECT_EQ(parked(*server), 0u);
}

TEST_P(TcpStoreBothVersions, WaitTimesOutAndTheConnectionStaysUsable) {
  Logged log;
  auto server = serve(log);
  auto c = client(*server, GetParam());
  EXPECT_THROW(c->wait({"never"}, 100ms), StoreTimeout);
  // v2 cancels the wait; v1 closes the connection, which the server sees a
  // moment later.
  EXPECT_TRUE(parks(*server, 0)) << "a timed-out wait must not stay parked";
  c->set("k", "v");
  EXPECT_EQ(c->get("k", 1s), "v");
}

INSTANTIATE_TEST_SUITE_P(Versions, TcpStoreBothVersions,
                         ::testing::Values(Version::kV1, Version::kV2),
                         [](const auto& info) { return info.param == Version::kV1 ? "V1" : "V2"; });

int thread_count() {
  int n = 0;
  DIR* d = opendir("/proc/self/task");
  while (dirent* e = readdir(d)) n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

TEST(TcpStoreServer, ManyParkedWaitsHoldNoThreads) {
  Logged log;
  auto server = serve(log);
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < 100; ++i) clients.push_back(client(*server, Version::kV2));
  // Raw WAITs (the clients' own wait() would block a thread each here).
  std::vector<int> fds;
  for (int i = 0; i < 100; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(server->port()));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    Request r;
    r.op = Op::kWait;
    r.keys = {"go"};
    const std::string b = encode_request(Version::kV1, r);
    ASSERT_EQ(::send(fd, b.data(), b.size(), 0), static_cast<ssize_t>(b.size()));
    fds.push_back(fd);
  }
  const int threads = thread_count();
  ASSERT_TRUE(parks(*server, 100)) << parked(*server);
  EXPECT_EQ(thread_count(), threads);
  clients[0]->set("go", "1");
  for (int fd : fds) {
    char b = 9;
    ASSERT_EQ(recv(fd, &b, 1, 0), 1);
    EXPECT_EQ(b, static_cast<char>(kStopWaiting));
    close(fd);
  }
}

TEST(TcpStoreServer, ClientsBreakingLimitsAreCutOffAndChangeNothing) {
  Logged log;
  ServiceLimits limits;
  limits.max_value_bytes = 1000;
  limits.max_job_keys = 3;
  limits.max_job_bytes = 1 << 20;
  auto server = serve(log, limits);
  auto good = client(*server, Version::kV2);
  good->set("k", "v");
  {
    auto big = client(*server, Version::kV2);
    big->set("big", std::string(1001, 'x'));
    EXPECT_THROW(big->num_keys(), StoreError);
  }
  {
    auto long_key = client(*server, Version::kV1);
    long_key->set(std::string(4097, 'k'), "v");
    EXPECT_THROW(long_key->num_keys(), StoreError);
  }
  {
    auto many = client(*server, Version::kV2);
    many->set("k2", "v");
    many->set("k3", "v");
    many->set("k4", "v");  // the fourth key
    EXPECT_THROW(many->num_keys(), StoreError);
  }
  EXPECT_EQ(good->num_keys(), 3);
  EXPECT_FALSE(good->check({"big"}));
  EXPECT_FALSE(good->check({"k4"}));
  const std::string lines = log.all();
  EXPECT_NE(lines.find("max_value_bytes"), std::string::npos) << lines;
  EXPECT_NE(lines.find("key of 4097 bytes"), std::string::npos) << lines;
  EXPECT_NE(lines.find("max_job_keys"), std::string::npos) << lines;
}

TEST(TcpStoreServer, ABusyPortIsAListenErrorNamingIt) {
  Logged log;
  auto first = serve(log);
  ServerOptions o;
  o.host = "127.0.0.1";
  o.port = first->port();
  try {
    Server second(o);
    FAIL() << "bound a port in use";
  } catch (const ListenError& e) {
    EXPECT_NE(std::string(e.what()).find(std::to_string(first->port())), std::string::npos);
    EXPECT_EQ(e.error_number(), EADDRINUSE);
  }
}

TEST(TcpStoreServer, DropsTheKeysOfEarlierAttempts) {
  EXPECT_EQ(attempt_of_key("//worker/attempt_3/rank0"), 3);
  EXPECT_EQ(attempt_of_key("/worker/attempt_12/x"), 12);
  EXPECT_EQ(attempt_of_key("/worker/attempt_/x"), -1);
  EXPECT_EQ(attempt_of_key("init/"), -1);
  Logged log;
  auto server = serve(log);
  auto c = client(*server, Version::kV1);
  c->set("//worker/attempt_0/a", "0");
  c->set("//worker/attempt_1/a", "1");
  c->set("/worker/attempt_2/a", "2");
  c->set("init/", "4");
  EXPECT_EQ(c->num_keys(), 4);  // a reply: the sets have been handled
  server->drop_attempts_before(2);
  EXPECT_EQ(num_keys(*server), 2u);
  EXPECT_TRUE(c->check({"/worker/attempt_2/a", "init/"}));
}

// --- Byte sequences of PyTorch 2.x ----------------------------------------
// Derived from pytorch/pytorch at commit 01afc5c9c6fc20537882b772c58b292f9c2c8d42,
// torch/csrc/distributed/c10d/TCPStoreLibUvBackend.cpp (UvClient::processBuf
// and the parse_*_command handlers: little-endian values, uint64 lengths,
// one-byte WAIT/CHECK replies), the QueryType enum of TCPStoreBackend.hpp
// (VALIDATE=0 ... CANCEL_WAIT=12, PING=13) and TCPStore::validate()/ping()
// of TCPStore.cpp (VALIDATE + 0x3C85F7CE, then PING with the pid as nonce).
// TCPStore::set() prefixes keys with "/". No PyTorch 2.x is installed here,
// so these bytes are written from that source, not captured.

std::string hex_bytes(std::initializer_list<int> b) {
  std::string s;
  for (int x : b) s.push_back(static_cast<char>(x));
  return s;
}

class RawConn {
 public:
  explicit RawConn(int port) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) throw std::runtime_error("connect");
  }
  ~RawConn() { close(fd_); }
  void send(const std::string& b) { ASSERT_EQ(::send(fd_, b.data(), b.size(), 0), (ssize_t)b.size()); }
  std::string recv(size_t n) {
    std::string out(n, '\0');
    size_t got = 0;
    while (got < n) {
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, 2000) != 1) break;
      ssize_t k = ::recv(fd_, out.data() + got, n - got, 0);
      if (k <= 0) break;
      got += k;
    }
    out.resize(got);
    return out;
  }
  bool closed_by_peer() {
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, 2000) != 1) return false;
    char b;
    return ::recv(fd_, &b, 1, 0) == 0;
  }

 private:
  int fd_ = -1;
};

// (What PyTorch 2.x's client sends is tested with the real one:
// tests/integration/tcpstore_interop_test.cpp in the PyTorch 2.x lane.)
TEST(TcpStoreV2Bytes, AWrongMagicOrAnUnknownCommandInV2ClosesTheConnection) {
  Logged log;
  auto server = serve(log);
  auto validate = [](uint32_t magic) {
    Writer w;
    w.u8(*op_code(Version::kV2, Op::kValidate));
    w.u32(magic);
    return w.take();
  };
  {
    RawConn c(server->port());
    c.send(validate(kValidationMagic));
    c.send(validate(0x04030201));  // a second VALIDATE, wrong magic
    EXPECT_TRUE(c.closed_by_peer());
  }
  {
    RawConn c(server->port());
    c.send(validate(kValidationMagic));
    c.send(std::string(1, static_cast<char>(0xEE)));  // not a command of any version
    EXPECT_TRUE(c.closed_by_peer());
  }
  {
    // PyTorch 2.x's LIST_KEYS (17): named, so a user knows what to avoid.
    RawConn c(server->port());
    c.send(validate(kValidationMagic));
    c.send(std::string(1, static_cast<char>(17)));
    EXPECT_TRUE(c.closed_by_peer());
  }
  EXPECT_NE(log.all().find("wrong magic"), std::string::npos) << log.all();
  EXPECT_NE(log.all().find("command LIST_KEYS (17, PyTorch 2.x) is not served"), std::string::npos) << log.all();
}

TEST(TcpStoreV1Bytes, WatchKeyTellsTheCallbackConnection) {
  // PyTorch 1.13's callback client: WATCH_KEY (7) → KEY_CALLBACK_REGISTERED
  // (3); then each change: event, key, old value, new value.
  Logged log;
  auto server = serve(log);
  RawConn watcher(server->port());
  watcher.send(hex_bytes({0x07, 2, 0, 0, 0, 0, 0, 0, 0, '/', 'w'}));
  EXPECT_EQ(watcher.recv(1), hex_bytes({0x03}));
  auto c = client(*server, Version::kV1);
  c->set("/w", "a");
  EXPECT_EQ(watcher.recv(1 + 10 + 8 + 9),
            hex_bytes({0x01, 2, 0, 0, 0, 0, 0, 0, 0, '/', 'w', 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0,
                       0, 0, 0, 0, 'a'}));
}

TEST(TcpStoreClient, ProbesTheVersionAndRetriesARefusedConnection) {
  // Find a free port, then start the server there only after the client tries.
  int port = 0;
  {
    Logged log;
    port = serve(log)->port();
  }
  Logged log;
  std::unique_ptr<Server> server;
  auto later = std::async(std::launch::async, [&] {
    std::this_thread::sleep_for(200ms);  // the server comes up late, on purpose
    ServerOptions o;
    o.host = "127.0.0.1";
    o.port = port;
    o.log = log.sink();
    server = std::make_unique<Server>(o);
  });
  ClientOptions o;
  o.port = port;
  o.connect_timeout = 5s;
  const auto t0 = std::chrono::steady_clock::now();
  Client c(o);
  const auto took = std::chrono::steady_clock::now() - t0;
  later.get();
  EXPECT_EQ(c.version(), Version::kV1);  // our server answers the v1 probe
  EXPECT_LT(took, 800ms) << "retries must be short, not PyTorch's 1 s";
  c.set("k", "v");
  EXPECT_EQ(c.get("k", 1s), "v");
}

}  // namespace
}  // namespace ddprun::tcpstore
