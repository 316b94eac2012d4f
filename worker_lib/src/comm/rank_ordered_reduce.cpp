#include "comm/rank_ordered_reduce.h"

#include <algorithm>
#include <string>
#include <vector>

#include "comm/shm_communicator.h"
#include "comm/shm_reduce.h"

namespace ddp {

void RankOrderedReduce::all_reduce(at::Tensor& tensor, ReduceOp op, Timeout timeout) {
  const bool order_matters =
      tensor.defined() && at::isFloatingType(tensor.scalar_type()) && (op == ReduceOp::kSum || op == ReduceOp::kAvg);
  if (!order_matters || size() == 1 || tensor.numel() == 0) {
    inner_->all_reduce(tensor, op, timeout);
    return;
  }
  if (!tensor.device().is_cpu()) {
    throw std::invalid_argument("ddp: all_reduce: the CPU communicator takes CPU tensors, got one on " +
                                tensor.device().str());
  }
  const ShmDtype type = shm_dtype(tensor.scalar_type());
  at::Tensor work = tensor.contiguous().view({-1});
  const int64_t count = work.numel();
  const int64_t per_chunk = std::max<int64_t>(1, static_cast<int64_t>(kChunkBytes / work.element_size()));
  std::vector<const void*> inputs(static_cast<size_t>(size()));
  for (int64_t first = 0; first < count; first += per_chunk) {
    const int64_t n = std::min(per_chunk, count - first);
    at::Tensor chunk = work.narrow(0, first, n);
    // Row r of `all` is rank r's chunk; every rank reduces all of it alike.
    const at::Tensor all = inner_->all_gather(chunk, timeout).contiguous();
    const auto* base = static_cast<const char*>(all.data_ptr());
    const size_t row = static_cast<size_t>(n) * static_cast<size_t>(work.element_size());
    for (int r = 0; r < size(); ++r) inputs[static_cast<size_t>(r)] = base + static_cast<size_t>(r) * row;
    reduce_into(type, op, inputs.data(), size(), chunk.data_ptr(), static_cast<size_t>(n));
  }
  if (!work.is_same(tensor) && work.data_ptr() != tensor.data_ptr()) tensor.copy_(work.view(tensor.sizes()));
}

}  // namespace ddp
