#include "heal/heal_watcher.h"

#include <chrono>
#include <utility>

namespace ddp {

HealWatcher::HealWatcher(std::shared_ptr<Heartbeat> heartbeat, uint32_t connected,
                         std::function<void(uint32_t)> on_newer)
    : heartbeat_(std::move(heartbeat)), connected_(connected), on_newer_(std::move(on_newer)) {
  thread_ = std::thread([this] { loop(); });
}

HealWatcher::~HealWatcher() {
  stop_.store(true, std::memory_order_release);
  // The thread may have checked stop_ just before it went to sleep, and a
  // wake-up before its sleep is lost: wake until it says it is out.
  while (!done_.load(std::memory_order_acquire)) {
    heartbeat_->wake_heal_waiters();
    std::this_thread::yield();
  }
  thread_.join();
}

void HealWatcher::loop() {
  uint32_t seen = connected_;
  while (!stop_.load(std::memory_order_acquire)) {
    // Sleeps until the agent writes the word (or the destructor wakes it).
    const uint32_t now = heartbeat_->wait_heal_generation(seen, std::chrono::hours(24), &stop_, /*heed_no_heal=*/false);
    if (now > seen) on_newer_(now);
    seen = now;
  }
  done_.store(true, std::memory_order_release);
}

}  // namespace ddp
