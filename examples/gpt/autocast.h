// bf16 autocast for a forward pass, on CPU or CUDA, across LibTorch 1.13
// and 2.x (2.4 replaced the per-device setters with device-type ones and
// deprecated the old names).
#pragma once

#include <ATen/autocast_mode.h>
#include <c10/core/DeviceType.h>
#include <torch/version.h>

namespace gpt {

// While alive, eligible ops on `device` run in `dtype` (matmuls, linear,
// attention); the rest (softmax, layer norm, losses) stay in fp32, as under
// Python's torch.autocast. Autocast state is per thread: run the backward
// outside the guard, as PyTorch recommends.
class AutocastGuard {
 public:
  AutocastGuard(c10::DeviceType device, at::ScalarType dtype, bool enabled) : device_(device), on_(enabled) {
    if (!on_) return;
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
    was_ = at::autocast::is_autocast_enabled(device_);
    at::autocast::set_autocast_dtype(device_, dtype);
    at::autocast::set_autocast_enabled(device_, true);
#else
    if (device_ == c10::DeviceType::CUDA) {
      was_ = at::autocast::is_enabled();
      at::autocast::set_autocast_gpu_dtype(dtype);
      at::autocast::set_enabled(true);
    } else {
      was_ = at::autocast::is_cpu_enabled();
      at::autocast::set_autocast_cpu_dtype(dtype);
      at::autocast::set_cpu_enabled(true);
    }
#endif
    at::autocast::increment_nesting();
  }
  ~AutocastGuard() {
    if (!on_) return;
    // Leaving the outermost region drops the casts cached for it (weights
    // cast to bf16 once per forward), as torch.autocast's __exit__ does.
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
    at::autocast::set_autocast_enabled(device_, was_);
#else
    if (device_ == c10::DeviceType::CUDA) {
      at::autocast::set_enabled(was_);
    } else {
      at::autocast::set_cpu_enabled(was_);
    }
#endif
  }
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  c10::DeviceType device_;
  bool on_;
  bool was_ = false;
};

}  // namespace gpt
