#include "optim/adam_kernel.h"

#include <cmath>

namespace ddp {

void adam_update_chunk(float* p, const float* g, float* m, float* v, int64_t n, const AdamScalars& s) {
  for (int64_t k = 0; k < n; ++k) {
    const float pk = p[k] * s.decay;
    const float gk = g[k] + s.l2 * pk;
    const float mk = m[k] * s.beta1 + gk * s.one_minus_beta1;
    const float vk = v[k] * s.beta2 + gk * gk * s.one_minus_beta2;
    m[k] = mk;
    v[k] = vk;
    p[k] = pk + s.neg_step_size * (mk / (std::sqrt(vk) / s.sqrt_bias_correction2 + s.eps));
  }
}

}  // namespace ddp
