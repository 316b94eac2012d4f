// The element types the shared-memory collectives reduce, and the reduction
// kernel itself: out[i] = inputs[0][i] op inputs[1][i] op ... No LibTorch.
#pragma once

#include <cstddef>
#include <cstdint>

#include "ddp/reduce_op.h"

namespace ddp {

enum class ShmDtype : uint32_t { kFloat32, kFloat64, kBFloat16, kFloat16, kInt32, kInt64, kInt8, kUInt8 };

size_t element_size(ShmDtype t);
const char* to_string(ShmDtype t);
inline bool is_floating(ShmDtype t) {
  return t == ShmDtype::kFloat32 || t == ShmDtype::kFloat64 || t == ShmDtype::kBFloat16 ||
         t == ShmDtype::kFloat16;
}

// Reduces `count` elements of n inputs into out (which may be one of the
// inputs). Floating types accumulate in float (bf16, fp16: rounded once, at
// the end) or in their own type; integer sums wrap around, as Gloo's do.
// kAvg divides the sum by n (floating types only; the caller checks).
// Processed in blocks that stay in L1, whatever n is.
void reduce_into(ShmDtype type, ReduceOp op, const void* const* inputs, int n, void* out, size_t count);

}  // namespace ddp
