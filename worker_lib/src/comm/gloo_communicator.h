// Collectives on CPU tensors over Gloo's TCP transport. Gloo's pairs are
// connected through a ddprun Store (Gloo's own rendezvous, over our store).
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ddp/communicator.h"
#include "base/heartbeat.h"
#include "rendezvous/store/store.h"

namespace gloo {
class Context;
}

namespace ddp {

struct GlooOptions {
  int rank = 0;
  int size = 1;
  // Address the transport binds to (the node's address, not a hostname that
  // may resolve to 127.0.1.1).
  std::string local_addr = "127.0.0.1";
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
  // Beaten before and after every collective (may be null).
  std::shared_ptr<Heartbeat> heartbeat;
};

class GlooCommunicator final : public Communicator {
 public:
  // Connects to every other rank; all ranks must call it with the same store
  // (prefix it per group and round). Throws CollectiveError.
  GlooCommunicator(ddprun::Store& store, const GlooOptions& options);
  ~GlooCommunicator() override;

  int rank() const override { return options_.rank; }
  int size() const override { return options_.size; }
  Timeout default_timeout() const override { return options_.timeout; }
  std::string backend() const override { return "gloo"; }

  using Communicator::all_gather;
  using Communicator::all_reduce;
  using Communicator::barrier;
  using Communicator::broadcast;
  void all_reduce(at::Tensor& tensor, ReduceOp op, Timeout timeout) override;
  void broadcast(at::Tensor& tensor, int root, Timeout timeout) override;
  at::Tensor all_gather(const at::Tensor& input, Timeout timeout) override;
  void barrier(Timeout timeout) override;
  // Gloo has no cancel: this shuts the pairs' sockets down for reading, so Gloo
  // fails whatever waits on them as if every peer had closed its end.
  void abort(const std::string& why) override;

 private:
  // Turns Gloo's exceptions into a CollectiveError naming op, rank, the
  // peer that failed or the timeout (see gloo_failure.h).
  template <typename Fn>
  void run(const char* op, Timeout timeout, Fn&& fn);
  void learn_peer_endpoints(ddprun::Store& store);

  GlooOptions options_;
  std::shared_ptr<gloo::Context> context_;
  std::vector<std::string> peer_endpoints_;  // by rank: the address Gloo names for that peer
  std::atomic<bool> aborted_{false};
  std::mutex abort_mu_;
  std::string abort_why_;  // the first abort's reason (under abort_mu_)
};

}  // namespace ddp
