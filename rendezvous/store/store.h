// A small key-value store with blocking reads, the one interface behind
// every rendezvous of ddprun: the in-memory store (tests, and the storage of
// the gRPC service), the gRPC client store (workers) and a prefixing view
// (one namespace per round).
#pragma once

#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace ddprun {

// Any failure of a store operation; the message names the key and the store.
class StoreError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A wait that ran out of time. Carries the key and the timeout so callers can
// say which setting to raise.
class StoreTimeout : public StoreError {
 public:
  StoreTimeout(std::string key, std::chrono::milliseconds timeout);
  const std::string& key() const { return key_; }
  std::chrono::milliseconds timeout() const { return timeout_; }

 private:
  std::string key_;
  std::chrono::milliseconds timeout_;
};

// The store was shut down while the operation waited or before it began.
class StoreClosed : public StoreError {
 public:
  using StoreError::StoreError;
};

// A write would take the store past one of its limits; the message names
// the limit, the values and the setting that raises it.
class StoreQuotaExceeded : public StoreError {
 public:
  using StoreError::StoreError;
};

class Store {
 public:
  virtual ~Store() = default;

  // Stores value under key, replacing any earlier value, and wakes waiters.
  virtual void set(const std::string& key, std::string_view value) = 0;

  // Waits up to timeout for key to exist, then returns its value.
  // Throws StoreTimeout when the key does not appear in time.
  virtual std::string get(const std::string& key, std::chrono::milliseconds timeout) = 0;

  // Waits up to timeout until every key exists.
  virtual void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;

  // Adds delta to the decimal integer stored at key (absent counts as 0)
  // and returns the new value.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
};

// Puts every key of an underlying store under "<prefix>/". The underlying
// store must outlive the view.
class PrefixStore final : public Store {
 public:
  PrefixStore(std::string prefix, Store& inner);
  void set(const std::string& key, std::string_view value) override;
  std::string get(const std::string& key, std::chrono::milliseconds timeout) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;

 private:
  std::string full(const std::string& key) const { return prefix_ + "/" + key; }
  std::string prefix_;
  Store& inner_;
};

}  // namespace ddprun
