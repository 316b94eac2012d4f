// Hang detection by progress (agent/health/progress_watch.h), with a fake clock:
// a rank that spins while the others wait, a job in which every rank waits,
// and the slowness that is neither.
#include <gtest/gtest.h>

#include "agent/supervision/group_policy.h"
#include "agent/health/progress_watch.h"
#include "unit/fake_group.h"

namespace ddprun {
namespace {

using namespace std::chrono_literals;
using ms = std::chrono::milliseconds;
using TP = ProgressWatch::TimePoint;
const TP t0{};

ProgressWatchOptions fixed(ms limit) {
  ProgressWatchOptions o;
  o.explicit_limit = limit;
  return o;
}

ProgressWatchOptions automatic() {
  ProgressWatchOptions o;
  o.learned = LearnedTimeoutOptions{};
  return o;
}

// n live workers that have each advanced `advanced` steps, idle.
std::vector<ProgressReading> idle_workers(int n, uint64_t advanced) {
  std::vector<ProgressReading> r(n);
  for (auto& w : r) {
    w.alive = true;
    w.cpu_known = true;
    w.advanced = advanced;
  }
  return r;
}

// Every worker advances once a second for `steps` seconds, using 100 ms of
// CPU a step; returns the readings at the last step.
std::vector<ProgressReading> train(ProgressWatch& p, int n, int steps) {
  auto r = idle_workers(n, 0);
  for (int s = 0; s <= steps; ++s) {
    for (auto& w : r) {
      w.advanced = static_cast<uint64_t>(s + 1);
      w.used = w.busy = ms(100 * s);
    }
    EXPECT_EQ(p.observe(r, t0 + std::chrono::seconds(s)).kind, ProgressVerdict::kNone) << "step " << s;
  }
  return r;
}

// Rank 1 computes for ever at step 10 (its CPU time grows with the clock)
// while ranks 0 and 2 wait for it: hung once it ran the spin bound (30 s,
// above --hang-timeout 2) of CPU without a step, not before.
TEST(ProgressWatch, ARankThatSpinsWhileTheOthersWaitIsHungAtTheSpinBound) {
  ProgressWatch p(3, fixed(2s));
  auto r = train(p, 3, 10);
  const ms used0 = r[1].used;
  ASSERT_EQ(p.spin_bound(), ms(ProgressWatch::kSpinFloor));
  for (int s = 11; s <= 39; ++s) {
    r[1].used = r[1].busy = used0 + std::chrono::seconds(s - 10);
    const auto v = p.observe(r, t0 + std::chrono::seconds(s));
    ASSERT_EQ(v.kind, ProgressVerdict::kNone) << "at " << s << " s: " << v.why;
  }
  r[1].used = r[1].busy = used0 + 31s;
  const auto v = p.observe(r, t0 + 41s);
  ASSERT_EQ(v.kind, ProgressVerdict::kSpins) << v.why;
  EXPECT_EQ(v.workers, std::vector<int>{1});
  EXPECT_NE(v.why.find("hung: it spins: no step for 31.0 s, and it ran on a CPU for 31.0 s of it (100%)"),
            std::string::npos)
      << v.why;
}

// The same rank on a loaded machine: without a step for two minutes, but
// it ran 5 s of them and waited for a CPU the rest. Slow, not hung; and
// the waiting ranks are not hung either while it is busy.
TEST(ProgressWatch, ASlowRankOnALoadedMachineIsNeitherSpinningNorAwaited) {
  ProgressWatch p(3, fixed(2s));
  auto r = train(p, 3, 10);
  for (int s = 11; s <= 130; ++s) {
    r[1].used += ms(40);
    r[1].busy += 1s;
    const auto v = p.observe(r, t0 + std::chrono::seconds(s));
    ASSERT_EQ(v.kind, ProgressVerdict::kNone) << "at " << s << " s: " << v.why;
  }
}

// Every rank computing without a step (a recompilation, a long step of
// all of them) waits for nobody: no spinner is named.
TEST(ProgressWatch, RanksThatAllComputeAreNotSpinners) {
  ProgressWatch p(2, fixed(2s));
  auto r = train(p, 2, 10);
  for (int s = 11; s <= 100; ++s) {
    for (auto& w : r) w.used = w.busy = w.used + 1s;
    ASSERT_EQ(p.observe(r, t0 + std::chrono::seconds(s)).kind, ProgressVerdict::kNone) << s;
  }
}

// Every rank waits (a deadlock inside torch.distributed: each one beats):
// hung at the stuck limit, a minute at least however short --hang-timeout
// (a pause shorter than it must never look like one); not where another
// node may hold the slow rank, not while one writes a checkpoint, not
// before any rank advanced.
TEST(ProgressWatch, EveryRankWaitingIsHungAtTheStuckLimit) {
  {
    ProgressWatch p(2, fixed(5s));
    auto r = train(p, 2, 10);
    EXPECT_EQ(p.stuck_limit(), 60s);
    EXPECT_EQ(p.observe(r, t0 + 69s).kind, ProgressVerdict::kNone);
    const auto v = p.observe(r, t0 + 70s);
    ASSERT_EQ(v.kind, ProgressVerdict::kAllWait) << v.why;
    EXPECT_EQ(v.workers, (std::vector<int>{0, 1}));
    EXPECT_NE(v.why.find("no rank of the job has advanced a step for 60.0 s, and none of them computes"),
              std::string::npos)
        << v.why;
  }
  {
    ProgressWatch p(2, fixed(90s));
    auto r = train(p, 2, 10);
    EXPECT_EQ(p.observe(r, t0 + 99s).kind, ProgressVerdict::kNone);
    EXPECT_EQ(p.observe(r, t0 + 100s).kind, ProgressVerdict::kAllWait);
  }
  {
    ProgressWatch p(2, fixed(5s));
    p.set_whole_job(false);
    auto r = train(p, 2, 10);
    EXPECT_EQ(p.observe(r, t0 + 100s).kind, ProgressVerdict::kNone);
  }
  {
    ProgressWatch p(2, fixed(5s));
    auto r = train(p, 2, 10);
    r[0].in_phase = r[0].checkpoint = true;
    EXPECT_EQ(p.observe(r, t0 + 100s).kind, ProgressVerdict::kNone);
  }
  {
    ProgressWatch p(2, fixed(5s));
    EXPECT_EQ(p.observe(idle_workers(2, 0), t0).kind, ProgressVerdict::kNone);
    EXPECT_EQ(p.observe(idle_workers(2, 0), t0 + 100s).kind, ProgressVerdict::kNone);
  }
}

// --hang-timeout auto: four times its floor at least (60 s by default),
// and 10x the longest gap between steps once learned (slow steps of 10 s:
// 100 s). A heal under way, or a rank busy with its start, is given as
// long; a replacement whose join never ends, waiting too, is hung.
TEST(ProgressWatch, TheStuckLimitIsLearnedFromTheStepsAndHoldsForAHeal) {
  ProgressWatch p(2, automatic());
  auto r = train(p, 2, 5);
  EXPECT_EQ(p.stuck_limit(), 60s);
  EXPECT_EQ(p.observe(r, t0 + 64s).kind, ProgressVerdict::kNone);
  EXPECT_EQ(p.observe(r, t0 + 65s).kind, ProgressVerdict::kAllWait);

  ProgressWatch q(2, automatic());
  r = idle_workers(2, 0);
  for (int s = 0; s <= 10; ++s) {
    for (auto& w : r) w.advanced = static_cast<uint64_t>(s + 1);
    q.observe(r, t0 + std::chrono::seconds(10 * s));
  }
  EXPECT_EQ(q.stuck_limit(), 100s);
  EXPECT_EQ(q.observe(r, t0 + 199s).kind, ProgressVerdict::kNone);
  EXPECT_EQ(q.observe(r, t0 + 200s).kind, ProgressVerdict::kAllWait);

  ProgressWatch h(2, fixed(5s));
  r = train(h, 2, 10);
  h.restart(1);
  r[1].joining = true;
  r[1].advanced = 0;
  r[1].used = r[1].busy = 0ms;
  EXPECT_EQ(h.observe(r, t0 + 11s).kind, ProgressVerdict::kNone);  // its baseline
  for (int s = 12; s <= 150; ++s) {
    r[1].used = r[1].busy = r[1].used + 800ms;  // imports, connects
    ASSERT_EQ(h.observe(r, t0 + std::chrono::seconds(s)).kind, ProgressVerdict::kNone) << s;
  }
  // Its join never ends, and it waits too: the heal is hung.
  const auto v = h.observe(r, t0 + 400s);
  EXPECT_EQ(v.kind, ProgressVerdict::kAllWait);
  EXPECT_NE(v.why.find("a heal under way"), std::string::npos) << v.why;
}

// A stretch when nobody could run (the agent paused the workers, or was
// stopped itself) is nobody's stillness.
TEST(ProgressWatch, APauseIsNobodysStillness) {
  ProgressWatch p(2, fixed(5s));
  auto r = train(p, 2, 10);
  p.shift(100s, t0 + 110s);
  EXPECT_EQ(p.observe(r, t0 + 169s).kind, ProgressVerdict::kNone);
  EXPECT_EQ(p.observe(r, t0 + 170s).kind, ProgressVerdict::kAllWait);
}

// The policy: a stopped worker is never excused by a busy peer (it waits
// for nobody); a spinning one is killed to be replaced when it can heal.
TEST(ProgressWatch, AStoppedWorkerIsNotExcusedByABusyPeer) {
  GroupPolicyOptions o;
  o.hang_timeout = 3s;
  o.heartbeats = true;
  fakes::FakeGroup p(3, o, t0);
  p.beats({1, 1, 1}, t0, {ms(0), ms(0), ms(0)});
  p.slots[2].stopped = true;
  const auto cs = p.beats({2, 1, 1}, t0 + 4s, {ms(0), ms(3900), ms(0)});
  bool killed2 = false;
  for (const auto& c : cs) killed2 = killed2 || (c.kind == GroupCommand::kKillWorker && c.worker == 2);
  EXPECT_TRUE(killed2) << "a stopped rank excused by a busy one";
}

// Before --hang-timeout auto has learned the rhythm, a stopped worker is
// hung at the first steps' bound (four times the floor); an idle one that
// is not stopped is left to the learned limit.
TEST(ProgressWatch, AStoppedWorkerIsHungAtTheFirstStepsBoundBeforeTheRhythmIsLearned) {
  GroupPolicyOptions o;
  o.heartbeats = true;
  o.learned_hang = LearnedTimeoutOptions{};
  fakes::FakeGroup p(2, o, t0);
  p.beats({1, 1}, t0, {ms(0), ms(0)});
  p.slots[1].stopped = true;
  uint64_t b0 = 1;
  for (int s = 1; s < 60; ++s) {
    for (const auto& c : p.beats({++b0, 1}, t0 + std::chrono::seconds(s), {ms(0), ms(0)})) {
      ASSERT_NE(c.kind, GroupCommand::kKillWorker) << "at " << s << " s: " << c.why;
    }
  }
  const auto cs = p.beats({++b0, 1}, t0 + 61s, {ms(0), ms(0)});
  ASSERT_FALSE(cs.empty());
  EXPECT_EQ(cs.front().kind, GroupCommand::kKillWorker);
  EXPECT_EQ(cs.front().worker, 1);
  EXPECT_NE(cs.front().why.find("stopped (--hang-timeout auto has not learned the job's rhythm yet"), std::string::npos)
      << cs.front().why;
}

}  // namespace
}  // namespace ddprun
