// Collectives on CPU tensors over Gloo's TCP transport. Gloo's pairs are
// connected through a ddprun Store (Gloo's own rendezvous, over our store).
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ddp/communicator.h"
#include "base/heartbeat.h"
#include "rendezvous/store/store.h"

namespace gloo {
class Context;
namespace transport {
class UnboundBuffer;
}
}  // namespace gloo

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
  // fails whatever waits on them as if every peer had closed its end, and
  // wakes the waits Gloo would not (see the .cpp).
  void abort(const std::string& why) override;

 private:
  // Turns Gloo's exceptions into a CollectiveError naming op, rank, the
  // peer that failed or the timeout (see gloo_failure.h).
  template <typename Fn>
  void run(const char* op, Timeout timeout, Fn&& fn);
  template <typename T>
  void all_reduce_as(at::Tensor& t, ReduceOp op, Timeout timeout);
  void learn_peer_endpoints(ddprun::Store& store);
  CollectiveError aborted_error(const char* op, const std::string& what);
  void release_waits();
  class Flight;
  struct BarrierOptions;

  GlooOptions options_;
  std::shared_ptr<gloo::Context> context_;
  std::vector<std::string> peer_endpoints_;  // by rank: the address Gloo names for that peer
  std::atomic<bool> aborted_{false};
  std::mutex flight_mu_;
  std::string abort_why_;  // the first abort's reason (under flight_mu_)
  std::vector<gloo::transport::UnboundBuffer*> in_flight_;  // the running collectives' buffers (under flight_mu_)
  std::condition_variable flight_cv_;  // a collective unlisted its buffers
  std::thread releaser_;               // after an abort, until the collectives in flight end
};

}  // namespace ddp
