// The supervision of one worker group as a pure policy, with a fake clock.
#include <gtest/gtest.h>
#include <signal.h>

#include "agent/supervision/group_policy.h"
#include "unit/fake_group.h"

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

using ms = std::chrono::milliseconds;
namespace ev = group_event;
using Group = fakes::FakeGroup;

TEST(GroupPolicy, AllSucceed) {
  Group p(2, opts());
  EXPECT_EQ(p.exit(0, false), WorkerEnd::kSucceeded);
  EXPECT_TRUE(p.last.empty());
  EXPECT_EQ(p.exit(1, false), WorkerEnd::kSucceeded);
  EXPECT_FALSE(p.policy.any_alive());
  EXPECT_EQ(p.policy.outcome(), GroupPolicy::kSucceeded);
  EXPECT_EQ(p.policy.poll_timeout_ms(t0), -1);
}

TEST(GroupPolicy, TheFirstFailureStopsTheRestThenSigkillAfterTheStopTimeout) {
  Group p(3, opts());
  EXPECT_EQ(p.exit(1, true), WorkerEnd::kFailed);
  EXPECT_TRUE(signals(p.last, SIGTERM));
  EXPECT_EQ(p.policy.poll_timeout_ms(t0 + 500ms), 1500);
  EXPECT_TRUE(p.tick(t0 + 1999ms).empty());
  EXPECT_TRUE(signals(p.tick(t0 + 2s), SIGKILL));
  EXPECT_TRUE(p.tick(t0 + 3s).empty());  // once
  // Asked to stop: however they end, they were stopped, not failed.
  EXPECT_EQ(p.exit_with({.worker = 0, .signal = SIGKILL}, t0 + 2s), WorkerEnd::kStopped);
  EXPECT_EQ(p.exit(2, false, t0 + 2s), WorkerEnd::kStopped);
  EXPECT_EQ(p.policy.stopped_count(), 2);
  EXPECT_EQ(p.policy.outcome(), GroupPolicy::kWorkerFailed);
}

TEST(GroupPolicy, WorkersThatFailTogetherAllCountAsFailures) {
  Group p(3, opts());
  // One pass: the stop comes after both.
  const auto cs = p.exits({{.worker = 0, .exit_code = 1}, {.worker = 2, .exit_code = 1}});
  EXPECT_EQ(p.ends, (std::vector<WorkerEnd>{WorkerEnd::kFailed, WorkerEnd::kFailed}));
  EXPECT_TRUE(signals(cs, SIGTERM));
}

TEST(GroupPolicy, AWorkerThatFailedOnItsOwnJustAfterTheStopStillCountsAsAFailure) {
  Group p(3, opts());
  EXPECT_EQ(p.exit(0, true), WorkerEnd::kFailed);
  EXPECT_TRUE(signals(p.last, SIGTERM));
  EXPECT_EQ(p.policy.stop_started(), t0);
  // Worker 1 exited with its own code at nearly the same moment: a failure.
  EXPECT_EQ(p.exit_with({.worker = 1, .exit_code = 1}, t0 + 50ms), WorkerEnd::kFailed);
  // Worker 2 died of our SIGTERM: stopped.
  EXPECT_EQ(p.exit_with({.worker = 2, .signal = SIGTERM}, t0 + 50ms), WorkerEnd::kStopped);
  EXPECT_EQ(p.policy.stopped_count(), 1);
  EXPECT_EQ(p.policy.outcome(), GroupPolicy::kWorkerFailed);
}

// The evidence that a worker asked to stop failed on its own: it had exited
// before the stop signal went out, its error file was written before the
// stop, or its own exit code (not a signal's, not 128 + SIGTERM) came within
// kTogether of the stop. Without any, it was stopped.
TEST(GroupPolicy, AFailureAfterTheStopIsTheWorkersOwnOnlyOnEvidence) {
  using Exit = ev::Exit;
  const TP stop = t0 + 10s;
  auto end_of = [&](Exit x, TP reaped) {
    Group p(2, opts());
    p.exit(0, true, stop);  // worker 0's failure begins the stop
    x.worker = 1;
    return p.exit_with(x, reaped);
  };
  EXPECT_EQ(end_of({.exit_code = 1}, stop + 100ms), WorkerEnd::kFailed) << "its own code, together";
  EXPECT_EQ(end_of({.exit_code = 1}, stop + 101ms), WorkerEnd::kStopped) << "its own code, but later";
  EXPECT_EQ(end_of({.exit_code = 128 + SIGTERM}, stop + 10ms), WorkerEnd::kStopped) << "our SIGTERM's code";
  EXPECT_EQ(end_of({.signal = SIGKILL}, stop + 10ms), WorkerEnd::kStopped);
  EXPECT_EQ(end_of({.signal = SIGSEGV, .exited_before_stop = true}, stop + 5s), WorkerEnd::kFailed)
      << "it had exited before the stop went out";
  EXPECT_EQ(end_of({.signal = SIGABRT, .error_written = stop - 1ms}, stop + 5s), WorkerEnd::kFailed)
      << "its error file was written before the stop";
  EXPECT_EQ(end_of({.signal = SIGABRT, .error_written = stop + 1ms}, stop + 5s), WorkerEnd::kStopped)
      << "its error file was written after the stop";
  // The time it was reaped, not the event's, is what counts.
  Group p(2, opts());
  p.exit(0, true, stop);
  p.exits({{.worker = 1, .exit_code = 1, .reaped = stop + 50ms}}, stop + 2s);
  EXPECT_EQ(p.ends, std::vector<WorkerEnd>{WorkerEnd::kFailed});
}

TEST(GroupPolicy, OwnFailuresCountOnlyWhenAWorkerFailureBeganTheStop) {
  Group by_signal(2, opts());
  by_signal.signal(SIGINT, t0);
  EXPECT_EQ(by_signal.exit(0, true), WorkerEnd::kStopped);  // KeyboardInterrupt, exit 1, at once
  Group by_round(2, opts());
  by_round.round_stop("a new round", t0);
  EXPECT_EQ(by_round.exit(0, true), WorkerEnd::kStopped);
}

TEST(GroupPolicy, AStopSignalIsPassedOnAndASecondOneKills) {
  Group p(2, opts());
  EXPECT_TRUE(signals(p.signal(SIGUSR1, t0), SIGUSR1));
  EXPECT_FALSE(p.policy.stopping());
  EXPECT_TRUE(signals(p.signal(SIGTERM, t0), SIGTERM));
  EXPECT_TRUE(p.policy.stopping());
  EXPECT_TRUE(signals(p.signal(SIGINT, t0), SIGKILL));
  p.exit(0, true);
  p.exit(1, true);
  EXPECT_EQ(p.policy.outcome(), GroupPolicy::kStoppedBySignal);
  EXPECT_EQ(p.policy.stop_signal(), SIGTERM);
}

TEST(GroupPolicy, ASilentWorkerIsKilledAsHungAndTheOthersStopped) {
  Group p(2, opts(1s));
  EXPECT_EQ(p.policy.poll_timeout_ms(t0), 100);
  p.beats({0, 0}, t0);                   // not started beating: never hung
  EXPECT_TRUE(p.beats({0, 0}, t0 + 5s).empty());
  p.beats({3, 1}, t0 + 5s);
  p.beats({4, 1}, t0 + 5500ms);
  auto cs = p.beats({5, 1}, t0 + 6s);    // worker 1 silent for 1 s
  ASSERT_EQ(cs.size(), 2u);
  EXPECT_EQ(cs[0].kind, GroupCommand::kKillWorker);
  EXPECT_EQ(cs[0].worker, 1);
  EXPECT_EQ(cs[0].silent, 1s);
  EXPECT_NE(cs[0].why.find("hung: no heartbeat for 1.0 s (--hang-timeout 1.0 s)"), std::string::npos);
  EXPECT_TRUE(signals(cs, SIGTERM));
  EXPECT_EQ(p.exit(1, true), WorkerEnd::kHung);  // recorded once, when found
  EXPECT_EQ(p.policy.outcome(), GroupPolicy::kWorkerFailed);
}

// --hang-timeout auto: two workers beat every `gap` for `n` gaps from
// `from`; returns when the last beat was.
GroupPolicyOptions learning(std::chrono::milliseconds floor = 2s) {
  GroupPolicyOptions o = opts();
  o.heartbeats = true;
  LearnedTimeoutOptions l;
  l.floor = floor;
  o.learned_hang = l;
  return o;
}

// Beats until a worker is watched: the first beat, 3 start-up gaps, 20 learned.
constexpr int kUntilWatched = 1 + 3 + 20;

TP beat_steadily(Group& p, uint64_t& count, TP from, std::chrono::milliseconds gap, int n) {
  TP t = from;
  for (int i = 0; i < n; ++i) {
    t += gap;
    ++count;
    EXPECT_TRUE(p.beats({count, count}, t).empty()) << "gap " << i;
  }
  return t;
}

// The learned limit: start-up is never judged, and after it a silence of
// 10x the longest gap (at least the floor) is a hang, named as learned.
TEST(GroupPolicy, TheLearnedHangTimeoutFiresAfterTenTimesTheLongestGap) {
  Group p(2, learning(2s));
  EXPECT_EQ(p.policy.poll_timeout_ms(t0), 100);  // watching from the start
  uint64_t n = 0;
  // Start-up: a long silence before the first beats and between them is no hang.
  EXPECT_TRUE(p.beats({0, 0}, t0 + 60s).empty());
  TP t = beat_steadily(p, n, t0 + 60s, 30s, 3);  // the first beat and 2 start-up gaps of 30 s
  EXPECT_TRUE(p.beats({n, n}, t + 29s).empty());  // not watched yet
  t = beat_steadily(p, n, t + 29s, 400ms, kUntilWatched - 3);  // a third start-up gap of 29.4 s
  EXPECT_EQ(p.policy.learned()->longest(), 400ms) << "start-up gaps are not learned";
  EXPECT_EQ(p.policy.learned()->limit(), 4s);
  EXPECT_TRUE(p.beats({n, n}, t + 4s - 1ms).empty());
  EXPECT_FALSE(p.beats({n, n}, t + 4s).empty());
}

TEST(GroupPolicy, TheLearnedLimitIsTenTimesTheLongestSteadyGapAtLeastTheFloor) {
  Group p(2, learning(2s));
  uint64_t n = 0;
  TP t = beat_steadily(p, n, t0 + 5s, 300ms, kUntilWatched);
  EXPECT_EQ(p.policy.learned()->longest(), 300ms);
  EXPECT_EQ(p.policy.learned()->limit(), 3s);
  // Worker 0 goes on; worker 1 falls silent.
  uint64_t n0 = n;
  for (int i = 1; i <= 9; ++i) EXPECT_TRUE(p.beats({++n0, n}, t + i * 300ms).empty());
  const auto cs = p.beats({++n0, n}, t + 3s);
  ASSERT_FALSE(cs.empty());
  EXPECT_EQ(cs[0].kind, GroupCommand::kKillWorker);
  EXPECT_EQ(cs[0].worker, 1);
  EXPECT_NE(cs[0].why.find("hung: no heartbeat for 3.0 s (--hang-timeout auto: 3.0 s, 10x the longest gap "
                           "between heartbeats, 0.30 s, and at least 2.0 s)"),
            std::string::npos)
      << cs[0].why;
  EXPECT_TRUE(signals(cs, SIGTERM));

  // A fast job: the floor holds.
  Group fast(2, learning(2s));
  n = 0;
  t = beat_steadily(fast, n, t0, 10ms, kUntilWatched);
  EXPECT_EQ(fast.policy.learned()->limit(), 2s);
  EXPECT_TRUE(fast.beats({n, n}, t + 1990ms).empty());
  EXPECT_FALSE(fast.beats({n, n}, t + 2s).empty());
}

// An announced phase (an evaluation) is neither judged nor learned, and
// the silence after it counts from its end; an explicit --hang-timeout
// still counts it.
TEST(GroupPolicy, AnAnnouncedPhaseIsNotAHangAndNotLearned) {
  Group p(2, learning(2s));
  uint64_t n = 0;
  TP t = beat_steadily(p, n, t0, 100ms, kUntilWatched);
  p.slots[0].silence_expected = true;
  p.slots[1].silence_expected = true;
  for (int s = 1; s <= 60; ++s) {
    p.slots[0].silence_expected = true;
    p.slots[1].silence_expected = true;
    ASSERT_TRUE(p.beats({n, n}, t + s * 1s).empty()) << s;
  }
  t += 60s;
  p.slots[0].silence_expected = false;
  p.slots[1].silence_expected = false;
  ++n;
  EXPECT_TRUE(p.beats({n, n}, t + 100ms).empty());
  EXPECT_EQ(p.policy.learned()->longest(), 100ms) << "the 60 s evaluation was not learned";
  EXPECT_TRUE(p.beats({n, n}, t + 2000ms).empty());
  EXPECT_FALSE(p.beats({n, n}, t + 2100ms).empty()) << "silence after the phase is judged";

  GroupPolicyOptions both = learning(2s);
  both.hang_timeout = 5s;
  Group q(2, both);
  n = 0;
  t = beat_steadily(q, n, t0, 100ms, kUntilWatched);
  q.slots[1].silence_expected = true;
  EXPECT_TRUE(q.beats({n + 1, n}, t + 4s).empty());
  q.slots[1].silence_expected = true;
  const auto cs = q.beats({n + 2, n}, t + 5s);
  ASSERT_FALSE(cs.empty());
  EXPECT_NE(cs[0].why.find("(--hang-timeout 5.0 s)"), std::string::npos) << cs[0].why;
}

// A rank stopped inside an announced phase is excused until the others
// have waited for it in a collective (the flight records) as long as the
// learned limit: the phase excuses its silence, not theirs.
TEST(GroupPolicy, ARankInAnAnnouncedPhaseIsHungOnceTheOthersWaitedTheLimitForIt) {
  Group p(2, learning(2s));
  uint64_t n = 0;
  TP t = beat_steadily(p, n, t0, 100ms, kUntilWatched);
  uint64_t n0 = n;
  for (int i = 1; i <= 50; ++i) {
    const TP now = t + i * 100ms;
    p.slots[1].silence_expected = true;  // rank 1 evaluates, then is stopped
    // Rank 0 finished its evaluation at t + 1 s and waits for rank 1 (its pulse beats).
    p.slots[1].awaited = now > t + 1s ? std::chrono::duration_cast<ms>(now - (t + 1s)) : 0ms;
    const auto cs = p.beats({++n0, n}, now);
    if (now - (t + 1s) < 2s) {
      ASSERT_TRUE(cs.empty()) << i;
      continue;
    }
    ASSERT_FALSE(cs.empty()) << i;
    EXPECT_EQ(cs[0].worker, 1);
    EXPECT_NE(cs[0].why.find("in a phase it announced, while the others have waited 2.0 s for it in a collective"),
              std::string::npos)
        << cs[0].why;
    return;
  }
  FAIL() << "never found hung";
}

// A replacement starts its start-up afresh: its own gaps are not judged
// until it has shown its rhythm, but one that never beats is judged by
// what the job learned, plus the time a fresh process took to start.
TEST(GroupPolicy, ALearnedReplacementThatNeverBeatsIsHung) {
  GroupPolicyOptions o = learning(2s);
  o.max_heals = 3;
  Group p(2, o);
  p.ready[0] = true;
  p.ready[1] = true;
  uint64_t n = 0;
  TP t = beat_steadily(p, n, t0 + 1s, 100ms, kUntilWatched);
  EXPECT_EQ(p.exit(1, true, t), WorkerEnd::kHealed);
  const auto cs = p.last;
  ASSERT_FALSE(cs.empty());
  p.started(1, /*from_standby=*/false, t);
  uint64_t n0 = n;
  // Allowance: the limit (2 s) and the 1.1 s the first workers took to beat.
  for (int i = 1; i <= 30; ++i) ASSERT_TRUE(p.beats({++n0, 0}, t + i * 100ms).empty()) << i;
  const auto kill = p.beats({++n0, 0}, t + 3100ms);
  ASSERT_FALSE(kill.empty());
  EXPECT_EQ(kill[0].worker, 1);
  EXPECT_NE(kill[0].why.find("a replacement that never beat, 3.1 s after its start (--hang-timeout auto: 2.0 s"),
            std::string::npos)
      << kill[0].why;
}

TEST(GroupPolicy, StandbysWarmOnceEveryWorkerBeats) {
  Group p(2, opts(0ms, true));
  EXPECT_TRUE(p.beats({1, 0}, t0).empty());
  auto cs = p.beats({2, 1}, t0);
  ASSERT_EQ(cs.size(), 1u);
  EXPECT_EQ(cs[0].kind, GroupCommand::kWarmStandbys);
  EXPECT_TRUE(p.beats({3, 2}, t0).empty());
}

// Python scripts never beat: their standbys warm on the clock, once, and
// not when the group is already stopping.
TEST(GroupPolicy, StandbysOfProgramsThatNeverBeatWarmAfterTheWarmup) {
  GroupPolicyOptions o = opts(0ms, true);
  o.standby_warmup = 3s;
  Group p(2, o);
  EXPECT_TRUE(p.beats({0, 0}, t0 + 5s).empty());  // beats do not trigger it
  EXPECT_TRUE(p.tick(t0 + 2900ms).empty());
  EXPECT_LE(p.policy.poll_timeout_ms(t0 + 2900ms), 100);
  auto cs = p.tick(t0 + 3s);
  ASSERT_EQ(cs.size(), 1u);
  EXPECT_EQ(cs[0].kind, GroupCommand::kWarmStandbys);
  EXPECT_TRUE(p.tick(t0 + 4s).empty());

  Group q(2, o);
  p.exit(0, true);
  q.exit(0, true, t0 + 1s);
  EXPECT_TRUE(signals(q.last, SIGTERM));
  for (const auto& c : q.tick(t0 + 3500ms)) EXPECT_NE(c.kind, GroupCommand::kWarmStandbys);
}

TEST(GroupPolicy, NewsFromTheRendezvousStopsTheWorkersForTheNextRound) {
  Group p(2, opts());
  EXPECT_TRUE(signals(p.round_stop("round 0 was superseded", t0), SIGTERM));
  EXPECT_TRUE(p.round_stop("again", t0).empty());
  p.exit(0, true);
  p.exit(1, false);
  EXPECT_EQ(p.policy.outcome(), GroupPolicy::kStoppedForRound);
  EXPECT_EQ(p.policy.stop_reason(), "round 0 was superseded");
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
  Group p(2, opts(1s));
  EXPECT_TRUE(p.beats({1, 1}, t0).empty());
  const auto stop = p.signal(SIGTSTP, t0 + 500ms);
  EXPECT_TRUE(signals(stop, SIGSTOP));
  EXPECT_TRUE(suspends_self(stop));
  EXPECT_FALSE(p.policy.stopping());  // paused, not stopping
  // Continued a minute later: the workers' silence counts from now.
  EXPECT_TRUE(signals(p.signal(SIGCONT, t0 + 60s), SIGCONT));
  EXPECT_TRUE(p.beats({1, 1}, t0 + 60s + 900ms).empty());
  const auto hung = p.beats({1, 2}, t0 + 61s + 100ms);  // worker 0 silent for 1.1 s
  ASSERT_FALSE(hung.empty());
  EXPECT_EQ(hung.front().kind, GroupCommand::kKillWorker);
  EXPECT_EQ(hung.front().worker, 0);
}

// A stop that is not ddprun's own is left alone: after Ctrl-Z and fg, a
// worker that a debugger (or an operator) had stopped before stays
// stopped; ddprun continued after a SIGSTOP of its own continues nobody.
TEST(GroupPolicy, ContinuedDdprunContinuesOnlyTheWorkersItStopped) {
  Group p(3, opts(1s));
  p.slots[1].stopped = true;  // read with the beats
  p.beats({0, 0, 0}, t0 + 500ms);
  p.signal(SIGTSTP, t0 + 1s);
  const auto cont = p.signal(SIGCONT, t0 + 5s);
  ASSERT_EQ(cont.size(), 1u);
  EXPECT_EQ(cont[0].sig, SIGCONT);
  EXPECT_EQ(cont[0].except, std::vector<int>{1});
  EXPECT_TRUE(p.signal(SIGCONT, t0 + 9s).empty());  // not paused by ddprun: nothing to continue
}

TEST(GroupPolicy, APauseDuringAStopDoesNotShortenTheStopTimeout) {
  Group p(2, opts());
  EXPECT_EQ(p.exit(0, true), WorkerEnd::kFailed);
  EXPECT_TRUE(signals(p.last, SIGTERM));  // SIGKILL due at 2 s
  p.signal(SIGTSTP, t0 + 1s);
  p.signal(SIGCONT, t0 + 30s);  // paused 29 s: SIGKILL due at 31 s
  EXPECT_TRUE(p.tick(t0 + 30s + 900ms).empty());
  EXPECT_TRUE(signals(p.tick(t0 + 31s), SIGKILL));
  // SIGSTOP/SIGCONT stopped nothing
  EXPECT_EQ(p.exit_with({.worker = 1, .signal = SIGKILL}, t0 + 31s), WorkerEnd::kStopped);
}

// Checkpointless recovery: workers that all say they can heal.
GroupPolicyOptions healing(int max_heals, std::chrono::milliseconds hang = 0ms) {
  GroupPolicyOptions o = opts(hang);
  o.heartbeats = true;
  o.max_heals = max_heals;
  return o;
}

std::vector<GroupCommand> replacements(const std::vector<GroupCommand>& cs) {
  std::vector<GroupCommand> out;
  for (const auto& c : cs) {
    if (c.kind == GroupCommand::kReplaceWorker) out.push_back(c);
  }
  return out;
}

TEST(GroupPolicy, AFailedWorkerIsReplacedWhileTheOthersGoOnWhenAllCanHeal) {
  Group p(4, healing(3));
  p.all_ready();
  EXPECT_EQ(p.exit(2, true), WorkerEnd::kHealed);
  const auto cs = p.last;
  EXPECT_FALSE(signals(cs, SIGTERM));
  ASSERT_EQ(replacements(cs).size(), 1u);
  EXPECT_EQ(replacements(cs)[0].worker, 2);
  EXPECT_EQ(replacements(cs)[0].generation, 1u);
  EXPECT_TRUE(p.policy.alive(2));  // the replacement runs
  EXPECT_FALSE(p.policy.stopping());
  p.ready[2] = true;  // the replacement has the state
  for (int w = 0; w < 4; ++w) EXPECT_EQ(p.exit(w, false), WorkerEnd::kSucceeded);
  EXPECT_EQ(p.policy.outcome(), GroupPolicy::kSucceeded);
  EXPECT_EQ(p.policy.heal_count(), 1);
}

// The heal words are read with the exits they decide (no word set before
// and remembered): a failure is healed when every worker's word in that
// reading says it can, and not when one says it cannot, whatever an
// earlier reading said.
TEST(GroupPolicy, TheHealWordsReadWithTheExitsDecideThem) {
  Group p(3, healing(3));
  p.all_ready();
  EXPECT_EQ(p.exit(1, true), WorkerEnd::kHealed);
  Group q(3, healing(3));
  q.all_ready();
  q.read_heal();
  q.ready[2] = false;  // worker 2 left its Healer loop since
  EXPECT_EQ(q.exit(1, true), WorkerEnd::kFailed);
  EXPECT_TRUE(signals(q.last, SIGTERM));
}

TEST(GroupPolicy, NoHealUnlessEveryRunningWorkerSaysItCan) {
  Group p(3, healing(3));
  p.ready[0] = true;
  p.ready[1] = true;  // worker 2 (a script, or not in its loop yet) cannot
  EXPECT_EQ(p.exit(0, true), WorkerEnd::kFailed);
  const auto cs = p.last;
  EXPECT_TRUE(signals(cs, SIGTERM));
  EXPECT_TRUE(replacements(cs).empty());
}

TEST(GroupPolicy, ARankThatKeepsFailingStopsTheGroupAfterItsHeals) {
  Group p(2, healing(2));
  for (uint32_t g = 1; g <= 2; ++g) {
    p.all_ready();
    EXPECT_EQ(p.exit(1, true), WorkerEnd::kHealed);
    const auto cs = replacements(p.last);
    ASSERT_EQ(cs.size(), 1u);
    EXPECT_EQ(cs[0].generation, g);
  }
  p.all_ready();
  EXPECT_EQ(p.exit(1, true), WorkerEnd::kFailed);  // the third time: a bad device, say
  EXPECT_TRUE(signals(p.last, SIGTERM));
  EXPECT_EQ(p.policy.outcome(), GroupPolicy::kWorkerFailed);
}

TEST(GroupPolicy, TwoWorkersFailingTogetherAreReplacedInOneGeneration) {
  Group p(4, healing(3));
  p.all_ready();
  const auto cs = replacements(p.exits({{.worker = 1, .exit_code = 1}, {.worker = 3, .exit_code = 1}}));
  EXPECT_EQ(p.ends, (std::vector<WorkerEnd>{WorkerEnd::kHealed, WorkerEnd::kHealed}));
  ASSERT_EQ(cs.size(), 2u);
  EXPECT_EQ(cs[0].generation, cs[1].generation);
}

TEST(GroupPolicy, NoHealOnceAWorkerHasFinished) {
  Group p(2, healing(3));
  p.all_ready();
  EXPECT_TRUE(replacements(p.exits({{.worker = 0}, {.worker = 1, .exit_code = 1}})).empty());
  EXPECT_EQ(p.ends, (std::vector<WorkerEnd>{WorkerEnd::kSucceeded, WorkerEnd::kFailed}));
  EXPECT_EQ(p.policy.outcome(), GroupPolicy::kWorkerFailed);
}

// Slowness is not a hang: a silent worker whose processes ran (or waited,
// runnable, to run) for at least half its silence computes; it is named
// slow once, and judged again only if it goes idle.
TEST(GroupPolicy, ASilentButBusyWorkerIsSlowNotHung) {
  Group p(2, opts(1s));
  p.beats({1, 1}, t0, {ms(0), ms(0)});
  auto cs = p.beats({5, 1}, t0 + 1500ms, {ms(100), ms(1200)});  // worker 1 computed 1.2 s of 1.5
  ASSERT_EQ(cs.size(), 1u);
  EXPECT_EQ(cs[0].kind, GroupCommand::kNote);
  EXPECT_EQ(cs[0].worker, 1);
  EXPECT_NE(cs[0].why.find("is slow, not hung: silent for 1.5 s, but it ran or waited to run for 1.2 s"),
            std::string::npos)
      << cs[0].why;
  EXPECT_TRUE(p.beats({6, 1}, t0 + 2s, {ms(100), ms(1700)}).empty()) << "said once a silence";
  // Then it stops: idle from 2 s on, its busy share falls under half.
  EXPECT_TRUE(p.beats({7, 1}, t0 + 3s, {ms(100), ms(1700)}).empty());  // 1.7 of 3 s
  cs = p.beats({8, 1}, t0 + 3500ms, {ms(100), ms(1700)});               // 1.7 of 3.5 s
  ASSERT_FALSE(cs.empty());
  EXPECT_EQ(cs[0].kind, GroupCommand::kKillWorker);
  EXPECT_EQ(cs[0].worker, 1);
  EXPECT_TRUE(signals(cs, SIGTERM));
}

// Under a short limit a slow worker's silences come every second or two
// (a beat between each): it is named slow at most once a minute
// (kSlowNoteEvery), not at every silence.
TEST(GroupPolicy, ASlowWorkerIsNamedSlowAtMostOnceAMinute) {
  Group p(2, opts(1s));
  p.beats({1, 1}, t0, {ms(0), ms(0)});
  int notes = 0;
  uint64_t beats0 = 1, beats1 = 1;
  auto tick = [&](ms at) {  // worker 0 beats at every tick; worker 1 is always busy
    for (const auto& c : p.beats({++beats0, beats1}, t0 + at, {ms(0), at})) {
      EXPECT_EQ(c.kind, GroupCommand::kNote);
      EXPECT_EQ(c.worker, 1);
      notes += c.kind == GroupCommand::kNote;
    }
  };
  // Worker 1 silent for 1.5 s of every 2 s (then a beat), for 58 s...
  for (int k = 0; k < 29; ++k) {
    tick(ms(2000 * k + 1500));
    ++beats1;
    tick(ms(2000 * k + 2000));
  }
  EXPECT_EQ(notes, 1) << "named slow at every silence";
  // ... and for 6 s more.
  for (int k = 29; k < 32; ++k) {
    tick(ms(2000 * k + 1500));
    ++beats1;
    tick(ms(2000 * k + 2000));
  }
  EXPECT_EQ(notes, 2) << "a minute after the first, it is named again";
}

// A whole node slow at once is the node's load: while a silent worker is
// busy, the idle silent ones may wait for it (a collective without a
// pulse) and nobody is judged; without busy readings they are, as before.
TEST(GroupPolicy, IdleWorkersAreNotJudgedWhileASilentPeerIsBusy) {
  Group p(3, opts(1s));
  p.beats({1, 1, 1}, t0, {ms(0), ms(0), ms(0)});
  const auto cs = p.beats({1, 1, 1}, t0 + 2s, {ms(1900), ms(10), ms(10)});
  ASSERT_EQ(cs.size(), 3u);
  for (const auto& c : cs) EXPECT_EQ(c.kind, GroupCommand::kNote) << c.why;
  EXPECT_NE(cs[1].why.find("another worker of this node is busy"), std::string::npos) << cs[1].why;
  EXPECT_FALSE(p.policy.stopping());
  Group unknown(3, opts(1s));
  unknown.beats({1, 1, 1}, t0);
  EXPECT_TRUE(signals(unknown.beats({1, 1, 1}, t0 + 2s), SIGTERM));
}

// A worker past its last step (finishing: its World ended, its interpreter
// exits) is never judged, however long its exit takes.
TEST(GroupPolicy, AFinishingWorkerIsNeverHung) {
  Group p(2, opts(1s));
  p.beats({1, 1}, t0);
  p.slots[1].finishing = true;
  EXPECT_TRUE(p.beats({9, 1}, t0 + 60s).empty());
  EXPECT_FALSE(p.policy.stopping());
  EXPECT_EQ(p.exit(1, false), WorkerEnd::kSucceeded);
}

// The agent's own stall (its loop woke long after it asked) is nobody's
// silence: every worker's silence starts again after it.
TEST(GroupPolicy, TheAgentsOwnStallIsNobodysSilence) {
  Group p(2, opts(1s));
  p.beats({1, 1}, t0);
  p.step(ev::OwnStall{5s}, t0 + 5s);  // the agent itself ran not from 0 to 5 s
  EXPECT_TRUE(p.beats({1, 1}, t0 + 5500ms).empty());
  EXPECT_TRUE(signals(p.beats({1, 1}, t0 + 6s), SIGTERM));  // 1 s after the stall: hung
}

// A hang while the others are not inside a step (an evaluation, the end of
// training) is no heal: they may never reach another collective, and a
// replacement would wait for them for ever. The group stops instead.
TEST(GroupPolicy, AHangWhileThePeersAreOutsideAStepStopsTheGroup) {
  Group p(2, healing(3, 1s));
  p.all_ready();
  p.slots[0].in_step = false;  // worker 0 evaluates; worker 1 hangs
  p.beats({1, 1}, t0);
  const auto cs = p.beats({5, 1}, t0 + 1100ms);
  ASSERT_FALSE(cs.empty());
  EXPECT_EQ(cs[0].kind, GroupCommand::kKillWorker);
  EXPECT_FALSE(cs[0].heal);
  EXPECT_TRUE(signals(cs, SIGTERM));
  EXPECT_EQ(p.exit(1, true), WorkerEnd::kHung);
}

// Several found hung in one pass: no more of them are replaced than leaves
// one holding the state (two workers, both hung: neither is replaced).
TEST(GroupPolicy, HungWorkersAreNeverAllReplacedAtOnce) {
  Group p(2, healing(3, 1s));
  p.all_ready();
  p.beats({1, 1}, t0);
  const auto cs = p.beats({1, 1}, t0 + 1100ms);
  int kills = 0;
  for (const auto& c : cs) kills += c.kind == GroupCommand::kKillWorker;
  EXPECT_EQ(kills, 2);
  EXPECT_TRUE(signals(cs, SIGTERM)) << "one of them held the state: the group stops";
  const auto after = p.exits({{.worker = 0, .exit_code = 1}, {.worker = 1, .exit_code = 1}}, t0 + 1200ms);
  EXPECT_TRUE(replacements(after).empty());
  // Worker 0 was killed to be replaced, but the stop came first: its heal
  // is not carried out (WorkerGroup counts it a failure).
  EXPECT_EQ(p.ends, (std::vector<WorkerEnd>{WorkerEnd::kHealed, WorkerEnd::kHung}));
  EXPECT_EQ(p.policy.outcome(), GroupPolicy::kWorkerFailed);
}

// A replacement takes the state from peers that hold it; once one of them
// finished (exited 0) it never will, and the failure it replaced stands.
TEST(GroupPolicy, AReplacementWhosePeersFinishedIsNotWaitedForEver) {
  Group p(2, healing(3));
  p.all_ready();
  EXPECT_EQ(p.exit(1, true), WorkerEnd::kHealed);
  ASSERT_EQ(replacements(p.last).size(), 1u);
  p.ready[1] = false;
  p.started(1, true, t0);
  EXPECT_EQ(p.exit(0, false, t0 + 1s), WorkerEnd::kSucceeded);  // the survivor finished its last step
  const auto cs = p.last;
  ASSERT_FALSE(cs.empty());
  EXPECT_EQ(cs[0].kind, GroupCommand::kNote);
  EXPECT_NE(cs[0].why.find("cannot heal"), std::string::npos) << cs[0].why;
  EXPECT_TRUE(signals(cs, SIGTERM));
  EXPECT_EQ(p.exit_with({.worker = 1, .signal = SIGTERM}, t0 + 1s), WorkerEnd::kStopped);
  EXPECT_EQ(p.policy.outcome(), GroupPolicy::kWorkerFailed);
}

// --straggler-action replace: a slow worker is killed to be replaced
// through a heal, counted against --max-heals; one that cannot heal now is
// kept (nothing is stopped for being slow).
TEST(GroupPolicy, AStragglerIsReplacedThroughAHealWithinMaxHeals) {
  Group p(2, healing(1));
  EXPECT_TRUE(p.straggler(1, "a straggler").empty()) << "nobody said it can heal yet";
  p.all_ready();
  const auto kill = p.straggler(1, "a straggler: score 0.40");
  ASSERT_EQ(kill.size(), 1u);
  EXPECT_EQ(kill[0].kind, GroupCommand::kKillWorker);
  EXPECT_EQ(kill[0].worker, 1);
  EXPECT_TRUE(kill[0].heal);
  EXPECT_TRUE(kill[0].straggler);
  EXPECT_EQ(kill[0].why, "a straggler: score 0.40");
  EXPECT_TRUE(p.straggler(1, "again").empty()) << "already being replaced";
  EXPECT_EQ(p.exit(1, true, t0 + 1s), WorkerEnd::kHealed);
  ASSERT_EQ(replacements(p.last).size(), 1u);
  EXPECT_FALSE(p.policy.stopping());
  p.ready[1] = true;
  EXPECT_TRUE(p.policy.heals_ran_out(1));
  EXPECT_TRUE(p.straggler(1, "slow again").empty()) << "--max-heals 1 is spent";
  EXPECT_FALSE(p.policy.stopping());
}

// A straggler to replace waits until every worker is inside a step (a heal
// named outside one fails that worker's next collective); one only named,
// one this node's load explains, or one that cannot heal now, is told at
// once and goes on.
TEST(GroupPolicy, AStragglerIsReplacedOnlyWhenEveryWorkerIsInsideAStepAndNotForTheLoad) {
  using Action = GroupPolicy::StragglerAction;
  Group p(2, healing(3));
  EXPECT_EQ(p.policy.straggler_action(1, false, /*replace=*/true, /*all_in_step=*/false), Action::kKept)
      << "it cannot heal yet: kept";
  p.all_ready();
  p.read_heal();
  EXPECT_EQ(p.policy.straggler_action(1, false, true, false), Action::kWait);
  EXPECT_EQ(p.policy.straggler_action(1, false, true, true), Action::kReplace);
  EXPECT_EQ(p.policy.straggler_action(1, false, /*replace=*/false, false), Action::kWarn) << "only named: at once";
  EXPECT_EQ(p.policy.straggler_action(1, /*load_explains=*/true, true, true), Action::kLoad)
      << "this node's load: not the rank's";
  EXPECT_EQ(p.policy.straggler_action(1, true, false, false), Action::kLoad);
}

TEST(GroupPolicy, AHungWorkerIsKilledAndReplacedWhileTheOthersGoOn) {
  Group p(2, healing(3, 1s));
  p.all_ready();
  EXPECT_TRUE(p.beats({1, 1}, t0).empty());
  EXPECT_TRUE(p.beats({2, 1}, t0 + 500ms).empty());
  const auto kill = p.beats({3, 1}, t0 + 1100ms);
  ASSERT_EQ(kill.size(), 1u);  // the kill, no stop
  EXPECT_EQ(kill[0].kind, GroupCommand::kKillWorker);
  EXPECT_EQ(kill[0].worker, 1);
  EXPECT_TRUE(kill[0].heal);
  EXPECT_TRUE(p.beats({4, 1}, t0 + 1200ms).empty());  // not judged again while it dies
  EXPECT_EQ(p.exit(1, true, t0 + 1300ms), WorkerEnd::kHealed);
  const auto cs = replacements(p.last);
  ASSERT_EQ(cs.size(), 1u);
  // The replacement's silence counts from its start.
  EXPECT_TRUE(p.beats({5, 0}, t0 + 2200ms).empty());
  EXPECT_FALSE(p.policy.stopping());
}

// Waiting for a replacement is no hang (worker_lib beats for a worker that
// waits for its peers), but a worker that stops beating during a heal is
// one: a survivor paused while a replacement joins is found hung and
// replaced in turn, not excused until the replacement has the state.
TEST(GroupPolicy, ASurvivorThatStopsBeatingWhileAReplacementJoinsIsHung) {
  Group p(4, healing(3, 1s));
  p.all_ready();
  EXPECT_TRUE(p.beats({1, 1, 1, 1}, t0).empty());
  EXPECT_EQ(p.exit(2, true, t0 + 100ms), WorkerEnd::kHealed);
  ASSERT_EQ(replacements(p.last).size(), 1u);
  p.ready[2] = false;
  p.started(2, /*from_standby=*/true, t0 + 100ms);
  // Workers 0 and 1 wait and beat; worker 3 was stopped; the replacement beats.
  uint64_t b = 1;
  std::vector<GroupCommand> cs;
  for (auto t = 200ms; t <= 1500ms && cs.empty(); t += 100ms) {
    ++b;
    cs = p.beats({b, b, b, 1}, t0 + t);
  }
  ASSERT_EQ(cs.size(), 1u);
  EXPECT_EQ(cs[0].kind, GroupCommand::kKillWorker);
  EXPECT_EQ(cs[0].worker, 3);
  EXPECT_TRUE(cs[0].heal) << "the joining replacement and two survivors hold the state";
  EXPECT_FALSE(p.policy.stopping());
}

// A replacement is judged from its start: from a standby (already past its
// start-up) within --hang-timeout, a fresh process allowed as long as the
// first workers took to beat on top. A stopped standby, released, never beats.
TEST(GroupPolicy, AReplacementThatNeverBeatsIsHungAfterItsAllowance) {
  for (bool standby : {true, false}) {
    Group p(3, healing(3, 1s));
    EXPECT_TRUE(p.beats({0, 0, 0}, t0 + 1s).empty());
    EXPECT_TRUE(p.beats({1, 1, 1}, t0 + 3s).empty());  // the first workers took 3 s to beat
    p.all_ready();
    EXPECT_EQ(p.exit(1, true, t0 + 10s), WorkerEnd::kHealed);
    ASSERT_EQ(replacements(p.last).size(), 1u);
    p.ready[1] = false;
    p.started(1, standby, t0 + 10s);
    const auto allowed = standby ? 1s : 4s;
    EXPECT_TRUE(p.beats({50, 0, 50}, t0 + 10s + allowed - 100ms).empty()) << "standby " << standby;
    const auto cs = p.beats({60, 0, 60}, t0 + 10s + allowed + 100ms);
    ASSERT_EQ(cs.size(), 1u) << "standby " << standby;
    EXPECT_EQ(cs[0].worker, 1);
    EXPECT_TRUE(cs[0].heal);
    EXPECT_NE(cs[0].why.find("never beat"), std::string::npos) << cs[0].why;
  }
}

// Healing workers of a multi-node job: the rendezvous names generations.
GroupPolicyOptions across_nodes() {
  GroupPolicyOptions o = healing(3);
  o.generations_from_rendezvous = true;
  return o;
}

// Across nodes the rendezvous names the generation: the failed worker waits
// for it (not running, but the group goes on, even when it was the node's
// only worker: the state lives on the other nodes), then is replaced in it.
TEST(GroupPolicy, AcrossNodesAReplacementWaitsForTheGenerationTheRendezvousNames) {
  const GroupPolicyOptions o = across_nodes();
  Group p(1, o);
  p.all_ready();
  EXPECT_EQ(p.exit(0, true), WorkerEnd::kHealed);
  auto cs = p.last;
  ASSERT_EQ(cs.size(), 1u);
  EXPECT_EQ(cs[0].kind, GroupCommand::kAskGeneration);
  EXPECT_TRUE(p.policy.awaiting_generation(0));
  EXPECT_FALSE(p.policy.alive(0));
  EXPECT_TRUE(p.policy.any_alive());  // the group waits with it
  cs = replacements(p.generation(7, t0 + 10ms));
  ASSERT_EQ(cs.size(), 1u);
  EXPECT_EQ(cs[0].worker, 0);
  EXPECT_EQ(cs[0].generation, 7u);
  EXPECT_TRUE(p.policy.alive(0));
  EXPECT_FALSE(p.policy.awaiting_generation(0));
  EXPECT_EQ(p.policy.heal_count(), 1);
  EXPECT_EQ(p.exit(0, false), WorkerEnd::kSucceeded);
  EXPECT_EQ(p.policy.outcome(), GroupPolicy::kSucceeded);
}

TEST(GroupPolicy, AcrossNodesARefusedGenerationStopsTheGroupAsAFailure) {
  const GroupPolicyOptions o = across_nodes();
  Group p(3, o);
  p.all_ready();
  EXPECT_EQ(p.exit(1, true), WorkerEnd::kHealed);
  EXPECT_EQ(p.last.size(), 1u);  // the question
  EXPECT_EQ(p.exit(2, true), WorkerEnd::kHealed);
  EXPECT_TRUE(p.last.empty());  // already asked: one answer serves both
  EXPECT_TRUE(signals(p.generation(0, t0 + 10ms), SIGTERM));
  EXPECT_FALSE(p.policy.awaiting_generation(1));
  EXPECT_EQ(p.exit_with({.worker = 0, .signal = SIGTERM}, t0 + 20ms), WorkerEnd::kStopped);
  EXPECT_FALSE(p.policy.any_alive());
  EXPECT_EQ(p.policy.outcome(), GroupPolicy::kWorkerFailed);
}

TEST(GroupPolicy, AcrossNodesAStopBeforeTheAnswerEndsTheWait) {
  const GroupPolicyOptions o = across_nodes();
  Group p(2, o);
  p.all_ready();
  EXPECT_EQ(p.exit(1, true), WorkerEnd::kHealed);
  EXPECT_TRUE(signals(p.round_stop("round 0 was superseded", t0 + 5ms), SIGTERM));
  EXPECT_TRUE(replacements(p.generation(3, t0 + 10ms)).empty());  // too late
  EXPECT_EQ(p.exit(0, true), WorkerEnd::kStopped);
  EXPECT_FALSE(p.policy.any_alive());
  EXPECT_EQ(p.policy.outcome(), GroupPolicy::kStoppedForRound);
}

// A second failure while a replacement still joins (two kills a few
// milliseconds apart, or the sender dying mid-heal): the next generation,
// and the joining replacement counts as one that can heal.
TEST(GroupPolicy, AFailureDuringAHealBeginsTheNextGeneration) {
  Group p(3, healing(3));
  p.all_ready();
  EXPECT_EQ(p.exit(0, true), WorkerEnd::kHealed);
  ASSERT_EQ(replacements(p.last).size(), 1u);
  p.ready[0] = false;  // worker 0's replacement has not said it can heal yet
  EXPECT_EQ(p.exit(2, true, t0 + 10ms), WorkerEnd::kHealed);
  auto cs = replacements(p.last);
  ASSERT_EQ(cs.size(), 1u);
  EXPECT_EQ(cs[0].generation, 2u);
  // And the joining replacement itself failing is healed too.
  EXPECT_EQ(p.exit(0, true, t0 + 20ms), WorkerEnd::kHealed);
  cs = replacements(p.last);
  ASSERT_EQ(cs.size(), 1u);
  EXPECT_EQ(cs[0].generation, 3u);
  p.all_ready();
  for (int w = 0; w < 3; ++w) EXPECT_EQ(p.exit(w, false), WorkerEnd::kSucceeded);
  EXPECT_EQ(p.policy.outcome(), GroupPolicy::kSucceeded);
}

// A replacement that fails before it joins may have met a peer's death
// once; failing twice in a row is the program's own (it cannot load its
// data, say): it is not replaced again until --max-heals runs out, the
// group stops saying why.
TEST(GroupPolicy, AReplacementThatFailsTwiceBeforeJoiningIsNotReplacedAgain) {
  Group p(2, healing(5));
  p.all_ready();
  EXPECT_EQ(p.exit(1, true), WorkerEnd::kHealed);
  ASSERT_EQ(replacements(p.last).size(), 1u);
  p.ready[1] = false;
  EXPECT_EQ(p.exit(1, true, t0 + 1s), WorkerEnd::kHealed);  // the first replacement fails joining: once
  ASSERT_EQ(replacements(p.last).size(), 1u);
  EXPECT_EQ(p.exit(1, true, t0 + 2s), WorkerEnd::kFailed);  // and the second: the program's own
  const auto cs = p.last;
  ASSERT_FALSE(cs.empty());
  EXPECT_EQ(cs[0].kind, GroupCommand::kNote);
  EXPECT_NE(cs[0].why.find("failed 2 times in a row before they could join"), std::string::npos) << cs[0].why;
  EXPECT_TRUE(signals(cs, SIGTERM));
  EXPECT_EQ(p.policy.heals_of(1), 2);
  // One that joins in between starts the count over.
  Group q(2, healing(10));
  q.all_ready();
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(q.exit(1, true), WorkerEnd::kHealed) << i;
    ASSERT_EQ(replacements(q.last).size(), 1u);
    q.ready[1] = false;
    EXPECT_EQ(q.exit(1, true), WorkerEnd::kHealed) << i;  // fails joining once
    ASSERT_EQ(replacements(q.last).size(), 1u);
    q.ready[1] = true;  // the next one joins
  }
}

TEST(GroupPolicy, ALoneWorkerIsNeverHealedNobodyWouldHoldItsState) {
  Group p(1, healing(3));
  p.all_ready();
  EXPECT_EQ(p.exit(0, true), WorkerEnd::kFailed);
  EXPECT_TRUE(replacements(p.last).empty());
  EXPECT_EQ(p.policy.outcome(), GroupPolicy::kWorkerFailed);
}

TEST(GroupPolicy, ASignalToDdprunDuringAHealStopsEveryoneAsBefore) {
  Group p(2, healing(3));
  p.all_ready();
  EXPECT_EQ(p.exit(0, true), WorkerEnd::kHealed);
  EXPECT_EQ(replacements(p.last).size(), 1u);
  EXPECT_TRUE(signals(p.signal(SIGTERM, t0), SIGTERM));
  EXPECT_EQ(p.exit(0, true), WorkerEnd::kStopped);
  EXPECT_EQ(p.exit(1, true), WorkerEnd::kStopped);
  EXPECT_EQ(p.policy.outcome(), GroupPolicy::kStoppedBySignal);
}

}  // namespace
}  // namespace ddprun
