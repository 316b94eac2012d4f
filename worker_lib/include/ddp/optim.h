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

#include <functional>
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

// What a captured step (ddp/captured_step.h) needs of an optimizer: a
// step that runs on the device alone, so that a CUDA graph can hold it, and
// a host side kept right around replays, which run no host code. Made
// capturable, ddp::AdamW and ddp::Adam read each group's learning rate from
// a tensor on the parameters' device (an LR schedule that sets the options
// goes on working) and count steps there; the state's counts (what
// checkpoints and heals carry) are counted on the host by after_replay().
class CapturableOptimizer {
 public:
  virtual ~CapturableOptimizer() = default;
  virtual void set_capturable(bool on) = 0;
  // Empty when step() can be captured for parameters on `device`; else why
  // not, naming the setting to change.
  virtual std::string why_not_capturable(c10::Device device) = 0;
  // Before a step that runs no host code (a capture, a replay): the
  // groups' learning rates, and step counts changed on the host (a
  // checkpoint loaded), go to the device tensors the step reads.
  virtual void before_replay() = 0;
  // After a replay: each parameter the captured step steps counts one more
  // step in its state, as the device did.
  virtual void after_replay() = 0;
  // After a capture, which ran nothing: the step counts the step's host
  // code counted while it was captured are taken back (the replay counts
  // them, by after_replay()), and the device's counts are written again by
  // the next before_replay().
  virtual void after_capture() = 0;
  // Called by step() after its closure (if any) and before it changes a
  // parameter or its state; empty: nothing. A captured step ends its first
  // graph here, so that a replay changes the parameters only once the
  // step's collectives are known to have completed.
  virtual void set_update_hook(std::function<void()> hook) = 0;
};

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

  // CapturableOptimizer, for AdamW and Adam.
  void set_capturable(bool on) { capturable_ = on; }
  template <class Options>
  std::string why_not_capturable(torch::optim::Optimizer& opt, c10::Device device) const;
  template <class Options, class State>
  void before_replay(torch::optim::Optimizer& opt);
  template <class State>
  void after_replay(torch::optim::Optimizer& opt);
  template <class State>
  void after_capture(torch::optim::Optimizer& opt);
  void set_update_hook(std::function<void()> hook) { update_hook_ = std::move(hook); }
  // step()'s call to the hook, before it changes anything.
  void before_update() const {
    if (update_hook_) update_hook_();
  }

 private:
  // Capturable: the group's learning rate as a tensor on `device` (float64
  // on CPU, as the double the plain step takes; float32 where ATen's CUDA
  // kernel reads it), written when the options' value changed.
  torch::Tensor lr_tensor(size_t group, double lr, c10::Device device);

  OptimizerImpl impl_;
  bool capturable_ = false;
  std::function<void()> update_hook_;
  // Adds `delta` to the state's step count of each parameter the last step
  // stepped; the device's count is then `count` when `device_counted`, else
  // unknown (written again before the next step or replay).
  template <class State>
  void count_stepped(torch::optim::Optimizer& opt, int64_t delta, bool device_counted);
  struct LrTensor {
    torch::Tensor t;
    double value = 0;
  };
  std::vector<LrTensor> lr_tensors_;  // by group
  // The parameters the last step stepped (capturable): what a replay steps.
  std::vector<torch::Tensor> stepped_;
  // Fused kernels read the step count from a float tensor on the
  // parameter's device. One per parameter, kept with the count it holds,
  // so a count that changed elsewhere (a checkpoint loaded, a heal) is
  // written again before the next step.
  struct StepTensor {
    torch::Tensor t;
    int64_t count = -1;  // what t holds; -1: not known
    // Brings t to the state's count where it changed elsewhere.
    void write(int64_t state_count) {
      if (count == state_count) return;
      t.fill_(static_cast<double>(state_count));
      count = state_count;
    }
  };
  std::unordered_map<const void*, StepTensor> step_tensors_;
};
}  // namespace detail

class AdamW : public torch::optim::AdamW, public CapturableOptimizer {
 public:
  AdamW(std::vector<torch::optim::OptimizerParamGroup> groups, torch::optim::AdamWOptions defaults = {},
        OptimizerImpl impl = OptimizerImpl::kAuto);
  AdamW(std::vector<torch::Tensor> params, torch::optim::AdamWOptions defaults = {},
        OptimizerImpl impl = OptimizerImpl::kAuto);
  torch::Tensor step(LossClosure closure = nullptr) override;
  // What step() runs: kAuto resolved.
  OptimizerImpl impl() const { return adam_.impl(); }
  void set_capturable(bool on) override { adam_.set_capturable(on); }
  std::string why_not_capturable(c10::Device device) override;
  void before_replay() override;
  void after_replay() override;
  void after_capture() override;
  void set_update_hook(std::function<void()> hook) override { adam_.set_update_hook(std::move(hook)); }

 private:
  detail::MultiTensorAdam adam_;
};

class Adam : public torch::optim::Adam, public CapturableOptimizer {
 public:
  Adam(std::vector<torch::optim::OptimizerParamGroup> groups, torch::optim::AdamOptions defaults = {},
       OptimizerImpl impl = OptimizerImpl::kAuto);
  Adam(std::vector<torch::Tensor> params, torch::optim::AdamOptions defaults = {},
       OptimizerImpl impl = OptimizerImpl::kAuto);
  torch::Tensor step(LossClosure closure = nullptr) override;
  OptimizerImpl impl() const { return adam_.impl(); }
  void set_capturable(bool on) override { adam_.set_capturable(on); }
  std::string why_not_capturable(c10::Device device) override;
  void before_replay() override;
  void after_replay() override;
  void after_capture() override;
  void set_update_hook(std::function<void()> hook) override { adam_.set_update_hook(std::move(hook)); }

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
