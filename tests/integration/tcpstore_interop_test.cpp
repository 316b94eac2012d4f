// The c10d store end to end: PyTorch 1.13 scripts against the store ddprun's
// agent hosts, our client against PyTorch's own TCPStore server, and a
// worker_lib program under torchrun and under hand-set variables.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <regex>

#include "support/job_helpers.h"
#include "support/process.h"
#include "tcpstore/client.h"

namespace {

using namespace ddptest;
using namespace std::chrono_literals;

using ddptest::ddprun;

// A socket listening on a free loopback port (the port stays taken while it lives).
struct Listener {
  int fd = -1;
  int port = 0;
  Listener() {
    fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    socklen_t len = sizeof(a);
    if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || listen(fd, 4) != 0 ||
        getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      throw std::runtime_error("cannot listen on a free port");
    }
    port = ntohs(a.sin_port);
  }
  ~Listener() { close(fd); }
};

const EnvChanges kPython = {"DDPRUN_PYTHON=" PYTHON_BIN};

TEST(AgentStore, PytorchStoreOpsAndInitProcessGroupMeetInTheAgentsStore) {
  Finished f = run(ddprun({"--nproc", "3", TCPSTORE_SCRIPT, "ops"}), kPython);
  ASSERT_EQ(f.exit_code, 0) << f.out << f.err;
  EXPECT_TRUE(contains(f.out, "[rank0]:store ops ok")) << f.out;
  for (int r = 0; r < 3; ++r) {
    EXPECT_TRUE(contains(f.out, "[rank" + std::to_string(r) + "]:all_reduce ok on rank " +
                                    std::to_string(r) + " of 3: 6"))
        << f.out;
  }
  // Rank 0's oversized value, and nothing else, was refused, with a line saying why.
  EXPECT_TRUE(contains(f.err, "worker store: closing the connection from 127.0.0.1:")) << f.err;
  EXPECT_TRUE(contains(f.err, "sends a value of 2097152 bytes, more than 1048576 (--rdzv-conf "
                              "max_value_bytes)"))
      << f.err;
  // ddprun's own warnings and errors, that is: PyTorch 2.x's client has its
  // own say about the timed-out wait and the cut connection on the workers'
  // stderr.
  std::vector<std::string> ours;
  for (const auto& l : lines(f.err)) {
    if (l.rfind("[rank", 0) != 0 && (contains(l, "warning") || contains(l, "error"))) ours.push_back(l);
  }
  ASSERT_EQ(ours.size(), 1u) << f.err;
  EXPECT_TRUE(contains(ours[0], "worker store: closing the connection from")) << f.err;
}

TEST(AgentStore, ARestartStartsFromAFreshKeySpace) {
  Finished f = run(ddprun({"--nproc", "2", "--max-restarts", "1", TCPSTORE_SCRIPT, "restart"}), kPython);
  ASSERT_EQ(f.exit_code, 0) << f.out << f.err;
  EXPECT_TRUE(contains(f.out, "[rank1]:rank 1 fails on purpose")) << f.out;
  EXPECT_TRUE(contains(f.out, "[rank0]:fresh key space on attempt 1")) << f.out;
  EXPECT_TRUE(contains(f.out, "[rank1]:fresh key space on attempt 1")) << f.out;
  EXPECT_TRUE(contains(f.out, "[rank1]:all_reduce ok on rank 1 of 2: 3")) << f.out;
}

TEST(AgentStore, ABusyMasterPortIsAOneLineUsageError) {
  Listener busy;
  Finished f = run(ddprun({"--nproc", "1", "--master-port", std::to_string(busy.port), "/bin/true"}));
  EXPECT_EQ(f.exit_code, 2) << f.out << f.err;
  EXPECT_EQ(lines(f.err).size(), 1u) << f.err;
  EXPECT_TRUE(contains(f.err, "ddprun: error: --master-port: cannot listen on")) << f.err;
  EXPECT_TRUE(contains(f.err, std::to_string(busy.port))) << f.err;
}

// Our client against PyTorch's own server: 1.13's (which answers the
// protocol of 1.13), 2.x's classic one and its libuv one (the default since
// 2.4), which speak 2.x's.
void talk_to_pytorchs_server(const std::string& server) {
  Process host({PYTHON_BIN, TCPSTORE_SCRIPT, "host", server});
  auto line = host.wait_for_line([](const std::string& l) { return l.rfind("port ", 0) == 0; }, 60s);
  if (!line) {
    Finished f = host.finish(10s);
    if (f.exit_code == 77) GTEST_SKIP() << f.out;
    FAIL() << f.out << f.err;
  }
  std::smatch m;
  ASSERT_TRUE(std::regex_match(*line, m, std::regex(R"(port (\d+) torch (\d+)\..*)"))) << *line;
  ddprun::tcpstore::ClientOptions o;
  o.port = std::stoi(m[1]);
  o.connect_timeout = 10s;
  ddprun::tcpstore::Client c(o);
  EXPECT_EQ(c.version(), m[2] == "1" ? ddprun::tcpstore::Version::kV1 : ddprun::tcpstore::Version::kV2) << *line;
  // PyTorch's TCPStore puts "/" before every key.
  EXPECT_EQ(c.get("/from_python", 5s), "hello");
  EXPECT_EQ(c.add("/counter", 5), 5);
  EXPECT_EQ(c.add("/counter", 7), 12);
  EXPECT_EQ(c.compare_set("/cs", "", "a"), "a");
  EXPECT_TRUE(c.check({"/cs", "/from_python"}));
  EXPECT_TRUE(c.delete_key("/cs"));
  EXPECT_THROW(c.wait({"/never"}, 200ms), ddprun::StoreTimeout);
  if (c.version() == ddprun::tcpstore::Version::kV2) {
    c.multi_set({"/m1", "/m2"}, {"a", "bc"});
    EXPECT_EQ(c.multi_get({"/m2", "/m1"}, 5s), (std::vector<std::string>{"bc", "a"}));
    c.append("/m1", "d");
    EXPECT_EQ(c.get("/m1", 5s), "ad");
    c.ping();
  }
  c.set("/from_cpp", "world");
  Finished f = host.finish(60s);
  EXPECT_EQ(f.exit_code, 0) << f.out << f.err;
  EXPECT_TRUE(contains(f.out, "host ok")) << f.out;
}

TEST(TcpStoreClient, TalksToPytorchsClassicServer) { talk_to_pytorchs_server("classic"); }
TEST(TcpStoreClient, TalksToPytorchsLibuvServer) { talk_to_pytorchs_server("libuv"); }

TEST(WorkerLib, RunsUnderTorchrun) {
  auto argv = ddptest::torchrun({"--nproc_per_node", "2", "--monitor_interval", "0.1", "--master_port",
                                  std::to_string(free_port()), "--no_python", COLLECTIVE_CHECK_BIN});
  if (!argv) GTEST_SKIP() << "no torchrun in this lane (" << TORCHRUN_SCRIPT << " is missing)";
  Finished f = run(*argv);
  ASSERT_EQ(f.exit_code, 0) << f.out << f.err;
  EXPECT_TRUE(contains(f.out, "collectives ok on rank 0 of 2")) << f.out;
  EXPECT_TRUE(contains(f.out, "collectives ok on rank 1 of 2")) << f.out;
}

TEST(WorkerLib, RunsWithHandSetVariablesRankZeroHostingTheStore) {
  const std::string port = std::to_string(free_port());
  std::vector<std::unique_ptr<Process>> ranks;
  // Rank 1 first: it must wait for rank 0's store without PyTorch's 1 s retry.
  for (int r : {1, 2, 0}) {
    ranks.push_back(std::make_unique<Process>(
        std::vector<std::string>{COLLECTIVE_CHECK_BIN},
        EnvChanges{"MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + port, "RANK=" + std::to_string(r),
                   "WORLD_SIZE=3", "LOCAL_RANK=0", "LOCAL_WORLD_SIZE=1"}));
  }
  for (int i = 0; i < 3; ++i) {
    Finished f = ranks[i]->finish(60s);
    const int r = i == 0 ? 1 : i == 1 ? 2 : 0;
    ASSERT_EQ(f.exit_code, 0) << "rank " << r << ": " << f.out << f.err;
    EXPECT_TRUE(contains(f.out, "collectives ok on rank " + std::to_string(r) + " of 3")) << f.out;
  }
}

}  // namespace
