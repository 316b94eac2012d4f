// Compiled with -O3 (worker_lib/CMakeLists.txt): the block loops below must
// vectorise, and GCC's -O2 cost model leaves loops with a remainder scalar.
#include "comm/shm_reduce.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <type_traits>

namespace ddp {
namespace {

// bf16 is the upper half of a float: widening is a shift, narrowing rounds
// to nearest even (as c10::BFloat16 does), NaN stays NaN.
struct Bf16 {
  uint16_t bits;
};
inline float widen(Bf16 v) {
  const uint32_t b = static_cast<uint32_t>(v.bits) << 16;
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
inline Bf16 narrow_bf16(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  if ((b & 0x7fffffffu) > 0x7f800000u) return {0x7fc0};  // NaN
  b += 0x7fffu + ((b >> 16) & 1u);
  return {static_cast<uint16_t>(b >> 16)};
}

// IEEE half: _Float16 (GCC 12, clang 15+); clang before 15 has it on x86
// only as the storage type __fp16, which converts to and from float alike.
#if defined(__clang__) && __clang_major__ < 15
using Half = __fp16;
#else
using Half = _Float16;
#endif
struct Fp16 {
  Half v;
};
inline float widen(Fp16 v) { return static_cast<float>(v.v); }

// How a type is held while reducing, and turned back.
template <typename T>
struct Acc {
  using type = T;
  static T in(T v) { return v; }
  static T out(T v) { return v; }
};
template <>
struct Acc<Bf16> {
  using type = float;
  static float in(Bf16 v) { return widen(v); }
  static Bf16 out(float v) { return narrow_bf16(v); }
};
template <>
struct Acc<Fp16> {
  using type = float;
  static float in(Fp16 v) { return widen(v); }
  static Fp16 out(float v) { return {static_cast<Half>(v)}; }
};

// Sums of integers wrap (unsigned arithmetic: no undefined overflow).
template <typename A>
inline A add(A a, A b) {
  if constexpr (std::is_integral_v<A>) {
    using U = std::make_unsigned_t<A>;
    return static_cast<A>(static_cast<U>(a) + static_cast<U>(b));
  } else {
    return a + b;
  }
}

template <typename T, ReduceOp op>
void reduce_typed(const void* const* inputs, int n, void* out_ptr, size_t count) {
  using A = typename Acc<T>::type;
  constexpr size_t kBlock = 2048;  // 8 KiB of float accumulators: stays in L1
  A acc[kBlock];
  T* out = static_cast<T*>(out_ptr);
  for (size_t base = 0; base < count; base += kBlock) {
    const size_t m = std::min(kBlock, count - base);
    const T* first = static_cast<const T*>(inputs[0]) + base;
    for (size_t j = 0; j < m; ++j) acc[j] = Acc<T>::in(first[j]);
    for (int k = 1; k < n; ++k) {
      const T* in = static_cast<const T*>(inputs[k]) + base;
      for (size_t j = 0; j < m; ++j) {
        const A v = Acc<T>::in(in[j]);
        if constexpr (op == ReduceOp::kSum || op == ReduceOp::kAvg) {
          acc[j] = add(acc[j], v);
        } else if constexpr (op == ReduceOp::kMax) {
          acc[j] = acc[j] < v ? v : acc[j];
        } else {
          acc[j] = v < acc[j] ? v : acc[j];
        }
      }
    }
    if constexpr (op == ReduceOp::kAvg && !std::is_integral_v<A>) {
      const A d = static_cast<A>(n);
      for (size_t j = 0; j < m; ++j) acc[j] = acc[j] / d;
    }
    for (size_t j = 0; j < m; ++j) out[base + j] = Acc<T>::out(acc[j]);
  }
}

template <typename T>
void reduce_op(ReduceOp op, const void* const* inputs, int n, void* out, size_t count) {
  switch (op) {
    case ReduceOp::kSum: return reduce_typed<T, ReduceOp::kSum>(inputs, n, out, count);
    case ReduceOp::kAvg:
      if constexpr (std::is_integral_v<T>) {
        throw std::invalid_argument("ddp: avg of integers");
      } else {
        return reduce_typed<T, ReduceOp::kAvg>(inputs, n, out, count);
      }
    case ReduceOp::kMax: return reduce_typed<T, ReduceOp::kMax>(inputs, n, out, count);
    case ReduceOp::kMin: return reduce_typed<T, ReduceOp::kMin>(inputs, n, out, count);
  }
}

}  // namespace

size_t element_size(ShmDtype t) {
  switch (t) {
    case ShmDtype::kFloat64:
    case ShmDtype::kInt64: return 8;
    case ShmDtype::kFloat32:
    case ShmDtype::kInt32: return 4;
    case ShmDtype::kBFloat16:
    case ShmDtype::kFloat16: return 2;
    case ShmDtype::kInt8:
    case ShmDtype::kUInt8: return 1;
  }
  return 1;
}

const char* to_string(ShmDtype t) {
  switch (t) {
    case ShmDtype::kFloat32: return "float32";
    case ShmDtype::kFloat64: return "float64";
    case ShmDtype::kBFloat16: return "bfloat16";
    case ShmDtype::kFloat16: return "float16";
    case ShmDtype::kInt32: return "int32";
    case ShmDtype::kInt64: return "int64";
    case ShmDtype::kInt8: return "int8";
    case ShmDtype::kUInt8: return "uint8";
  }
  return "?";
}

void reduce_into(ShmDtype type, ReduceOp op, const void* const* inputs, int n, void* out, size_t count) {
  if (n <= 0 || count == 0) return;
  switch (type) {
    case ShmDtype::kFloat32: return reduce_op<float>(op, inputs, n, out, count);
    case ShmDtype::kFloat64: return reduce_op<double>(op, inputs, n, out, count);
    case ShmDtype::kBFloat16: return reduce_op<Bf16>(op, inputs, n, out, count);
    case ShmDtype::kFloat16: return reduce_op<Fp16>(op, inputs, n, out, count);
    case ShmDtype::kInt32: return reduce_op<int32_t>(op, inputs, n, out, count);
    case ShmDtype::kInt64: return reduce_op<int64_t>(op, inputs, n, out, count);
    case ShmDtype::kInt8: return reduce_op<int8_t>(op, inputs, n, out, count);
    case ShmDtype::kUInt8: return reduce_op<uint8_t>(op, inputs, n, out, count);
  }
}

}  // namespace ddp
