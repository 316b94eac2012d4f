// An in-memory Store: the storage behind the gRPC rendezvous service, and a
// store for tests that run several ranks as threads of one process.
#pragma once

#include <condition_variable>
#include <mutex>
#include <string>
#include <unordered_map>

#include "rendezvous/store.h"

namespace ddprun {

class MemoryStore final : public Store {
 public:
  void set(const std::string& key, std::string_view value) override;
  std::string get(const std::string& key, std::chrono::milliseconds timeout) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;

  // Wakes every waiter with a StoreError and refuses later operations; the
  // service calls it on shutdown so that no handler stays blocked.
  void close();

  size_t size() const;
  // Removes every key that starts with prefix (the keys of a round that is over).
  void erase_prefix(const std::string& prefix);

 private:
  // Waits until pred() holds (true) or the timeout passes (false); throws
  // StoreError when the store closes. Called with lock held.
  template <typename Pred>
  bool wait_locked(std::unique_lock<std::mutex>& lock, Pred pred,
                   std::chrono::milliseconds timeout);
  void check_open_locked() const;

  mutable std::mutex mu_;
  std::condition_variable changed_;
  std::unordered_map<std::string, std::string> data_;
  bool closed_ = false;
};

}  // namespace ddprun
