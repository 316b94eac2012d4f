// What the training loop reports of its progress: written into this
// worker's heartbeat slot (channel/heartbeat_layout.h) for the agent's
// progress line, event log and `ddprun status`, and, when no agent shows it
// (DDPRUN_PROGRESS_BY_AGENT unset), printed by rank 0 itself. Cheap enough
// to call every step. No LibTorch here.
//
//   world->report_progress({.step = s, .total_steps = n, .epoch = e, .loss = l, .samples = k});
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <mutex>
#include <string>

#include "channel/heartbeat_layout.h"

namespace ddp {

// A field left at its default is unknown (not reported).
struct ProgressReport {
  int64_t step = -1;
  int64_t total_steps = -1;
  int32_t epoch = -1;
  double loss = std::numeric_limits<double>::quiet_NaN();
  int64_t samples = -1;  // of the whole job so far
};

struct ProgressPrintOptions {
  bool enabled = false;          // rank 0, and no agent shows progress
  double interval_seconds = 10;  // between plain lines (not a terminal)
  // The line's destination and whether it is a terminal (one line updated
  // in place, a few times a second). Default: stderr, isatty(stderr).
  std::FILE* out = nullptr;
  int is_tty = -1;  // -1: ask isatty
};

class ProgressReporter {
 public:
  // block: this worker's progress block, null when there is none.
  ProgressReporter(ddprun::channel::ProgressBlock* block, ProgressPrintOptions print = {});
  // Ends an in-place terminal line with a newline.
  ~ProgressReporter();
  ProgressReporter(const ProgressReporter&) = delete;
  ProgressReporter& operator=(const ProgressReporter&) = delete;

  // The training loop's report; keeps the checkpoint fields.
  void report(const ProgressReport& r);
  // Checkpointer: a save of `step` reached the disk / this attempt resumed from `step`.
  void saved(int64_t step);
  void restored(int64_t step);

  // What was last published.
  ddprun::channel::Progress last() const;

  // The printed line for a report (public for tests): step/total, epoch,
  // loss, samples/s, ETA; rates need two reports.
  static std::string format_line(const ddprun::channel::Progress& p, double samples_per_s, double eta_s);

 private:
  void publish_locked();
  void maybe_print_locked();

  ddprun::channel::ProgressBlock* block_;
  ProgressPrintOptions print_;
  mutable std::mutex mu_;  // one writer of the seqlock at a time
  ddprun::channel::Progress p_{};
  // Printing (rank 0): when and at what the last line and the first report were.
  std::chrono::steady_clock::time_point first_at_{}, printed_at_{};
  int64_t first_step_ = -1, printed_samples_ = -1;
  bool line_open_ = false;
};

}  // namespace ddp
