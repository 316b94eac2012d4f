#include "rendezvous/server/wait_quota.h"

namespace ddprun {

std::optional<std::string> WaitQuota::acquire(const std::string& host) {
  std::lock_guard lock(mu_);
  size_t& mine = by_host_[host];
  if (mine >= per_client_) {
    if (mine == 0) by_host_.erase(host);
    return "rendezvous: " + host + " already has " + std::to_string(mine) +
           " store waits pending, at most " + std::to_string(per_client_) +
           " (raise --rdzv-conf max_waits_per_client on the node that hosts the rendezvous)";
  }
  if (total_ >= total_limit_) {
    if (mine == 0) by_host_.erase(host);
    return "rendezvous: " + std::to_string(total_) + " store waits pending, at most " +
           std::to_string(total_limit_);
  }
  ++mine;
  ++total_;
  return std::nullopt;
}

void WaitQuota::release(const std::string& host) {
  {
    std::lock_guard lock(mu_);
    auto it = by_host_.find(host);
    if (it == by_host_.end()) return;
    --total_;
    if (--it->second == 0) by_host_.erase(it);
  }
  released_.notify_all();
}

bool WaitQuota::wait_until_at_most(size_t n, std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mu_);
  return released_.wait_for(lock, timeout, [&] { return total_ <= n; });
}

size_t WaitQuota::in_use() const {
  std::lock_guard lock(mu_);
  return total_;
}

}  // namespace ddprun
