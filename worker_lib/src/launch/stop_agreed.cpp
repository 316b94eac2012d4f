#include <ATen/ATen.h>

#include "ddp/communicator.h"
#include "ddp/stop_flag.h"

namespace ddp {

bool stop_agreed(const StopFlag& flag, Communicator& comm) {
  at::Tensor any = at::tensor({flag.requested() ? 1 : 0}, at::kInt);
  comm.all_reduce(any, ReduceOp::kMax);
  return any.item<int>() != 0;
}

}  // namespace ddp
