// Counts the store waits (Get, Wait) the service has parked, per client
// host and in all, so that no client can park waits without end.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <string>

namespace ddprun {

class WaitQuota {
 public:
  WaitQuota(size_t per_client, size_t total) : per_client_(per_client), total_limit_(total) {}

  // Takes a place for host; on refusal, says why (naming the setting).
  std::optional<std::string> acquire(const std::string& host);
  void release(const std::string& host);
  size_t in_use() const;
  // Waits until at most n places are taken (a place is given back when
  // gRPC is done with its call, a moment after the client has its answer).
  bool wait_until_at_most(size_t n, std::chrono::milliseconds timeout) const;

 private:
  const size_t per_client_;
  const size_t total_limit_;
  mutable std::mutex mu_;
  mutable std::condition_variable released_;
  std::map<std::string, size_t> by_host_;
  size_t total_ = 0;
};

}  // namespace ddprun
