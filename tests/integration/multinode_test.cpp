// Multi-node jobs end to end: several real agents form one job, on loopback
// and on separate hosts (network namespaces joined by a bridge); nodes are
// killed, cut off, and arrive late; the job goes on.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <regex>
#include <thread>
#include <atomic>

#include "support/netns.h"
#include "support/job_helpers.h"
#include "support/process.h"
#include "support/shared_result.h"
#include "support/test_certs.h"

namespace {

namespace fs = std::filesystem;
using ddptest::free_port;
using namespace std::chrono_literals;
using ddptest::Finished;
using ddptest::NetLab;
using ddptest::Process;
using ddptest::checksum_in;
using ddptest::contains;
using ddptest::reach_step;
using ddptest::worker_of;

fs::path temp(const std::string& name) { return ddptest::temp_path("multi", name); }

// ddprun's flags for one node of a job, then the program and its flags.
std::vector<std::string> node_cmd(const std::vector<std::string>& flags,
                                  const std::vector<std::string>& program) {
  std::vector<std::string> argv{DDPRUN_BIN};
  argv.insert(argv.end(), flags.begin(), flags.end());
  argv.insert(argv.end(), program.begin(), program.end());
  return argv;
}

std::vector<std::string> train(const std::vector<std::string>& extra) {
  std::vector<std::string> argv{TRAIN_BIN, "--limit", "2048", "--epochs", "1"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return argv;
}

// Runs every command at once and waits for all.
std::vector<Finished> run_together(const std::vector<std::vector<std::string>>& cmds,
                                   const ddptest::EnvChanges& env = {}) {
  std::vector<std::unique_ptr<Process>> ps;
  for (const auto& c : cmds) ps.push_back(std::make_unique<Process>(c, env));
  std::vector<Finished> out;
  for (auto& p : ps) out.push_back(p->finish(3min));
  return out;
}

// The same training as `nodes` agents of `nproc` workers and as one node of
// nodes*nproc workers: identical parameters. Both use Gloo throughout:
// shared memory (inside a node) adds in another order and would end a few
// bits apart. And one thread per worker in both: a node of one worker gets
// every core (torchrun's OMP_NUM_THREADS=1 is for several per node), and
// LibTorch 2.x's CPU kernels sum in another order with more threads.
void expect_same_as_one_node(int nodes, int nproc) {
  const int world = nodes * nproc;
  const fs::path ref = temp("ref-" + std::to_string(world) + ".json");
  Finished one = ddptest::run(node_cmd({"--nproc", std::to_string(world)},
                                       train({"--summary-json", ref.string()})),
                              {"DDPRUN_CPU_COMM=gloo", "OMP_NUM_THREADS=1"});
  ASSERT_EQ(one.exit_code, 0) << one.err;

  const fs::path multi = temp("multi-" + std::to_string(world) + ".json");
  const std::string endpoint = "127.0.0.1:" + std::to_string(free_port());
  std::vector<std::vector<std::string>> cmds;
  for (int n = 0; n < nodes; ++n) {
    cmds.push_back(node_cmd({"--nnodes", std::to_string(nodes), "--nproc", std::to_string(nproc),
                             "--rdzv-endpoint", endpoint, "--rdzv-id", "same-" + std::to_string(world)},
                            train({"--summary-json", multi.string()})));
  }
  std::vector<Finished> fs_ = run_together(cmds, {"DDPRUN_CPU_COMM=gloo", "OMP_NUM_THREADS=1"});
  std::string all;
  for (const auto& f : fs_) {
    EXPECT_EQ(f.exit_code, 0) << f.out << f.err;
    all += f.out;
  }
  EXPECT_TRUE(contains(all, std::to_string(world) + " ranks x")) << all;
  EXPECT_TRUE(contains(all, "parameters identical on all " + std::to_string(world) + " ranks")) << all;
  const std::string want = checksum_in(ref);
  ASSERT_FALSE(want.empty());
  EXPECT_EQ(checksum_in(multi), want);
}

TEST(MultiNode, TwoAgentsOnLoopbackTrainLikeOneNodeOfTheSameWorld) { expect_same_as_one_node(2, 2); }

TEST(MultiNode, ThreeAgentsOnLoopbackTrainLikeOneNodeOfTheSameWorld) { expect_same_as_one_node(3, 1); }

TEST(MultiNode, RanksOfANodeShareMemoryAndNodesTalkThroughGloo) {
  const std::string endpoint = "127.0.0.1:" + std::to_string(free_port());
  std::vector<std::vector<std::string>> cmds;
  for (int n = 0; n < 2; ++n) {
    cmds.push_back(node_cmd({"--nnodes", "2", "--nproc", "2", "--rdzv-endpoint", endpoint, "--rdzv-id", "twolevel"},
                            {COLLECTIVE_CHECK_BIN}));
  }
  std::string all;
  for (const auto& f : run_together(cmds)) {
    EXPECT_EQ(f.exit_code, 0) << f.out << f.err;
    all += f.out;
  }
  for (int r = 0; r < 4; ++r) {
    EXPECT_TRUE(contains(all, "collectives ok on rank " + std::to_string(r) + " of 4 (shm+gloo)")) << all;
  }
}

// KEY=VALUE lines printed by `probe env`, per rank.
std::map<int, std::map<std::string, std::string>> env_by_rank(const std::string& out) {
  std::map<int, std::map<std::string, std::string>> by_rank;
  std::regex re(R"(^\[rank(\d+)\]:([A-Z_]+)=(.*)$)");
  for (const auto& l : ddptest::lines(out)) {
    std::smatch m;
    if (std::regex_match(l, m, re)) by_rank[std::stoi(m[1])][m[2]] = m[3];
  }
  return by_rank;
}

TEST(MultiNode, WorkersOfEveryNodeGetOneConsistentWorld) {
  const std::string endpoint = "127.0.0.1:" + std::to_string(free_port());
  std::vector<std::vector<std::string>> cmds;
  for (int n = 0; n < 2; ++n) {
    cmds.push_back(node_cmd({"--nnodes", "2", "--nproc", "2", "--rdzv-endpoint", endpoint,
                             "--rdzv-id", "envjob"},
                            {PROBE_BIN, "env"}));
  }
  std::string all;
  for (const auto& f : run_together(cmds)) {
    EXPECT_EQ(f.exit_code, 0) << f.err;
    all += f.out;
    // Without a token the job runs (torchrun's command lines), with one warning.
    std::regex warning("takes calls from anyone who reaches it.*--rdzv-token");
    auto n = std::distance(std::sregex_iterator(f.err.begin(), f.err.end(), warning),
                           std::sregex_iterator());
    EXPECT_EQ(n, 1) << f.err;
  }
  auto env = env_by_rank(all);
  ASSERT_EQ(env.size(), 4u) << all;
  for (int r = 0; r < 4; ++r) {
    auto& e = env[r];
    EXPECT_EQ(e["WORLD_SIZE"], "4");
    EXPECT_EQ(e["LOCAL_WORLD_SIZE"], "2");
    EXPECT_EQ(e["GROUP_WORLD_SIZE"], "2");
    EXPECT_EQ(e["GROUP_RANK"], std::to_string(r / 2));
    EXPECT_EQ(e["LOCAL_RANK"], std::to_string(r % 2));
    EXPECT_EQ(e["MASTER_ADDR"], "127.0.0.1");
    EXPECT_EQ(e["MASTER_PORT"], env[0]["MASTER_PORT"]);  // node 0's, on every node
    EXPECT_EQ(e["DDPRUN_RDZV_ADDR"], endpoint);
    EXPECT_EQ(e["TORCHELASTIC_RUN_ID"], "envjob");
    EXPECT_EQ(e["GLOO_SOCKET_IFNAME"], "lo");  // the interface of the node's address
  }
}

TEST(MultiNode, AJoinThatTimesOutSaysWhichFlagToRaise) {
  const std::string endpoint = "127.0.0.1:" + std::to_string(free_port());
  Finished f = ddptest::run(node_cmd({"--nnodes", "2", "--rdzv-endpoint", endpoint, "--rdzv-id",
                                      "alone", "--rdzv-conf", "join_timeout=0.5"},
                                     {PROBE_BIN, "env"}));
  EXPECT_EQ(f.exit_code, 1);
  EXPECT_TRUE(contains(f.err, "1 of the 2 node(s) needed joined")) << f.err;
  EXPECT_TRUE(contains(f.err, "--rdzv-conf join_timeout=")) << f.err;
  EXPECT_FALSE(contains(f.out, "RANK=")) << "no worker may start";
}

// Two jobs given one endpoint: the first serves its embedded control plane
// there; the second's calls reach that service, which refuses a job not its
// own at once (never serving it, nor sending it to wait for a leader until
// join_timeout), and the second says so and ends.
TEST(MultiNode, AnEmbeddedControlPlaneRefusesAnotherJobAtItsEndpoint) {
  const std::string endpoint = "127.0.0.1:" + std::to_string(free_port());
  auto job = [&](const std::string& id) {
    return node_cmd({"--nnodes", "2", "--rdzv-backend", "embedded", "--rdzv-endpoint", endpoint, "--rdzv-id", id,
                     "--rdzv-conf", "join_timeout=300"},
                    {PROBE_BIN, "env"});
  };
  Process a(job("first"));
  ASSERT_TRUE(a.wait_for_err_line([](const std::string& l) { return contains(l, "joining job first"); }, 60s))
      << a.err();
  Finished b = ddptest::run(job("second"), {}, 120s);
  a.signal(SIGINT);
  a.finish(30s);
  EXPECT_EQ(b.exit_code, 1) << b.err;
  EXPECT_TRUE(contains(b.err, "runs job 'first''s control plane, not job 'second''s: --rdzv-endpoint names another "
                              "job's rendezvous"))
      << b.err;
  EXPECT_FALSE(contains(b.out, "RANK=")) << b.out;
}

// A control plane nobody answers for: the join's error says what did not
// answer (etcd there, or the nodes --rdzv-endpoint lists), not this
// agent's own service, which only relays; and an etcd out of reach is said
// once, not at every try.
TEST(MultiNode, AJoinThatTimesOutNamesTheControlPlaneThatDidNotAnswer) {
  const std::string etcd = "127.0.0.1:" + std::to_string(free_port());  // nobody listens there
  Finished e = ddptest::run(node_cmd({"--nnodes", "2", "--rdzv-backend", "etcd", "--rdzv-endpoint", etcd, "--rdzv-id",
                                      "no-etcd", "--rdzv-conf", "join_timeout=4"},
                                     {PROBE_BIN, "env"}),
                            {}, 60s);
  EXPECT_EQ(e.exit_code, 1) << e.err;
  EXPECT_TRUE(contains(e.err, "error: no answer from the job's rendezvous within 4.0 s: etcd at " + etcd +
                                  " did not answer"))
      << e.err;
  EXPECT_LE(ddptest::occurrences(e.err, "warning: control plane: "), 1) << e.err;
  const std::string listed = "192.0.2.1:" + std::to_string(free_port());  // TEST-NET-1: never answers
  Finished m = ddptest::run(node_cmd({"--nnodes", "3", "--rdzv-backend", "embedded", "--rdzv-endpoint", listed,
                                      "--rdzv-id", "no-node-0", "--rdzv-conf", "join_timeout=4"},
                                     {PROBE_BIN, "env"}),
                            {}, 60s);
  EXPECT_EQ(m.exit_code, 1) << m.err;
  EXPECT_TRUE(contains(m.err, "no control-plane leader: none of the nodes --rdzv-endpoint lists (" + listed)) << m.err;
}

// A shell line that runs argv with stderr merged into stdout (to wait for
// the agent's log lines).
std::vector<std::string> merged(const std::vector<std::string>& argv) {
  std::string line = "exec";
  for (const auto& a : argv) line += " '" + a + "'";
  return {"/bin/sh", "-c", line + " 2>&1"};
}

TEST(MultiNode, CtrlCDuringAJoinEndsItAtOnceWithNoWorkerStarted) {
  const std::string endpoint = "127.0.0.1:" + std::to_string(free_port());
  // stderr merged into stdout, to wait for the agent's "joining" line.
  Process p(merged(node_cmd({"--nnodes", "2", "--rdzv-endpoint", endpoint, "--rdzv-id", "ctrlc"},
                            {PROBE_BIN, "env"})));
  ASSERT_TRUE(p.wait_for_line([](const std::string& l) { return contains(l, "joining job ctrlc"); },
                              30s))
      << p.out();
  p.signal(SIGINT);
  Finished f = p.finish(20s);
  EXPECT_EQ(f.exit_code, 128 + SIGINT) << f.out;
  EXPECT_TRUE(contains(f.out, "received SIGINT while joining")) << f.out;
  EXPECT_FALSE(contains(f.out, "RANK=")) << f.out;
}

TEST(MultiNode, TheHostingNodeLeavesLastAndALateNodeHearsTheJobFinished) {
  const std::string endpoint = "127.0.0.1:" + std::to_string(free_port());
  // Node rank 1's worker takes a while; node 0 (which hosts) is done at once.
  const std::string work =
      "if [ \"$GROUP_RANK\" = 1 ]; then sleep 2; fi; echo done $GROUP_RANK";
  auto node = [&](int rank) {
    return node_cmd({"--nnodes", "2", "--node-rank", std::to_string(rank), "--rdzv-host",
                     rank == 0 ? "on" : "off", "--rdzv-endpoint", endpoint, "--rdzv-id", "order",
                     "--no-python"},
                    {"/bin/sh", "-c", work});
  };
  Process host(node(0));
  Process other(node(1));
  Finished o = other.finish(60s);
  Finished h = host.finish(60s);
  EXPECT_EQ(o.exit_code, 0) << o.err;
  EXPECT_EQ(h.exit_code, 0) << h.err;
  // The host finished first and stayed until the other node had left.
  EXPECT_TRUE(contains(h.err, "waiting for 1 other node(s) to leave")) << h.err;
  EXPECT_TRUE(contains(o.out, "done 1")) << o.out;
}

TEST(MultiNode, ANodeWithAWrongCommandLineIsRefusedAndTheJobGoesOn) {
  const std::string endpoint = "127.0.0.1:" + std::to_string(free_port());
  auto node = [&](const std::string& nnodes) {
    return node_cmd({"--nnodes", nnodes, "--rdzv-endpoint", endpoint, "--rdzv-id", "careless",
                     "--no-python"},
                    {"/bin/sh", "-c", "sleep 2; echo finished $GROUP_RANK"});
  };
  Process a(merged(node("2"))), b(merged(node("2")));
  // The job runs before the careless node comes.
  ASSERT_TRUE(a.wait_for_line([](const std::string& l) { return contains(l, "round 0: node rank"); },
                              30s))
      << a.out();
  Finished wrong = ddptest::run(node("3"));
  EXPECT_EQ(wrong.exit_code, 1);
  EXPECT_TRUE(contains(wrong.err, "every node must pass the same --nnodes")) << wrong.err;
  Finished fa = a.finish(60s), fb = b.finish(60s);
  EXPECT_EQ(fa.exit_code, 0) << fa.out;
  EXPECT_EQ(fb.exit_code, 0) << fb.out;
  EXPECT_TRUE(contains(fa.out + fb.out, "finished 0")) << fa.out << fb.out;
  EXPECT_TRUE(contains(fa.out + fb.out, "finished 1")) << fa.out << fb.out;
}

TEST(MultiNode, WhenTheHostingNodeDiesTheOthersSayWhyAndGiveUp) {
  const std::string endpoint = "127.0.0.1:" + std::to_string(free_port());
  auto node = [&](const std::string& host) {
    return node_cmd({"--nnodes", "2", "--rdzv-endpoint", endpoint, "--rdzv-id", "orphaned",
                     "--rdzv-host", host, "--rdzv-conf", "join_timeout=2,lease_timeout=1",
                     "--stop-timeout", "1", "--no-python"},
                    {"/bin/sh", "-c", "echo working; exec sleep 60"});
  };
  Process host(node("on"));
  Process other(merged(node("off")));
  ASSERT_TRUE(other.wait_for_line([](const std::string& l) { return contains(l, "]:working"); }, 30s))
      << other.out();
  host.signal(SIGKILL);
  Finished f = other.finish(60s);
  EXPECT_EQ(f.exit_code, 1) << f.out;
  EXPECT_TRUE(contains(f.out, "lost contact with the rendezvous")) << f.out;
  EXPECT_TRUE(contains(f.out, "no answer from the rendezvous at " + endpoint)) << f.out;
}

TEST(MultiNode, AStandaloneRendezvousTurnsANodeStartedAfterSuccessAway) {
  Process rdzv({DDPRUN_BIN, "rendezvous", "--host", "127.0.0.1", "--port", "0"});
  auto line = rdzv.wait_for_line([](const std::string& l) { return contains(l, "listening on"); }, 30s);
  ASSERT_TRUE(line) << rdzv.out();
  const std::string endpoint = line->substr(line->rfind(' ') + 1);
  auto node = [&] {
    return node_cmd({"--nnodes", "1:2", "--rdzv-endpoint", endpoint, "--rdzv-id", "over",
                     "--rdzv-host", "off", "--rdzv-conf", "last_call_timeout=0"},
                    {PROBE_BIN, "env"});
  };
  Finished first = ddptest::run(node());
  EXPECT_EQ(first.exit_code, 0) << first.err;
  Finished late = ddptest::run(node());
  EXPECT_EQ(late.exit_code, 1);
  EXPECT_TRUE(contains(late.err, "job finished")) << late.err;
  EXPECT_FALSE(contains(late.out, "RANK=")) << late.out;
  rdzv.signal(SIGTERM);
  EXPECT_EQ(rdzv.finish(20s).exit_code, 0);
}

// ---- Separate hosts: network namespaces --------------------------------

std::unique_ptr<NetLab> lab_or_skip(int hosts, std::string* why) {
  auto lab = NetLab::create(hosts, why);
  if (!lab && getenv("DDPTEST_REQUIRE_NETNS")) ADD_FAILURE() << *why;
  return lab;
}

// One node of a training job on host i of the lab; node 0 hosts the
// rendezvous. (Each namespace has its own ports: a fixed one is free there.)
std::vector<std::string> lab_node(const NetLab& lab, int i, const fs::path& ckpt,
                                  const std::string& join_timeout = "20",
                                  const std::vector<std::string>& more_flags = {}, const std::string& epochs = "2") {
  std::vector<std::string> flags{"--nnodes",      "1:2",
                                 "--nproc",       "1",
                                 "--node-rank",   std::to_string(i),
                                 "--rdzv-endpoint", lab.addr(0) + ":29400",
                                 "--rdzv-id",     "lab",
                                 "--max-restarts", "3",
                                 "--stop-timeout", "3",
                                 "--rdzv-conf",   "join_timeout=" + join_timeout};
  flags.insert(flags.end(), more_flags.begin(), more_flags.end());
  std::vector<std::string> prog{TRAIN_BIN,          "--limit",       "6000",
                                "--epochs",         epochs,          "--print-steps",
                                "--checkpoint-dir", ckpt.string(),   "--checkpoint-every",
                                "10"};
  return lab.wrap(i, node_cmd(flags, prog));
}

// The flags of node i of a lab job `id` that heals: --nnodes `nnodes`, one
// worker, node 0's rendezvous, 3 restarts, a 3 s stop timeout, `conf` as
// --rdzv-conf; pinned to node rank i unless `pin` is false (a spare).
std::vector<std::string> lab_flags(const NetLab& lab, int i, const std::string& nnodes, const std::string& id,
                                   const std::string& conf = "join_timeout=120", bool pin = true, int nproc = 1) {
  std::vector<std::string> flags{"--nnodes", nnodes, "--nproc", std::to_string(nproc), "--rdzv-endpoint", lab.addr(0) + ":29400",
                                 "--rdzv-id", id, "--max-restarts", "3", "--stop-timeout", "3",
                                 "--rdzv-conf", conf};
  if (pin) flags.insert(flags.end(), {"--node-rank", std::to_string(i)});
  return flags;
}

// Without heals (--max-heals 0; or a program without a Healer) a lost node
// costs a round: the survivor restarts its worker from the checkpoint.
TEST(NetNodes, AKilledNodeCostsTheSurvivorsARoundNotTheJob) {
  std::string why;
  auto lab = lab_or_skip(2, &why);
  if (!lab) GTEST_SKIP() << why;
  const fs::path ckpt = temp("killed-ckpt");
  Process n0(lab_node(*lab, 0, ckpt, "20", {"--max-heals", "0"}));
  Process n1(lab_node(*lab, 1, ckpt, "20", {"--max-heals", "0"}));
  ASSERT_TRUE(reach_step(n0, 25)) << n0.out();
  // Written in the background, step 20's checkpoint can land after step 25.
  ASSERT_TRUE(ddptest::wait_for_checkpoint(ckpt, 20)) << n0.out();
  n1.signal(SIGKILL);  // the whole node's agent; its workers die with it
  Finished f0 = n0.finish(3min);
  n1.finish(10s);
  EXPECT_EQ(f0.exit_code, 0) << f0.err;
  // Its connection closed, which alone proves nothing; but its host
  // refused a connect where its agent listened: lost at once, not after its
  // lease. (The survivor hears of it as a superseded round or, when its
  // own workers failed first, in the next round's list of lost nodes.)
  EXPECT_TRUE(contains(f0.err, "its host refused connections at " + lab->addr(1) + ":")) << f0.err;
  EXPECT_TRUE(contains(f0.out, "]:resumed from ")) << f0.out;
  EXPECT_TRUE(contains(f0.out, "parameters identical on all 1 ranks")) << f0.out;
}

// The cut-off node is dropped when its lease runs out, and the job shrinks
// past it: the survivor's Gloo collective blocked on it is aborted when the
// shrink is named (not after DDPRUN_TIMEOUT_S, 300 s here).
TEST(NetNodes, ACutLinkIsTreatedLikeALostNode) {
  std::string why;
  auto lab = lab_or_skip(2, &why);
  if (!lab) GTEST_SKIP() << why;
  const fs::path ckpt = temp("cut-ckpt");
  Process n0(lab_node(*lab, 0, ckpt));
  Process n1(lab_node(*lab, 1, ckpt, "5"));
  ASSERT_TRUE(reach_step(n0, 25)) << n0.out();
  lab->link_down(1);
  Finished f0 = n0.finish(3min);
  EXPECT_EQ(f0.exit_code, 0) << f0.err;
  EXPECT_TRUE(std::regex_search(f0.err, std::regex(R"(warning: node '[^']+' \([^)]+\) was lost: no keep-alive for \d+ ms( \([^)]*\))?; )"
                                                  R"(the job goes on with 1 node\(s\), world size 1)")))
      << f0.err;
  EXPECT_FALSE(contains(f0.err, "restarting the workers")) << f0.err;
  EXPECT_TRUE(contains(f0.out, "parameters identical on all 1 ranks")) << f0.out;
  // The cut-off node notices it lost the rendezvous and gives up.
  Finished f1 = n1.finish(2min);
  EXPECT_NE(f1.exit_code, 0);
  EXPECT_TRUE(contains(f1.err, "lost contact with the rendezvous")) << f1.err;
}

// The hosting ddprun stopped (SIGSTOP) past every lease: when it goes on,
// the round is over and the other node's agent stops its worker for the
// next one. That stop is ddprun's own, not a preemption: train must not
// checkpoint, agree to stop and exit 0 (which ended the job as a success
// with a few percent of its steps done); the job goes on to its end.
TEST(NetNodes, APausedRendezvousHostCostsARoundNotTheJob) {
  std::string why;
  auto lab = lab_or_skip(2, &why);
  if (!lab) GTEST_SKIP() << why;
  const fs::path ckpt = temp("paused-ckpt");
  // 6 epochs: the workers train on while the host's agent is paused, and
  // the job must outlast the pause (2 epochs ended within it in 1 run of 8).
  Process n0(lab_node(*lab, 0, ckpt, "20", {}, "6"));
  Process n1(lab_node(*lab, 1, ckpt, "20", {}, "6"));
  ASSERT_TRUE(reach_step(n0, 25)) << n0.out();
  n0.signal(SIGSTOP);
  // Past the 3 s lease, seen from the other node (no sleep would do: the
  // point is that time passes while the host cannot answer).
  ASSERT_TRUE(n1.wait_for_err_line(
                    [](const std::string& l) { return contains(l, "lost contact with the rendezvous"); }, 30s)
                  .has_value())
      << n1.err();
  n0.signal(SIGCONT);
  Finished f0 = n0.finish(3min);
  Finished f1 = n1.finish(3min);
  for (const Finished* f : {&f0, &f1}) {
    EXPECT_FALSE(contains(f->out, "stopped by signal")) << f->out;
    EXPECT_EQ(f->exit_code, 0) << f->err;
  }
  // Rank 0 trained to the end: every epoch, then the check across ranks.
  EXPECT_TRUE(contains(f0.out + f1.out, "]:epoch 6/6")) << f0.out << f1.out;
  EXPECT_TRUE(contains(f0.out + f1.out, "]:parameters identical on all")) << f0.out << f1.out;
  fs::remove_all(ckpt);
}

// A cut long enough for the host to give up the cut-off node's connection:
// when the link returns, that node's join meets a reset connection. A
// transport error is retried until join_timeout, so it rejoins the job
// (admitted into a new round) instead of failing the moment the link is back.
TEST(NetNodes, ANodeCutOffForHalfAMinuteRejoinsWhenTheLinkReturns) {
  std::string why;
  auto lab = lab_or_skip(2, &why);
  if (!lab) GTEST_SKIP() << why;
  const fs::path ckpt = temp("long-cut-ckpt");
  auto node = [&](int i) {
    std::vector<std::string> flags = lab_flags(*lab, i, "1:2", "longcut");
    // Node 0's worker is held stopped through the cut (below): that is the
    // test's doing, not a hang to find.
    flags.insert(flags.end(), {"--hang-timeout", "0"});
    std::vector<std::string> prog{TRAIN_BIN, "--limit", "8000", "--epochs", "2", "--print-steps", "--checkpoint-dir",
                                  ckpt.string(), "--checkpoint-every", "50"};
    return lab->wrap(i, node_cmd(flags, prog));
  };
  Process n0(node(0));
  Process n1(node(1));
  ASSERT_TRUE(reach_step(n0, 25)) << n0.out();
  lab->link_down(1);
  ASSERT_TRUE(n1.wait_for_err_line(
                    [](const std::string& l) { return contains(l, "lost contact with the rendezvous"); }, 30s)
                  .has_value());
  // Node 0's worker waits out the cut and node 1's return (stopped):
  // however fast this machine trains, the job still runs when node 1 is back.
  const pid_t w0 = worker_of(n0);
  ASSERT_NE(w0, 0);
  kill(w0, SIGSTOP);
  // Half a minute without a packet either way (no sleep could be replaced
  // here: the cut's length is the point).
  std::this_thread::sleep_for(30s);
  lab->link_up(1);
  const bool back = n1.wait_for_err_line(
                        [](const std::string& l) { return contains(l, "joining the running round as node rank 1"); },
                        2min)
                        .has_value();
  kill(w0, SIGCONT);
  ASSERT_TRUE(back) << n1.err();
  Finished f1 = n1.finish(4min);
  Finished f0 = n0.finish(4min);
  EXPECT_EQ(f1.exit_code, 0) << f1.err;
  EXPECT_FALSE(contains(f1.err, "join failed")) << f1.err;
  EXPECT_EQ(f0.exit_code, 0) << f0.err;
  // It rejoins the running round: the world grows back. (Without a restart
  // unless the grow lands outside a step, in the evaluation at an epoch's
  // end, where workers cannot heal: the link comes back at any moment here.
  // ALateNodeJoinsTheRunningRound... checks the restart-free grow.)
  EXPECT_TRUE(contains(f0.err, "joined the running round as node rank 1")) << f0.err;
  EXPECT_TRUE(contains(f0.out, "]:parameters identical on all 2 ranks")) << f0.out;
  fs::remove_all(ckpt);
}

// Checkpointless recovery across hosts: a third node waits while the job
// runs at its --nnodes 2. When node 1 is lost (killed with its worker, or
// cut off), the spare takes over its node rank in the same round: node 0's
// worker is the same process throughout, the spare's worker receives the
// state from it, and the job ends with exactly the parameters of a run that
// nothing interrupted.
enum class Loss { kKilled, kCutOff };


// The healing tests' job: train on 8000 images for 2 epochs, its
// parameters' checksum in `summary`.
std::vector<std::string> heal_job(const fs::path& summary, const std::string& epochs = "2") {
  return {TRAIN_BIN, "--limit", "8000", "--epochs", epochs, "--print-steps", "--summary-json", summary.string()};
}

// How a run of heal_job ended (its summary): the parameters' checksum and
// the last epoch's loss, which a heal changes neither of.
std::string outcome_in(const fs::path& summary) {
  const std::string sum = checksum_in(summary);
  return sum.empty() ? "" : "checksum " + sum + ", final loss " + ddptest::final_loss_in(summary);
}

// How an uninterrupted run of heal_job on 2 ranks ends.
std::string uninterrupted_outcome(const ddptest::EnvChanges& env, const std::string& name,
                                  const std::string& epochs = "2") {
  const fs::path ref = temp(name + "-ref.json");
  Finished one = ddptest::run(node_cmd({"--nproc", "2"}, heal_job(ref, epochs)), env);
  EXPECT_EQ(one.exit_code, 0) << one.err;
  return outcome_in(ref);
}

// Once node 0 has trained 10 steps, starts a spare node and waits until it
// waits to join (node 0 says so); null if either did not happen.
std::unique_ptr<Process> start_spare(Process& n0, const std::vector<std::string>& cmd, const ddptest::EnvChanges& env) {
  if (!reach_step(n0, 10)) return nullptr;
  auto spare = std::make_unique<Process>(cmd, env);
  if (!n0.wait_for_err_line([](const std::string& l) { return contains(l, "node(s) wait to join"); }, 60s)) {
    return nullptr;
  }
  return spare;
}

void expect_spare_takes_over(Loss loss) {
  std::string why;
  auto lab = lab_or_skip(3, &why);
  if (!lab) GTEST_SKIP() << why;
  // A cut-off peer closes no socket: node 0's worker is released when the
  // takeover is named (or, where Gloo cannot abort, at this timeout).
  const ddptest::EnvChanges env{"DDPRUN_CPU_COMM=gloo", "OMP_NUM_THREADS=1", "DDPRUN_TIMEOUT_S=30"};
  const std::string want = uninterrupted_outcome(env, "spare");
  ASSERT_FALSE(want.empty());

  const fs::path summary = temp("spare.json");
  auto node = [&](int i) {
    return lab->wrap(i, node_cmd(lab_flags(*lab, i, "2", "spare", "join_timeout=120", /*pin=*/i < 2),
                                 heal_job(summary)));
  };
  Process n0(node(0), env);
  Process n1(node(1), env);
  std::unique_ptr<Process> spare_node = start_spare(n0, node(2), env);
  ASSERT_TRUE(spare_node) << n0.out() << n0.err();
  Process& spare = *spare_node;
  const pid_t before = worker_of(n0);
  ASSERT_TRUE(reach_step(n0, 40)) << n0.out();
  if (loss == Loss::kKilled) {
    n1.signal(SIGKILL);  // the whole node: its agent, and its worker with it
    n1.finish(10s);
  } else {
    lab->link_down(1);  // dropped when its lease runs out; its sockets stay open
  }
  ASSERT_TRUE(reach_step(n0, 70)) << n0.out() << n0.err();
  const pid_t after = worker_of(n0);
  Finished f0 = n0.finish(4min);
  Finished f2 = spare.finish(4min);
  EXPECT_EQ(f0.exit_code, 0) << f0.err;
  EXPECT_EQ(f2.exit_code, 0) << f2.err;
  EXPECT_TRUE(contains(f0.err, "took over node rank 1")) << f0.err;
  EXPECT_TRUE(contains(f2.err, "taking over node rank 1 (ranks 1..1)")) << f2.err;
  EXPECT_FALSE(contains(f0.err, "restarting the workers")) << f0.err;
  EXPECT_FALSE(contains(f0.err, "superseded")) << f0.err;
  // Node 0's worker lived throughout.
  EXPECT_NE(before, 0);
  EXPECT_EQ(after, before) << "node 0's worker was restarted";
  EXPECT_TRUE(contains(f2.out, "joined at step")) << f2.out;
  EXPECT_EQ(outcome_in(summary), want) << "the healed run's parameters or loss differ from an uninterrupted run's";
}

TEST(NetNodes, ASpareNodeTakesOverAKilledNodesRanksAndTheJobEndsBitwiseEqual) {
  expect_spare_takes_over(Loss::kKilled);
}

TEST(NetNodes, ASpareNodeTakesOverACutOffNodesRanksAndTheJobEndsBitwiseEqual) {
  expect_spare_takes_over(Loss::kCutOff);
}

// A slow node (its worker stopped 25 ms of every 35 from here: a noisy
// neighbour, a throttled machine) is found from every node's timings at
// the job's collectives; with --straggler-action replace it hands its place
// to the waiting spare through the takeover path: node 0's worker goes on,
// the spare's takes the state, and the job ends bitwise equal to a run that
// nothing slowed.
TEST(NetNodes, ASlowNodeIsHandedToASpareAndTheJobEndsBitwiseEqual) {
  std::string why;
  auto lab = lab_or_skip(3, &why);
  if (!lab) GTEST_SKIP() << why;
  const ddptest::EnvChanges env{"DDPRUN_CPU_COMM=gloo", "OMP_NUM_THREADS=1"};
  const std::string want = uninterrupted_outcome(env, "slow-node", "4");
  ASSERT_FALSE(want.empty());
  const fs::path summary = temp("slow-node.json");
  auto node = [&](int i) {
    std::vector<std::string> flags = lab_flags(*lab, i, "2", "slow-node", "join_timeout=120", /*pin=*/i < 2);
    flags.insert(flags.end(), {"--straggler-action", "replace"});
    return lab->wrap(i, node_cmd(flags, heal_job(summary, "4")));
  };
  Process n0(node(0), env);
  Process n1(node(1), env);
  std::unique_ptr<Process> spare_node = start_spare(n0, node(2), env);
  ASSERT_TRUE(spare_node) << n0.out() << n0.err();
  Process& spare = *spare_node;
  const pid_t before = worker_of(n0);
  const pid_t slow = worker_of(n1);
  ASSERT_NE(slow, 0);
  std::atomic<bool> done{false};
  std::thread neighbour([&] {
    while (!done.load()) {
      kill(slow, SIGSTOP);
      std::this_thread::sleep_for(25ms);  // a duty cycle, not a wait for anything
      kill(slow, SIGCONT);
      std::this_thread::sleep_for(10ms);
    }
  });
  auto said = n1.wait_for_err_line([](const std::string& l) { return contains(l, "handing its place to a waiting node"); },
                                   240s);
  done = true;
  neighbour.join();
  kill(slow, SIGCONT);
  ASSERT_TRUE(said) << n1.finish(10s).err << n0.err();
  EXPECT_TRUE(contains(*said, "this node is the job's straggler (score 0.")) << *said;
  Finished f1 = n1.finish(2min);
  Finished f0 = n0.finish(4min);
  Finished f2 = spare.finish(4min);
  EXPECT_EQ(f1.exit_code, 0) << f1.err;
  EXPECT_EQ(f0.exit_code, 0) << f0.err;
  EXPECT_EQ(f2.exit_code, 0) << f2.err;
  EXPECT_TRUE(contains(f0.err, "took over node rank 1")) << f0.err;
  EXPECT_TRUE(contains(f0.err, "was the job's straggler")) << f0.err;  // why node 1 went, as node 0 heard it
  EXPECT_FALSE(contains(f0.err, "restarting the workers")) << f0.err;
  EXPECT_FALSE(contains(f0.err, "is the job's straggler")) << f0.err;  // node 0 was never named
  EXPECT_NE(before, 0);
  EXPECT_EQ(outcome_in(summary), want) << "the run's parameters or loss differ from an uninterrupted run's";
}

// A hang on one node is diagnosed job-wide: the node of the stuck rank
// names the other node's rank waiting in the all_reduce it never entered,
// from what that node's agent reported, with the stuck rank's own stack.
TEST(NetNodes, AHangOnOneNodeIsDiagnosedJobWide) {
  std::string why;
  auto lab = lab_or_skip(2, &why);
  if (!lab) GTEST_SKIP() << why;
  auto node = [&](int i) {
    std::vector<std::string> flags = lab_flags(*lab, i, "2", "hang-wide", "join_timeout=60");
    flags.insert(flags.end(), {"--hang-timeout", "2", "--max-restarts", "1"});
    return lab->wrap(i, node_cmd(flags, {HANG_CHECK_BIN, "--stuck", "1", "--at", "40", "--work-ms", "5"}));
  };
  const ddptest::EnvChanges env{"DDPRUN_CPU_COMM=gloo", "OMP_NUM_THREADS=1"};
  Process n0(node(0), env);
  Process n1(node(1), env);
  Finished f1 = n1.finish(3min);
  Finished f0 = n0.finish(3min);
  EXPECT_NE(f1.exit_code, 0) << f1.err;
  // Rank 0 is node 0's: node 1 knows it waits from node 0's report.
  EXPECT_TRUE(contains(f1.err, "hang: rank 0 waits in all_reduce #")) << f1.err;
  EXPECT_TRUE(contains(f1.err, "rank 1 never entered it")) << f1.err;
  EXPECT_TRUE(contains(f1.err, "rank 1 is in: stuck_outside_any_collective")) << f1.err;
  EXPECT_FALSE(contains(f1.err, "rank 0 is on another node")) << f1.err;  // it is not the one awaited
  // Node 0 hears the root cause with the restart, and its own worker was no suspect.
  EXPECT_TRUE(contains(f0.err, "rank 1 hung")) << f0.err;
  EXPECT_FALSE(contains(f0.err, "rank 0 hung")) << f0.err;
}

// Two nodes of one rank each: node 1's worker (not its node) is SIGKILLed at
// node 0's step 40. Checks that the job heals without a restart, node 0's
// worker the same process throughout, and that the replacement says
// `joined` on its stdout; node 0's ending is left in *f0.
void kill_a_worker_on_node_1(NetLab& lab, const std::string& id, const std::vector<std::string>& program,
                             const ddptest::EnvChanges& env, const std::string& joined, Finished* f0) {
  auto node = [&](int i) { return lab.wrap(i, node_cmd(lab_flags(lab, i, "2", id), program)); };
  Process n0(node(0), env);
  Process n1(node(1), env);
  ASSERT_TRUE(reach_step(n0, 40)) << n0.out() << n0.err();
  const pid_t before = worker_of(n0);
  const pid_t victim = worker_of(n1);
  ASSERT_NE(victim, 0);
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  ASSERT_TRUE(reach_step(n0, 70)) << n0.out() << n0.err();
  const pid_t after = worker_of(n0);
  *f0 = n0.finish(4min);
  Finished f1 = n1.finish(4min);
  EXPECT_EQ(f0->exit_code, 0) << f0->err;
  EXPECT_EQ(f1.exit_code, 0) << f1.err;
  EXPECT_TRUE(contains(f1.err, "asking the rendezvous for a heal generation")) << f1.err;
  EXPECT_TRUE(contains(f1.err, "its replacement heals from the other workers in generation 1")) << f1.err;
  EXPECT_TRUE(contains(f0->err, "the workers here heal with the replacement")) << f0->err;
  const Finished* both[] = {f0, &f1};
  for (const Finished* f : both) {
    EXPECT_FALSE(contains(f->err, "restarting the workers")) << f->err;
    EXPECT_FALSE(contains(f->err, "superseded")) << f->err;
  }
  EXPECT_NE(before, 0);
  EXPECT_EQ(after, before) << "node 0's worker was restarted";
  EXPECT_TRUE(contains(f1.out, joined)) << f1.out;
}

// A worker (not its node) dies: its agent asks the rendezvous for a heal
// generation, starts a replacement in it, and the other node's worker heals
// with it. Nothing restarts: node 0's worker is the same process throughout,
// and the job ends with exactly the parameters of an uninterrupted run.
TEST(NetNodes, AKilledWorkerOfOneNodeIsReplacedThereAndTheJobEndsBitwiseEqual) {
  std::string why;
  auto lab = lab_or_skip(2, &why);
  if (!lab) GTEST_SKIP() << why;
  const ddptest::EnvChanges env{"DDPRUN_CPU_COMM=gloo", "OMP_NUM_THREADS=1"};
  const std::string want = uninterrupted_outcome(env, "worker-heal");
  ASSERT_FALSE(want.empty());

  const fs::path summary = temp("worker-heal.json");
  Finished f0;
  kill_a_worker_on_node_1(*lab, "worker-heal", heal_job(summary), env, "joined at step", &f0);
  EXPECT_EQ(outcome_in(summary), want) << "the healed run's parameters or loss differ from an uninterrupted run's";
}

// The same heals for a PyTorch script (examples/python/ddp_heal.py, through
// ddprun.Healer): 2 ranks on 2 hosts, 250 steps; its final parameters' line
// (rank 0's) must be an uninterrupted 2-rank run's.
std::vector<std::string> python_heal_job() {
  return {HEAL_SCRIPT, "--samples", "16000", "--epochs", "1", "--print-steps"};
}

std::string python_outcome(const std::string& out) {
  std::smatch m;
  return std::regex_search(out, m, std::regex(R"(final loss [0-9.]+; checksum [0-9a-f]{16})")) ? m.str(0) : "";
}

const ddptest::EnvChanges kPythonHealEnv{"PYTHON_EXEC=" PYTHON_BIN, "OMP_NUM_THREADS=1"};

// Once in a ctest run (shared_result.h).
std::string python_uninterrupted() {
  return ddptest::shared_result("netnodes python reference", [] {
    Finished one = ddptest::run(node_cmd({"--nproc", "2"}, python_heal_job()), kPythonHealEnv);
    EXPECT_EQ(one.exit_code, 0) << one.err;
    return python_outcome(one.out);
  });
}

TEST(NetNodes, APythonScriptsKilledWorkerIsReplacedOnItsNodeAndTheRunEndsBitwiseEqual) {
  std::string why;
  auto lab = lab_or_skip(2, &why);
  if (!lab) GTEST_SKIP() << why;
  const std::string want = python_uninterrupted();
  ASSERT_FALSE(want.empty());
  Finished f0;
  kill_a_worker_on_node_1(*lab, "py-worker-heal", python_heal_job(), kPythonHealEnv, "with the state of its peers", &f0);
  EXPECT_EQ(python_outcome(f0.out), want) << "the healed run's parameters or loss differ from an uninterrupted run's";
}

TEST(NetNodes, APythonScriptsLostNodeIsTakenOverByASpareAndTheRunEndsBitwiseEqual) {
  std::string why;
  auto lab = lab_or_skip(3, &why);
  if (!lab) GTEST_SKIP() << why;
  const std::string want = python_uninterrupted();
  ASSERT_FALSE(want.empty());
  auto node = [&](int i) {
    return lab->wrap(i, node_cmd(lab_flags(*lab, i, "2", "py-spare", "join_timeout=120", /*pin=*/i < 2),
                                 python_heal_job()));
  };
  Process n0(node(0), kPythonHealEnv);
  Process n1(node(1), kPythonHealEnv);
  std::unique_ptr<Process> spare = start_spare(n0, node(2), kPythonHealEnv);
  ASSERT_TRUE(spare) << n0.out() << n0.err();
  ASSERT_TRUE(reach_step(n0, 60)) << n0.out();
  const pid_t before = worker_of(n0);
  n1.signal(SIGKILL);  // the whole node: its agent, and its worker with it
  n1.finish(10s);
  ASSERT_TRUE(reach_step(n0, 90)) << n0.out() << n0.err();
  const pid_t after = worker_of(n0);
  Finished f0 = n0.finish(4min);
  Finished f2 = spare->finish(4min);
  EXPECT_EQ(f0.exit_code, 0) << f0.err;
  EXPECT_EQ(f2.exit_code, 0) << f2.err;
  EXPECT_TRUE(contains(f0.err, "took over node rank 1")) << f0.err;
  EXPECT_FALSE(contains(f0.err, "restarting the workers")) << f0.err;
  EXPECT_EQ(after, before) << "node 0's worker was restarted";
  EXPECT_TRUE(contains(f2.out, "with the state of its peers")) << f2.out;
  EXPECT_EQ(python_outcome(f0.out), want) << "the healed run's parameters or loss differ from an uninterrupted run's";
}

// Compound: a node is lost while another node's worker heals. Node 2 is
// paused (its agent and workers: its lease runs out 3 s later) and node 1's
// worker killed: the rendezvous names a heal generation for the world of 3,
// which cannot connect without node 2, then drops node 2 and shrinks the
// world to 2 in the next generation. The replacement on node 1 must connect
// that generation as one of 2 ranks, not wait for node 2's keys until its
// store timeout.
TEST(NetNodes, ANodeLostDuringAnotherNodesHealShrinksTheWorldTheReplacementJoins) {
  std::string why;
  auto lab = lab_or_skip(3, &why);
  if (!lab) GTEST_SKIP() << why;
  const ddptest::EnvChanges env{"DDPRUN_CPU_COMM=gloo", "OMP_NUM_THREADS=1", "DDPRUN_TIMEOUT_S=40"};
  const fs::path summary = temp("heal-loss.json");
  auto node = [&](int i) {
    return lab->wrap(i, node_cmd(lab_flags(*lab, i, "2:3", "heal-loss", "join_timeout=120,last_call_timeout=60"),
                                 heal_job(summary)));
  };
  Process n0(node(0), env);
  Process n1(node(1), env);
  Process n2(node(2), env);
  ASSERT_TRUE(reach_step(n0, 40)) << n0.out() << n0.err();
  const pid_t before = worker_of(n0);
  const pid_t victim = worker_of(n1);
  ASSERT_NE(victim, 0);
  // Node 2 stops: its agent (no more keep-alives) and its processes.
  for (pid_t c : ddptest::children_of(n2.pid())) kill(c, SIGSTOP);
  n2.signal(SIGSTOP);
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  ASSERT_TRUE(n1.wait_for_err_line([](const std::string& l) { return contains(l, "heals from the other workers in generation 1"); }, 60s))
      << n1.err();
  ASSERT_TRUE(n0.wait_for_line([](const std::string& l) { return contains(l, "world size now 2"); }, 90s))
      << n0.out() << n0.err();
  const pid_t after = worker_of(n0);
  Finished f0 = n0.finish(4min);
  Finished f1 = n1.finish(4min);
  for (pid_t c : ddptest::children_of(n2.pid())) kill(c, SIGKILL);
  n2.signal(SIGKILL);
  n2.finish(10s);
  EXPECT_EQ(f0.exit_code, 0) << f0.err;
  EXPECT_EQ(f1.exit_code, 0) << f1.err;
  EXPECT_TRUE(contains(f0.err, "the job goes on with 2 node(s), world size 2")) << f0.err;
  for (const Finished* f : {&f0, &f1}) {
    EXPECT_FALSE(contains(f->err, "restarting the workers")) << f->err;
    EXPECT_FALSE(contains(f->err, "superseded")) << f->err;
  }
  EXPECT_NE(before, 0);
  EXPECT_EQ(after, before) << "node 0's worker was restarted";
  EXPECT_TRUE(contains(f0.out, "]:parameters identical on all 2 ranks")) << f0.out;
  // One heal on node 1: its replacement connected the shrunk world at once
  // (one that kept the world of 3 waits for node 2, or fails and heals again).
  EXPECT_EQ(ddptest::occurrences(f1.err, "its replacement heals from the other workers"), 1) << f1.err;
  EXPECT_FALSE(contains(f1.out, "error:")) << f1.out;
}

// Waiting for a replacement on another node is no hang. Two nodes of two
// workers, --hang-timeout 3: node 1's warm standbys are stopped, then one of
// its workers killed; the standby released as the replacement never beats.
// Node 0's workers wait for it (and beat while they wait): they are not
// declared hung. Node 1 finds its replacement hung, replaces it afresh, and
// the job ends on both nodes with node 0's workers the same processes.
TEST(NetNodes, WaitingForAStoppedReplacementOnAnotherNodeIsNoHang) {
  std::string why;
  auto lab = lab_or_skip(2, &why);
  if (!lab) GTEST_SKIP() << why;
  const ddptest::EnvChanges env{"DDPRUN_CPU_COMM=gloo", "OMP_NUM_THREADS=1"};
  const fs::path summary = temp("paused-replacement.json");
  auto node = [&](int i) {
    std::vector<std::string> flags = lab_flags(*lab, i, "2", "paused", "join_timeout=120", true, 2);
    flags.insert(flags.end(), {"--hang-timeout", "3"});
    return lab->wrap(i, node_cmd(flags, heal_job(summary)));
  };
  Process n0(node(0), env);
  Process n1(node(1), env);
  ASSERT_TRUE(reach_step(n0, 20)) << n0.out() << n0.err();
  auto children = [](Process& p, bool standbys) {
    std::vector<pid_t> out;
    for (pid_t c : ddptest::children_of(p.pid())) {
      if (ddptest::started_as_standby(c) == standbys) out.push_back(c);
    }
    std::sort(out.begin(), out.end());
    return out;
  };
  std::vector<pid_t> standby;
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while ((standby = children(n1, true)).empty() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(50ms);  // polling for the process, not a synchronisation
  }
  ASSERT_FALSE(standby.empty()) << "node 1 keeps no warm standby";
  const std::vector<pid_t> before = children(n0, false);
  const std::vector<pid_t> victims = children(n1, false);
  ASSERT_EQ(before.size(), 2u);
  ASSERT_FALSE(victims.empty());
  for (pid_t p : standby) kill(p, SIGSTOP);  // whichever is released as the replacement
  ASSERT_EQ(kill(victims.front(), SIGKILL), 0);
  if (!n1.wait_for_err_line([](const std::string& l) { return contains(l, "hung: a replacement that never beat"); },
                                   90s)) {
    Finished x1 = n1.finish(60s);
    Finished x0 = n0.finish(60s);
    FAIL() << x1.err << x1.out.substr(x1.out.size() > 4000 ? x1.out.size() - 4000 : 0) << "\n---\n" << x0.err << x0.out.substr(x0.out.size() > 3000 ? x0.out.size() - 3000 : 0);
  }
  ASSERT_TRUE(reach_step(n0, 80)) << n0.out() << n0.err();
  const std::vector<pid_t> after = children(n0, false);
  Finished f0 = n0.finish(4min);
  Finished f1 = n1.finish(4min);
  EXPECT_EQ(f0.exit_code, 0) << f0.err;
  EXPECT_EQ(f1.exit_code, 0) << f1.err;
  // None of node 0's own workers was found hung (it only relays node 1's news).
  EXPECT_FALSE(std::regex_search(f0.err, std::regex(R"(\(pid \d+\) hung)"))) << f0.err;
  EXPECT_TRUE(contains(f0.err, "hung: a replacement that never beat")) << f0.err;
  for (const Finished* f : {&f0, &f1}) EXPECT_FALSE(contains(f->err, "restarting the workers")) << f->err;
  EXPECT_EQ(after, before) << "node 0's workers were restarted";
  EXPECT_TRUE(contains(f0.out, "]:parameters identical on all 4 ranks")) << f0.out;
}

// The checksum heal_job ends with when it runs on `before` ranks with a
// checkpoint after every step, and that of `step` is resumed on `after`
// ranks ("" when something failed, and the test failed with it).
std::string checksum_resumed_at(const ddptest::EnvChanges& env, int before, int64_t step, int after,
                                const std::string& name) {
  auto with = [](const fs::path& summary, std::vector<std::string> more) {
    std::vector<std::string> p = heal_job(summary);
    p.insert(p.end(), more.begin(), more.end());
    return p;
  };
  const fs::path every = temp(name + "-every"), one = temp(name + "-one");
  Finished first = ddptest::run(node_cmd({"--nproc", std::to_string(before)},
                                         with(temp(name + "-first.json"), {"--checkpoint-dir", every.string(),
                                                                           "--checkpoint-every", "1",
                                                                           "--keep-checkpoints", "1000"})),
                                env, 4min);
  EXPECT_EQ(first.exit_code, 0) << first.err;
  fs::create_directories(one);
  const std::string prefix = ddptest::checkpoint_file_prefix(step);
  for (const auto& e : fs::directory_iterator(every)) {
    if (e.path().filename().string().rfind(prefix, 0) == 0) fs::copy_file(e.path(), one / e.path().filename());
  }
  EXPECT_FALSE(fs::is_empty(one)) << "no checkpoint of step " << step << " in " << every;
  const fs::path resumed = temp(name + "-resumed.json");
  Finished f = ddptest::run(node_cmd({"--nproc", std::to_string(after)},
                                     with(resumed, {"--checkpoint-dir", one.string()})),
                            env, 4min);
  EXPECT_EQ(f.exit_code, 0) << f.err;
  EXPECT_TRUE(contains(f.out, "resumed from")) << f.out;
  fs::remove_all(every);
  fs::remove_all(one);
  return checksum_in(resumed);
}

// Shrink: no node waits to take a lost node's place, and --nnodes 1:2 lets
// the job run on one. The round goes on without node 1: node 0's worker is
// the same process throughout, it heals alone as rank 0 of 1, and the
// sampler shares the rest of the epoch out from the global position. Its
// parameters then equal, bit for bit, those of a job that ran on 2 ranks to
// the same step, saved a checkpoint there, and resumed from it on 1.
struct ShrinkRun {
  Finished f0;
  pid_t worker_before = 0, worker_after = 0;
  int64_t shrunk_at = -1;  // "world size now 1, going on from step N"
};

ShrinkRun shrink_two_nodes(NetLab& lab, const ddptest::EnvChanges& env, const std::vector<std::string>& prog) {
  auto node = [&](int i) {
    return lab.wrap(i, node_cmd(lab_flags(lab, i, "1:2", "shrink", "join_timeout=120,last_call_timeout=60"), prog));
  };
  ShrinkRun r;
  Process n0(node(0), env);
  Process n1(node(1), env);
  EXPECT_TRUE(reach_step(n0, 40)) << n0.out() << n0.err();
  r.worker_before = worker_of(n0);
  n1.signal(SIGKILL);  // the whole node: its agent, and its worker with it
  n1.finish(10s);
  EXPECT_TRUE(n0.wait_for_line([](const std::string& l) { return contains(l, "world size now 1"); }, 60s))
      << n0.out() << n0.err();
  r.worker_after = worker_of(n0);
  r.f0 = n0.finish(4min);
  std::smatch m;
  if (std::regex_search(r.f0.out, m, std::regex(R"(world size now 1, going on from step (\d+))"))) {
    r.shrunk_at = std::stoll(m[1]);
  }
  return r;
}

void expect_kept_its_worker(const ShrinkRun& r) {
  EXPECT_EQ(r.f0.exit_code, 0) << r.f0.err;
  EXPECT_TRUE(contains(r.f0.err, "the job goes on with 1 node(s), world size 1")) << r.f0.err;
  EXPECT_TRUE(contains(r.f0.err, "heal among the survivors")) << r.f0.err;
  EXPECT_FALSE(contains(r.f0.err, "restarting the workers")) << r.f0.err;
  EXPECT_NE(r.worker_before, 0);
  EXPECT_EQ(r.worker_after, r.worker_before) << "node 0's worker was restarted";
  EXPECT_TRUE(contains(r.f0.out, "]:parameters identical on all 1 ranks")) << r.f0.out;
}

TEST(NetNodes, WithNoSpareTheJobShrinksPastAKilledNodeAndEndsAsAResumeAtOneRankWould) {
  std::string why;
  auto lab = lab_or_skip(2, &why);
  if (!lab) GTEST_SKIP() << why;
  const ddptest::EnvChanges env{"DDPRUN_CPU_COMM=gloo", "OMP_NUM_THREADS=1"};
  const fs::path summary = temp("shrink.json");
  ShrinkRun r = shrink_two_nodes(*lab, env, heal_job(summary));
  expect_kept_its_worker(r);
  ASSERT_GT(r.shrunk_at, 0) << r.f0.out;

  // The same job on 2 ranks, resumed on 1 from the step the shrink went on from.
  EXPECT_EQ(checksum_in(summary), checksum_resumed_at(env, 2, r.shrunk_at, 1, "shrink"))
      << "the shrunk run's parameters differ from a resume at 1 rank from step " << r.shrunk_at;
}

// The same shrink for a PyTorch script (ddprun.Healer): node 0's worker goes
// on alone from the global sample position, so it takes exactly the steps
// that position leaves (64 samples a step on 2 ranks, 32 on 1).
TEST(NetNodes, WithNoSpareAPythonScriptShrinksPastAKilledNodeAndReadsTheRestOfTheEpochOnce) {
  std::string why;
  auto lab = lab_or_skip(2, &why);
  if (!lab) GTEST_SKIP() << why;
  ShrinkRun r = shrink_two_nodes(*lab, kPythonHealEnv, python_heal_job());
  EXPECT_EQ(r.f0.exit_code, 0) << r.f0.err;
  EXPECT_TRUE(contains(r.f0.err, "heal among the survivors")) << r.f0.err;
  EXPECT_FALSE(contains(r.f0.err, "restarting the workers")) << r.f0.err;
  EXPECT_EQ(r.worker_after, r.worker_before) << "node 0's worker was restarted";
  ASSERT_GT(r.shrunk_at, 0) << r.f0.out;
  const int64_t steps = r.shrunk_at + (16000 - r.shrunk_at * 64) / 32;
  EXPECT_TRUE(contains(r.f0.out, "]:1 ranks, " + std::to_string(steps) + " steps in ")) << r.f0.out;
}

// --rdzv-backend embedded: the node that serves the rendezvous (node 0, on
// the endpoint's host, where the job's control plane started) is lost like
// any other. Its agent is SIGKILLed mid-epoch (its worker dies with it)
// once three nodes vote; a voter on another node takes the control plane
// over, drops node 0, and the two others heal among themselves with no
// restart. The job ends bit for bit as one that ran on 3 ranks to the step
// the shrink went on from, saved a checkpoint there and resumed on 2.
TEST(NetNodes, EmbeddedControlPlaneTheServingNodeIsLostAndTheOthersGoOnAsAResumeAtTwoRanksWould) {
  std::string why;
  auto lab = lab_or_skip(3, &why);
  if (!lab) GTEST_SKIP() << why;
  const ddptest::EnvChanges env{"DDPRUN_CPU_COMM=gloo", "OMP_NUM_THREADS=1"};
  const fs::path summary = temp("embedded.json");
  auto node = [&](int i) {
    std::vector<std::string> flags = lab_flags(*lab, i, "2:3", "embedded", "join_timeout=120,last_call_timeout=60");
    flags.insert(flags.end(), {"--rdzv-backend", "embedded"});
    return lab->wrap(i, node_cmd(flags, heal_job(summary)));
  };
  Process n0(node(0), env);
  ASSERT_TRUE(n0.wait_for_err_line([](const std::string& l) { return contains(l, "starting job embedded's control plane"); },
                                   60s))
      << n0.err();
  Process n1(node(1), env);
  Process n2(node(2), env);
  ASSERT_TRUE(n0.wait_for_err_line([](const std::string& l) { return contains(l, "(3 voters:"); }, 60s)) << n0.err();
  ASSERT_TRUE(reach_step(n0, 40)) << n0.out() << n0.err();
  const pid_t before = worker_of(n1);
  n0.signal(SIGKILL);  // the whole node: the serving agent, and its worker with it
  n0.finish(10s);
  ASSERT_TRUE(n1.wait_for_line([](const std::string& l) { return contains(l, "world size now 2"); }, 60s))
      << n1.out() << n1.err() << n2.err();
  const pid_t after = worker_of(n1);
  Finished f1 = n1.finish(4min), f2 = n2.finish(4min);
  ASSERT_EQ(f1.exit_code, 0) << f1.err;
  ASSERT_EQ(f2.exit_code, 0) << f2.err;
  EXPECT_TRUE(contains(f1.err + f2.err, "took over job embedded's rendezvous")) << f1.err << f2.err;
  // Every survivor says who took over, and in which term.
  for (const Finished* f : {&f1, &f2}) {
    EXPECT_TRUE(std::regex_search(f->err, std::regex(R"(node \S+ took over the job's rendezvous \(term \d+; node \S+ served term \d+\))")))
        << f->err;
  }
  EXPECT_FALSE(contains(f1.err + f2.err, "restarting the workers")) << f1.err << f2.err;
  EXPECT_NE(before, 0);
  EXPECT_EQ(after, before) << "node 1's worker was restarted";
  std::smatch m;
  ASSERT_TRUE(std::regex_search(f1.out, m, std::regex(R"(world size now 2, going on from step (\d+))"))) << f1.out;
  EXPECT_EQ(checksum_in(summary), checksum_resumed_at(env, 3, std::stoll(m[1]), 2, "embedded"))
      << "the job's parameters differ from a resume at 2 ranks from step " << m[1];
}

// Slowness is not failure: links down for less than the lease cost
// nothing. Three hosts on the embedded control plane; the serving node's
// link goes down for 1.5 s (round 4 saw a 1.2 s cut end such a job: its
// connection closed, and a closed connection dropped the node), then node
// 1's. Then the whole job is suspended for 8 s, more than two leases (a
// scheduler's suspend: every process of every node SIGSTOPped, then
// SIGCONTed) while node 1's keep-alive is in flight: round 5 saw that
// restart every worker, the call timing out by the clock (seen failing
// without lease_keeper's call_stall). Nobody is lost, nothing restarts,
// and one rank 0 of 3 finishes.
TEST(NetNodes, LinkBlipsShorterThanTheLeaseCostNothingNotEvenOnTheServingNode) {
  std::string why;
  auto lab = lab_or_skip(3, &why);
  if (!lab) GTEST_SKIP() << why;
  const ddptest::EnvChanges env{"DDPRUN_CPU_COMM=gloo", "OMP_NUM_THREADS=1"};
  const fs::path summary = temp("blips.json");
  std::vector<std::unique_ptr<Process>> n;
  for (int i = 0; i < 3; ++i) {
    n.push_back(std::make_unique<Process>(
        lab->wrap(i, node_cmd(lab_flags(*lab, i, "3", "blips", "join_timeout=120"), heal_job(summary, "3"))), env));
  }
  ASSERT_TRUE(reach_step(*n[0], 20)) << n[0]->out() << n[0]->err();
  for (int host : {0, 1}) {
    lab->link_down(host);
    std::this_thread::sleep_for(1500ms);  // the blip's length is the point
    lab->link_up(host);
    ASSERT_TRUE(reach_step(*n[0], 20 + 10 * (host + 1))) << n[0]->err() << n[1]->err() << n[2]->err();
  }
  // Every process of the job: the agents, their workers and standbys.
  std::vector<pid_t> job;
  for (auto& p : n) job.push_back(p->pid());
  for (size_t i = 0; i < job.size(); ++i) {
    for (pid_t c : ddptest::children_of(job[i])) job.push_back(c);
  }
  // Node 1's keep-alive in flight as it stops (its link down for 0.6 s
  // first: a call waits for its answer, which comes after the job resumes,
  // 8 s past its deadline).
  lab->link_down(1);
  std::this_thread::sleep_for(600ms);
  for (pid_t pid : job) kill(pid, SIGSTOP);
  std::this_thread::sleep_for(8s);  // the suspension's length is the point
  lab->link_up(1);
  for (pid_t pid : job) kill(pid, SIGCONT);
  ASSERT_TRUE(reach_step(*n[0], 60)) << n[0]->err() << n[1]->err() << n[2]->err();
  std::string outs, errs;
  for (auto& p : n) {
    Finished f = p->finish(4min);
    EXPECT_EQ(f.exit_code, 0) << f.err;
    outs += f.out;
    errs += f.err;
  }
  for (const char* alarm : {"was lost", "restarting the workers", "superseded", "dropped from the job", "hung"}) {
    EXPECT_FALSE(contains(errs, alarm)) << alarm << "\n" << errs;
  }
  EXPECT_EQ(ddptest::occurrences(outs, "]:parameters identical on all 3 ranks"), 1) << outs;
  EXPECT_FALSE(checksum_in(summary).empty());
}

// Embedded control plane, the serving node out of the job's majority past
// its lease: cut off alone (its link down), or paused. The two others
// elect a successor, drop node 0 when its lease runs out there, and go on
// as a 2-rank job without a restart, one rank 0 writing the result. Node
// 0 steps down; once continued, or its link back, it hears it was dropped
// and comes back as a member (a grow) unless the job finished. (Cut off
// long enough, it would instead leave non-zero on its own, having reached
// no majority for a lease: the link comes back at any moment here.)
void expect_serving_node_lost(NetLab& lab, const std::string& id, bool cut) {
  const ddptest::EnvChanges env{"DDPRUN_CPU_COMM=gloo", "OMP_NUM_THREADS=1", "DDPRUN_TIMEOUT_S=30"};
  const fs::path summary = temp(id + ".json");
  auto node = [&](int i) {
    std::vector<std::string> flags = lab_flags(lab, i, "2:3", id, "join_timeout=120,last_call_timeout=60");
    flags.insert(flags.end(), {"--rdzv-backend", "embedded"});
    return lab.wrap(i, node_cmd(flags, heal_job(summary)));
  };
  Process n0(node(0), env);
  ASSERT_TRUE(n0.wait_for_err_line([&](const std::string& l) { return contains(l, "starting job " + id); }, 60s))
      << n0.err();
  Process n1(node(1), env);
  Process n2(node(2), env);
  ASSERT_TRUE(n0.wait_for_err_line([](const std::string& l) { return contains(l, "(3 voters:"); }, 60s)) << n0.err();
  ASSERT_TRUE(reach_step(n0, 20)) << n0.out() << n0.err();
  const pid_t w0 = worker_of(n0);
  ASSERT_NE(w0, 0);
  if (cut) {
    lab.link_down(0);
  } else {
    n0.signal(SIGSTOP);
    kill(w0, SIGSTOP);
  }
  const bool shrunk =
      n1.wait_for_err_line([](const std::string& l) { return contains(l, "the job goes on with 2 node(s)"); }, 60s)
          .has_value();
  if (cut) {
    lab.link_up(0);
  } else {
    kill(w0, SIGCONT);
    n0.signal(SIGCONT);
  }
  ASSERT_TRUE(shrunk) << n1.err() << n2.err();
  Finished f0 = n0.finish(4min), f1 = n1.finish(4min), f2 = n2.finish(4min);
  EXPECT_TRUE(std::regex_search(f0.err, std::regex("stopped serving job " + id + "'s rendezvous \\(term \\d+\\)")))
      << f0.err;
  const bool left_by_itself = cut && contains(f0.err, "this node has reached no majority of the job's 3 control-plane "
                                                     "voters");
  if (left_by_itself) {
    EXPECT_NE(f0.exit_code, 0) << f0.err;
    EXPECT_TRUE(contains(f0.err, "the job goes on without this node, which leaves")) << f0.err;
  } else {
    // Back from its pause, the node hears that it was dropped, or (its own
    // term over, its keep-alive going to the address it served at) finds
    // the rendezvous silent for longer than the lease: either way it stops
    // its workers and joins again.
    EXPECT_TRUE(contains(f0.err, "this node was dropped from the job (its lease ran out)") ||
                contains(f0.err, "lost contact with the rendezvous for longer than the lease"))
        << f0.err;
  }
  EXPECT_EQ(f1.exit_code, 0) << f1.err;
  EXPECT_EQ(f2.exit_code, 0) << f2.err;
  EXPECT_TRUE(contains(f1.err + f2.err, "took over job " + id + "'s rendezvous from node")) << f1.err << f2.err;
  EXPECT_FALSE(contains(f1.err + f2.err, "restarting the workers")) << f1.err << f2.err;
  EXPECT_FALSE(contains(f1.err + f2.err, "superseded")) << f1.err << f2.err;
  // One rank 0 finished the job: the new one, on node 1.
  EXPECT_EQ(ddptest::occurrences(f1.out + f2.out, "]:parameters identical on all "), 1) << f1.out << f2.out;
  EXPECT_FALSE(contains(f0.out, "]:parameters identical")) << f0.out;
  EXPECT_FALSE(checksum_in(summary).empty());
}

TEST(NetNodes, EmbeddedControlPlaneTheServingNodeCutOffAloneIsDroppedAndTheOthersFinish) {
  std::string why;
  auto lab = lab_or_skip(3, &why);
  if (!lab) GTEST_SKIP() << why;
  expect_serving_node_lost(*lab, "cut-off", true);
}

TEST(NetNodes, EmbeddedControlPlaneAPausedServingNodeIsDroppedAndTheOthersFinish) {
  std::string why;
  auto lab = lab_or_skip(3, &why);
  if (!lab) GTEST_SKIP() << why;
  expect_serving_node_lost(*lab, "paused", false);
}

// A partition of 5 hosts, on the default backend (from 3 nodes: embedded):
// the serving node 0 and node 1 on one side, nodes 2-4 on the other. The
// three are a majority of the 5 voters: they elect a successor, drop 0 and
// 1, and finish as a 3-rank job. The two can commit nothing: neither
// reaches a majority for a lease, both stop their workers and leave
// non-zero saying so, and neither's rank 0 writes a result.
TEST(NetNodes, EmbeddedControlPlaneAPartitionKeepsTheMajoritySideAndTheMinorityLeaves) {
  std::string why;
  auto lab = lab_or_skip(5, &why);
  if (!lab) GTEST_SKIP() << why;
  const ddptest::EnvChanges env{"DDPRUN_CPU_COMM=gloo", "OMP_NUM_THREADS=1", "DDPRUN_TIMEOUT_S=30"};
  const std::string id = "split";
  const fs::path summary = temp(id + ".json");
  auto node = [&](int i) {
    return lab->wrap(i, node_cmd(lab_flags(*lab, i, "3:5", id, "join_timeout=120,last_call_timeout=60"),
                                 heal_job(summary)));
  };
  std::vector<std::unique_ptr<Process>> n;
  n.push_back(std::make_unique<Process>(node(0), env));
  ASSERT_TRUE(n[0]->wait_for_err_line([&](const std::string& l) { return contains(l, "starting job " + id); }, 60s))
      << n[0]->err();
  for (int i = 1; i < 5; ++i) n.push_back(std::make_unique<Process>(node(i), env));
  ASSERT_TRUE(n[0]->wait_for_err_line([](const std::string& l) { return contains(l, "(5 voters:"); }, 60s))
      << n[0]->err();
  ASSERT_TRUE(reach_step(*n[0], 20)) << n[0]->out() << n[0]->err();
  lab->partition({0, 1});
  const bool shrunk =
      n[2]->wait_for_err_line([](const std::string& l) { return contains(l, "the job goes on with 3 node(s)"); }, 90s)
          .has_value();
  // The minority leaves on its own, the link still cut: it does not wait
  // for the network to come back.
  Finished f0 = n[0]->finish(2min), f1 = n[1]->finish(2min);
  lab->heal_partition();
  ASSERT_TRUE(shrunk) << n[2]->err() << n[3]->err();
  std::vector<Finished> majority;
  for (int i = 2; i < 5; ++i) majority.push_back(n[i]->finish(4min));
  for (const Finished* f : {&f0, &f1}) {
    EXPECT_NE(f->exit_code, 0) << f->err;
    EXPECT_TRUE(contains(f->err, "this node has reached no majority of the job's 5 control-plane voters")) << f->err;
    EXPECT_TRUE(contains(f->err, "the job goes on without this node, which leaves")) << f->err;
    EXPECT_FALSE(contains(f->out, "]:parameters identical")) << f->out;
  }
  std::string outs, errs;
  for (const Finished& f : majority) {
    EXPECT_EQ(f.exit_code, 0) << f.err;
    outs += f.out;
    errs += f.err;
  }
  EXPECT_TRUE(contains(errs, "took over job " + id + "'s rendezvous from node")) << errs;
  // One rank 0 finished the job, on the majority's side.
  EXPECT_EQ(ddptest::occurrences(outs, "]:parameters identical on all 3 ranks"), 1) << outs;
  EXPECT_FALSE(checksum_in(summary).empty());
}

// The serving node lost, then a new node comes: --rdzv-endpoint lists the
// job's first three nodes, and each serves at its entry, so the newcomer
// finds the job at a survivor (node 0's address no longer answers) and
// joins the running round: the world grows back to 3 and everyone finishes.
TEST(NetNodes, EmbeddedControlPlaneANodeThatComesAfterTheServingNodeWasLostFindsTheJobAtAListedNode) {
  std::string why;
  auto lab = lab_or_skip(4, &why);
  if (!lab) GTEST_SKIP() << why;
  const ddptest::EnvChanges env{"DDPRUN_CPU_COMM=gloo", "OMP_NUM_THREADS=1"};
  const fs::path summary = temp("listed.json");
  const std::string listed = lab->addr(0) + ":29400," + lab->addr(1) + ":29400," + lab->addr(2) + ":29400";
  auto node = [&](int i) {
    std::vector<std::string> flags =
        lab_flags(*lab, i, "2:3", "listed", "join_timeout=120,last_call_timeout=60", /*pin=*/i < 3);
    *(std::find(flags.begin(), flags.end(), "--rdzv-endpoint") + 1) = listed;
    return lab->wrap(i, node_cmd(flags, heal_job(summary)));
  };
  Process n0(node(0), env);
  ASSERT_TRUE(n0.wait_for_err_line([](const std::string& l) { return contains(l, "starting job listed's control plane"); },
                                   60s))
      << n0.err();
  Process n1(node(1), env);
  Process n2(node(2), env);
  ASSERT_TRUE(n0.wait_for_err_line([](const std::string& l) { return contains(l, "(3 voters:"); }, 60s)) << n0.err();
  ASSERT_TRUE(reach_step(n0, 30)) << n0.out() << n0.err();
  n0.signal(SIGKILL);  // the whole node: the serving agent, and its worker with it
  n0.finish(10s);
  const auto shrunk = n1.wait_for_line([](const std::string& l) { return contains(l, "world size now 2"); }, 60s);
  ASSERT_TRUE(shrunk) << n1.out() << n1.err() << n2.err();
  // At once: the growth is named while the survivors still exchange the
  // shrink's first buckets. (That window once hung a survivor in a Gloo
  // send its healed peer had closed half-way: abort_test.cpp's
  // AGlooSendHalfWritten...; this test waited 5 steps then, and still failed
  // now and then.)
  Process n3(node(3), env);
  ASSERT_TRUE(n1.wait_for_line([](const std::string& l) { return contains(l, "world size now 3"); }, 90s))
      << n1.out() << n1.err() << "\nnode 3:\n" << n3.finish(10s).err << n3.out() << "\nnode 2:\n" << n2.finish(10s).err
      << n2.out();
  Finished f1 = n1.finish(4min), f2 = n2.finish(4min), f3 = n3.finish(4min);
  EXPECT_EQ(f1.exit_code, 0) << f1.err;
  EXPECT_EQ(f2.exit_code, 0) << f2.err;
  EXPECT_EQ(f3.exit_code, 0) << f3.err;
  EXPECT_TRUE(contains(f3.err, "joining the running round")) << f3.err;
  EXPECT_FALSE(contains(f1.err + f2.err + f3.err, "restarting the workers")) << f1.err << f2.err << f3.err;
  EXPECT_EQ(ddptest::occurrences(f1.out + f2.out + f3.out, "]:parameters identical on all 3 ranks"), 1)
      << f1.out << f2.out << f3.out;
}

// An unmodified PyTorch script on 3 hosts (default backend: embedded) whose
// serving node dies with its agent and worker: a voter takes the control
// plane over, the survivors' workers fail (a plain script cannot heal) and
// restart as a 2-rank job whose MASTER_ADDR is the new node 0's c10d store.
TEST(NetNodes, APytorchScriptWhoseServingNodeDiesRestartsAgainstTheNewNodeZerosStore) {
  std::string why;
  auto lab = lab_or_skip(3, &why);
  if (!lab) GTEST_SKIP() << why;
  const fs::path dir = temp("serving-node");
  fs::create_directories(dir);
  const fs::path script = dir / "job.py";
  std::ofstream(script) << R"PY(import os, sys
import torch
import torch.distributed as dist
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
for step in range(1000000 if attempt == 0 else 20):
    t = torch.tensor([1.0])
    dist.all_reduce(t)
    assert t.item() == world
    if rank == 0 and step % 10 == 0:
        print("attempt %d step %d world %d" % (attempt, step, world), flush=True)
if rank == 0:
    print("done: world %d, store at %s" % (world, os.environ["MASTER_ADDR"]), flush=True)
dist.barrier()
os._exit(0)  # past PyTorch 2.x's abort in interpreter shutdown (see tests/interop/torch_ddp.py)
)PY";
  const ddptest::EnvChanges env{"DDPRUN_PYTHON=" PYTHON_BIN, "OMP_NUM_THREADS=1"};
  auto node = [&](int i) {
    return lab->wrap(i, node_cmd(lab_flags(*lab, i, "2:3", "py-serving", "join_timeout=120,last_call_timeout=60"),
                                 {script.string()}));
  };
  Process n0(node(0), env);
  ASSERT_TRUE(n0.wait_for_err_line([](const std::string& l) { return contains(l, "starting job py-serving"); }, 60s))
      << n0.err();
  Process n1(node(1), env);
  Process n2(node(2), env);
  ASSERT_TRUE(n0.wait_for_err_line([](const std::string& l) { return contains(l, "(3 voters:"); }, 60s)) << n0.err();
  ASSERT_TRUE(n0.wait_for_line([](const std::string& l) { return contains(l, "attempt 0 step 20 world 3"); }, 120s))
      << n0.out() << n0.err();
  n0.signal(SIGKILL);  // the whole node: the serving agent, and its worker with it
  n0.finish(10s);
  Finished f1 = n1.finish(4min), f2 = n2.finish(4min);
  fs::remove_all(dir);
  EXPECT_EQ(f1.exit_code, 0) << f1.err;
  EXPECT_EQ(f2.exit_code, 0) << f2.err;
  EXPECT_TRUE(contains(f1.err + f2.err, "took over job py-serving's rendezvous")) << f1.err << f2.err;
  // (The survivors' workers start again at world 2, as a restart or, when
  // the takeover's new round reaches an agent before its worker's failure,
  // for that round: either way the script runs anew, which "done" shows.)
  // One survivor is node 0 now: its agent's store serves the restarted
  // script, and its rank 0 finishes the job.
  EXPECT_EQ(ddptest::occurrences(f1.out + f2.out, "]:done: world 2, store at "), 1) << f1.out << f2.out;
  const bool one_leads = contains(f1.out, "]:done: world 2, store at " + lab->addr(1) + "\n");
  const bool two_leads = contains(f2.out, "]:done: world 2, store at " + lab->addr(2) + "\n");
  EXPECT_TRUE(one_leads || two_leads) << f1.out << f2.out;
  EXPECT_FALSE(contains(f1.out + f2.out, "store at " + lab->addr(0))) << f1.out << f2.out;
}

// A shrink past a middle node moves the later node's ranks down: node 2's
// worker goes on as global rank 1, and its agent says so from then on (its
// events name rank 1, not the rank 2 it was launched as).
TEST(NetNodes, AShrinkPastAMiddleNodeRenumbersTheLaterNodesWorker) {
  std::string why;
  auto lab = lab_or_skip(3, &why);
  if (!lab) GTEST_SKIP() << why;
  const ddptest::EnvChanges env{"DDPRUN_CPU_COMM=gloo", "OMP_NUM_THREADS=1"};
  const fs::path logs = temp("renumber-logs");
  auto node = [&](int i) {
    std::vector<std::string> flags =
        lab_flags(*lab, i, "2:3", "renumber", "join_timeout=120,last_call_timeout=60");
    if (i == 2) flags.insert(flags.end(), {"--log-dir", logs.string()});
    return lab->wrap(i, node_cmd(flags, heal_job(temp("renumber.json"))));
  };
  Process n0(node(0), env);
  Process n1(node(1), env);
  Process n2(node(2), env);
  ASSERT_TRUE(reach_step(n0, 40)) << n0.out() << n0.err();
  n1.signal(SIGKILL);  // the whole node: its agent, and its worker with it
  n1.finish(10s);
  Finished f2 = n2.finish(4min);
  Finished f0 = n0.finish(4min);
  ASSERT_EQ(f2.exit_code, 0) << f2.err;
  EXPECT_EQ(f0.exit_code, 0) << f0.err;
  EXPECT_TRUE(contains(f2.err, "go on as ranks 1..1 of 2 (node rank 1 of 2)")) << f2.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(f2.err, m, std::regex(R"(worker logs are in (\S+))"))) << f2.err;
  std::ifstream in(fs::path(m[1].str()) / "events.jsonl");
  std::string line, exit_line;
  while (std::getline(in, line)) {
    if (contains(line, "\"event\":\"exit\"")) exit_line = line;
  }
  EXPECT_TRUE(contains(exit_line, "\"rank\":1")) << "the worker's exit names its launch rank: " << exit_line;
  fs::remove_all(logs);
}

// --keep-global-batch: the one rank left reads both ranks' share per step,
// so the run takes as many steps as one that nothing interrupted.
TEST(NetNodes, AShrunkJobThatKeepsItsGlobalBatchTakesTheUninterruptedRunsSteps) {
  std::string why;
  auto lab = lab_or_skip(2, &why);
  if (!lab) GTEST_SKIP() << why;
  const ddptest::EnvChanges env{"DDPRUN_CPU_COMM=gloo", "OMP_NUM_THREADS=1"};
  const fs::path summary = temp("keep.json");
  ShrinkRun r = shrink_two_nodes(*lab, env,
                                 {TRAIN_BIN, "--limit", "8000", "--epochs", "2", "--print-steps",
                                  "--keep-global-batch", "--summary-json", summary.string()});
  expect_kept_its_worker(r);
  EXPECT_TRUE(contains(r.f0.out, "global batch kept")) << r.f0.out;
  std::ifstream in(summary);
  const std::string json((std::istreambuf_iterator<char>(in)), {});
  std::smatch m;
  ASSERT_TRUE(std::regex_search(json, m, std::regex(R"re("steps": (\d+))re"))) << json;
  EXPECT_EQ(std::stoi(m[1]), 2 * 8000 / 64) << "2 epochs of 8000 images at a global batch of 64\n" << r.f0.out;
}

// Grow: node 0 trains alone (--nnodes 1:2); node 1 arrives and joins the
// running round. Node 0's worker is the same process throughout, node 1's
// worker takes the state from it, the sampler shares the rest of the epoch
// out over 2 ranks from the global position, and the job ends bit for bit
// as one that ran on 1 rank to the same step, saved a checkpoint there and
// resumed from it on 2.
TEST(NetNodes, ALateNodeJoinsTheRunningRoundAndTheJobEndsAsAResumeAtTwoRanksWould) {
  std::string why;
  auto lab = lab_or_skip(2, &why);
  if (!lab) GTEST_SKIP() << why;
  const ddptest::EnvChanges env{"DDPRUN_CPU_COMM=gloo", "OMP_NUM_THREADS=1"};
  const fs::path summary = temp("grow.json");
  // Node 1 names a summary of its own: a per-node argument, admitted.
  const fs::path summary1 = temp("grow-node1.json");
  auto node = [&](int i) {
    return lab->wrap(i, node_cmd(lab_flags(*lab, i, "1:2", "grow"), heal_job(i == 0 ? summary : summary1)));
  };
  Process n0(node(0), env);
  ASSERT_TRUE(reach_step(n0, 30)) << n0.out() << n0.err();
  // Node 1 comes once the rendezvous knows that node 0's workers heal (its
  // agent tells it at once, but on a fast machine step 30 can come first):
  // `ddprun status` shows it. Before that, a restart is the right answer.
  const Finished heals = ddptest::run_until(
      lab->wrap(0, node_cmd({"status", "--rdzv-endpoint", lab->addr(0) + ":29400", "--rdzv-id", "grow", "--json"}, {})),
      "\"heals\": true");
  ASSERT_TRUE(contains(heals.out, "\"heals\": true")) << heals.out << heals.err;
  const pid_t before = worker_of(n0);
  Process n1(node(1), env);
  ASSERT_TRUE(n0.wait_for_line([](const std::string& l) { return contains(l, "world size now 2"); }, 90s))
      << n0.out() << n0.err();
  const pid_t after = worker_of(n0);
  Finished f0 = n0.finish(4min);
  Finished f1 = n1.finish(4min);
  EXPECT_EQ(f0.exit_code, 0) << f0.err;
  EXPECT_EQ(f1.exit_code, 0) << f1.err;
  EXPECT_TRUE(contains(f0.err, "joined the running round as node rank 1")) << f0.err;
  EXPECT_TRUE(contains(f1.err, "joining the running round as node rank 1")) << f1.err;
  EXPECT_FALSE(contains(f0.err, "restarting the workers")) << f0.err;
  EXPECT_FALSE(contains(f0.err, "admitting node")) << f0.err;
  EXPECT_TRUE(contains(f0.err, "the rendezvous admitted node ")) << f0.err;
  EXPECT_TRUE(contains(f0.err, "is `" + summary1.string() + "`, theirs `" + summary.string() + "`")) << f0.err;
  EXPECT_NE(before, 0);
  EXPECT_EQ(after, before) << "node 0's worker was restarted";
  EXPECT_TRUE(contains(f0.out, "]:parameters identical on all 2 ranks")) << f0.out;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(f0.out, m, std::regex(R"(world size now 2, going on from step (\d+))"))) << f0.out;
  const int64_t grew_at = std::stoll(m[1]);

  // The same job on 1 rank, resumed on 2 from the step the growth went on from.
  EXPECT_EQ(checksum_in(summary), checksum_resumed_at(env, 1, grew_at, 2, "grow"))
      << "the grown run's parameters differ from a resume at 2 ranks from step " << grew_at;
}

// A late node must run the job's program: one started with another program
// (here the same binary under another name) is refused by the running
// round, with a message on both sides; the job goes on as if it had never
// come. (The same program with other arguments is admitted: the test above.)
TEST(NetNodes, ALateNodeRunningAnotherProgramIsRefusedAndTheJobGoesOn) {
  std::string why;
  auto lab = lab_or_skip(2, &why);
  if (!lab) GTEST_SKIP() << why;
  const ddptest::EnvChanges env{"DDPRUN_CPU_COMM=gloo", "OMP_NUM_THREADS=1"};
  const fs::path summary = temp("mismatch.json");
  Process n0(lab->wrap(0, node_cmd(lab_flags(*lab, 0, "1:2", "mismatch"), heal_job(summary))), env);
  ASSERT_TRUE(reach_step(n0, 20)) << n0.out() << n0.err();
  std::vector<std::string> other = heal_job(summary);
  const fs::path renamed = temp("mismatch-train-other");
  fs::remove(renamed);
  fs::create_symlink(other[0], renamed);
  other[0] = renamed.string();
  Finished f1 = ddptest::run(lab->wrap(1, node_cmd(lab_flags(*lab, 1, "1:2", "mismatch"), other)), env, 2min);
  fs::remove(renamed);
  EXPECT_EQ(f1.exit_code, 1) << f1.err;
  EXPECT_TRUE(contains(f1.err, "it runs `ddprun-multi-mismatch-train-other")) << f1.err;
  EXPECT_TRUE(contains(f1.err, "but the running round's nodes run `train --limit 8000")) << f1.err;
  EXPECT_TRUE(contains(f1.err, "joins a running job only with the same program")) << f1.err;
  ASSERT_TRUE(n0.wait_for_err_line([](const std::string& l) { return contains(l, "the rendezvous refused node"); }, 60s))
      << n0.err();
  Finished f0 = n0.finish(4min);
  EXPECT_EQ(f0.exit_code, 0) << f0.err;
  EXPECT_FALSE(contains(f0.err, "restarting the workers")) << f0.err;
  EXPECT_FALSE(contains(f0.err, "admitting node")) << f0.err;
  EXPECT_FALSE(contains(f0.err, "joined the running round")) << f0.err;
  EXPECT_TRUE(contains(f0.out, "]:parameters identical on all 1 ranks")) << f0.out;
}

// A flapping link: node 1's link goes down for 4 s (past its 3 s lease) and
// up for 3 s, four times (no sleep could be replaced here: the flapping is
// the point). Each time it is lost the job shrinks; each time it comes back
// it joins the running round again, and learns it at once (its agent
// connects afresh after a lost contact: the old connection held the answer
// back for seconds, while node 0 waited for its workers). Whenever the job
// ends, node 1 hears it and ends too: never waiting, silent, for a job that
// is over. (A loss that lands outside a step, in the evaluation, restarts
// the workers: --max-restarts is large for that.)
TEST(NetNodes, AFlappingLinkEndsWithBothNodesDone) {
  std::string why;
  auto lab = lab_or_skip(2, &why);
  if (!lab) GTEST_SKIP() << why;
  const ddptest::EnvChanges env{"DDPRUN_CPU_COMM=gloo", "OMP_NUM_THREADS=1", "DDPRUN_TIMEOUT_S=60"};
  const fs::path summary = temp("flap.json");
  std::vector<std::string> prog = heal_job(summary);
  prog[4] = "8";  // --epochs
  auto node = [&](int i) {
    std::vector<std::string> flags = lab_flags(*lab, i, "1:2", "flap", "join_timeout=120,last_call_timeout=60");
    flags.insert(flags.end(), {"--max-restarts", "20"});
    return lab->wrap(i, node_cmd(flags, prog));
  };
  Process n0(node(0), env);
  Process n1(node(1), env);
  ASSERT_TRUE(reach_step(n0, 20)) << n0.out() << n0.err();
  for (int i = 0; i < 4; ++i) {
    lab->link_down(1);
    std::this_thread::sleep_for(4s);
    lab->link_up(1);
    std::this_thread::sleep_for(3s);
  }
  Finished f0 = n0.finish(5min);
  const auto ended = std::chrono::steady_clock::now();
  Finished f1 = n1.finish(2min);
  const auto after = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - ended);
  EXPECT_EQ(f0.exit_code, 0) << f0.err;
  EXPECT_GE(f1.exit_code, 0) << "node 1 was still running " << after.count() << " s after node 0 ended:\n" << f1.err;
  EXPECT_LT(after.count(), 30) << f1.err;
  // Each grow reached node 1 while node 0 went on: its heal into the grown
  // world never waited seconds for node 1's workers.
  const std::regex connecting(R"(([0-9.]+) s connecting)");
  int heals = 0;
  for (auto it = std::sregex_iterator(f0.err.begin(), f0.err.end(), connecting); it != std::sregex_iterator(); ++it) {
    ++heals;
    EXPECT_LT(std::stod((*it)[1]), 3.0) << "a heal waited " << (*it)[1] << " s to connect:\n" << f0.err;
  }
  EXPECT_GT(heals, 0) << f0.err;
  if (f1.exit_code != 0) {
    EXPECT_TRUE(contains(f1.err, "job finished")) << f1.err;
  }
}

// Without heals a late node is admitted by a new round: the workers restart
// from the checkpoint, with no restart spent.
TEST(NetNodes, ALateNodeIsAdmittedAndBothFinishTogether) {
  std::string why;
  auto lab = lab_or_skip(2, &why);
  if (!lab) GTEST_SKIP() << why;
  const fs::path ckpt = temp("late-ckpt");
  Process n0(lab_node(*lab, 0, ckpt, "20", {"--max-heals", "0"}));
  ASSERT_TRUE(reach_step(n0, 15)) << n0.out();
  Process n1(lab_node(*lab, 1, ckpt, "20", {"--max-heals", "0"}));
  Finished f1 = n1.finish(3min);
  Finished f0 = n0.finish(3min);
  EXPECT_EQ(f0.exit_code, 0) << f0.err;
  EXPECT_EQ(f1.exit_code, 0) << f1.err;
  EXPECT_TRUE(contains(f0.err, "admitting node")) << f0.err;
  EXPECT_TRUE(contains(f0.out, "parameters identical on all 2 ranks")) << f0.out;
  EXPECT_TRUE(contains(f1.err, "node rank 1 of 2, ranks 1..1 of 2")) << f1.err;
  // Admitting a node is no failure: no restart was spent on it.
  EXPECT_FALSE(contains(f0.err, "restarting the workers")) << f0.err;
}

// The control plane under attack: a job's store takes only its own token,
// on one node and across nodes, with and without TLS.
// The resident memory of a process, in KiB (0 if it is gone).
long rss_kb(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  }
  return 0;
}

// A job's own rendezvous (hosted by its ddprun) serves that job alone:
// another job whose ddprun finds the port taken is refused at once, naming
// both, instead of running as the first job's tenant (which would then wait
// for it before exiting).
TEST(ControlPlane, AnotherJobOnAJobsOwnRendezvousIsRefusedNamingBoth) {
  const int port = free_port();
  const std::string endpoint = "127.0.0.1:" + std::to_string(port);
  Process host(node_cmd({"--nnodes", "2", "--nproc", "1", "--rdzv-endpoint", endpoint, "--rdzv-id", "first"},
                        {PROBE_BIN, "exit", "0"}));
  ASSERT_TRUE(host.wait_for_err_line([](const std::string& l) { return contains(l, "joining job first"); }, 20s));
  Finished other = ddptest::run(
      node_cmd({"--nnodes", "1", "--nproc", "1", "--rdzv-endpoint", endpoint, "--rdzv-id", "second"},
               {PROBE_BIN, "exit", "0"}),
      {}, 60s);
  EXPECT_NE(other.exit_code, 0) << other.err;
  EXPECT_TRUE(contains(other.err, "this endpoint is the rendezvous of job 'first', hosted by that job's ddprun")) << other.err;
  EXPECT_TRUE(contains(other.err, "job 'second' needs an endpoint of its own")) << other.err;
  host.signal(SIGTERM);
  Finished f = host.finish(20s);
  EXPECT_FALSE(contains(f.err, "second")) << f.err;
}

// Anyone may connect to the rendezvous port (the token is checked per
// call): 2,000 connections that come, send a little and go leave the host
// holding gRPC's freed buffers, 27 MiB here, unless it gives them back.
TEST(ControlPlane, TheHostGivesBackWhatAConnectionFloodTook) {
  const int port = free_port();
  Process host(node_cmd({"--nnodes", "2", "--nproc", "1", "--rdzv-endpoint", "127.0.0.1:" + std::to_string(port),
                         "--rdzv-id", "flood"},
                        {PROBE_BIN, "exit", "0"}));
  ASSERT_TRUE(host.wait_for_err_line([](const std::string& l) { return contains(l, "joining job flood"); }, 20s));
  const long before = rss_kb(host.pid());
  rlimit fds{};
  getrlimit(RLIMIT_NOFILE, &fds);
  fds.rlim_cur = fds.rlim_max;
  setrlimit(RLIMIT_NOFILE, &fds);
  std::vector<int> conns;
  for (int i = 0; i < 2000; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0) << "connection " << i << ": " << strerror(errno);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0) << strerror(errno);
    const std::string hello = i % 2 ? "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" : std::string(100, 'x');
    ASSERT_EQ(write(fd, hello.data(), hello.size()), static_cast<ssize_t>(hello.size()));
    conns.push_back(fd);
  }
  // Until the host has read them all (its memory is at its peak then).
  long peak = 0;
  for (auto until = std::chrono::steady_clock::now() + 10s; std::chrono::steady_clock::now() < until;) {
    const long now = rss_kb(host.pid());
    if (now <= peak) break;
    peak = now;
    std::this_thread::sleep_for(500ms);  // sampling a number that only grows while it reads
  }
  for (int fd : conns) close(fd);
  // Back within 12 MiB of where it started (it grew by 27), in at most 30 s.
  long after = 0;
  for (auto until = std::chrono::steady_clock::now() + 30s; std::chrono::steady_clock::now() < until;) {
    after = rss_kb(host.pid());
    if (after - before < 12 * 1024) break;
    std::this_thread::sleep_for(200ms);  // polling a figure; nothing to wait on
  }
  EXPECT_LT(after - before, 12 * 1024) << "RSS " << before << " KiB before, " << peak << " at the flood, " << after
                                       << " after";
  host.signal(SIGTERM);
  host.finish(20s);
}

TEST(ControlPlane, AOneNodeJobsStoreTakesOnlyItsOwnWorkersToken) {
  Finished f = ddptest::run(node_cmd({"--nproc", "1"}, {PROBE_BIN, "intrude"}));
  ASSERT_EQ(f.exit_code, 0) << f.out << f.err;
  EXPECT_TRUE(contains(f.out, "no-token: refused: ")) << f.out;
  EXPECT_TRUE(contains(f.out, "wrong-token: refused: ")) << f.out;
  EXPECT_TRUE(contains(f.out, "wrong token")) << f.out;
  EXPECT_TRUE(contains(f.out, "job-token: ok")) << f.out;
  EXPECT_FALSE(contains(f.err, "takes calls from anyone")) << f.err;
}

// torchrun's docs start one node with `--rdzv-backend=c10d --rdzv-endpoint=
// localhost:0 --nnodes=1`: the agent joins the free port its rendezvous got
// (not port 0), and the rendezvous, on loopback with nobody else to join,
// takes only its own token like a private one, without the warning.
TEST(ControlPlane, ALoopbackEndpointOnPortZeroRunsAtOnceAndPrivately) {
  for (const std::string endpoint : {"localhost:0", "127.0.0.1:0"}) {
    Finished f = ddptest::run(node_cmd({"--rdzv-backend=c10d", "--rdzv-endpoint=" + endpoint, "--nnodes=1",
                                        "--nproc", "1", "--rdzv-conf", "join_timeout=20"},
                                       {PROBE_BIN, "intrude"}),
                              {}, 60s);
    ASSERT_EQ(f.exit_code, 0) << endpoint << "\n" << f.out << f.err;
    EXPECT_TRUE(contains(f.out, "no-token: refused: ")) << f.out;
    EXPECT_TRUE(contains(f.out, "job-token: ok")) << f.out;
    EXPECT_FALSE(contains(f.err, "takes calls from anyone")) << f.err;
  }
  // A node that does not host the rendezvous cannot join "any free port".
  Finished off = ddptest::run(node_cmd({"--rdzv-endpoint=127.0.0.1:0", "--rdzv-host", "off", "--rdzv-id", "j",
                                        "--nproc", "1"},
                                       {PROBE_BIN, "env"}),
                              {}, 60s);
  EXPECT_EQ(off.exit_code, 2) << off.err;
  EXPECT_EQ(ddptest::lines(off.err).size(), 1u) << off.err;
  EXPECT_TRUE(contains(off.err, "--rdzv-endpoint 127.0.0.1:0: port 0")) << off.err;
}

TEST(ControlPlane, NodesWithTheTokenFormAJobAndAStrangerIsTurnedAway) {
  const std::string endpoint = "127.0.0.1:" + std::to_string(free_port());
  const fs::path token_file = temp("token");
  std::ofstream(token_file) << "tok-0123456789abcdef\n";  // a trailing newline is no part of it
  fs::permissions(token_file, fs::perms::owner_read | fs::perms::owner_write);
  const std::vector<std::string> program{
      "/bin/sh", "-c", std::string(PROBE_BIN) + " intrude; sleep 2"};
  auto node = [&](std::vector<std::string> extra) {
    std::vector<std::string> flags{"--nnodes", "2", "--rdzv-endpoint", endpoint, "--rdzv-id",
                                   "guarded", "--no-python"};
    flags.insert(flags.end(), extra.begin(), extra.end());
    return merged(node_cmd(flags, program));
  };
  // One node takes the token from the environment, the other from a file.
  Process a(node({}), {"DDPRUN_RDZV_TOKEN=tok-0123456789abcdef"});
  Process b(node({"--rdzv-token-file", token_file.string()}));
  ASSERT_TRUE(a.wait_for_line([](const std::string& l) { return contains(l, "job-token: ok"); },
                              30s))
      << a.out();
  Finished stranger = ddptest::run(node_cmd({"--nnodes", "2", "--rdzv-endpoint", endpoint,
                                             "--rdzv-id", "guarded", "--no-python"},
                                            program),
                                   {"DDPRUN_RDZV_TOKEN=guessed-token"});
  EXPECT_EQ(stranger.exit_code, 1) << stranger.err;
  EXPECT_TRUE(contains(stranger.err, "wrong token")) << stranger.err;
  Finished fa = a.finish(60s), fb = b.finish(60s);
  EXPECT_EQ(fa.exit_code, 0) << fa.out;
  EXPECT_EQ(fb.exit_code, 0) << fb.out;
  for (const Finished* f : {&fa, &fb}) {
    EXPECT_TRUE(contains(f->out, "no-token: refused")) << f->out;
    EXPECT_TRUE(contains(f->out, "job-token: ok")) << f->out;
    EXPECT_FALSE(contains(f->out, "takes calls from anyone")) << f->out;
    EXPECT_FALSE(contains(f->out, "tok-0123456789abcdef")) << "the token was printed:\n" << f->out;
  }
}

TEST(ControlPlane, NodesTalkMutualTlsAndSoDoTheirWorkers) {
  ddptest::TestCerts certs;
  const std::string endpoint = "127.0.0.1:" + std::to_string(free_port());
  auto node = [&](const std::string& who, const std::string& mode) {
    return node_cmd({"--nnodes", "2", "--nproc", "1", "--rdzv-endpoint", endpoint, "--rdzv-id",
                     "tlsjob", "--rdzv-tls-cert", certs.file(who + ".pem"), "--rdzv-tls-key",
                     certs.file(who + ".key"), "--rdzv-tls-ca", certs.file("ca.pem")},
                    {PROBE_BIN, mode});
  };
  // The first node hosts the rendezvous, with the service's certificate.
  std::vector<std::vector<std::string>> cmds{node("server", "env"), node("client", "intrude")};
  std::vector<Finished> done = run_together(cmds);
  for (const auto& f : done) EXPECT_EQ(f.exit_code, 0) << f.out << f.err;
  EXPECT_TRUE(contains(done[0].out, "DDPRUN_RDZV_TLS_CA=" + certs.file("ca.pem"))) << done[0].out;
  EXPECT_TRUE(contains(done[1].out, "job-token: ok")) << done[1].out;
}

TEST(ControlPlane, BadTokensAndTlsFilesAreUsageErrors) {
  const std::vector<std::string> base{"--nnodes", "2", "--rdzv-endpoint", "127.0.0.1:1",
                                      "--rdzv-id", "x"};
  auto usage = [&](std::vector<std::string> extra, const ddptest::EnvChanges& env,
                   const std::string& want) {
    std::vector<std::string> flags = base;
    flags.insert(flags.end(), extra.begin(), extra.end());
    Finished f = ddptest::run(node_cmd(flags, {"/bin/true"}), env);
    EXPECT_EQ(f.exit_code, 2) << f.err;
    EXPECT_TRUE(contains(f.err, want)) << "want '" << want << "' in:\n" << f.err;
    EXPECT_EQ(std::count(f.err.begin(), f.err.end(), '\n'), 1) << f.err;
  };
  usage({"--rdzv-token-file", "/nonexistent/token"}, {}, "--rdzv-token-file: cannot read");
  usage({"--rdzv-token", "a b"}, {}, "--rdzv-token: ");
  usage({}, {"DDPRUN_RDZV_TOKEN=tab\there"}, "DDPRUN_RDZV_TOKEN: ");
  usage({"--rdzv-tls-cert", "/nonexistent.pem", "--rdzv-tls-key", "/nonexistent.key"}, {},
        "--rdzv-tls-cert: cannot read");
  usage({"--rdzv-tls-cert", "/etc/hostname"}, {}, "--rdzv-tls-cert: needs --rdzv-tls-key");
}

}  // namespace
