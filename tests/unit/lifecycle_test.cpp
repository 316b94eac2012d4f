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

// A group's end as the Attempt reports it (the rest of GroupResult, the
// exits and heals, the Lifecycle does not read).
GroupResult ended(GroupOutcome outcome, int signal, const std::string& why) {
  GroupResult r;
  r.outcome = outcome;
  r.signal = signal;
  r.why = why;
  return r;
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
  NodeCommand a = life.start();
  EXPECT_EQ(a.kind, NodeCommand::kJoin);
  EXPECT_EQ(a.intent.last_round, -1);
  EXPECT_EQ(life.on_join(joined(0)).kind, NodeCommand::kRunWorkers);
  EXPECT_EQ(life.state(), NodeState::kRunning);
  a = life.on_group_end(ended(GroupResult::kSucceeded, 0, ""));
  EXPECT_EQ(a.kind, NodeCommand::kLeave);
  EXPECT_EQ(a.leave, LeaveKind::kSucceeded);
  a = life.on_left();
  EXPECT_EQ(a.kind, NodeCommand::kExit);
  EXPECT_EQ(a.exit_code, 0);
  EXPECT_EQ(life.state(), NodeState::kDone);
}

TEST(Lifecycle, TheHostWaitsForTheOthersBeforeItExits) {
  Lifecycle life({0, true});
  life.start();
  life.on_join(joined(0));
  life.on_group_end(ended(GroupResult::kSucceeded, 0, ""));
  NodeCommand a = life.on_left();
  EXPECT_EQ(a.kind, NodeCommand::kAwaitOthers);
  a = life.on_others_gone();
  EXPECT_EQ(a.kind, NodeCommand::kExit);
  EXPECT_EQ(a.exit_code, 0);
}

// The rendezvous refused the success (the round was over): the node leaves
// again as failed, so the others hear at once, and exits non-zero.
TEST(Lifecycle, ARefusedSuccessFailsTheNode) {
  Lifecycle life({3, true});
  life.start();
  life.on_join(joined(0));
  life.on_group_end(ended(GroupResult::kSucceeded, 0, ""));
  NodeCommand a = life.on_success_refused("round 0 was over");
  EXPECT_EQ(a.kind, NodeCommand::kLeave);
  EXPECT_EQ(a.leave, LeaveKind::kFailed);
  EXPECT_EQ(a.message, "round 0 was over");
  a = life.on_left();
  EXPECT_EQ(a.kind, NodeCommand::kAwaitOthers);
  a = life.on_others_gone();
  EXPECT_EQ(a.kind, NodeCommand::kExit);
  EXPECT_EQ(a.exit_code, 1);
}

TEST(Lifecycle, AFailureRejoinsSayingWhichRoundFailedWhileRestartsRemain) {
  Lifecycle life({2, false});
  life.start();
  life.on_join(joined(3, 1));
  NodeCommand a = life.on_group_end(ended(GroupResult::kWorkerFailed, 0, "rank 1 hung: no heartbeat for 15.0 s"));
  EXPECT_EQ(a.kind, NodeCommand::kJoin);
  EXPECT_EQ(a.intent.last_round, 3);
  EXPECT_TRUE(a.intent.workers_failed);
  EXPECT_EQ(a.intent.failure, "rank 1 hung: no heartbeat for 15.0 s");  // told to the rendezvous
  EXPECT_EQ(life.state(), NodeState::kRestarting);
  // The next failure uses the last restart up: the node fails the job.
  life.on_join(joined(4, 2));
  a = life.on_group_end(ended(GroupResult::kWorkerFailed, 0, ""));
  EXPECT_EQ(a.kind, NodeCommand::kLeave);
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
  NodeCommand a = life.on_group_end(ended(GroupResult::kStoppedForRound, 0, ""));
  EXPECT_EQ(a.kind, NodeCommand::kJoin);
  EXPECT_EQ(a.intent.last_round, 1);
  EXPECT_FALSE(a.intent.workers_failed);
}

// A straggler node that stopped its workers to hand its place to a waiting
// node leaves saying so (the rendezvous gives its place away, no restart
// counted) and exits 0: nothing failed.
TEST(Lifecycle, AHandOverLeavesWithItsReasonAndExitsZero) {
  Lifecycle life({2, false});
  life.start();
  life.on_join(joined(5));
  NodeCommand a = life.on_group_end(ended(GroupResult::kHandedOver, 0, "its workers were the slowest 3 times"));
  EXPECT_EQ(a.kind, NodeCommand::kLeave);
  EXPECT_EQ(a.leave, LeaveKind::kHandedOver);
  EXPECT_EQ(a.message, "its workers were the slowest 3 times");
  a = life.on_left();
  EXPECT_EQ(a.kind, NodeCommand::kExit);
  EXPECT_EQ(a.exit_code, 0);
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
  NodeCommand a = life.on_join(e);
  EXPECT_EQ(a.kind, NodeCommand::kLeave);
  EXPECT_EQ(a.leave, LeaveKind::kStopped);
  EXPECT_EQ(life.on_left().exit_code, 130);
}

TEST(Lifecycle, AJobThatEndedIsNotLeftAgain) {
  Lifecycle life({0, false});
  life.start();
  JoinEnd e;
  e.job_ended = true;
  e.error = "rendezvous: job finished";
  NodeCommand a = life.on_join(e);
  EXPECT_EQ(a.kind, NodeCommand::kExit);
  EXPECT_EQ(a.exit_code, 1);
}

TEST(Lifecycle, AFailedJoinEndsThisNodeOnlyNotTheJob) {
  Lifecycle life({0, false});
  life.start();
  JoinEnd e;
  e.error = "node 'x' joined with min_nodes=3 ... every node must pass the same --nnodes";
  NodeCommand a = life.on_join(e);
  EXPECT_EQ(a.kind, NodeCommand::kLeave);
  EXPECT_EQ(a.leave, LeaveKind::kStopped);
  EXPECT_EQ(life.on_left().exit_code, 1);
}

TEST(Lifecycle, AHostStoppedBySignalDoesNotWaitForTheOthers) {
  Lifecycle life({0, true});
  life.start();
  life.on_join(joined(0));
  life.on_group_end(ended(GroupResult::kStoppedBySignal, 2, ""));
  EXPECT_EQ(life.on_left().kind, NodeCommand::kExit);
  Lifecycle failing({0, true});
  failing.start();
  failing.on_join(joined(0));
  failing.on_group_end(ended(GroupResult::kWorkerFailed, 0, ""));
  NodeCommand a = failing.on_left();
  EXPECT_EQ(a.kind, NodeCommand::kAwaitOthers);  // they must hear the job failed
  EXPECT_EQ(a.leave, LeaveKind::kFailed);
}

TEST(Lifecycle, StoppedBySignalLeavesCleanly) {
  Lifecycle life({3, false});
  life.start();
  life.on_join(joined(0));
  NodeCommand a = life.on_group_end(ended(GroupResult::kStoppedBySignal, 15, ""));
  EXPECT_EQ(a.leave, LeaveKind::kStopped);
  EXPECT_EQ(life.on_left().exit_code, 143);
}

}  // namespace
}  // namespace ddprun
