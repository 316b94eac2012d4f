// Clients of the rendezvous service: the agent's join, and the Store that
// workers use, both over one gRPC channel.
#pragma once

#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>

#include "rendezvous/registry.h"
#include "rendezvous/store.h"

namespace grpc {
class Channel;
}

namespace ddprun {

// A failed call to the rendezvous service (unreachable, refused, timed out).
class RendezvousCallError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A channel to "host:port" that ignores http_proxy settings and reconnects
// quickly (a worker may start before its first call can connect).
std::shared_ptr<grpc::Channel> make_rendezvous_channel(const std::string& target);

struct JoinArgs {
  std::string job_id;
  NodeSpec node;
  RoundSettings settings;
  std::chrono::milliseconds timeout{std::chrono::minutes(10)};
};

class RendezvousClient {
 public:
  explicit RendezvousClient(const std::string& target);
  // Blocks until the round closes; throws RendezvousCallError.
  JoinResult join(const JoinArgs& args);
  const std::string& target() const { return target_; }

 private:
  std::string target_;
  std::shared_ptr<grpc::Channel> channel_;
};

// The job's key-value store on the rendezvous service. Thread-safe.
class GrpcStore final : public Store {
 public:
  GrpcStore(const std::string& target, std::string job_id);
  void set(const std::string& key, std::string_view value) override;
  std::string get(const std::string& key, std::chrono::milliseconds timeout) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;

 private:
  struct Stub;
  std::string target_;
  std::string job_id_;
  std::shared_ptr<Stub> stub_;
};

}  // namespace ddprun
