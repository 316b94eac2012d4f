#include "rendezvous/server/periodic_task.h"

namespace ddprun {

PeriodicTask::PeriodicTask(std::chrono::milliseconds every, std::function<void()> run)
    : every_(every), run_(std::move(run)), thread_([this] { loop(); }) {}

PeriodicTask::~PeriodicTask() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  thread_.join();
}

void PeriodicTask::loop() {
  std::unique_lock lock(mu_);
  while (!stop_cv_.wait_for(lock, every_, [this] { return stop_; })) {
    lock.unlock();
    run_();
    lock.lock();
  }
}

}  // namespace ddprun
