// Adam and AdamW over many tensors at once (ddp/optim.h).
//
// LibTorch's step, per parameter p with gradient g (1.13 and 2.x alike):
//   AdamW: p *= 1 - lr * wd          Adam: g = g + wd * p
//   step += 1; bc1 = 1 - beta1^step; bc2 = 1 - beta2^step
//   m = m * beta1 + g * (1 - beta1)
//   v = v * beta2 + g * g * (1 - beta2)
//   p += -(lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps)
// The foreach step below makes the same calls in the same order, one
// multi-tensor op for all the parameters of a group; per-parameter numbers
// (the bias corrections, which depend on each parameter's own step count)
// go as scalar lists. The fused step hands the whole update to ATen's
// _fused_adam(w)_, which reads each step count from a device tensor; where
// ATen has none (LibTorch < 2.4), float32 parameters on CPU take one pass
// of our own loop per parameter (cpu_fused_step), others the foreach step.
#include <torch/torch.h>
#include <torch/version.h>

#include <cmath>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <type_traits>
#include <utility>

#include "ddp/optim.h"
#include "optim/adam_kernel.h"

namespace ddp {

namespace {

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
#define DDP_HAVE_FUSED_ADAM 1
#else
#define DDP_HAVE_FUSED_ADAM 0
#endif

// The key LibTorch's optimizers file a parameter's state under: the
// TensorImpl's address (2.x), or that address printed (1.13).
template <class StateMap>
typename StateMap::key_type state_key(StateMap&, const torch::Tensor& p) {
  using Key = typename StateMap::key_type;
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream os;  // what 1.13's c10::guts::to_string writes
    os << p.unsafeGetTensorImpl();
    return os.str();
  } else {
    return p.unsafeGetTensorImpl();
  }
}

// The parameters of one group that have a gradient, with their state.
template <class State>
struct GroupTensors {
  std::vector<torch::Tensor> params, grads, exp_avgs, exp_avg_sqs;
  std::vector<State*> states;
};

template <class State>
GroupTensors<State> gather(torch::optim::Optimizer& opt, torch::optim::OptimizerParamGroup& group) {
  GroupTensors<State> g;
  auto& state = opt.state();
  for (auto& p : group.params()) {
    if (!p.grad().defined()) continue;
    if (p.grad().is_sparse()) {
      throw std::invalid_argument("ddp::Adam(W): sparse gradients are not supported; use SparseAdam");
    }
    auto key = state_key(state, p);
    auto it = state.find(key);
    if (it == state.end()) {  // as LibTorch's step: zero moments, step 0
      auto s = std::make_unique<State>();
      s->step(0);
      s->exp_avg(torch::zeros_like(p, torch::MemoryFormat::Preserve));
      s->exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
      it = state.emplace(key, std::move(s)).first;
    }
    auto* s = static_cast<State*>(it->second.get());
    g.params.push_back(p);
    g.grads.push_back(p.grad());
    g.exp_avgs.push_back(s->exp_avg());
    g.exp_avg_sqs.push_back(s->exp_avg_sq());
    g.states.push_back(s);
  }
  return g;
}

// Counts one more step in a parameter's state and returns that step's bias
// corrections, 1 - beta1^step and 1 - beta2^step (as LibTorch's step does).
template <class State>
std::pair<double, double> count_step(State* s, double beta1, double beta2) {
  s->step(s->step() + 1);
  const auto step = static_cast<double>(s->step());
  return {1 - std::pow(beta1, step), 1 - std::pow(beta2, step)};
}

// Fused kernels take one device and one floating type for every list.
template <class State>
bool fusable(const GroupTensors<State>& g) {
  for (size_t i = 0; i < g.params.size(); ++i) {
    const auto& p = g.params[i];
    if (p.device() != g.params[0].device() || p.scalar_type() != g.params[0].scalar_type() ||
        !at::isFloatingType(p.scalar_type()) || g.grads[i].scalar_type() != p.scalar_type() ||
        !p.is_contiguous() || !g.grads[i].is_contiguous()) {
      return false;
    }
  }
  return true;
}

// One pass over each parameter's memory, in parallel chunks
// (adam_kernel.h). Float32, contiguous, on CPU only (cpu_fusable).
template <class State>
bool cpu_fusable(const GroupTensors<State>& g) {
  for (size_t i = 0; i < g.params.size(); ++i) {
    for (const torch::Tensor* t : {&g.params[i], &g.grads[i], &g.exp_avgs[i], &g.exp_avg_sqs[i]}) {
      if (!t->device().is_cpu() || t->scalar_type() != torch::kFloat || !t->is_contiguous()) return false;
    }
  }
  return true;
}

template <class State>
void cpu_fused_step(GroupTensors<State>& g, double lr, double beta1, double beta2, double eps, double wd,
                    bool decoupled) {
  for (size_t i = 0; i < g.params.size(); ++i) {
    const auto [bc1, bc2] = count_step(g.states[i], beta1, beta2);
    AdamScalars k;
    k.decay = decoupled ? static_cast<float>(1 - lr * wd) : 1.0f;
    k.l2 = decoupled ? 0.0f : static_cast<float>(wd);
    k.beta1 = static_cast<float>(beta1);
    k.one_minus_beta1 = static_cast<float>(1 - beta1);
    k.beta2 = static_cast<float>(beta2);
    k.one_minus_beta2 = static_cast<float>(1 - beta2);
    k.sqrt_bias_correction2 = static_cast<float>(std::sqrt(bc2));
    k.eps = static_cast<float>(eps);
    k.neg_step_size = static_cast<float>(-(lr / bc1));
    float* p = g.params[i].template data_ptr<float>();
    const float* gr = g.grads[i].template data_ptr<float>();
    float* m = g.exp_avgs[i].template data_ptr<float>();
    float* v = g.exp_avg_sqs[i].template data_ptr<float>();
    at::parallel_for(0, g.params[i].numel(), 1 << 15, [&](int64_t lo, int64_t hi) {
      adam_update_chunk(p + lo, gr + lo, m + lo, v + lo, hi - lo, k);
    });
  }
}

template <class State>
void foreach_step(GroupTensors<State>& g, double lr, double beta1, double beta2, double eps, double wd,
                  bool decoupled) {
  std::vector<torch::Tensor> grads = g.grads;
  if (wd != 0) {
    if (decoupled) {
      at::_foreach_mul_(g.params, 1 - lr * wd);
    } else {
      grads = at::_foreach_add(g.grads, g.params, wd);
    }
  }
  std::vector<at::Scalar> sqrt_bc2, neg_step_size;
  for (State* s : g.states) {
    const auto [bc1, bc2] = count_step(s, beta1, beta2);
    sqrt_bc2.emplace_back(std::sqrt(bc2));
    neg_step_size.emplace_back(-(lr / bc1));
  }
  at::_foreach_mul_(g.exp_avgs, beta1);
  at::_foreach_add_(g.exp_avgs, grads, 1 - beta1);
  at::_foreach_mul_(g.exp_avg_sqs, beta2);
  at::_foreach_addcmul_(g.exp_avg_sqs, grads, grads, 1 - beta2);
  std::vector<torch::Tensor> denom = at::_foreach_sqrt(g.exp_avg_sqs);
  at::_foreach_div_(denom, sqrt_bc2);
  at::_foreach_add_(denom, eps);
  at::_foreach_addcdiv_(g.params, g.exp_avgs, denom, neg_step_size);
}

}  // namespace

OptimizerImpl parse_optimizer_impl(const std::string& name) {
  if (name == "auto") return OptimizerImpl::kAuto;
  if (name == "plain") return OptimizerImpl::kPerParameter;
  if (name == "foreach") return OptimizerImpl::kForeach;
  if (name == "fused") return OptimizerImpl::kFused;
  throw std::invalid_argument("optimizer implementation '" + name + "': expected auto, plain, foreach or fused");
}

const char* to_string(OptimizerImpl impl) {
  switch (impl) {
    case OptimizerImpl::kAuto: return "auto";
    case OptimizerImpl::kPerParameter: return "plain";
    case OptimizerImpl::kForeach: return "foreach";
    case OptimizerImpl::kFused: return "fused";
  }
  return "?";
}

bool fused_adam_available(c10::DeviceType device) { return DDP_HAVE_FUSED_ADAM || device == c10::DeviceType::CPU; }

namespace detail {

MultiTensorAdam::MultiTensorAdam(OptimizerImpl impl) : impl_(impl) {
  if (impl_ == OptimizerImpl::kAuto) impl_ = OptimizerImpl::kFused;
}

template <class Options, class State>
bool MultiTensorAdam::step(torch::optim::Optimizer& opt, bool decoupled) {
  if (impl_ == OptimizerImpl::kPerParameter) return false;
  for (auto& group : opt.param_groups()) {
    if (static_cast<Options&>(group.options()).amsgrad()) return false;
  }
  torch::NoGradGuard no_grad;
  if (capturable_) stepped_.clear();
  for (size_t gi = 0; gi < opt.param_groups().size(); ++gi) {
    auto& group = opt.param_groups()[gi];
    auto& o = static_cast<Options&>(group.options());
    GroupTensors<State> g = gather<State>(opt, group);
    if (g.params.empty()) continue;
    if (capturable_) stepped_.insert(stepped_.end(), g.params.begin(), g.params.end());
    const auto [beta1, beta2] = o.betas();
#if DDP_HAVE_FUSED_ADAM
    {
      if (impl_ == OptimizerImpl::kFused && fusable(g)) {
        // Step counts: the device tensors are brought to the state's count
        // where it changed elsewhere, then counted up on the device and in
        // the state alike (the state's count is what checkpoints keep).
        std::vector<torch::Tensor> steps;
        steps.reserve(g.states.size());
        for (size_t i = 0; i < g.states.size(); ++i) {
          StepTensor& st = step_tensors_[g.params[i].unsafeGetTensorImpl()];
          if (!st.t.defined() || st.t.device() != g.params[i].device()) {
            st.t = torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat).device(g.params[i].device()));
            st.count = 0;
          }
          st.write(g.states[i]->step());
          g.states[i]->step(g.states[i]->step() + 1);
          st.count = g.states[i]->step();
          steps.push_back(st.t);
        }
        at::_foreach_add_(steps, 1);
        const std::vector<torch::Tensor> no_max;
        // lr: a double, or (capturable) a tensor on the device, so that a
        // replay reads what before_replay() wrote there, not the value of
        // the capture. (The betas by value: clang 14 captures no
        // structured binding.)
        auto fused = [&, b1 = beta1, b2 = beta2](const auto& lr) {
          if (decoupled) {
            at::_fused_adamw_(g.params, g.grads, g.exp_avgs, g.exp_avg_sqs, no_max, steps, lr, b1, b2,
                              o.weight_decay(), o.eps(), /*amsgrad=*/false, /*maximize=*/false);
          } else {
            at::_fused_adam_(g.params, g.grads, g.exp_avgs, g.exp_avg_sqs, no_max, steps, lr, b1, b2,
                             o.weight_decay(), o.eps(), /*amsgrad=*/false, /*maximize=*/false);
          }
        };
        if (capturable_) {
          fused(lr_tensor(gi, o.lr(), g.params[0].device()));
        } else {
          fused(o.lr());
        }
        continue;
      }
    }
#else
    if (impl_ == OptimizerImpl::kFused && cpu_fusable(g)) {
      cpu_fused_step(g, o.lr(), beta1, beta2, o.eps(), o.weight_decay(), decoupled);
      continue;
    }
#endif
    foreach_step(g, o.lr(), beta1, beta2, o.eps(), o.weight_decay(), decoupled);
  }
  return true;
}

torch::Tensor MultiTensorAdam::lr_tensor(size_t group, double lr, c10::Device device) {
  if (lr_tensors_.size() <= group) lr_tensors_.resize(group + 1);
  LrTensor& l = lr_tensors_[group];
  if (!l.t.defined() || l.t.device() != device) {
    const auto dtype = device.is_cpu() ? torch::kDouble : torch::kFloat;
    l.t = torch::full({}, lr, torch::TensorOptions().dtype(dtype).device(device));
    l.value = lr;
  } else if (l.value != lr) {
    l.t.fill_(lr);
    l.value = lr;
  }
  return l.t;
}

template <class Options>
std::string MultiTensorAdam::why_not_capturable(torch::optim::Optimizer& opt, c10::Device device) const {
  if (impl_ == OptimizerImpl::kPerParameter) {
    return "the optimizer runs LibTorch's own step (OptimizerImpl::kPerParameter, \"plain\"), which counts steps "
           "on the host: make it with kFused or kAuto";
  }
  if (impl_ == OptimizerImpl::kForeach) {
    return "the foreach step computes its bias corrections on the host: make the optimizer with kFused or kAuto";
  }
  if (!DDP_HAVE_FUSED_ADAM) {
    return std::string("this LibTorch (") + TORCH_VERSION + ") has no fused Adam kernel for " + device.str() +
           " (LibTorch >= 2.4)";
  }
  for (size_t gi = 0; gi < opt.param_groups().size(); ++gi) {
    auto& group = opt.param_groups()[gi];
    if (static_cast<Options&>(group.options()).amsgrad()) {
      return "parameter group " + std::to_string(gi) + " has amsgrad on, which runs LibTorch's own step";
    }
    for (const auto& p : group.params()) {
      if (p.device() != device || p.scalar_type() != group.params()[0].scalar_type() ||
          !at::isFloatingType(p.scalar_type()) || !p.is_contiguous()) {
        return "parameter group " + std::to_string(gi) + " mixes devices or dtypes (or holds a non-contiguous " +
               "tensor): the fused step, the only one a graph can hold, takes one device and one floating dtype " +
               "per group, on " + device.str();
      }
    }
  }
  return "";
}

template <class Options, class State>
void MultiTensorAdam::before_replay(torch::optim::Optimizer& opt) {
  auto& state = opt.state();
  for (size_t gi = 0; gi < opt.param_groups().size(); ++gi) {
    auto& group = opt.param_groups()[gi];
    std::optional<c10::Device> stepped_on;  // where this group's fused step ran, if it did
    for (const auto& p : group.params()) {
      auto st = step_tensors_.find(p.unsafeGetTensorImpl());
      auto it = state.find(state_key(state, p));
      if (st == step_tensors_.end() || !st->second.t.defined() || it == state.end()) continue;
      st->second.write(static_cast<State*>(it->second.get())->step());
      stepped_on = p.device();
    }
    if (stepped_on) lr_tensor(gi, static_cast<Options&>(group.options()).lr(), *stepped_on);
  }
}

template <class State>
void MultiTensorAdam::count_stepped(torch::optim::Optimizer& opt, int64_t delta, bool device_counted) {
  auto& state = opt.state();
  for (const auto& p : stepped_) {
    auto it = state.find(state_key(state, p));
    if (it == state.end()) continue;
    auto* s = static_cast<State*>(it->second.get());
    s->step(s->step() + delta);
    auto st = step_tensors_.find(p.unsafeGetTensorImpl());
    if (st != step_tensors_.end()) st->second.count = device_counted ? s->step() : -1;
  }
}

template <class State>
void MultiTensorAdam::after_replay(torch::optim::Optimizer& opt) {
  count_stepped<State>(opt, +1, /*device_counted=*/true);
}

// The capture counted on the host as the body ran; the device counted
// nothing (the step's kernels were recorded, not run). The counts go back,
// and the device's are marked unknown: before_replay() writes them from
// the state, so that the replay counts from where the state stands.
template <class State>
void MultiTensorAdam::after_capture(torch::optim::Optimizer& opt) {
  count_stepped<State>(opt, -1, /*device_counted=*/false);
}

template bool MultiTensorAdam::step<torch::optim::AdamWOptions, torch::optim::AdamWParamState>(
    torch::optim::Optimizer&, bool);
template bool MultiTensorAdam::step<torch::optim::AdamOptions, torch::optim::AdamParamState>(
    torch::optim::Optimizer&, bool);

}  // namespace detail

AdamW::AdamW(std::vector<torch::optim::OptimizerParamGroup> groups, torch::optim::AdamWOptions defaults,
             OptimizerImpl impl)
    : torch::optim::AdamW(std::move(groups), defaults), adam_(impl) {}
AdamW::AdamW(std::vector<torch::Tensor> params, torch::optim::AdamWOptions defaults, OptimizerImpl impl)
    : torch::optim::AdamW(std::move(params), defaults), adam_(impl) {}

namespace {

// LibTorch's step() contract around the multi-tensor step: the closure's
// loss (computed with grad on), and LibTorch's own step where ours steps
// nothing (plain, amsgrad).
template <class Options, class State, class Fallback>
torch::Tensor step_with(detail::MultiTensorAdam& adam, torch::optim::Optimizer& opt,
                        const torch::optim::Optimizer::LossClosure& closure, bool decoupled, Fallback&& fallback) {
  torch::Tensor loss;
  if (closure) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  adam.before_update();
  if (!adam.step<Options, State>(opt, decoupled)) fallback();
  return loss;
}

}  // namespace

torch::Tensor AdamW::step(LossClosure closure) {
  return step_with<torch::optim::AdamWOptions, torch::optim::AdamWParamState>(
      adam_, *this, closure, /*decoupled=*/true, [this] { torch::optim::AdamW::step(); });
}

std::string AdamW::why_not_capturable(c10::Device device) {
  return adam_.why_not_capturable<torch::optim::AdamWOptions>(*this, device);
}
void AdamW::before_replay() { adam_.before_replay<torch::optim::AdamWOptions, torch::optim::AdamWParamState>(*this); }
void AdamW::after_replay() { adam_.after_replay<torch::optim::AdamWParamState>(*this); }
void AdamW::after_capture() { adam_.after_capture<torch::optim::AdamWParamState>(*this); }

Adam::Adam(std::vector<torch::optim::OptimizerParamGroup> groups, torch::optim::AdamOptions defaults,
           OptimizerImpl impl)
    : torch::optim::Adam(std::move(groups), defaults), adam_(impl) {}
Adam::Adam(std::vector<torch::Tensor> params, torch::optim::AdamOptions defaults, OptimizerImpl impl)
    : torch::optim::Adam(std::move(params), defaults), adam_(impl) {}

torch::Tensor Adam::step(LossClosure closure) {
  return step_with<torch::optim::AdamOptions, torch::optim::AdamParamState>(
      adam_, *this, closure, /*decoupled=*/false, [this] { torch::optim::Adam::step(); });
}

std::string Adam::why_not_capturable(c10::Device device) {
  return adam_.why_not_capturable<torch::optim::AdamOptions>(*this, device);
}
void Adam::before_replay() { adam_.before_replay<torch::optim::AdamOptions, torch::optim::AdamParamState>(*this); }
void Adam::after_replay() { adam_.after_replay<torch::optim::AdamParamState>(*this); }
void Adam::after_capture() { adam_.after_capture<torch::optim::AdamParamState>(*this); }

torch::Tensor clip_grad_norm_(const std::vector<torch::Tensor>& params, double max_norm) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> grads;
  for (const auto& p : params) {
    if (p.grad().defined()) grads.push_back(p.grad());
  }
  if (grads.empty()) return torch::zeros({});
  // One norm per gradient (one multi-tensor kernel), the norm of those.
  std::vector<torch::Tensor> norms = at::_foreach_norm(grads, 2);
  torch::Tensor total = norms.size() == 1 ? norms[0] : torch::stack(norms).norm(2);
  torch::Tensor scale = torch::clamp_max(max_norm / (total + 1e-6), 1.0);
#if TORCH_VERSION_MAJOR >= 2
  at::_foreach_mul_(grads, scale);
#else
  for (auto& g : grads) g.mul_(scale);
#endif
  return total;
}

}  // namespace ddp
