// ddp::AdamW, ddp::Adam and ddp::clip_grad_norm_ (ddp/optim.h) against
// LibTorch's own per-parameter step and clip: on CPU in CI, on the GPU with
// DDPRUN_TEST_DEVICE=cuda (scripts/gpu-test.sh), where the foreach kernels
// are other kernels and equal within tolerance only.
#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>

#include "ddp/ddp.h"

namespace {

torch::Device test_device() {
  const char* d = std::getenv("DDPRUN_TEST_DEVICE");
  return torch::Device(d && std::string(d) == "cuda" ? torch::kCUDA : torch::kCPU);
}

// Parameters shaped like a small transformer's (matrices, vectors, a
// scalar), in two groups as GPT trainers make them: decay on matrices only.
struct Params {
  std::vector<torch::Tensor> decay, no_decay;
  std::vector<torch::Tensor> all() const {
    std::vector<torch::Tensor> v = decay;
    v.insert(v.end(), no_decay.begin(), no_decay.end());
    return v;
  }
};

Params make_params(uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  Params p;
  for (auto shape : std::vector<std::vector<int64_t>>{{64, 32}, {32, 96}, {17, 5}}) {
    p.decay.push_back(at::randn(shape, gen).to(test_device()).requires_grad_(true));
  }
  for (auto shape : std::vector<std::vector<int64_t>>{{32}, {96}, {1}}) {
    p.no_decay.push_back(at::randn(shape, gen).to(test_device()).requires_grad_(true));
  }
  return p;
}

std::vector<torch::optim::OptimizerParamGroup> groups_of(const Params& p, double wd) {
  std::vector<torch::optim::OptimizerParamGroup> g;
  g.emplace_back(p.decay, std::make_unique<torch::optim::AdamWOptions>(
                              torch::optim::AdamWOptions(3e-3).betas({0.9, 0.95}).weight_decay(wd)));
  g.emplace_back(p.no_decay, std::make_unique<torch::optim::AdamWOptions>(
                                 torch::optim::AdamWOptions(3e-3).betas({0.9, 0.95}).weight_decay(0.0)));
  return g;
}

std::vector<torch::optim::OptimizerParamGroup> adam_groups_of(const Params& p, double wd) {
  std::vector<torch::optim::OptimizerParamGroup> g;
  g.emplace_back(p.decay, std::make_unique<torch::optim::AdamOptions>(torch::optim::AdamOptions(3e-3).weight_decay(wd)));
  g.emplace_back(p.no_decay, std::make_unique<torch::optim::AdamOptions>(torch::optim::AdamOptions(3e-3)));
  return g;
}

// Gradients drawn from `seed` and the step: the same on both sides. On odd
// steps the last matrix gets none (a parameter unused in that step: its
// step count falls behind the others').
void set_grads(const Params& p, uint64_t seed, int step) {
  auto gen = at::detail::createCPUGenerator(seed * 1000 + static_cast<uint64_t>(step));
  auto all = p.all();
  for (size_t i = 0; i < all.size(); ++i) {
    if (i == 2 && step % 2 == 1) {
      all[i].mutable_grad() = torch::Tensor();
    } else {
      all[i].mutable_grad() = at::randn(all[i].sizes(), gen).to(test_device());
    }
  }
}

void train(const Params& p, torch::optim::Optimizer& opt, int from, int to, uint64_t seed = 7) {
  for (int s = from; s < to; ++s) {
    set_grads(p, seed, s);
    opt.step();
  }
}

void expect_close(const Params& a, const Params& b, const char* what, double rtol = 1e-5, double atol = 1e-6);

// Bitwise on CPU; on CUDA the multi-tensor kernels round alike only within
// tolerance.
void expect_equal(const Params& a, const Params& b, const char* what) {
  if (test_device().is_cuda()) return expect_close(a, b, what);
  auto x = a.all(), y = b.all();
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_TRUE(torch::equal(x[i], y[i])) << what << ": parameter " << i << " differs, max |diff| "
                                          << (x[i] - y[i]).abs().max().item<double>();
  }
}

void expect_close(const Params& a, const Params& b, const char* what, double rtol, double atol) {
  auto x = a.all(), y = b.all();
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_TRUE(torch::allclose(x[i], y[i], rtol, atol))
        << what << ": parameter " << i << " differs by up to " << (x[i] - y[i]).abs().max().item<double>();
  }
}

template <class State>
int64_t step_count(torch::optim::Optimizer& opt, const torch::Tensor& p) {
  for (auto& [key, state] : opt.state()) {
    (void)key;
    auto& s = static_cast<State&>(*state);
    if (s.exp_avg().sizes() == p.sizes()) return s.step();
  }
  return -1;
}

TEST(Optim, ParsesImplementationsAndNamesABadOne) {
  EXPECT_EQ(ddp::parse_optimizer_impl("foreach"), ddp::OptimizerImpl::kForeach);
  EXPECT_EQ(ddp::parse_optimizer_impl("plain"), ddp::OptimizerImpl::kPerParameter);
  EXPECT_STREQ(ddp::to_string(ddp::parse_optimizer_impl("fused")), "fused");
  try {
    ddp::parse_optimizer_impl("fast");
    FAIL() << "no error for 'fast'";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'fast'"), std::string::npos) << e.what();
  }
}

TEST(Optim, ForeachAdamWIsBitwiseLibTorchsAdamWOnCpu) {
  Params a = make_params(1), b = make_params(1);
  torch::optim::AdamW plain(groups_of(a, 0.1), torch::optim::AdamWOptions(3e-3));
  ddp::AdamW foreach(groups_of(b, 0.1), torch::optim::AdamWOptions(3e-3), ddp::OptimizerImpl::kForeach);
  ASSERT_EQ(foreach.impl(), ddp::OptimizerImpl::kForeach);
  train(a, plain, 0, 6);
  train(b, foreach, 0, 6);
  expect_equal(a, b, "foreach AdamW");
  // The unused-on-odd-steps matrix counted only its own steps, as LibTorch's.
  EXPECT_EQ(step_count<torch::optim::AdamWParamState>(foreach, b.decay[2]), 3);
  EXPECT_EQ(step_count<torch::optim::AdamWParamState>(plain, a.decay[2]), 3);
}

TEST(Optim, ForeachAdamIsBitwiseLibTorchsAdamOnCpu) {
  Params a = make_params(2), b = make_params(2);
  torch::optim::Adam plain(adam_groups_of(a, 0.05), torch::optim::AdamOptions(3e-3));
  ddp::Adam foreach(adam_groups_of(b, 0.05), torch::optim::AdamOptions(3e-3), ddp::OptimizerImpl::kForeach);
  train(a, plain, 0, 6);
  train(b, foreach, 0, 6);
  expect_equal(a, b, "foreach Adam");
}

TEST(Optim, FusedAdamWMatchesLibTorchsAdamWWithinTolerance) {
  if (!ddp::fused_adam_available()) GTEST_SKIP() << "this LibTorch (" << TORCH_VERSION << ") has no fused Adam";
  Params a = make_params(3), b = make_params(3);
  torch::optim::AdamW plain(groups_of(a, 0.1), torch::optim::AdamWOptions(3e-3));
  ddp::AdamW fused(groups_of(b, 0.1), torch::optim::AdamWOptions(3e-3), ddp::OptimizerImpl::kFused);
  ASSERT_EQ(fused.impl(), ddp::OptimizerImpl::kFused);
  train(a, plain, 0, 6);
  train(b, fused, 0, 6);
  expect_close(a, b, "fused AdamW");
  EXPECT_EQ(step_count<torch::optim::AdamWParamState>(fused, b.decay[2]), 3);
}

TEST(Optim, FusedAdamMatchesLibTorchsAdamWithinTolerance) {
  if (!ddp::fused_adam_available()) GTEST_SKIP() << "this LibTorch (" << TORCH_VERSION << ") has no fused Adam";
  Params a = make_params(4), b = make_params(4);
  torch::optim::Adam plain(adam_groups_of(a, 0.05), torch::optim::AdamOptions(3e-3));
  ddp::Adam fused(adam_groups_of(b, 0.05), torch::optim::AdamOptions(3e-3), ddp::OptimizerImpl::kFused);
  train(a, plain, 0, 6);
  train(b, fused, 0, 6);
  expect_close(a, b, "fused Adam");
}

// A resume: the state saved from LibTorch's step at step 5, loaded into an
// optimizer of each implementation that had run 2 steps of its own, goes on
// as LibTorch's would (the fused step's device counts must follow the loaded
// state's counts, not their own).
TEST(Optim, ForeachAndFusedResumeFromLibTorchsSavedState) {
  Params ref = make_params(5);
  torch::optim::AdamW plain(groups_of(ref, 0.1), torch::optim::AdamWOptions(3e-3));
  train(ref, plain, 0, 5);
  std::ostringstream saved;
  {
    torch::serialize::OutputArchive archive;
    plain.save(archive);
    archive.save_to(saved);
  }
  const Params at5 = make_params(5);  // filled below with ref's step-5 values
  for (size_t i = 0; i < ref.all().size(); ++i) at5.all()[i].detach().copy_(ref.all()[i].detach());
  train(ref, plain, 5, 9);

  std::vector<ddp::OptimizerImpl> impls{ddp::OptimizerImpl::kForeach};
  if (ddp::fused_adam_available()) impls.push_back(ddp::OptimizerImpl::kFused);
  for (auto impl : impls) {
    SCOPED_TRACE(ddp::to_string(impl));
    Params p = make_params(5);
    ddp::AdamW opt(groups_of(p, 0.1), torch::optim::AdamWOptions(3e-3), impl);
    train(p, opt, 0, 2, /*seed=*/99);  // its own counts and moments, to be replaced
    for (size_t i = 0; i < p.all().size(); ++i) p.all()[i].detach().copy_(at5.all()[i].detach());
    std::istringstream in(saved.str());
    torch::serialize::InputArchive archive;
    archive.load_from(in);
    opt.load(archive);
    train(p, opt, 5, 9);
    if (impl == ddp::OptimizerImpl::kForeach) {
      expect_equal(ref, p, "foreach after a resume");
    } else {
      expect_close(ref, p, "fused after a resume");
    }
  }
}

TEST(Optim, ClipGradNormMatchesLibTorchsClipAndReturnsATensor) {
  for (double max_norm : {0.5, 1e6}) {  // clipped, and left as it is
    SCOPED_TRACE(max_norm);
    Params a = make_params(6), b = make_params(6);
    set_grads(a, 3, 0);
    set_grads(b, 3, 0);
    const auto before = b.all()[0].grad().clone();
    const double want = torch::nn::utils::clip_grad_norm_(a.all(), max_norm);
    const torch::Tensor got = ddp::clip_grad_norm_(b.all(), max_norm);
    EXPECT_EQ(got.dim(), 0);
    EXPECT_NEAR(got.item<double>(), want, 1e-5 * want);
    for (size_t i = 0; i < a.all().size(); ++i) {
      EXPECT_TRUE(torch::allclose(a.all()[i].grad(), b.all()[i].grad(), 1e-6, 1e-7)) << "gradient " << i;
    }
    if (max_norm > want) {
      EXPECT_TRUE(torch::equal(b.all()[0].grad(), before)) << "a scale of 1 changed a gradient";
    } else {
      double sq = 0;
      for (const auto& p : b.all()) sq += p.grad().pow(2).sum().item<double>();
      EXPECT_NEAR(std::sqrt(sq), max_norm, 1e-4) << "the clipped gradients' norm";
    }
  }
  Params none = make_params(7);
  EXPECT_EQ(ddp::clip_grad_norm_(none.all(), 1.0).item<double>(), 0.0);
}

}  // namespace
