// Runs callbacks at given times on one thread of its own: the timeouts of
// the service's parked store waits, so that a waiting call holds no thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

namespace ddprun {

class DeadlineTimer {
 public:
  using Clock = std::chrono::steady_clock;

  DeadlineTimer();
  ~DeadlineTimer();  // drops what has not run yet
  DeadlineTimer(const DeadlineTimer&) = delete;
  DeadlineTimer& operator=(const DeadlineTimer&) = delete;

  // Runs fn on the timer's thread at `when` (at once if it has passed).
  // Returns an id for cancel(); never 0.
  uint64_t schedule(Clock::time_point when, std::function<void()> fn);
  // Drops a callback that has not started; false if it ran, runs or is unknown.
  bool cancel(uint64_t id);
  size_t pending() const;

 private:
  void loop();

  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::map<std::pair<Clock::time_point, uint64_t>, std::function<void()>> due_;
  std::map<uint64_t, Clock::time_point> when_;  // id → its place in due_
  uint64_t next_id_ = 1;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace ddprun
