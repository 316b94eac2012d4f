// The supervision of one worker group as a pure policy, with a fake clock.
#include <gtest/gtest.h>
#include <signal.h>

#include "agent/group_policy.h"

namespace ddprun {
namespace {

using namespace std::chrono_literals;
using TP = GroupPolicy::TimePoint;
const TP t0{};

GroupPolicyOptions opts(std::chrono::milliseconds hang = 0ms, bool standbys = false) {
  GroupPolicyOptions o;
  o.stop_timeout = 2s;
  o.hang_timeout = hang;
  o.monitor_interval = 100ms;
  o.heartbeats = hang.count() > 0 || standbys;
  o.wants_standbys = standbys;
  return o;
}

bool signals(const std::vector<GroupCommand>& cs, int sig) {
  for (const auto& c : cs) {
    if (c.kind == GroupCommand::kSignalRunning && c.sig == sig) return true;
  }
  return false;
}

TEST(GroupPolicy, AllSucceed) {
  GroupPolicy p(2, opts(), t0);
  EXPECT_EQ(p.on_exit(0, false), WorkerEnd::kSucceeded);
  EXPECT_TRUE(p.after_exits(t0).empty());
  EXPECT_EQ(p.on_exit(1, false), WorkerEnd::kSucceeded);
  EXPECT_FALSE(p.any_alive());
  EXPECT_EQ(p.outcome(), GroupPolicy::kSucceeded);
  EXPECT_EQ(p.poll_timeout_ms(t0), -1);
}

TEST(GroupPolicy, TheFirstFailureStopsTheRestThenSigkillAfterTheStopTimeout) {
  GroupPolicy p(3, opts(), t0);
  EXPECT_EQ(p.on_exit(1, true), WorkerEnd::kFailed);
  EXPECT_TRUE(signals(p.after_exits(t0), SIGTERM));
  EXPECT_EQ(p.poll_timeout_ms(t0 + 500ms), 1500);
  EXPECT_TRUE(p.on_tick(t0 + 1999ms).empty());
  EXPECT_TRUE(signals(p.on_tick(t0 + 2s), SIGKILL));
  EXPECT_TRUE(p.on_tick(t0 + 3s).empty());  // once
  // Asked to stop: however they end, they were stopped, not failed.
  EXPECT_EQ(p.on_exit(0, true), WorkerEnd::kStopped);
  EXPECT_EQ(p.on_exit(2, false), WorkerEnd::kStopped);
  EXPECT_EQ(p.stopped_count(), 2);
  EXPECT_EQ(p.outcome(), GroupPolicy::kWorkerFailed);
}

TEST(GroupPolicy, WorkersThatFailTogetherAllCountAsFailures) {
  GroupPolicy p(3, opts(), t0);
  EXPECT_EQ(p.on_exit(0, true), WorkerEnd::kFailed);
  EXPECT_EQ(p.on_exit(2, true), WorkerEnd::kFailed);  // same pass, before the stop
  EXPECT_TRUE(signals(p.after_exits(t0), SIGTERM));
}

TEST(GroupPolicy, AWorkerThatFailedOnItsOwnJustAfterTheStopStillCountsAsAFailure) {
  GroupPolicy p(3, opts(), t0);
  EXPECT_EQ(p.on_exit(0, true), WorkerEnd::kFailed);
  EXPECT_TRUE(signals(p.after_exits(t0), SIGTERM));
  EXPECT_EQ(p.stop_started(), t0);
  // Worker 1 exited with its own code at nearly the same moment: a failure.
  EXPECT_EQ(p.on_exit(1, true, /*on_its_own=*/true), WorkerEnd::kFailed);
  // Worker 2 died of our SIGTERM: stopped.
  EXPECT_EQ(p.on_exit(2, true, false), WorkerEnd::kStopped);
  EXPECT_EQ(p.stopped_count(), 1);
  EXPECT_EQ(p.outcome(), GroupPolicy::kWorkerFailed);
}

TEST(GroupPolicy, OwnFailuresCountOnlyWhenAWorkerFailureBeganTheStop) {
  GroupPolicy by_signal(2, opts(), t0);
  by_signal.on_signal(SIGINT, t0);
  EXPECT_EQ(by_signal.on_exit(0, true, true), WorkerEnd::kStopped);  // KeyboardInterrupt, exit 1
  GroupPolicy by_round(2, opts(), t0);
  by_round.on_control("a new round", t0);
  EXPECT_EQ(by_round.on_exit(0, true, true), WorkerEnd::kStopped);
}

TEST(GroupPolicy, AStopSignalIsPassedOnAndASecondOneKills) {
  GroupPolicy p(2, opts(), t0);
  EXPECT_TRUE(signals(p.on_signal(SIGUSR1, t0), SIGUSR1));
  EXPECT_FALSE(p.stopping());
  EXPECT_TRUE(signals(p.on_signal(SIGTERM, t0), SIGTERM));
  EXPECT_TRUE(p.stopping());
  EXPECT_TRUE(signals(p.on_signal(SIGINT, t0), SIGKILL));
  p.on_exit(0, true);
  p.on_exit(1, true);
  EXPECT_EQ(p.outcome(), GroupPolicy::kStoppedBySignal);
  EXPECT_EQ(p.stop_signal(), SIGTERM);
}

TEST(GroupPolicy, ASilentWorkerIsKilledAsHungAndTheOthersStopped) {
  GroupPolicy p(2, opts(1s), t0);
  EXPECT_EQ(p.poll_timeout_ms(t0), 100);
  p.on_beats({0, 0}, t0);                   // not started beating: never hung
  EXPECT_TRUE(p.on_beats({0, 0}, t0 + 5s).empty());
  p.on_beats({3, 1}, t0 + 5s);
  p.on_beats({4, 1}, t0 + 5500ms);
  auto cs = p.on_beats({5, 1}, t0 + 6s);    // worker 1 silent for 1 s
  ASSERT_EQ(cs.size(), 2u);
  EXPECT_EQ(cs[0].kind, GroupCommand::kKillWorker);
  EXPECT_EQ(cs[0].worker, 1);
  EXPECT_EQ(cs[0].silent, 1s);
  EXPECT_NE(cs[0].why.find("hung: no heartbeat for 1.0 s (--hang-timeout 1.0 s)"), std::string::npos);
  EXPECT_TRUE(signals(cs, SIGTERM));
  EXPECT_EQ(p.on_exit(1, true), WorkerEnd::kHung);  // recorded once, when found
  EXPECT_EQ(p.outcome(), GroupPolicy::kWorkerFailed);
}

TEST(GroupPolicy, StandbysWarmOnceEveryWorkerBeats) {
  GroupPolicy p(2, opts(0ms, true), t0);
  EXPECT_TRUE(p.on_beats({1, 0}, t0).empty());
  auto cs = p.on_beats({2, 1}, t0);
  ASSERT_EQ(cs.size(), 1u);
  EXPECT_EQ(cs[0].kind, GroupCommand::kWarmStandbys);
  EXPECT_TRUE(p.on_beats({3, 2}, t0).empty());
}

// Python scripts never beat: their standbys warm on the clock, once, and
// not when the group is already stopping.
TEST(GroupPolicy, StandbysOfProgramsThatNeverBeatWarmAfterTheWarmup) {
  GroupPolicyOptions o = opts(0ms, true);
  o.standby_warmup = 3s;
  GroupPolicy p(2, o, t0);
  EXPECT_TRUE(p.on_beats({0, 0}, t0 + 5s).empty());  // beats do not trigger it
  EXPECT_TRUE(p.on_tick(t0 + 2900ms).empty());
  EXPECT_LE(p.poll_timeout_ms(t0 + 2900ms), 100);
  auto cs = p.on_tick(t0 + 3s);
  ASSERT_EQ(cs.size(), 1u);
  EXPECT_EQ(cs[0].kind, GroupCommand::kWarmStandbys);
  EXPECT_TRUE(p.on_tick(t0 + 4s).empty());

  GroupPolicy q(2, o, t0);
  p.on_exit(0, true);
  q.on_exit(0, true);
  EXPECT_TRUE(signals(q.after_exits(t0 + 1s), SIGTERM));
  for (const auto& c : q.on_tick(t0 + 3500ms)) EXPECT_NE(c.kind, GroupCommand::kWarmStandbys);
}

TEST(GroupPolicy, NewsFromTheRendezvousStopsTheWorkersForTheNextRound) {
  GroupPolicy p(2, opts(), t0);
  EXPECT_TRUE(signals(p.on_control("round 0 was superseded", t0), SIGTERM));
  EXPECT_TRUE(p.on_control("again", t0).empty());
  p.on_exit(0, true);
  p.on_exit(1, false);
  EXPECT_EQ(p.outcome(), GroupPolicy::kStoppedForRound);
  EXPECT_EQ(p.stop_reason(), "round 0 was superseded");
}

}  // namespace
}  // namespace ddprun

namespace ddprun {
namespace {

bool suspends_self(const std::vector<GroupCommand>& cs) {
  for (const auto& c : cs) {
    if (c.kind == GroupCommand::kSuspendSelf) return true;
  }
  return false;
}

TEST(GroupPolicy, CtrlZStopsTheWorkersThenDdprunAndThePauseIsNotAHang) {
  GroupPolicy p(2, opts(1s), t0);
  EXPECT_TRUE(p.on_beats({1, 1}, t0).empty());
  const auto stop = p.on_signal(SIGTSTP, t0 + 500ms);
  EXPECT_TRUE(signals(stop, SIGSTOP));
  EXPECT_TRUE(suspends_self(stop));
  EXPECT_FALSE(p.stopping());  // paused, not stopping
  // Continued a minute later: the workers' silence counts from now.
  EXPECT_TRUE(signals(p.on_signal(SIGCONT, t0 + 60s), SIGCONT));
  EXPECT_TRUE(p.on_beats({1, 1}, t0 + 60s + 900ms).empty());
  const auto hung = p.on_beats({1, 2}, t0 + 61s + 100ms);  // worker 0 silent for 1.1 s
  ASSERT_FALSE(hung.empty());
  EXPECT_EQ(hung.front().kind, GroupCommand::kKillWorker);
  EXPECT_EQ(hung.front().worker, 0);
}

TEST(GroupPolicy, APauseDuringAStopDoesNotShortenTheStopTimeout) {
  GroupPolicy p(2, opts(), t0);
  EXPECT_EQ(p.on_exit(0, true), WorkerEnd::kFailed);
  EXPECT_TRUE(signals(p.after_exits(t0), SIGTERM));  // SIGKILL due at 2 s
  p.on_signal(SIGTSTP, t0 + 1s);
  p.on_signal(SIGCONT, t0 + 30s);  // paused 29 s: SIGKILL due at 31 s
  EXPECT_TRUE(p.on_tick(t0 + 30s + 900ms).empty());
  EXPECT_TRUE(signals(p.on_tick(t0 + 31s), SIGKILL));
  EXPECT_EQ(p.on_exit(1, true), WorkerEnd::kStopped);  // SIGSTOP/SIGCONT stopped nothing
}

}  // namespace
}  // namespace ddprun
