#include "rendezvous/server/deadline_timer.h"

namespace ddprun {

DeadlineTimer::DeadlineTimer() : thread_([this] { loop(); }) {}

DeadlineTimer::~DeadlineTimer() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

uint64_t DeadlineTimer::schedule(Clock::time_point when, std::function<void()> fn) {
  uint64_t id = 0;
  bool earliest = false;
  {
    std::lock_guard lock(mu_);
    id = next_id_++;
    earliest = due_.empty() || when < due_.begin()->first.first;
    due_.emplace(std::make_pair(when, id), std::move(fn));
    when_.emplace(id, when);
  }
  if (earliest) wake_.notify_all();
  return id;
}

bool DeadlineTimer::cancel(uint64_t id) {
  std::lock_guard lock(mu_);
  auto it = when_.find(id);
  if (it == when_.end()) return false;
  due_.erase({it->second, id});
  when_.erase(it);
  return true;
}

size_t DeadlineTimer::pending() const {
  std::lock_guard lock(mu_);
  return due_.size();
}

void DeadlineTimer::loop() {
  std::unique_lock lock(mu_);
  while (!stopping_) {
    if (due_.empty()) {
      wake_.wait(lock);
      continue;
    }
    auto first = due_.begin();
    // A copy: while we wait, the lock is free and cancel() may erase the
    // entry (wait_until reads the time again after waking).
    const Clock::time_point when = first->first.first;
    if (Clock::now() < when) {
      wake_.wait_until(lock, when);
      continue;
    }
    std::function<void()> fn = std::move(first->second);
    when_.erase(first->first.second);
    due_.erase(first);
    lock.unlock();
    fn();
    lock.lock();
  }
}

}  // namespace ddprun
