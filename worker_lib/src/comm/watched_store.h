// A view of a store whose waits give up when a condition turns true: a
// rank connecting the communicators of one heal generation must not wait
// for a peer that died meanwhile (its keys never come) until the timeout,
// when the agent has already begun the next generation. get() and wait()
// wait in slices of kSlice and check `superseded` between them; once it
// holds they throw GenerationSuperseded, which the heal takes as "connect
// again in the newer generation" (ddp::Healer, World's constructor).
#pragma once

#include <algorithm>
#include <chrono>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "ddp/collective_error.h"
#include "rendezvous/store/store.h"

namespace ddp {

class GenerationSuperseded : public CollectiveError {
 public:
  using CollectiveError::CollectiveError;
};

class WatchedStore final : public ddprun::Store {
 public:
  static constexpr std::chrono::milliseconds kSlice{100};

  WatchedStore(ddprun::Store& inner, std::function<bool()> superseded)
      : inner_(inner), superseded_(std::move(superseded)) {}

  void set(const std::string& key, std::string_view value) override { inner_.set(key, value); }
  int64_t add(const std::string& key, int64_t delta) override { return inner_.add(key, delta); }

  std::string get(const std::string& key, std::chrono::milliseconds timeout) override {
    std::string value;
    watch(timeout, [&](std::chrono::milliseconds slice) { value = inner_.get(key, slice); });
    return value;
  }
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    watch(timeout, [&](std::chrono::milliseconds slice) { inner_.wait(keys, slice); });
  }

 private:
  // Runs one wait of at most kSlice after another until one succeeds, the
  // condition holds, or the whole timeout has passed (then the last
  // slice's StoreTimeout is thrown).
  template <typename Wait>
  void watch(std::chrono::milliseconds timeout, Wait&& wait_slice) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
      check();
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      try {
        wait_slice(std::clamp(left, std::chrono::milliseconds(1), kSlice));
        return;
      } catch (const ddprun::StoreTimeout&) {
        if (left <= kSlice) throw;
      }
    }
  }
  void check() const {
    if (superseded_()) {
      throw GenerationSuperseded("ddp: a newer heal generation began while connecting (a peer failed meanwhile)");
    }
  }

  ddprun::Store& inner_;
  std::function<bool()> superseded_;
};

}  // namespace ddp
