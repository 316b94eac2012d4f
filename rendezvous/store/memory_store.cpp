#include "rendezvous/store/memory_store.h"

#include <charconv>

namespace ddprun {
namespace {

StoreClosed closed_error() {
  return StoreClosed("store: closed (the rendezvous is shutting down or the job is over)");
}

}  // namespace

void MemoryStore::check_open_locked() const {
  if (closed_) throw closed_error();
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

void MemoryStore::put_locked(const std::string& key, std::string value) {
  auto it = data_.find(key);
  const size_t old_bytes = it == data_.end() ? 0 : key.size() + it->second.size();
  const size_t new_bytes = bytes_ - old_bytes + key.size() + value.size();
  if (it == data_.end() && data_.size() >= quota_.max_keys) {
    throw StoreQuotaExceeded("store: key '" + key.substr(0, 64) + "' would be key number " +
                             std::to_string(data_.size() + 1) + "; at most " +
                             std::to_string(quota_.max_keys) + " (raise " + quota_.keys_setting +
                             ")");
  }
  if (new_bytes > bytes_ && new_bytes > quota_.max_bytes) {
    throw StoreQuotaExceeded("store: writing key '" + key.substr(0, 64) + "' (" +
                             std::to_string(value.size()) + " bytes) would hold " +
                             std::to_string(new_bytes) + " bytes; at most " +
                             std::to_string(quota_.max_bytes) + " (raise " +
                             quota_.bytes_setting + ")");
  }
  bytes_ = new_bytes;
  if (it == data_.end()) {
    data_.emplace(key, std::move(value));
  } else {
    it->second = std::move(value);
  }
}

const std::string* MemoryStore::first_missing_locked(const std::vector<std::string>& keys) const {
  for (const auto& k : keys) {
    if (!data_.count(k)) return &k;
  }
  return nullptr;
}

void MemoryStore::forget_watch_locked(uint64_t ticket, const Watch& w) {
  for (const auto& k : w.keys) {
    auto [lo, hi] = watchers_.equal_range(k);
    for (auto it = lo; it != hi; ++it) {
      if (it->second == ticket) {
        watchers_.erase(it);
        break;
      }
    }
  }
}

void MemoryStore::fire_watches_locked(const std::string& key, Fired& fired) {
  std::vector<uint64_t> ready;
  auto [lo, hi] = watchers_.equal_range(key);
  for (auto it = lo; it != hi; ++it) {
    if (!first_missing_locked(watches_.at(it->second).keys)) ready.push_back(it->second);
  }
  for (uint64_t t : ready) {
    auto node = watches_.extract(t);
    Watch& w = node.mapped();
    forget_watch_locked(t, w);
    WatchResult r;
    for (const auto& k : w.keys) r.values.push_back(data_.at(k));
    fired.emplace_back(std::move(w.done), std::move(r));
  }
}

void MemoryStore::run(Fired& fired) {
  for (auto& [done, result] : fired) done(std::move(result));
}

void MemoryStore::set(const std::string& key, std::string_view value) {
  Fired fired;
  {
    std::lock_guard lock(mu_);
    check_open_locked();
    put_locked(key, std::string(value));
    fire_watches_locked(key, fired);
  }
  changed_.notify_all();
  run(fired);
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
  if (!wait_locked(lock, [&] { return !first_missing_locked(keys); }, timeout)) {
    // The timeout names the first key still missing, which is the useful one.
    throw StoreTimeout(*first_missing_locked(keys), timeout);
  }
}

int64_t MemoryStore::add(const std::string& key, int64_t delta) {
  int64_t value = 0;
  Fired fired;
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
    int64_t sum = 0;
    if (__builtin_add_overflow(value, delta, &sum)) {
      throw StoreError("store: add " + std::to_string(delta) + " to key '" + key + "' holding " +
                       std::to_string(value) + " would overflow a 64-bit integer");
    }
    value = sum;
    put_locked(key, std::to_string(value));
    fire_watches_locked(key, fired);
  }
  changed_.notify_all();
  run(fired);
  return value;
}

uint64_t MemoryStore::watch(std::vector<std::string> keys, WatchDone done) {
  Fired fired;
  uint64_t ticket = 0;
  {
    std::lock_guard lock(mu_);
    ticket = next_ticket_++;
    WatchResult r;
    if (closed_) {
      r.error = std::make_exception_ptr(closed_error());
      fired.emplace_back(std::move(done), std::move(r));
    } else if (!first_missing_locked(keys)) {
      for (const auto& k : keys) r.values.push_back(data_.at(k));
      fired.emplace_back(std::move(done), std::move(r));
    } else {
      for (const auto& k : keys) watchers_.emplace(k, ticket);
      watches_.emplace(ticket, Watch{std::move(keys), std::move(done)});
    }
  }
  run(fired);
  return ticket;
}

bool MemoryStore::end_watch(uint64_t ticket, std::exception_ptr error) {
  WatchDone done;
  {
    std::lock_guard lock(mu_);
    auto it = watches_.find(ticket);
    if (it == watches_.end()) return false;
    forget_watch_locked(ticket, it->second);
    done = std::move(it->second.done);
    watches_.erase(it);
  }
  if (error) done(WatchResult{{}, error});
  return true;
}

size_t MemoryStore::num_watches() const {
  std::lock_guard lock(mu_);
  return watches_.size();
}

void MemoryStore::close() {
  Fired fired;
  {
    std::lock_guard lock(mu_);
    closed_ = true;
    data_.clear();
    bytes_ = 0;
    auto closed = std::make_exception_ptr(closed_error());
    for (auto& [t, w] : watches_) fired.emplace_back(std::move(w.done), WatchResult{{}, closed});
    watches_.clear();
    watchers_.clear();
  }
  changed_.notify_all();
  run(fired);
}

size_t MemoryStore::size() const {
  std::lock_guard lock(mu_);
  return data_.size();
}

size_t MemoryStore::bytes() const {
  std::lock_guard lock(mu_);
  return bytes_;
}

void MemoryStore::erase_prefix(const std::string& prefix) {
  std::lock_guard lock(mu_);
  std::erase_if(data_, [&](const auto& kv) {
    if (kv.first.compare(0, prefix.size(), prefix) != 0) return false;
    bytes_ -= kv.first.size() + kv.second.size();
    return true;
  });
}

std::vector<std::pair<std::string, std::string>> MemoryStore::entries() const {
  std::lock_guard lock(mu_);
  return {data_.begin(), data_.end()};
}

}  // namespace ddprun
