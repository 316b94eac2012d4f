// Fast optimizer steps for C++ trainers: Adam and AdamW that step every
// parameter in a few multi-tensor (foreach) or fused kernels instead of
// about ten kernels per parameter, and a gradient clip that never waits for
// the device.
//
//   ddp::AdamW opt(groups, torch::optim::AdamWOptions(3e-4), ddp::OptimizerImpl::kAuto);
//   loss.backward();
//   torch::Tensor norm = ddp::clip_grad_norm_(model->parameters(), 1.0);  // no sync
//   opt.step();
//   if (log_now) std::printf("norm %.3f\n", norm.item<double>());    // sync only here
//
// ddp::AdamW *is* a torch::optim::AdamW (ddp::Adam a torch::optim::Adam):
// the same options, the same per-parameter state, so checkpoints, the
// Healer and LibTorch's serialize read and write it unchanged, and a
// checkpoint from one implementation resumes in another.
//
// What each implementation gives, against LibTorch's own step (kPerParameter):
//   - kForeach: the same arithmetic in the same order, element by element, so
//     on CPU the parameters are bitwise equal; on CUDA one kernel per op over
//     many tensors. Every LibTorch (1.13 too).
//   - kFused: one pass over each parameter's memory: ATen's _fused_adam(w)_
//     (LibTorch >= 2.4, CUDA and CPU), or on an older LibTorch worker_lib's
//     own loop for float32 parameters on CPU. Its rounding differs (equal
//     within float tolerance, as PyTorch documents for its fused Adam).
//     Groups it cannot take (another device or dtype) step foreach.
//   - kAuto: kFused.
// amsgrad runs LibTorch's own step (kForeach does not implement it).
#pragma once

#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>

#include <string>
#include <unordered_map>
#include <vector>

namespace ddp {

enum class OptimizerImpl { kAuto, kPerParameter, kForeach, kFused };

// "auto", "plain" (LibTorch's own step), "foreach" or "fused"; throws
// std::invalid_argument naming the value otherwise.
OptimizerImpl parse_optimizer_impl(const std::string& name);
const char* to_string(OptimizerImpl impl);
// Whether kFused has a one-pass kernel for parameters on `device` with this
// LibTorch (any device from 2.4 on; CPU before).
bool fused_adam_available(c10::DeviceType device = c10::DeviceType::CPU);

namespace detail {
// The step shared by Adam and AdamW; `decoupled` is AdamW's weight decay.
class MultiTensorAdam {
 public:
  explicit MultiTensorAdam(OptimizerImpl impl);
  OptimizerImpl impl() const { return impl_; }
  // Steps every group of `opt` (its state created as LibTorch's step does);
  // false when the step must be LibTorch's own (amsgrad, kPerParameter).
  template <class Options, class State>
  bool step(torch::optim::Optimizer& opt, bool decoupled);

 private:
  OptimizerImpl impl_;
  // Fused kernels read the step count from a float tensor on the
  // parameter's device. One per parameter, kept with the count it holds,
  // so a count that changed elsewhere (a checkpoint loaded, a heal) is
  // written again before the next step.
  struct StepTensor {
    torch::Tensor t;
    int64_t count = -1;
  };
  std::unordered_map<const void*, StepTensor> step_tensors_;
};
}  // namespace detail

class AdamW : public torch::optim::AdamW {
 public:
  AdamW(std::vector<torch::optim::OptimizerParamGroup> groups, torch::optim::AdamWOptions defaults = {},
        OptimizerImpl impl = OptimizerImpl::kAuto);
  AdamW(std::vector<torch::Tensor> params, torch::optim::AdamWOptions defaults = {},
        OptimizerImpl impl = OptimizerImpl::kAuto);
  torch::Tensor step(LossClosure closure = nullptr) override;
  // What step() runs: kAuto resolved.
  OptimizerImpl impl() const { return adam_.impl(); }

 private:
  detail::MultiTensorAdam adam_;
};

class Adam : public torch::optim::Adam {
 public:
  Adam(std::vector<torch::optim::OptimizerParamGroup> groups, torch::optim::AdamOptions defaults = {},
       OptimizerImpl impl = OptimizerImpl::kAuto);
  Adam(std::vector<torch::Tensor> params, torch::optim::AdamOptions defaults = {},
       OptimizerImpl impl = OptimizerImpl::kAuto);
  torch::Tensor step(LossClosure closure = nullptr) override;
  OptimizerImpl impl() const { return adam_.impl(); }

 private:
  detail::MultiTensorAdam adam_;
};

// Scales the gradients of `params` so that their joint 2-norm is at most
// max_norm, as torch.nn.utils.clip_grad_norm_ does, and returns that norm
// (before clipping) as a tensor on the gradients' device: nothing waits for
// the device, where LibTorch's clip returns a double and so synchronises
// every step. Per-parameter norms in one multi-tensor kernel; the scale is
// min(1, max_norm / (norm + 1e-6)), applied always (a scale of 1 changes no
// bit). Parameters without a gradient are skipped; none at all gives 0.
torch::Tensor clip_grad_norm_(const std::vector<torch::Tensor>& params, double max_norm);

}  // namespace ddp
