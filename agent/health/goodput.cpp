#include "agent/health/goodput.h"

#include <algorithm>

namespace ddprun {

void Goodput::step(int64_t step, Clock::time_point now) {
  // 1. A fresh interval (the first reading, or one after lost time): the
  //    time up to here was start-up or recovery; only note where we are.
  //    A step below the highest means a restart went back: those steps
  //    will be redone.
  if (interrupted_ || !last_step_) {
    interrupted_ = false;
    last_step_ = step;
    last_at_ = now;
    if (!highest_ || step > *highest_) highest_ = step;
    return;
  }
  // 2. The step went back without a lost-time event (a restart the agent
  //    heard of late): start again from here, counting nothing.
  if (step < *last_step_) {
    last_step_ = step;
    last_at_ = now;
    return;
  }
  // 3. It moved: the interval is good for the steps past the highest,
  //    redone for those below it.
  if (step > *last_step_) {
    const double interval = std::chrono::duration<double>(now - last_at_).count();
    const int64_t moved = step - *last_step_;
    const int64_t fresh = std::max<int64_t>(0, step - std::max(*highest_, *last_step_));
    redone_ += moved - fresh;
    good_ += interval * static_cast<double>(fresh) / static_cast<double>(moved);
    highest_ = std::max(*highest_, step);
    last_step_ = step;
    last_at_ = now;
  }
  // 4. Unmoved: the interval goes on (a step slower than a tick).
}

void Goodput::lost(Clock::time_point) { interrupted_ = true; }

}  // namespace ddprun
