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
