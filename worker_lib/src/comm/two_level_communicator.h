// CPU collectives of a group spread over several nodes, each with several
// of its ranks: shared memory inside every node, Gloo only between one
// leader per node. An all_reduce reduces inside the node (shared memory),
// then across nodes between the leaders (Gloo), then the leader's result
// goes back to its node (shared memory), so every byte crosses the network
// once per node instead of once per rank. Broadcast, all_gather and
// barrier, which DDP's steps do not depend on, use a flat Gloo
// communicator over the whole group.
#pragma once

#include <memory>

#include "ddp/communicator.h"

namespace ddp {

class TwoLevelCommunicator final : public Communicator {
 public:
  // local: this node's members, its rank 0 being the node's leader;
  // leaders: the leaders of every node (null on ranks that lead none);
  // flat: every member. rank and size are in the whole group.
  TwoLevelCommunicator(std::unique_ptr<Communicator> local, std::unique_ptr<Communicator> leaders,
                       std::unique_ptr<Communicator> flat);

  int rank() const override { return flat_->rank(); }
  int size() const override { return flat_->size(); }
  Timeout default_timeout() const override { return flat_->default_timeout(); }
  std::string backend() const override { return "shm+gloo"; }

  using Communicator::all_gather;
  using Communicator::all_reduce;
  using Communicator::barrier;
  using Communicator::broadcast;
  void all_reduce(at::Tensor& tensor, ReduceOp op, Timeout timeout) override;
  void broadcast(at::Tensor& tensor, int root, Timeout timeout) override { flat_->broadcast(tensor, root, timeout); }
  at::Tensor all_gather(const at::Tensor& input, Timeout timeout) override { return flat_->all_gather(input, timeout); }
  void barrier(Timeout timeout) override { flat_->barrier(timeout); }
  void abort(const std::string& why) override;

 private:
  std::unique_ptr<Communicator> local_;
  std::unique_ptr<Communicator> leaders_;
  std::unique_ptr<Communicator> flat_;
};

}  // namespace ddp
