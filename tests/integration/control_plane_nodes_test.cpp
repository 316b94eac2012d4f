// No single point of failure, with real processes on namespace hosts: the
// agent that serves a job's rendezvous is lost like any other node, and the
// job goes on under a successor (rendezvous/server/control_plane_host.h).
//
// --rdzv-backend etcd: a 3-member etcd cluster runs on a host of its own.
//   - Its raft leader is killed mid-job, then the node whose agent serves
//     the rendezvous: a spare takes that node's ranks in the same round, the
//     other member's worker lives throughout, and the job ends with exactly
//     the parameters of a run that nothing interrupted.
//   - The serving node is paused (SIGSTOP, agent and worker) until the
//     others have taken the rendezvous over and shrunk past it, then
//     resumed: it serves nothing more, its node is out of the job, it exits
//     non-zero, and only the job's rank 0 writes the summary.
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <regex>

#include "support/etcd_cluster.h"
#include "support/job_helpers.h"
#include "support/netns.h"
#include "support/process.h"

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using ddptest::contains;
using ddptest::EtcdCluster;
using ddptest::Finished;
using ddptest::NetLab;
using ddptest::Process;
using ddptest::reach_step;
using ddptest::worker_of;

fs::path temp(const std::string& name) { return ddptest::temp_path("control-plane-nodes", name); }

// The job: train on 8000 images for 2 epochs, its parameters' checksum and
// final loss in `summary` (a heal changes neither).
std::vector<std::string> job(const fs::path& summary) {
  return {TRAIN_BIN, "--limit", "8000", "--epochs", "2", "--print-steps", "--summary-json", summary.string()};
}

std::string outcome_in(const fs::path& summary) {
  const std::string sum = ddptest::checksum_in(summary);
  return sum.empty() ? "" : "checksum " + sum + ", final loss " + ddptest::final_loss_in(summary);
}

// `ddprun FLAGS... PROGRAM...`.
std::vector<std::string> command(std::vector<std::string> flags, const std::vector<std::string>& program) {
  flags.insert(flags.begin(), DDPRUN_BIN);
  flags.insert(flags.end(), program.begin(), program.end());
  return flags;
}

// A lab of `hosts` hosts whose last runs a 3-member etcd cluster; null
// (the test skips) where namespaces cannot be made.
struct EtcdLab {
  std::unique_ptr<NetLab> lab;
  std::unique_ptr<EtcdCluster> etcd;
};

EtcdLab etcd_lab(int hosts, std::string* why) {
  EtcdLab l;
  if (std::string missing = ddptest::etcd_missing(); !missing.empty()) {
    *why = missing;
    return l;
  }
  l.lab = NetLab::create(hosts, why);
  if (!l.lab) {
    if (getenv("DDPTEST_REQUIRE_NETNS")) ADD_FAILURE() << *why;
    return l;
  }
  NetLab& lab = *l.lab;
  const int e = hosts - 1;
  l.etcd = std::make_unique<EtcdCluster>(
      3, "nodes", ddptest::EtcdHost{lab.addr(e), [&lab, e](std::vector<std::string> argv) { return lab.wrap(e, std::move(argv)); }});
  return l;
}

// Node i of job `id` on the lab, with the control plane in its etcd. Node
// 0 asks for node rank 0: it serves the rendezvous (it starts first), but
// its own first join can reach its service after the others' (it is sent
// before the election ends, and waits out a back-off), and the tests kill
// or pause the node whose worker prints the steps.
std::vector<std::string> etcd_node(const EtcdLab& l, int i, const std::string& nnodes, const std::string& id,
                                   const std::vector<std::string>& program) {
  std::vector<std::string> flags{"--nnodes", nnodes, "--nproc", "1", "--max-restarts", "3", "--stop-timeout", "3",
                                 "--rdzv-backend", "etcd", "--rdzv-endpoint", l.etcd->endpoint_list(), "--rdzv-id",
                                 id, "--rdzv-conf", "join_timeout=120"};
  if (i == 0) flags.insert(flags.end(), {"--node-rank", "0"});
  return l.lab->wrap(i, command(flags, program));
}

// `ddprun status` of the job at `door`, run on lab host i.
std::vector<std::string> lab_status(const EtcdLab& l, int i, const std::string& door) {
  return l.lab->wrap(i, {DDPRUN_BIN, "status", "--rdzv-endpoint", door, "--rdzv-id", "etcd-job"});
}

bool says(Process& p, const std::string& what, std::chrono::milliseconds patience = 60s) {
  return p.wait_for_err_line([&](const std::string& l) { return contains(l, what); }, patience).has_value();
}

TEST(ControlPlaneNodes, EtcdLeaderThenTheServingNodeKilledASpareTakesOverAndTheJobEndsBitwiseEqual) {
  std::string why;
  EtcdLab l = etcd_lab(4, &why);  // hosts 0 and 1 run the job, host 2 a spare, host 3 etcd
  if (!l.etcd) GTEST_SKIP() << why;
  const ddptest::EnvChanges env{"DDPRUN_CPU_COMM=gloo", "OMP_NUM_THREADS=1", "DDPRUN_TIMEOUT_S=30"};
  const fs::path ref = temp("ref.json");
  Finished uninterrupted = ddptest::run(command({"--nproc", "2"}, job(ref)), env, 4min);
  ASSERT_EQ(uninterrupted.exit_code, 0) << uninterrupted.err;
  const std::string want = outcome_in(ref);
  ASSERT_FALSE(want.empty());

  const fs::path summary = temp("job.json");
  auto node = [&](int i) { return etcd_node(l, i, "2", "etcd-job", job(summary)); };
  // Node 0 starts first and so serves the rendezvous.
  Process n0(node(0), env);
  ASSERT_TRUE(says(n0, "this node serves job etcd-job's rendezvous")) << n0.err();
  Process n1(node(1), env);
  // Where node 1's own rendezvous service is ("joining job etcd-job at HOST:PORT as ...").
  const std::string joining1 =
      n1.wait_for_err_line([](const std::string& l) { return contains(l, "joining job etcd-job at"); }, 60s)
          .value_or("");
  ASSERT_TRUE(reach_step(n0, 10)) << n0.out() << n0.err();
  Process spare(node(2), env);
  ASSERT_TRUE(says(n0, "node(s) wait to join")) << n0.err() << spare.err();
  const pid_t before = worker_of(n1);

  l.etcd->kill(l.etcd->leader());  // etcd elects another leader; the job does not notice
  ASSERT_TRUE(reach_step(n0, 30)) << n0.out() << n0.err();
  n0.signal(SIGKILL);  // the whole node: its agent (the rendezvous' server), and its worker with it
  n0.finish(10s);
  // Rank 0 is the spare's now: it trains on.
  ASSERT_TRUE(reach_step(spare, 60)) << spare.out() << spare.err() << n1.err();
  const pid_t after = worker_of(n1);
  // `ddprun status` at node 1's own service names the node that serves now.
  // (A node's id is its host name and its agent's pid.)
  std::smatch door;
  ASSERT_TRUE(std::regex_search(joining1, door, std::regex(R"(joining job etcd-job at (\S+) as)"))) << joining1;
  Finished st = ddptest::run_until(lab_status(l, 1, door[1]), "serves the rendezvous (term");
  EXPECT_TRUE(std::regex_search(st.out, std::regex(":(" + std::to_string(n1.pid()) + "|" + std::to_string(spare.pid()) +
                                                   ") serves the rendezvous \\(term \\d+;")))
      << st.out << st.err;
  Finished f1 = n1.finish(4min);
  Finished f2 = spare.finish(4min);
  EXPECT_EQ(f1.exit_code, 0) << f1.err;
  EXPECT_EQ(f2.exit_code, 0) << f2.err;
  const std::string both = f1.err + f2.err;
  // A survivor took the rendezvous over from node 0, and node 0 was lost
  // once its host refused a connect to its service (its agent is gone; a
  // host gone too would have cost node 0's lease, started afresh there).
  EXPECT_TRUE(std::regex_search(both, std::regex(R"(this node took over job etcd-job's rendezvous from node \S+ \(term \d+\))")))
      << both;
  EXPECT_TRUE(contains(both, "lost: its host refused connections at ")) << both;
  EXPECT_TRUE(contains(f2.err, "taking over node rank 0 (ranks 0..0)")) << f2.err;
  EXPECT_FALSE(contains(f1.err, "restarting the workers")) << f1.err;
  EXPECT_FALSE(contains(f1.err, "superseded")) << f1.err;
  EXPECT_NE(before, 0);
  EXPECT_EQ(after, before) << "node 1's worker was restarted";
  EXPECT_EQ(outcome_in(summary), want) << "the healed run's parameters or loss differ from an uninterrupted run's";
}

// The serving node paused past its term and its lease: another agent takes
// the rendezvous over, node 0's lease runs out there and the job shrinks
// past it without a restart. Node 0, continued, serves nothing more (its
// term is over) and is told it was dropped; it comes back as a member
// (the round grows again, at the next node rank) unless the job finished
// meanwhile. Either way the job ends once, on the survivors' rank 0.
TEST(ControlPlaneNodes, APausedServingNodeIsDroppedAndTheOthersGoOnWithoutARestart) {
  std::string why;
  EtcdLab l = etcd_lab(4, &why);  // hosts 0..2 run the job, host 3 etcd
  if (!l.etcd) GTEST_SKIP() << why;
  const ddptest::EnvChanges env{"DDPRUN_CPU_COMM=gloo", "OMP_NUM_THREADS=1", "DDPRUN_TIMEOUT_S=30"};
  const fs::path summary = temp("paused.json");
  auto node = [&](int i) { return etcd_node(l, i, "2:3", "paused-job", job(summary)); };
  Process n0(node(0), env);
  ASSERT_TRUE(says(n0, "this node serves job paused-job's rendezvous")) << n0.err();
  Process n1(node(1), env);
  Process n2(node(2), env);
  ASSERT_TRUE(reach_step(n0, 20)) << n0.out() << n0.err();
  const pid_t w0 = worker_of(n0);
  ASSERT_NE(w0, 0);
  // The whole node stops: its agent (the rendezvous' server) and its worker.
  n0.signal(SIGSTOP);
  kill(w0, SIGSTOP);
  // Another agent takes the rendezvous over, drops node 0 and the job
  // shrinks past it; only then does node 0 go on.
  const bool shrunk = says(n1, "the job goes on with 2 node(s)");
  kill(w0, SIGCONT);
  n0.signal(SIGCONT);
  ASSERT_TRUE(shrunk) << n1.err() << n2.err();
  Finished f0 = n0.finish(4min);
  Finished f1 = n1.finish(4min);
  Finished f2 = n2.finish(4min);
  // Node 0 serves nothing more, and knows it was dropped.
  EXPECT_TRUE(std::regex_search(f0.err, std::regex(R"(stopped serving job paused-job's rendezvous \(term \d+\))")))
      << f0.err;
  // Back from the pause, it hears it was dropped or, when the keep-alive
  // it sent before the pause answers first (past its deadline), that it
  // lost contact for longer than the lease: either way its workers stop.
  EXPECT_TRUE(contains(f0.err, "this node was dropped from the job (its lease ran out)") ||
              contains(f0.err, "lost contact with the rendezvous for longer than the lease"))
      << f0.err;
  EXPECT_EQ(f1.exit_code, 0) << f1.err;
  EXPECT_EQ(f2.exit_code, 0) << f2.err;
  EXPECT_TRUE(contains(f1.err + f2.err, "took over job paused-job's rendezvous from node")) << f1.err << f2.err;
  EXPECT_FALSE(contains(f1.err + f2.err, "restarting the workers")) << f1.err << f2.err;
  EXPECT_FALSE(contains(f1.err + f2.err, "superseded")) << f1.err << f2.err;
  // One rank 0 finished the job: the new one, on node 1 or 2.
  EXPECT_EQ(ddptest::occurrences(f1.out + f2.out, "]:parameters identical on all "), 1)
      << f1.out << f2.out << f0.err << f1.err << f2.err;
  EXPECT_FALSE(contains(f0.out, "]:parameters identical")) << f0.out;
  EXPECT_FALSE(ddptest::checksum_in(summary).empty());
}

}  // namespace
