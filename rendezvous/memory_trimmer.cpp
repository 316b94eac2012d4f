#include "rendezvous/memory_trimmer.h"

#include <malloc.h>

namespace ddprun {

MemoryTrimmer::MemoryTrimmer(std::chrono::milliseconds every) : every_(every), thread_([this] { run(); }) {}

MemoryTrimmer::~MemoryTrimmer() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  thread_.join();
}

void MemoryTrimmer::run() {
  std::unique_lock lock(mu_);
  // A timer, not a wait for anything: the destructor wakes it to stop.
  while (!stop_cv_.wait_for(lock, every_, [this] { return stop_; })) {
    lock.unlock();
    malloc_trim(0);
    lock.lock();
  }
}

}  // namespace ddprun
