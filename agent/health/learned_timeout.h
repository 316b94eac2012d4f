// The default hang timeout (--hang-timeout auto): learned from the job's own
// rhythm instead of set by hand. Each change of a worker's heartbeat
// counter that the agent sees closes a gap, the silence since the change
// before. A worker's first gaps are its start-up (connecting, building the
// model, the first batches) and are not learned; after them every gap is,
// and once a worker has shown enough of them it is watched: a silence
// longer than `multiple` times the longest gap learned from any worker
// (and never shorter than the floor) is a hang. The caller leaves out the
// gaps that span a phase the program announced (a checkpoint, an
// evaluation) and does not judge silence inside one.
// Pure: fed gaps, asked for the limit; no clock, no I/O.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

namespace ddprun {

struct LearnedTimeoutOptions {
  // A silence is never a hang below this (--hang-timeout auto:SECONDS).
  std::chrono::milliseconds floor{std::chrono::seconds(15)};
  int multiple = 10;     // the limit is this many times the longest gap learned
  int startup_gaps = 3;  // a worker's first gaps, not learned
  int learn_gaps = 20;   // gaps learned before the worker is watched
};

class LearnedTimeout {
 public:
  LearnedTimeout(int workers, LearnedTimeoutOptions options)
      : options_(options), gaps_(workers, 0) {}

  // Worker w's counter changed after `gap` of silence.
  void on_gap(int w, std::chrono::milliseconds gap);
  // Worker w is a fresh process (a replacement): its start-up comes again.
  // What the job's other workers taught stays.
  void restart(int w) { gaps_[w] = 0; }
  // Whether worker w has shown enough gaps to be judged.
  bool watching(int w) const { return gaps_[w] >= options_.startup_gaps + options_.learn_gaps; }
  // The longest gap learned so far (0: none yet), and the silence that is a hang.
  std::chrono::milliseconds longest() const { return longest_; }
  std::chrono::milliseconds limit() const;
  const LearnedTimeoutOptions& options() const { return options_; }

 private:
  LearnedTimeoutOptions options_;
  std::vector<int64_t> gaps_;  // per worker: gaps seen since its start
  std::chrono::milliseconds longest_{0};
};

}  // namespace ddprun
