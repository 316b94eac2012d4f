#include "comm/two_level_communicator.h"

#include <stdexcept>
#include <string>

namespace ddp {

TwoLevelCommunicator::TwoLevelCommunicator(std::unique_ptr<Communicator> local, std::unique_ptr<Communicator> leaders,
                                           std::unique_ptr<Communicator> flat)
    : local_(std::move(local)), leaders_(std::move(leaders)), flat_(std::move(flat)) {}

void TwoLevelCommunicator::abort(const std::string& why) {
  local_->abort(why);
  if (leaders_) leaders_->abort(why);
  flat_->abort(why);
}

void TwoLevelCommunicator::all_reduce(at::Tensor& tensor, ReduceOp op, Timeout timeout) {
  if (op == ReduceOp::kAvg && !at::isFloatingType(tensor.scalar_type())) {
    throw std::invalid_argument("ddp: all_reduce avg needs a floating-point tensor, got " +
                                std::string(c10::toString(tensor.scalar_type())));
  }
  if (!tensor.defined() || tensor.numel() == 0) return;
  // An average is the sum over all ranks divided once, at the end.
  const ReduceOp step = op == ReduceOp::kAvg ? ReduceOp::kSum : op;
  at::Tensor work = tensor.contiguous();
  local_->all_reduce(work, step, timeout);                // the node's reduction, on every local rank
  if (leaders_) leaders_->all_reduce(work, step, timeout);  // across nodes, leaders only
  local_->broadcast(work, 0, timeout);                    // the leader's result to its node
  if (op == ReduceOp::kAvg) work.div_(size());
  if (!work.is_same(tensor)) tensor.copy_(work);
}

}  // namespace ddp
