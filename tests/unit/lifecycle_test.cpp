// The agent's lifecycle as a pure policy: events in, actions out.
#include <gtest/gtest.h>

#include "agent/lifecycle.h"

namespace ddprun {
namespace {

JoinEnd joined(int64_t round, int restarts = 0) {
  JoinEnd e;
  JoinResult r;
  r.assignment.round = round;
  r.assignment.restart_count = restarts;
  e.joined = r;
  return e;
}

NodeView view(int64_t round, JobPhase phase = JobPhase::kActive) {
  NodeView v;
  v.round = round;
  v.phase = phase;
  v.detail = "node 'b' was lost";
  return v;
}

TEST(Lifecycle, JoinsRunsAndLeavesWhenTheWorkersSucceed) {
  Lifecycle life({/*max_restarts=*/0, /*hosts_rendezvous=*/false});
  Action a = life.start();
  EXPECT_EQ(a.kind, Action::kJoin);
  EXPECT_EQ(a.intent.last_round, -1);
  EXPECT_EQ(life.on_join(joined(0)).kind, Action::kRunWorkers);
  EXPECT_EQ(life.state(), NodeState::kRunning);
  a = life.on_group_end({GroupEnd::kSucceeded, 0, ""});
  EXPECT_EQ(a.kind, Action::kLeave);
  EXPECT_EQ(a.leave, LeaveKind::kSucceeded);
  a = life.on_left();
  EXPECT_EQ(a.kind, Action::kExit);
  EXPECT_EQ(a.exit_code, 0);
  EXPECT_EQ(life.state(), NodeState::kDone);
}

TEST(Lifecycle, TheHostWaitsForTheOthersBeforeItExits) {
  Lifecycle life({0, true});
  life.start();
  life.on_join(joined(0));
  life.on_group_end({GroupEnd::kSucceeded, 0, ""});
  Action a = life.on_left();
  EXPECT_EQ(a.kind, Action::kAwaitOthers);
  a = life.on_others_gone();
  EXPECT_EQ(a.kind, Action::kExit);
  EXPECT_EQ(a.exit_code, 0);
}

// The rendezvous refused the success (the round was over): the node leaves
// again as failed, so the others hear at once, and exits non-zero.
TEST(Lifecycle, ARefusedSuccessFailsTheNode) {
  Lifecycle life({3, true});
  life.start();
  life.on_join(joined(0));
  life.on_group_end({GroupEnd::kSucceeded, 0, ""});
  Action a = life.on_success_refused("round 0 was over");
  EXPECT_EQ(a.kind, Action::kLeave);
  EXPECT_EQ(a.leave, LeaveKind::kFailed);
  EXPECT_EQ(a.message, "round 0 was over");
  a = life.on_left();
  EXPECT_EQ(a.kind, Action::kAwaitOthers);
  a = life.on_others_gone();
  EXPECT_EQ(a.kind, Action::kExit);
  EXPECT_EQ(a.exit_code, 1);
}

TEST(Lifecycle, AFailureRejoinsSayingWhichRoundFailedWhileRestartsRemain) {
  Lifecycle life({2, false});
  life.start();
  life.on_join(joined(3, 1));
  Action a = life.on_group_end({GroupEnd::kWorkerFailed, 0, "rank 1 hung: no heartbeat for 15.0 s"});
  EXPECT_EQ(a.kind, Action::kJoin);
  EXPECT_EQ(a.intent.last_round, 3);
  EXPECT_TRUE(a.intent.workers_failed);
  EXPECT_EQ(a.intent.failure, "rank 1 hung: no heartbeat for 15.0 s");  // told to the rendezvous
  EXPECT_EQ(life.state(), NodeState::kRestarting);
  // The next failure uses the last restart up: the node fails the job.
  life.on_join(joined(4, 2));
  a = life.on_group_end({GroupEnd::kWorkerFailed, 0, ""});
  EXPECT_EQ(a.kind, Action::kLeave);
  EXPECT_EQ(a.leave, LeaveKind::kFailed);
  EXPECT_NE(a.message.find("--max-restarts"), std::string::npos);
  EXPECT_EQ(life.on_left().exit_code, 1);
}

TEST(Lifecycle, ANewerRoundStopsTheWorkersAndTheNodeFollowsWithoutARestart) {
  Lifecycle life({0, false});
  life.start();
  life.on_join(joined(1));
  EXPECT_FALSE(life.on_view(view(1)));
  EXPECT_FALSE(life.on_view(view(0)));  // an old answer that arrived late
  auto why = life.on_view(view(2));
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("superseded by round 2"), std::string::npos) << *why;
  EXPECT_NE(why->find("was lost"), std::string::npos) << *why;
  EXPECT_EQ(life.state(), NodeState::kStopping);
  Action a = life.on_group_end({GroupEnd::kStoppedForRound, 0, ""});
  EXPECT_EQ(a.kind, Action::kJoin);
  EXPECT_EQ(a.intent.last_round, 1);
  EXPECT_FALSE(a.intent.workers_failed);
}

TEST(Lifecycle, AnotherNodesSuccessLetsTheWorkersFinishButAFailedJobStopsThem) {
  Lifecycle life({0, false});
  life.start();
  life.on_join(joined(0));
  EXPECT_FALSE(life.on_view(view(0, JobPhase::kSucceeded)));
  EXPECT_TRUE(life.on_view(view(0, JobPhase::kFailed)));
}

TEST(Lifecycle, ADroppedNodeStopsItsWorkersAndJoinsAgain) {
  Lifecycle life({0, false});
  life.start();
  life.on_join(joined(0));
  NodeView gone = view(0);
  gone.known = false;
  auto why = life.on_view(gone);
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("dropped"), std::string::npos);
}

TEST(Lifecycle, ASignalDuringAJoinLeavesAndExitsWithTheSignal) {
  Lifecycle life({0, false});
  life.start();
  JoinEnd e;
  e.signal = 2;
  Action a = life.on_join(e);
  EXPECT_EQ(a.kind, Action::kLeave);
  EXPECT_EQ(a.leave, LeaveKind::kStopped);
  EXPECT_EQ(life.on_left().exit_code, 130);
}

TEST(Lifecycle, AJobThatEndedIsNotLeftAgain) {
  Lifecycle life({0, false});
  life.start();
  JoinEnd e;
  e.job_ended = true;
  e.error = "rendezvous: job finished";
  Action a = life.on_join(e);
  EXPECT_EQ(a.kind, Action::kExit);
  EXPECT_EQ(a.exit_code, 1);
}

TEST(Lifecycle, AFailedJoinEndsThisNodeOnlyNotTheJob) {
  Lifecycle life({0, false});
  life.start();
  JoinEnd e;
  e.error = "node 'x' joined with min_nodes=3 ... every node must pass the same --nnodes";
  Action a = life.on_join(e);
  EXPECT_EQ(a.kind, Action::kLeave);
  EXPECT_EQ(a.leave, LeaveKind::kStopped);
  EXPECT_EQ(life.on_left().exit_code, 1);
}

TEST(Lifecycle, AHostStoppedBySignalDoesNotWaitForTheOthers) {
  Lifecycle life({0, true});
  life.start();
  life.on_join(joined(0));
  life.on_group_end({GroupEnd::kStoppedBySignal, 2, ""});
  EXPECT_EQ(life.on_left().kind, Action::kExit);
  Lifecycle failing({0, true});
  failing.start();
  failing.on_join(joined(0));
  failing.on_group_end({GroupEnd::kWorkerFailed, 0, ""});
  Action a = failing.on_left();
  EXPECT_EQ(a.kind, Action::kAwaitOthers);  // they must hear the job failed
  EXPECT_EQ(a.leave, LeaveKind::kFailed);
}

TEST(Lifecycle, StoppedBySignalLeavesCleanly) {
  Lifecycle life({3, false});
  life.start();
  life.on_join(joined(0));
  Action a = life.on_group_end({GroupEnd::kStoppedBySignal, 15, ""});
  EXPECT_EQ(a.leave, LeaveKind::kStopped);
  EXPECT_EQ(life.on_left().exit_code, 143);
}

}  // namespace
}  // namespace ddprun
