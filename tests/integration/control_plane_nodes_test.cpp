// No single point of failure, with real processes on namespace hosts: the
// agent that serves a job's rendezvous is lost like any other node, and the
// job goes on under a successor (rendezvous/control_plane_host.h).
//
// --rdzv-backend etcd: a 3-member etcd cluster runs on a host of its own.
// Its raft leader is killed mid-job, then the node whose agent serves the
// rendezvous: a spare takes that node's ranks in the same round, the other
// member's worker lives throughout, and the job ends with exactly the
// parameters of a run that nothing interrupted.
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

// An agent's worker (not a standby it warmed up); 0 if none.
pid_t worker_of(Process& agent) {
  for (pid_t c : ddptest::children_of(agent.pid())) {
    if (!ddptest::started_as_standby(c)) return c;
  }
  return 0;
}

TEST(ControlPlaneNodes, EtcdLeaderThenTheServingNodeKilledASpareTakesOverAndTheJobEndsBitwiseEqual) {
  if (std::string why = ddptest::etcd_missing(); !why.empty()) GTEST_SKIP() << why;
  std::string why;
  auto lab = NetLab::create(4, &why);
  if (!lab) {
    if (getenv("DDPTEST_REQUIRE_NETNS")) ADD_FAILURE() << why;
    GTEST_SKIP() << why;
  }
  // Host 3 runs etcd; hosts 0 and 1 run the job, host 2 a spare.
  EtcdCluster etcd(3, "nodes", ddptest::EtcdHost{lab->addr(3), [&](std::vector<std::string> argv) {
                                                   return lab->wrap(3, std::move(argv));
                                                 }});
  const ddptest::EnvChanges env{"DDPRUN_CPU_COMM=gloo", "OMP_NUM_THREADS=1", "DDPRUN_TIMEOUT_S=30"};
  const fs::path ref = temp("ref.json");
  Finished uninterrupted = ddptest::run(command({"--nproc", "2"}, job(ref)), env, 4min);
  ASSERT_EQ(uninterrupted.exit_code, 0) << uninterrupted.err;
  const std::string want = outcome_in(ref);
  ASSERT_FALSE(want.empty());

  const fs::path summary = temp("job.json");
  auto node = [&](int i) {
    return lab->wrap(i, command({"--nnodes", "2", "--nproc", "1", "--max-restarts", "3", "--stop-timeout", "3",
                                "--rdzv-backend", "etcd", "--rdzv-endpoint", etcd.endpoint_list(), "--rdzv-id",
                                "etcd-job", "--rdzv-conf", "join_timeout=120"},
                               job(summary)));
  };
  auto says = [](Process& p, const std::string& what, std::chrono::milliseconds patience = 60s) {
    return p.wait_for_err_line([&](const std::string& l) { return contains(l, what); }, patience).has_value();
  };
  // Node 0 starts first and so serves the rendezvous.
  Process n0(node(0), env);
  ASSERT_TRUE(says(n0, "this node serves job etcd-job's rendezvous")) << n0.err();
  Process n1(node(1), env);
  ASSERT_TRUE(reach_step(n0, 10)) << n0.out() << n0.err();
  Process spare(node(2), env);
  ASSERT_TRUE(says(n0, "node(s) wait to join")) << n0.err() << spare.err();
  const pid_t before = worker_of(n1);

  etcd.kill(etcd.leader());  // etcd elects another leader; the job does not notice
  ASSERT_TRUE(reach_step(n0, 30)) << n0.out() << n0.err();
  n0.signal(SIGKILL);  // the whole node: its agent (the rendezvous' server), and its worker with it
  n0.finish(10s);
  // Rank 0 is the spare's now: it trains on.
  ASSERT_TRUE(reach_step(spare, 60)) << spare.out() << spare.err() << n1.err();
  const pid_t after = worker_of(n1);
  Finished f1 = n1.finish(4min);
  Finished f2 = spare.finish(4min);
  EXPECT_EQ(f1.exit_code, 0) << f1.err;
  EXPECT_EQ(f2.exit_code, 0) << f2.err;
  const std::string both = f1.err + f2.err;
  // A survivor took the rendezvous over from node 0 and dropped node 0 at once.
  EXPECT_TRUE(std::regex_search(both, std::regex(R"(this node took over job etcd-job's rendezvous from node \S+ \(term \d+\))")))
      << both;
  EXPECT_TRUE(contains(both, "its agent led the job's control plane, and a successor took over")) << both;
  EXPECT_TRUE(contains(f2.err, "taking over node rank 0 (ranks 0..0)")) << f2.err;
  EXPECT_FALSE(contains(f1.err, "restarting the workers")) << f1.err;
  EXPECT_FALSE(contains(f1.err, "superseded")) << f1.err;
  EXPECT_NE(before, 0);
  EXPECT_EQ(after, before) << "node 1's worker was restarted";
  EXPECT_EQ(outcome_in(summary), want) << "the healed run's parameters or loss differ from an uninterrupted run's";
}

}  // namespace
