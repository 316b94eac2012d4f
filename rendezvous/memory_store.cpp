#include "rendezvous/memory_store.h"

#include <charconv>

namespace ddprun {

void MemoryStore::check_open_locked() const {
  if (closed_) throw StoreClosed("store: closed (the rendezvous is shutting down)");
}

template <typename Pred>
bool MemoryStore::wait_locked(std::unique_lock<std::mutex>& lock, Pred pred,
                              std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    check_open_locked();
    if (pred()) return true;
    if (changed_.wait_until(lock, deadline) == std::cv_status::timeout) {
      check_open_locked();
      return pred();
    }
  }
}

void MemoryStore::set(const std::string& key, std::string_view value) {
  {
    std::lock_guard lock(mu_);
    check_open_locked();
    data_[key] = std::string(value);
  }
  changed_.notify_all();
}

std::string MemoryStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  if (!wait_locked(lock, [&] { return data_.count(key) > 0; }, timeout)) {
    throw StoreTimeout(key, timeout);
  }
  return data_.at(key);
}

void MemoryStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  // The timeout names the first key still missing, which is the useful one.
  std::string missing;
  auto all_present = [&] {
    for (const auto& k : keys) {
      if (!data_.count(k)) {
        missing = k;
        return false;
      }
    }
    return true;
  };
  if (!wait_locked(lock, all_present, timeout)) throw StoreTimeout(missing, timeout);
}

int64_t MemoryStore::add(const std::string& key, int64_t delta) {
  int64_t value = 0;
  {
    std::lock_guard lock(mu_);
    check_open_locked();
    auto it = data_.find(key);
    if (it != data_.end()) {
      const std::string& s = it->second;
      auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
      if (ec != std::errc() || ptr != s.data() + s.size()) {
        throw StoreError("store: add on key '" + key + "' whose value is not an integer");
      }
    }
    value += delta;
    data_[key] = std::to_string(value);
  }
  changed_.notify_all();
  return value;
}

void MemoryStore::close() {
  {
    std::lock_guard lock(mu_);
    closed_ = true;
  }
  changed_.notify_all();
}

size_t MemoryStore::size() const {
  std::lock_guard lock(mu_);
  return data_.size();
}

void MemoryStore::erase_prefix(const std::string& prefix) {
  std::lock_guard lock(mu_);
  std::erase_if(data_, [&](const auto& kv) { return kv.first.compare(0, prefix.size(), prefix) == 0; });
}

}  // namespace ddprun
