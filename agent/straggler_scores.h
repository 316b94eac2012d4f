// Which local rank slows the others: from each rank's flight record
// (channel/flight_record.h), how late it arrives at every collective that
// all of them ran, against the first arriver, as a share of the time
// between collectives. A rank that computes 1.5x as long as its peers
// arrives a third of each step late; noise spreads over the ranks.
// Smoothed (EWMA, about the last 50 collectives, weighed by their time)
// into a 0-1 score per rank, with how often it came last when the
// others waited.
// Pure: fed records and read back, no I/O.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "channel/flight_record.h"

namespace ddprun {

struct StragglerScore {
  double score = 0;      // 0-1: the share of each period the others waited for it
  double last_share = 0;  // how often it came last when the others waited
  double late_ms = 0;     // how long after the first arriver it came (smoothed)
  int64_t samples = 0;   // collectives at which the others waited
};

class StragglerScores {
 public:
  // A rank is a straggler once the others waited at this many collectives
  // and its score and its share of last arrivals are at least these (a
  // slow rank is last nearly every time; delays that strike ranks at
  // random share it out).
  static constexpr int64_t kMinSamples = 40;
  static constexpr double kFlagScore = 0.25;
  static constexpr double kFlagLastShare = 0.8;

  // The flight records of every local rank (rank → its records), read now.
  void update(const std::map<int, std::vector<channel::FlightEntry>>& records);
  const std::map<int, StragglerScore>& scores() const { return scores_; }
  // Ranks that are stragglers as things stand.
  std::vector<int> stragglers() const;

 private:
  uint32_t generation_ = 0;
  uint64_t last_seq_ = 0;     // the newest collective scored
  int64_t last_first_ = 0;    // when its first arriver came
  std::map<int, StragglerScore> scores_;
  // Smoothed: the time between collectives; per rank, how late it came.
  double period_ns_ = 0;
  int64_t scored_ = 0;  // collectives scored
  std::map<int, double> late_ns_;
  std::map<int, double> last_raw_;  // the EWMA behind last_share
};

}  // namespace ddprun
