// An in-memory Store: the storage behind the gRPC rendezvous service, and a
// store for tests that run several ranks as threads of one process.
//
// Besides the blocking calls of Store it offers watches, which hold no
// thread: the service parks a Get or Wait as a watch and answers when the
// keys appear (or the watch is ended by a timer or a cancelled call).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "rendezvous/store/store.h"

namespace ddprun {

// How much one store may hold. Keys and values count by their bytes.
struct StoreQuota {
  size_t max_keys = std::numeric_limits<size_t>::max();
  size_t max_bytes = std::numeric_limits<size_t>::max();
  // Named in the error when a limit is hit (e.g. "--rdzv-conf store_max_bytes").
  std::string keys_setting = "the store's key limit";
  std::string bytes_setting = "the store's byte limit";
};

// A finished watch: the watched keys' values in order, or the error that
// ended it (StoreClosed, or whatever end_watch() was given).
struct WatchResult {
  std::vector<std::string> values;
  std::exception_ptr error;
};

class MemoryStore final : public Store {
 public:
  using WatchDone = std::function<void(WatchResult)>;

  explicit MemoryStore(StoreQuota quota = {}) : quota_(std::move(quota)) {}

  // set and add throw StoreQuotaExceeded (and change nothing) when the
  // write would pass the quota; add throws StoreError when it would overflow.
  void set(const std::string& key, std::string_view value) override;
  std::string get(const std::string& key, std::chrono::milliseconds timeout) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;

  // Calls done once, never under the store's lock, when every key exists
  // (maybe before this returns), when the store closes, or when end_watch
  // ends it. Returns a ticket for end_watch.
  uint64_t watch(std::vector<std::string> keys, WatchDone done);
  // Ends a pending watch: calls its done with error, or, with a null error,
  // drops it without calling done. False when it has already finished (or
  // is finishing).
  bool end_watch(uint64_t ticket, std::exception_ptr error);
  size_t num_watches() const;

  // Wakes every waiter and watch with StoreClosed, drops every key and
  // refuses later operations: the service calls it on shutdown and when
  // a job is over.
  void close();

  size_t size() const;
  size_t bytes() const;
  // Every key and its value (a copy, in no order): what a successor of the
  // rendezvous needs (job_state.h).
  std::vector<std::pair<std::string, std::string>> entries() const;
  // Removes every key that starts with prefix (the keys of a round that is over).
  void erase_prefix(const std::string& prefix);

 private:
  struct Watch {
    std::vector<std::string> keys;
    WatchDone done;
  };
  using Fired = std::vector<std::pair<WatchDone, WatchResult>>;

  // Waits until pred() holds (true) or the timeout passes (false); throws
  // StoreError when the store closes. Called with lock held.
  template <typename Pred>
  bool wait_locked(std::unique_lock<std::mutex>& lock, Pred pred,
                   std::chrono::milliseconds timeout);
  void check_open_locked() const;
  // Stores value under key within the quota (throws before changing anything).
  void put_locked(const std::string& key, std::string value);
  // The first of keys not stored, or null when all are.
  const std::string* first_missing_locked(const std::vector<std::string>& keys) const;
  // Moves the watches on key that are now satisfied into fired.
  void fire_watches_locked(const std::string& key, Fired& fired);
  void forget_watch_locked(uint64_t ticket, const Watch& w);
  static void run(Fired& fired);

  const StoreQuota quota_;
  mutable std::mutex mu_;
  std::condition_variable changed_;
  std::unordered_map<std::string, std::string> data_;
  size_t bytes_ = 0;
  std::map<uint64_t, Watch> watches_;
  std::unordered_multimap<std::string, uint64_t> watchers_;  // key → watch tickets
  uint64_t next_ticket_ = 1;
  bool closed_ = false;
};

}  // namespace ddprun
