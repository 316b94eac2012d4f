// One Adam(W) update over a chunk of float32 memory, for CPUs whose
// LibTorch has no fused Adam (< 2.4). No LibTorch here: the file compiles
// at -O3 so that the loop vectorises (adam_step.cpp calls it per chunk).
#pragma once

#include <cstdint>

namespace ddp {

// Per parameter, per step: what adam_step.cpp computes from the options
// and the parameter's step count.
struct AdamScalars {
  float decay;     // AdamW: 1 - lr * weight_decay; Adam: 1
  float l2;        // Adam: weight_decay (added to the gradient); AdamW: 0
  float beta1, one_minus_beta1, beta2, one_minus_beta2;
  float sqrt_bias_correction2, eps;
  float neg_step_size;  // -(lr / bias_correction1)
};

// For k in [0, n): p *= decay; g' = g + l2 * p;
//   m = m * beta1 + g' * (1 - beta1); v = v * beta2 + g' * g' * (1 - beta2);
//   p += neg_step_size * m / (sqrt(v) / sqrt_bias_correction2 + eps)
void adam_update_chunk(float* p, const float* g, float* m, float* v, int64_t n, const AdamScalars& s);

}  // namespace ddp
