// Collectives on CPU tensors between ranks of one node, through shared
// memory (ShmGroup): no sockets, every rank reducing its share of each chunk
// in parallel. World picks it for CPU tensors when every rank of a group is
// on one node (DDPRUN_CPU_COMM=auto, the default), or when told
// (DDPRUN_CPU_COMM=shm).
#pragma once

#include <memory>

#include "comm/shm_group.h"
#include "ddp/communicator.h"

namespace ddp {

// The shared-memory kernel's element type for a tensor's; throws
// std::invalid_argument for a dtype it cannot reduce.
ShmDtype shm_dtype(at::ScalarType t);

class ShmCommunicator final : public Communicator {
 public:
  // Collective over `store` (prefix it per group and round); see ShmGroup.
  ShmCommunicator(ddprun::Store& store, const ShmGroupOptions& options);

  int rank() const override { return group_.rank(); }
  int size() const override { return group_.size(); }
  Timeout default_timeout() const override { return group_.options().timeout; }
  std::string backend() const override { return "shm"; }
  // Only with a core per rank for its compute threads and one more for its
  // collectives.
  bool overlap_pays() const override;

  using Communicator::all_gather;
  using Communicator::all_reduce;
  using Communicator::barrier;
  using Communicator::broadcast;
  void all_reduce(at::Tensor& tensor, ReduceOp op, Timeout timeout) override;
  void broadcast(at::Tensor& tensor, int root, Timeout timeout) override;
  at::Tensor all_gather(const at::Tensor& input, Timeout timeout) override;
  void barrier(Timeout timeout) override;
  void abort(const std::string& why) override { group_.abort(why); }

 private:
  ShmGroup group_;
};

}  // namespace ddp
