// Straggler scores from synthetic flight records: a rank that computes 1.5x
// as long is found, with DDP-like buckets too; random delays on random
// ranks flag nobody; a heal's new numbering starts over.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <vector>

#include "agent/health/straggler_scores.h"

namespace {

using namespace ddprun;
using channel::FlightEntry;

constexpr int64_t kNsPerMs = 1000000;

// Records steps of `ranks` ranks, each computing work_ms (rank `slow`
// slow_factor times as long, plus jitter) then running `buckets`
// collectives back to back (0.1 ms each); fed to the scores as an agent
// reads rings of 16: every `per_read` collectives.
struct Job {
  int ranks = 2;
  int buckets = 1;
  double work_ms = 2;
  int slow = -1;
  double slow_factor = 1.5;
  double jitter_ms = 0;  // a delay, on a random rank, now and then
  double bucket_jitter_ms = 0;  // a short delay of a random rank at every bucket but the first
  uint32_t generation = 0;
  std::mt19937 rng{7};
  int64_t now = 0;
  uint64_t seq = 0;
  std::map<int, std::vector<FlightEntry>> rings;

  void step(StragglerScores& scores) {
    std::vector<int64_t> arrive(static_cast<size_t>(ranks));
    std::uniform_int_distribution<int> who(0, ranks - 1);
    std::uniform_real_distribution<double> chance(0, 1);
    const int delayed = chance(rng) < 0.3 ? who(rng) : -1;
    for (int r = 0; r < ranks; ++r) {
      double w = work_ms * (r == slow ? slow_factor : 1.0);
      if (r == delayed) w += jitter_ms;
      arrive[static_cast<size_t>(r)] = now + static_cast<int64_t>(w * kNsPerMs);
    }
    for (int b = 0; b < buckets; ++b) {
      if (b > 0 && bucket_jitter_ms > 0) arrive[static_cast<size_t>(who(rng))] += static_cast<int64_t>(bucket_jitter_ms * kNsPerMs);
      ++seq;
      int64_t done = 0;
      for (int r = 0; r < ranks; ++r) {
        FlightEntry e;
        e.id = seq;
        e.seq = seq;
        e.generation = generation;
        e.started_ns = arrive[static_cast<size_t>(r)];
        auto& ring = rings[r];
        ring.push_back(e);
        if (ring.size() > 16) ring.erase(ring.begin());
        done = std::max(done, arrive[static_cast<size_t>(r)]);
      }
      done += kNsPerMs / 10;
      // Every rank leaves together, when the last one came and the
      // transfer (0.1 ms) is done.
      for (int r = 0; r < ranks; ++r) {
        FlightEntry& e = rings[r].back();
        e.state = static_cast<uint32_t>(channel::FlightState::kFinished);
        e.finished_ns = done;
      }
      for (auto& a : arrive) a = done;  // the next bucket: everyone leaves together
    }
    now = arrive[0];
    scores.update(rings);
  }
};

// (Counted after the settling collectives of the job's start.)
TEST(StragglerScores, ARankOneAndAHalfTimesAsSlowIsFoundWithinFiftyScoredSteps) {
  for (int buckets : {1, 4}) {
    StragglerScores scores;
    Job job;
    job.ranks = 4;
    job.buckets = buckets;
    job.slow = 2;
    int steps = 0;
    while (scores.stragglers().empty() && steps < 200) {
      job.step(scores);
      ++steps;
    }
    EXPECT_EQ(scores.stragglers(), std::vector<int>{2}) << buckets << " bucket(s)";
    EXPECT_LE(steps, static_cast<int>(StragglerScores::kSettling) + 50) << buckets << " bucket(s)";
    EXPECT_NEAR(scores.scores().at(2).score, 1.0 / 3, 0.06) << buckets;
    EXPECT_LT(scores.scores().at(0).score, 0.02) << buckets;
    EXPECT_GT(scores.scores().at(2).wait_share, 0.95) << buckets;
    EXPECT_GT(scores.scores().at(2).late_ms, 4 * scores.scores().at(0).late_ms) << buckets;
  }
}

// DDP's later buckets follow each other closely, and at each a random rank
// comes a little late: counted by collectives, the slow rank would be
// last at only some of the waits; weighed by how long they waited, it is
// the one waited for.
TEST(StragglerScores, ShortWaitsAtLaterBucketsDoNotHideTheSlowRank) {
  StragglerScores scores;
  Job job;
  job.ranks = 4;
  job.buckets = 4;
  job.bucket_jitter_ms = 0.05;
  job.slow = 1;
  EXPECT_EQ(scores.slowest(), "");
  int steps = 0;
  while (scores.stragglers().empty() && steps < 200) {
    job.step(scores);
    ++steps;
  }
  EXPECT_EQ(scores.stragglers(), std::vector<int>{1});
  EXPECT_LE(steps, 50);
  EXPECT_GT(scores.scores().at(1).wait_share, 0.8);
  const std::string slowest = scores.slowest();
  EXPECT_EQ(slowest.rfind("slowest: rank 1 (0.", 0), 0u) << slowest;
  EXPECT_EQ(slowest.substr(slowest.size() - 10), " straggler") << slowest;
}

TEST(StragglerScores, RandomDelaysOnRandomRanksFlagNobody) {
  StragglerScores scores;
  Job job;
  job.ranks = 2;
  job.buckets = 3;
  job.jitter_ms = 4;  // twice the work, on one rank in three steps
  for (int i = 0; i < 10000; ++i) {
    job.step(scores);
    ASSERT_TRUE(scores.stragglers().empty()) << "step " << i << ": rank " << scores.stragglers()[0];
  }
}

TEST(StragglerScores, AHealsNewNumberingStartsOverAndTheSlowRankIsFoundAgain) {
  StragglerScores scores;
  Job job;
  job.slow = 1;
  for (int i = 0; i < 60; ++i) job.step(scores);
  ASSERT_EQ(scores.stragglers(), std::vector<int>{1});
  // A heal: numbers from 1 again, and the new rank 1 is as fast as the rest.
  job.generation = 1;
  job.seq = 0;
  job.slow = -1;
  for (auto& [r, ring] : job.rings) ring.clear();
  job.step(scores);
  EXPECT_TRUE(scores.stragglers().empty()) << "what was learned of the old processes is gone";
  EXPECT_EQ(scores.slowest(), "");
  for (int i = 0; i < 200; ++i) job.step(scores);
  EXPECT_TRUE(scores.stragglers().empty());
  EXPECT_LT(scores.scores().at(1).score, 0.05);
}

// The node as a whole: its ranks' time inside each collective, for the
// job-wide scores of nodes. A node with a slow rank of its own waits for
// it; one whose ranks are all alike waits only the transfer (and whatever
// other nodes make it wait, which this node cannot see apart).
TEST(StragglerScores, TheNodesTimeInsideCollectivesAndItsPeriodAreMeasured) {
  StragglerScores even, uneven;
  Job a, b;
  a.ranks = b.ranks = 2;
  b.slow = 1;  // 3 ms against 2: rank 0 waits 1 ms inside each collective
  for (int i = 0; i < 100; ++i) {
    a.step(even);
    b.step(uneven);
  }
  EXPECT_NEAR(even.node_wait_ms(), 0.1, 0.01);
  EXPECT_NEAR(even.node_period_ms(), 2.1, 0.01);
  EXPECT_NEAR(uneven.node_wait_ms(), (1.1 + 0.1) / 2, 0.01);
  EXPECT_NEAR(uneven.node_period_ms(), 3.1, 0.01);
  EXPECT_EQ(even.node_samples(), 100 - static_cast<int64_t>(StragglerScores::kSettling));
  // One rank alone is measured too (a node of one worker).
  StragglerScores one;
  Job c;
  c.ranks = 1;
  for (int i = 0; i < 10 + static_cast<int>(StragglerScores::kSettling); ++i) c.step(one);
  EXPECT_NEAR(one.node_wait_ms(), 0.1, 0.01);
  EXPECT_GT(one.node_samples(), 0);
}

// A collective under way at a read is counted once it finished: counting
// only those finished at each read would leave out long waits more often
// than short ones.
TEST(StragglerScores, ACollectiveUnderWayIsCountedOnceFinished) {
  StragglerScores scores;
  Job job;
  for (int i = 0; i < 30; ++i) job.step(scores);
  const int64_t before = scores.node_samples();
  ++job.seq;
  for (int r = 0; r < job.ranks; ++r) {
    FlightEntry e;
    e.id = e.seq = job.seq;
    e.state = static_cast<uint32_t>(channel::FlightState::kStarted);
    e.started_ns = job.now + 2 * kNsPerMs;
    job.rings[r].push_back(e);
  }
  scores.update(job.rings);
  EXPECT_EQ(scores.node_samples(), before);
  for (int r = 0; r < job.ranks; ++r) {
    FlightEntry& e = job.rings[r].back();
    e.state = static_cast<uint32_t>(channel::FlightState::kFinished);
    e.finished_ns = e.started_ns + 50 * kNsPerMs;  // a long wait
  }
  scores.update(job.rings);
  EXPECT_EQ(scores.node_samples(), before + 1);
  EXPECT_GT(scores.node_wait_ms(), 0.5);  // the long wait counted
}

// A rank that is late because it waited for a CPU more than its peers (the
// machine is loaded, its process has more threads, a neighbour holds its
// cores) is the node's load: a fresh process in its place would wait the
// same. One stopped or slow for reasons of its own waited no more than they.
TEST(StragglerScores, ARankSlowedByWaitingForACpuIsTheLoadNotAStraggler) {
  EXPECT_NE(StragglerScores::slowed_by_load({0.45, 0.10, 0.12}, 0, 0.28), "");
  EXPECT_NE(StragglerScores::slowed_by_load({0.45, 0.10, 0.12}, 0, 0.28).find("45% of the time against its peers' 11%"),
            std::string::npos);
  EXPECT_EQ(StragglerScores::slowed_by_load({0.20, 0.18, 0.22}, 0, 0.28), "") << "everyone waits alike";
  EXPECT_EQ(StragglerScores::slowed_by_load({0.0, 0.0}, 1, 0.5), "") << "stopped half the time: no CPU wait";
  EXPECT_EQ(StragglerScores::slowed_by_load({0.3}, 0, 0.3), "") << "no peer to compare with";
}

// On a machine loaded past its cores every rank waits for a CPU about half
// the time, and the one whose turns fall just before the collectives is
// late at most of them (measured here: 0.46 and 0.46 waited, score 0.26
// with 2 cores and two CPU hogs besides). Kept off a CPU at least as long
// as its peers waited for it, it is the load; late by more, it is not.
TEST(StragglerScores, ARankWhoseCpuWaitCoversItsLatenessIsTheLoadEvenIfItsPeersWaitedAlike) {
  const std::string said = StragglerScores::slowed_by_load({0.46, 0.46}, 1, 0.26);
  EXPECT_NE(said.find("waited for a CPU 46% of the time, as long as or longer than the 26% its peers waited"),
            std::string::npos)
      << said;
  EXPECT_EQ(StragglerScores::slowed_by_load({0.46, 0.46}, 1, 0.5), "") << "late by more than the load could make it";
}

}  // namespace
