#include "ddp/replicas.h"

#include <algorithm>

namespace ddp {

void ReplicaLedger::agreed(int64_t step) {
  std::lock_guard lock(mu_);
  agreed_step_ = std::max(agreed_step_, step);
  ++agreements_;
}

uint64_t ReplicaLedger::agreements() const {
  std::lock_guard lock(mu_);
  return agreements_;
}

void ReplicaLedger::set_compared_by_healer(bool yes) {
  std::lock_guard lock(mu_);
  by_healer_ = yes;
}

bool ReplicaLedger::compared_by_healer() const {
  std::lock_guard lock(mu_);
  return by_healer_;
}

int64_t ReplicaLedger::agreed_step() const {
  std::lock_guard lock(mu_);
  return agreed_step_;
}

void ReplicaLedger::found_apart(int64_t step, const std::vector<int>& ranks) {
  std::vector<Listener> listeners;
  int64_t agreed;
  {
    std::lock_guard lock(mu_);
    agreed = agreed_step_;
    for (const auto& [id, l] : listeners_) listeners.push_back(l);
  }
  for (const auto& l : listeners) l(agreed, step, ranks);
}

ReplicaLedger::Id ReplicaLedger::listen(Listener listener) {
  std::lock_guard lock(mu_);
  const Id id = next_++;
  listeners_.emplace_back(id, std::move(listener));
  return id;
}

void ReplicaLedger::forget(Id id) {
  std::lock_guard lock(mu_);
  std::erase_if(listeners_, [id](const auto& l) { return l.first == id; });
}

}  // namespace ddp
