// A communicator that sums as shared memory does, whatever carries the
// bytes. all_reduce of a floating-point tensor gathers every rank's tensor
// (the inner communicator's all_gather) and reduces it here with shared
// memory's own kernel (reduce_into), rank by rank: ((g0 + g1) + g2) + g3 for
// every element, as ShmGroup computes it. Gloo's ring adds in another order,
// which changes the last bits once there are 3 ranks or more.
//
// World uses it where shared memory could not be set up on one node (no
// room in /dev/shm): at the start, and in a heal, when a group that ran on
// shared memory connects again and must go on bit for bit. Integer sums,
// max and min are exact in any order, and broadcast, all_gather and barrier
// move bytes only: they go straight to the inner communicator. The price is
// size() times the bytes of a ring all_reduce, in chunks (kChunkBytes per
// rank) so that memory stays bounded.
#pragma once

#include <memory>

#include "ddp/communicator.h"

namespace ddp {

class RankOrderedReduce final : public Communicator {
 public:
  static constexpr size_t kChunkBytes = size_t{4} << 20;

  explicit RankOrderedReduce(std::unique_ptr<Communicator> inner) : inner_(std::move(inner)) {}

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  Timeout default_timeout() const override { return inner_->default_timeout(); }
  std::string backend() const override { return inner_->backend(); }
  bool overlap_pays() const override { return inner_->overlap_pays(); }

  using Communicator::all_gather;
  using Communicator::all_reduce;
  using Communicator::barrier;
  using Communicator::broadcast;
  void all_reduce(at::Tensor& tensor, ReduceOp op, Timeout timeout) override;
  void broadcast(at::Tensor& tensor, int root, Timeout timeout) override { inner_->broadcast(tensor, root, timeout); }
  at::Tensor all_gather(const at::Tensor& input, Timeout timeout) override { return inner_->all_gather(input, timeout); }
  void barrier(Timeout timeout) override { inner_->barrier(timeout); }
  void abort(const std::string& why) override { inner_->abort(why); }

 private:
  std::unique_ptr<Communicator> inner_;
};

}  // namespace ddp
