// Goodput: how much of the job's wall time trained and was kept. Fed rank
// 0's step as the agent reads it from the heartbeat slot (every tick of its
// loop) and the events that lose time (a failure, a hang, a heal, a
// restart, a lost node, a new round); pure, on the caller's clock.
//
// The time between two readings counts as good when the step moved past
// the highest step ever read and nothing lost time in between; steps that
// only redo what a restart threw away are lost, as is a reading's interval
// that held a failure or a heal, the start-up before the first step, and
// every wait for nodes (no step moves then). An interval that redid some
// steps and went past the highest counts the new steps' share.
//
//   Goodput g(start);
//   g.step(12, now);        // each tick
//   g.lost(now);            // a worker failed
//   g.good_seconds(), g.wall_seconds(now)
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>

namespace ddprun {

class Goodput {
 public:
  using Clock = std::chrono::steady_clock;
  explicit Goodput(Clock::time_point start) : start_(start) {}

  // Rank 0's step as read at `now` (the workers' own count: after a restart
  // it goes back to the checkpoint's step).
  void step(int64_t step, Clock::time_point now);
  // Something lost the time since the last reading (and the next reading
  // starts a fresh interval).
  void lost(Clock::time_point now);

  double good_seconds() const { return good_; }
  double wall_seconds(Clock::time_point now) const { return std::chrono::duration<double>(now - start_).count(); }
  // Steps read more than once: redone after a restart.
  int64_t redone_steps() const { return redone_; }

 private:
  Clock::time_point start_;
  std::optional<int64_t> last_step_;     // of the last reading in this interval chain
  Clock::time_point last_at_{};
  bool interrupted_ = true;               // no reading yet, or something lost time since
  std::optional<int64_t> highest_;        // the highest step read
  double good_ = 0;
  int64_t redone_ = 0;
};

}  // namespace ddprun
