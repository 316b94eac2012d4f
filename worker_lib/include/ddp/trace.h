// The worker's side of `ddprun --trace DIR`: records when each phase of a
// step (data, forward, backward, each bucket's all-reduce, optimizer,
// checkpoints) began and ended into this rank's trace file
// (channel/trace_format.h), mapped shared so that what was recorded survives
// a SIGKILL. No LibTorch here.
//
// The World owns its Tracer (world.tracer()); without DDPRUN_TRACE_FILE it
// is off and a span costs one predictable branch. On, a span costs two
// steady_clock reads, one atomic add and a 48-byte store.
//
//   auto& tr = world->tracer();
//   tr.step(step);                                   // closes the previous kStep
//   { ddp::TraceSpan s(tr, ddp::TracePhase::kData); batch = next(); }
//   { ddp::TraceSpan s(tr, ddp::TracePhase::kOptimizer); optimizer.step(); }
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <limits>
#include <string>

#include "channel/trace_format.h"

namespace ddp {

using TracePhase = ddprun::channel::TracePhase;
using TraceTrack = ddprun::channel::TraceTrack;

struct TraceOptions {
  std::string file;  // empty: off
  // Steps first_step .. end_step-1 are recorded (DDPRUN_TRACE_STEPS "A:B");
  // records outside any step (init, restore) always are.
  int64_t first_step = 0;
  int64_t end_step = std::numeric_limits<int64_t>::max();
  uint64_t capacity = uint64_t{1} << 18;  // records (12 MiB, allocated when the Tracer starts)
  int rank = 0, local_rank = 0, world_size = 1;
  int attempt = 0;  // the file's folder attempt_<N> wins over this
};

class Tracer {
 public:
  Tracer() = default;  // off
  // Creates the file (and its folder) and maps it. Throws std::runtime_error
  // naming the file when it cannot.
  explicit Tracer(const TraceOptions& options);
  // Closes the open step (its kStep record) and unmaps the file.
  ~Tracer();
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;

  bool on() const { return records_ != nullptr; }
  // Whether a span begun now is recorded: on, and inside the step window.
  bool recording() const { return recording_.load(std::memory_order_relaxed); }
  // The step the training loop is on (-1 before its first step()).
  int64_t current_step() const { return step_.load(std::memory_order_relaxed); }

  // Training thread: step `n` begins. Records the previous step as a kStep
  // (if it was in the window) and opens the window for n if it is in it.
  void step(int64_t n);
  // Training thread: the last step is over (also done by the destructor).
  void end_step();

  // Appends one record; dropped (counted) when the file is full.
  void record(TracePhase phase, TraceTrack track, int64_t begin_ns, int64_t end_ns, int64_t step,
              int64_t arg = 0, int64_t bytes = 0);
  // Records that did not fit.
  uint64_t dropped() const;
  const std::string& file() const { return file_; }

  static int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

 private:
  bool in_window(int64_t n) const { return n >= first_step_ && n < end_step_; }

  std::string file_;
  void* map_ = nullptr;
  size_t map_len_ = 0;
  ddprun::channel::TraceHeader* header_ = nullptr;
  ddprun::channel::TraceRecord* records_ = nullptr;
  uint64_t capacity_ = 0;
  int64_t first_step_ = 0, end_step_ = 0;
  std::atomic<bool> recording_{false};
  std::atomic<int64_t> step_{-1};
  int64_t step_begin_ns_ = 0;  // training thread only
};

// Times a scope: a record from construction to destruction, on the step
// that was current at construction. Does nothing when the tracer was not
// recording then.
class TraceSpan {
 public:
  TraceSpan(Tracer& tracer, TracePhase phase, TraceTrack track = TraceTrack::kMain, int64_t arg = 0,
            int64_t bytes = 0) {
    if (tracer.recording()) [[unlikely]] {
      tracer_ = &tracer;
      phase_ = phase;
      track_ = track;
      arg_ = arg;
      bytes_ = bytes;
      step_ = tracer.current_step();
      begin_ns_ = Tracer::now_ns();
    }
  }
  ~TraceSpan() { finish(); }
  TraceSpan(const TraceSpan&) = delete;
  TraceSpan& operator=(const TraceSpan&) = delete;

  // Ends the span now (the destructor then does nothing).
  void finish() {
    if (tracer_) [[unlikely]] {
      tracer_->record(phase_, track_, begin_ns_, Tracer::now_ns(), step_, arg_, bytes_);
      tracer_ = nullptr;
    }
  }

 private:
  Tracer* tracer_ = nullptr;
  TracePhase phase_{};
  TraceTrack track_{};
  int64_t arg_ = 0, bytes_ = 0, step_ = 0, begin_ns_ = 0;
};

}  // namespace ddp
