// Issue 51's CPU measure: one optimizer step (clip + AdamW) at GPT-2
// small's parameter shapes and at the 10M and 100M MLPs', LibTorch's own
// per-parameter AdamW and clip (the anchor) against worker_lib's foreach
// and fused AdamW with its clip that does not wait for the device. The same
// parameters, gradients and options on every row; each row also shows how
// far its parameters end from the anchor's.
//
//   build/bin/optimizer_step                      # all three models, 6 timed steps
//   build/bin/optimizer_step --models gpt2-small --steps 10
#include <CLI/CLI.hpp>
#include <torch/torch.h>
#include <torch/version.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <sstream>

#include "bench_models.h"
#include "ddp/optim.h"

namespace {

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
constexpr const char* kFusedBy = "ATen's _fused_adamw_";
#else
constexpr const char* kFusedBy = "worker_lib's CPU loop";
#endif

using Shapes = std::vector<std::vector<int64_t>>;

Shapes gpt2_small() {  // examples/gpt --model small: 124.5M parameters, 148 tensors
  const int64_t V = 50304, C = 768, T = 1024;
  Shapes s{{V, C}, {T, C}};
  for (int l = 0; l < 12; ++l) {
    for (const Shapes& block : {Shapes{{C}, {C}, {3 * C, C}, {3 * C}, {C, C}, {C}, {C}, {C}, {4 * C, C}, {4 * C}, {C, 4 * C}, {C}}}) {
      s.insert(s.end(), block.begin(), block.end());
    }
  }
  s.push_back({C});
  s.push_back({C});
  return s;
}

template <class Module>
Shapes shapes_of(Module m) {
  Shapes s;
  for (const auto& p : m->parameters()) s.push_back(p.sizes().vec());
  return s;
}

struct Run {
  double median_ms = 0;
  std::vector<torch::Tensor> params;
};

// `steps` timed steps after 2 untimed ones: clip then step, as a training
// loop does; the gradients are drawn once and kept.
Run run(const Shapes& shapes, ddp::OptimizerImpl impl, int steps) {
  torch::manual_seed(0);
  std::vector<torch::Tensor> decay, no_decay, all;
  for (const auto& shape : shapes) {
    torch::Tensor p = torch::randn(shape).requires_grad_(true);
    p.mutable_grad() = torch::randn(shape) * 1e-2;
    (shape.size() >= 2 ? decay : no_decay).push_back(p);
    all.push_back(p);
  }
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay, std::make_unique<torch::optim::AdamWOptions>(
                                 torch::optim::AdamWOptions(1e-3).betas({0.9, 0.95}).weight_decay(0.1)));
  groups.emplace_back(no_decay, std::make_unique<torch::optim::AdamWOptions>(
                                    torch::optim::AdamWOptions(1e-3).betas({0.9, 0.95}).weight_decay(0.0)));
  ddp::AdamW opt(std::move(groups), torch::optim::AdamWOptions(1e-3), impl);
  const bool plain = impl == ddp::OptimizerImpl::kPerParameter;
  std::vector<double> ms;
  for (int i = 0; i < steps + 2; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    if (plain) {
      torch::nn::utils::clip_grad_norm_(all, 1.0);
    } else {
      ddp::clip_grad_norm_(all, 1.0);
    }
    opt.step();
    if (i >= 2) ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return {ms[ms.size() / 2], all};
}

double max_diff(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, (a[i] - b[i]).abs().max().item<double>());
  return d;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"One clip + AdamW step: LibTorch's per-parameter one against worker_lib's foreach and fused"};
  std::vector<std::string> models{"gpt2-small", "mlp10m", "mlp100m"};
  int steps = 6;
  app.add_option("--models", models, "gpt2-small, mlp10m, mlp100m [all]")
      ->check(CLI::IsMember({"gpt2-small", "mlp10m", "mlp100m"}));
  app.add_option("--steps", steps, "Timed steps per row (median reported) [6]")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  std::vector<ddp::OptimizerImpl> impls{ddp::OptimizerImpl::kPerParameter, ddp::OptimizerImpl::kForeach};
  if (ddp::fused_adam_available()) impls.push_back(ddp::OptimizerImpl::kFused);
  std::printf("LibTorch %s on CPU, %d threads; median of %d steps (clip to 1.0 + AdamW), 2 untimed first\n\n",
              TORCH_VERSION, at::get_num_threads(), steps);
  std::printf("| model | parameters (tensors) | implementation | ms per step | speed-up vs LibTorch's | max abs diff vs LibTorch's |\n");
  std::printf("|---|---|---|---|---|---|\n");
  for (const auto& name : models) {
    const Shapes shapes = name == "gpt2-small" ? gpt2_small()
                          : name == "mlp10m"   ? shapes_of(bench::WideMlp())
                                               : shapes_of(bench::Mlp100m());
    int64_t n = 0;
    for (const auto& s : shapes) n += c10::multiply_integers(s);
    Run anchor;
    for (auto impl : impls) {
      Run r = run(shapes, impl, steps);
      if (impl == ddp::OptimizerImpl::kPerParameter) anchor = r;
      const std::string what = impl == ddp::OptimizerImpl::kPerParameter ? "LibTorch AdamW + clip (anchor)"
                               : impl == ddp::OptimizerImpl::kFused   ? std::string("fused (") + kFusedBy + ")"
                                                                      : ddp::to_string(impl);
      std::printf("| %s | %.1fM (%zu) | %s | %.1f | %.2fx | %.2g |\n", name.c_str(), n / 1e6, shapes.size(), what.c_str(),
                  r.median_ms, anchor.median_ms / r.median_ms, max_diff(anchor.params, r.params));
      std::fflush(stdout);
    }
  }
  return 0;
}
