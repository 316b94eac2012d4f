#include "ddp/state_fence.h"

#include <algorithm>

namespace ddp {

StateFence::Id StateFence::add(std::function<void()> wait) {
  std::lock_guard lock(mu_);
  const Id id = next_++;
  waits_.emplace_back(id, std::move(wait));
  return id;
}

void StateFence::remove(Id id) {
  std::lock_guard lock(mu_);
  std::erase_if(waits_, [id](const auto& w) { return w.first == id; });
}

void StateFence::wait() const {
  std::lock_guard lock(mu_);
  for (const auto& [id, w] : waits_) w();
}

}  // namespace ddp
