// Which local rank slows the others: from each rank's flight record
// (channel/flight_record.h), how late it arrives at every collective that
// all of them ran, against the first arriver, as a share of the time
// between collectives. A rank that computes 1.5x as long as its peers
// arrives a third of each step late; noise spreads over the ranks.
// Smoothed (EWMA, about the last 50 collectives, weighed by their time)
// into a 0-1 score per rank, with its share of the time the others
// waited (the time they waited for it, when it came last).
// A heal (a new generation in the records) starts the scores over.
// Pure: fed records and read back, no I/O.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "channel/flight_record.h"

namespace ddprun {

struct StragglerScore {
  double score = 0;      // 0-1: the share of each period the others waited for it
  double wait_share = 0;  // its share of the time the others waited: the time they waited for it
  double late_ms = 0;     // how long after the first arriver it came (smoothed)
  int64_t samples = 0;   // collectives at which the others waited
};

class StragglerScores {
 public:
  // A rank is a straggler once the others waited at this many collectives
  // and its score and its share of their waiting are at least these (the
  // others wait for a slow rank nearly all the time they wait; delays that
  // strike ranks at random share it out).
  static constexpr int64_t kMinSamples = 40;
  static constexpr double kFlagScore = 0.25;
  static constexpr double kFlagWaitShare = 0.8;
  // Collectives of each generation (the start, each heal) left unscored:
  // a replacement's first ones (its caches cold, its pages faulted in, its
  // threads starting) are no pace of its own.
  static constexpr uint64_t kSettling = 20;

  // The flight records of every local rank (rank → its records), read now.
  void update(const std::map<int, std::vector<channel::FlightEntry>>& records);
  const std::map<int, StragglerScore>& scores() const { return scores_; }
  // The heal generation the scores are of (they start over at each).
  uint32_t generation() const { return generation_; }
  // The rank with the highest score among those scored enough
  // (kMinSamples), if any. A rank in `excused` (one this node's load
  // explained, WorkerGroup::check_stragglers) is no straggler, whatever
  // its scores.
  struct Slowest {
    int rank = 0;
    double score = 0;
    bool straggler = false;
    bool excused = false;  // flagged by its scores, explained by the load
  };
  std::optional<Slowest> slowest_rank(const std::vector<int>& excused = {}) const;
  // The same as text: "" before, else "slowest: rank 1 (0.41)", with
  // " straggler" when it is one, ", this node's load" when excused.
  std::string slowest(const std::vector<int>& excused = {}) const;
  // Ranks that are stragglers as things stand.
  std::vector<int> stragglers() const;

  // Whether the machine's load explains a straggler: `waited` is each local
  // rank's share of the scoring window spent runnable and waiting for a CPU
  // (cgroup cpu.pressure), `slow` the straggler's index, `score` its score.
  // When it waited at least its score (the share of their time its peers
  // waited for it), or more than its peers by at least kLoadExplains of
  // its score, a fresh process in its place would wait the same (a machine
  // loaded past its cores, more threads than cores, a neighbour on its
  // cores): "" when not, else why in words.
  static constexpr double kLoadExplains = 0.5;
  static std::string slowed_by_load(const std::vector<double>& waited, size_t slow, double score);

  // The node as a whole, for the job-wide scores of nodes
  // (rendezvous/server/node_scores.h): how long its ranks spend inside a
  // collective (their mean; the others' lateness shows here, its own does
  // not) and the time from one collective to the next, smoothed alike, over
  // node_samples() collectives that every local rank finished. Needs only
  // durations, which every host measures on its own clock.
  double node_wait_ms() const;
  double node_period_ms() const;
  int64_t node_samples() const { return node_scored_; }

 private:
  uint32_t generation_ = 0;
  uint64_t last_seq_ = 0;     // the newest collective scored
  int64_t last_first_ = 0;    // when its first arriver came
  std::map<int, StragglerScore> scores_;
  // Smoothed: the time between collectives; per rank, how late it came.
  double period_ns_ = 0;
  int64_t scored_ = 0;  // collectives scored
  std::map<int, double> late_ns_;
  double wait_ns_ = 0;                   // smoothed: how long the first arriver waited for the last
  std::map<int, double> waited_for_ns_;  // smoothed: the same, counted for the rank they waited for
  // The node's timings: the newest collective they count, its first start.
  uint64_t node_seq_ = 0;
  int64_t node_first_ = 0;
  double node_wait_ns_ = 0, node_period_ns_ = 0;
  int64_t node_scored_ = 0;
  void update_node(const std::map<int, std::vector<channel::FlightEntry>>& records);
};

}  // namespace ddprun
