#include "comm/shm_communicator.h"

#include <ATen/Parallel.h>

#include <stdexcept>
#include <string>

namespace ddp {
namespace {

void check_cpu(const at::Tensor& t, const char* op) {
  if (!t.defined()) throw std::invalid_argument(std::string("ddp: ") + op + ": undefined tensor");
  if (!t.device().is_cpu()) {
    throw std::invalid_argument(std::string("ddp: ") + op +
                                ": the shared-memory communicator takes CPU tensors, got one on " + t.device().str());
  }
}

}  // namespace

ShmDtype shm_dtype(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return ShmDtype::kFloat32;
    case at::kDouble: return ShmDtype::kFloat64;
    case at::kBFloat16: return ShmDtype::kBFloat16;
    case at::kHalf: return ShmDtype::kFloat16;
    case at::kInt: return ShmDtype::kInt32;
    case at::kLong: return ShmDtype::kInt64;
    case at::kChar: return ShmDtype::kInt8;
    case at::kByte: return ShmDtype::kUInt8;
    default:
      throw std::invalid_argument("ddp: all_reduce does not support dtype " + std::string(c10::toString(t)));
  }
}

ShmCommunicator::ShmCommunicator(ddprun::Store& store, const ShmGroupOptions& options) : group_(store, options) {}

void ShmCommunicator::all_reduce(at::Tensor& tensor, ReduceOp op, Timeout timeout) {
  check_cpu(tensor, "all_reduce");
  if (op == ReduceOp::kAvg && !at::isFloatingType(tensor.scalar_type())) {
    throw std::invalid_argument("ddp: all_reduce avg needs a floating-point tensor, got " +
                                std::string(c10::toString(tensor.scalar_type())));
  }
  const ShmDtype type = shm_dtype(tensor.scalar_type());
  if (tensor.numel() == 0) return;
  at::Tensor work = tensor.contiguous();
  group_.all_reduce(work.data_ptr(), static_cast<size_t>(work.numel()), type, op, timeout);
  if (!work.is_same(tensor)) tensor.copy_(work);
}

void ShmCommunicator::broadcast(at::Tensor& tensor, int root, Timeout timeout) {
  check_cpu(tensor, "broadcast");
  if (root < 0 || root >= size()) {
    throw std::invalid_argument("ddp: broadcast root " + std::to_string(root) + " is not in [0, " +
                                std::to_string(size()) + ")");
  }
  if (tensor.numel() == 0) return;
  at::Tensor work = tensor.contiguous();
  group_.broadcast(work.data_ptr(), work.nbytes(), root, timeout);
  if (!work.is_same(tensor)) tensor.copy_(work);
}

at::Tensor ShmCommunicator::all_gather(const at::Tensor& input, Timeout timeout) {
  check_cpu(input, "all_gather");
  std::vector<int64_t> shape{size()};
  shape.insert(shape.end(), input.sizes().begin(), input.sizes().end());
  at::Tensor out = at::empty(shape, input.options());
  if (input.numel() == 0) return out;
  at::Tensor in = input.contiguous();
  group_.all_gather(in.data_ptr(), in.nbytes(), out.data_ptr(), timeout);
  return out;
}

void ShmCommunicator::barrier(Timeout timeout) { group_.barrier(timeout); }

bool ShmCommunicator::overlap_pays() const {
  return cpus_available() >= size() * (at::get_num_threads() + 1);
}

}  // namespace ddp
