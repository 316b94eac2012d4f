// ddp::CapturedStep (ddp/captured_step.h) and the capturable optimizer
// underneath it, on CPU: every run is the body, eager, with the optimizer
// reading its learning rate from a tensor and counting steps as a replay
// would. Ranks are threads (support/thread_ranks.h). The capture itself
// needs a GPU: scripts/gpu-test.sh runs these tests there (a failed replay
// steps nothing: CUDA builds only) and `gpt --capture on`.
#include <gtest/gtest.h>

#include "ddp/ddp.h"
#include "support/ddp_checks.h"
#include "support/thread_ranks.h"

#if DDPRUN_TORCH_CUDA
#include <ATen/cuda/Sleep.h>
#include <torch/cuda.h>
#endif

namespace {

using ddptest::Mlp;
using ddptest::run_ranks;

std::unique_ptr<ddp::AdamW> adamw_of(Mlp& net) {
  return std::make_unique<ddp::AdamW>(net->parameters(),
                                      torch::optim::AdamWOptions(1e-2).betas({0.9, 0.95}).weight_decay(0.1),
                                      ddp::OptimizerImpl::kFused);
}

// The batch of rank r at step s: the same on both sides of a comparison.
std::pair<torch::Tensor, torch::Tensor> batch(int rank, int step) {
  auto gen = at::detail::createCPUGenerator(static_cast<uint64_t>(100 * step + rank));
  return {at::randn({8, 64}, gen), at::randn({8, 10}, gen)};
}

// Six steps of DDP + fused AdamW under a learning rate that changes every
// step, either through a CapturedStep or as a plain loop; the parameters.
torch::Tensor train(ddp::World& w, bool through_captured) {
  Mlp net = ddptest::seeded_model<Mlp>(7);
  ddp::DistributedDataParallel<Mlp> model(net, w);
  auto opt = adamw_of(net);
  auto body = [&](const std::vector<torch::Tensor>& in) {
    opt->zero_grad();
    torch::Tensor loss = torch::mse_loss(model(in[0]), in[1]);
    loss.backward();
    torch::Tensor norm = ddp::clip_grad_norm_(net->parameters(), 0.5);
    opt->step();
    return std::vector<torch::Tensor>{loss.detach(), norm};
  };
  std::unique_ptr<ddp::CapturedStep> step;
  if (through_captured) step = std::make_unique<ddp::CapturedStep>(w, *opt, body);
  for (int s = 0; s < 6; ++s) {
    static_cast<torch::optim::AdamWOptions&>(opt->param_groups()[0].options()).lr(1e-2 / (s + 1));
    auto [x, y] = batch(w.rank(), s);
    std::vector<torch::Tensor> out = step ? step->run({x, y}) : body({x, y});
    EXPECT_EQ(out.size(), 2u);
  }
  if (step) {
    EXPECT_FALSE(step->captured());
    EXPECT_EQ(step->eager_runs(), 6);
    EXPECT_EQ(step->captures(), 0);
    EXPECT_NE(step->describe().find("eager on cpu"), std::string::npos) << step->describe();
  }
  return ddptest::flat_parameters(*net);
}

TEST(CapturedStep, OnCpuEveryRunIsTheBodyBitwiseEqualToThePlainLoopUnderAChangingLearningRate) {
  run_ranks(2, [](ddp::World& w) {
    const torch::Tensor plain = train(w, false);
    const torch::Tensor captured = train(w, true);
    EXPECT_TRUE(torch::equal(plain, captured))
        << "rank " << w.rank() << ": max |diff| " << (plain - captured).abs().max().item<double>();
  });
}

TEST(CapturedStep, AnInputOfAnotherShapeThrowsNamingItAndBothShapes) {
  run_ranks(1, [](ddp::World& w) {
    Mlp net = ddptest::seeded_model<Mlp>(7);
    auto opt = adamw_of(net);
    int runs = 0;
    ddp::CapturedStep step(w, *opt, [&](const std::vector<torch::Tensor>&) {
      ++runs;
      return std::vector<torch::Tensor>{};
    });
    step.run({torch::zeros({8, 64}), torch::zeros({8, 10})});
    try {
      step.run({torch::zeros({5, 64}), torch::zeros({5, 10})});  // a short last batch
      FAIL() << "a batch of another shape ran";
    } catch (const std::invalid_argument& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("input 0 is [5, 64] Float on cpu"), std::string::npos) << m;
      EXPECT_NE(m.find("prepared for [8, 64] Float on cpu"), std::string::npos) << m;
    }
    EXPECT_THROW(step.run({torch::zeros({8, 64})}), std::invalid_argument);  // one input of two
    EXPECT_THROW(step.run({torch::zeros({8, 64}, torch::kDouble), torch::zeros({8, 10})}), std::invalid_argument);
    EXPECT_EQ(runs, 1);
    EXPECT_THROW(ddp::CapturedStep(w, *opt, nullptr), std::invalid_argument);
    ddp::CapturedStepOptions none;
    none.warmup_steps = 0;
    EXPECT_THROW(ddp::CapturedStep(w, *opt, [](const std::vector<torch::Tensor>&) {
      return std::vector<torch::Tensor>{};
    }, none), std::invalid_argument);
  });
}

// The step state of the parameter shaped like `p` (the Mlp's shapes are distinct).
int64_t step_count(ddp::AdamW& opt, const torch::Tensor& p) {
  for (auto& [key, s] : opt.state()) {
    (void)key;
    auto& st = static_cast<torch::optim::AdamWParamState&>(*s);
    if (st.exp_avg().sizes() == p.sizes()) return st.step();
  }
  return -1;
}

// A replay runs no host code: after_replay() counts, in the state that
// checkpoints and heals carry, the step the device took, for exactly the
// parameters the captured step stepped.
TEST(CapturedStep, AfterReplayCountsTheDevicesStepInTheStateOfTheParametersItStepped) {
  Mlp net = ddptest::seeded_model<Mlp>(7);
  auto opt = adamw_of(net);
  opt->set_capturable(true);
  auto params = net->parameters();
  for (size_t i = 0; i + 1 < params.size(); ++i) params[i].mutable_grad() = torch::ones_like(params[i]);
  opt->step();  // the last parameter has no gradient: not stepped
  opt->after_replay();
  opt->after_replay();
  EXPECT_EQ(step_count(*opt, params[0]), 3);
  EXPECT_EQ(opt->state().size(), params.size() - 1) << "the parameter without a gradient got a state";
}

// Where the captured step cuts its graphs: the optimizer calls the update
// hook after the closure's backward (the collectives) and before it
// changes any parameter.
TEST(CapturedStep, TheOptimizersUpdateHookRunsAfterTheClosureAndBeforeAnyParameterChanges) {
  Mlp net = ddptest::seeded_model<Mlp>(7);
  auto opt = adamw_of(net);
  opt->set_capturable(true);
  const torch::Tensor initial = ddptest::flat_parameters(*net);
  bool backward_ran = false;
  int hooks = 0;
  torch::Tensor at_hook;
  opt->set_update_hook([&] {
    ++hooks;
    EXPECT_TRUE(backward_ran) << "the hook ran before the closure";
    at_hook = ddptest::flat_parameters(*net);
  });
  opt->step([&] {
    opt->zero_grad();
    torch::Tensor loss = net->forward(torch::ones({4, 64})).sum();
    loss.backward();
    backward_ran = true;
    return loss;
  });
  EXPECT_EQ(hooks, 1);
  ASSERT_TRUE(at_hook.defined());
  EXPECT_TRUE(torch::equal(at_hook, initial)) << "a parameter changed before the hook";
  EXPECT_FALSE(torch::equal(ddptest::flat_parameters(*net), initial)) << "the step changed nothing";
  opt->set_update_hook(nullptr);
  opt->step();
  EXPECT_EQ(hooks, 1) << "a cleared hook ran";
}

// A capture runs nothing: the counts the step's host code took while it
// was captured go back, for the replay to count.
TEST(CapturedStep, AfterCaptureTakesBackTheStepCountsTheCapturedStepCounted) {
  Mlp net = ddptest::seeded_model<Mlp>(7);
  auto opt = adamw_of(net);
  opt->set_capturable(true);
  auto params = net->parameters();
  for (auto& p : params) p.mutable_grad() = torch::ones_like(p);
  opt->step();  // an eager warm-up
  opt->step();  // as if captured
  ASSERT_EQ(step_count(*opt, params[0]), 2);
  opt->after_capture();
  EXPECT_EQ(step_count(*opt, params[0]), 1);
  opt->before_replay();
  opt->after_replay();  // the replay's step
  EXPECT_EQ(step_count(*opt, params[0]), 2);
}

#if DDPRUN_TORCH_CUDA
// The reason for the cut: a replay whose collectives fail (here: its watch
// times out while the first graph spins on the GPU for about a second)
// throws before the optimizer's graph runs, so the parameters and the
// step counts are those of before the step, as after a failed eager step:
// the Healer's retry then steps once. One graph would have stepped.
TEST(CapturedStep, AReplayWhoseCollectivesFailLeavesTheParametersAndCountsOfBeforeTheStep) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a GPU";
  run_ranks(1, [](ddp::World& w) {
    const torch::Device gpu(torch::kCUDA, 0);
    Mlp net = ddptest::seeded_model<Mlp>(7);
    net->to(gpu);
    ddp::DistributedDataParallel<Mlp> model(net, w);
    auto opt = adamw_of(net);
    bool spin = false;  // read as the body runs: the captured graph spins at every replay
    ddp::CapturedStepOptions o;
    o.warmup_steps = 1;
    o.timeout = std::chrono::milliseconds(50);  // the replay's watch; the warm-up's collectives keep theirs
    ddp::CapturedStep step(w, *opt, [&](const std::vector<torch::Tensor>& in) {
      opt->zero_grad(/*set_to_none=*/false);
      if (spin) at::cuda::sleep(int64_t{4} * 1000 * 1000 * 1000);  // ~2 s at 2 GHz: 40x the timeout
      torch::Tensor loss = torch::mse_loss(model(in[0]), in[1]);
      loss.backward();
      opt->step();
      return std::vector<torch::Tensor>{loss.detach()};
    }, o);
    auto [x, y] = batch(0, 0);
    x = x.to(gpu);
    y = y.to(gpu);
    step.run({x, y});  // the warm-up, eager
    const torch::Tensor before = ddptest::flat_parameters(*net).cpu();
    const int64_t count = step_count(*opt, net->parameters()[0]);
    spin = true;
    EXPECT_THROW(step.run({x, y}), ddp::CollectiveError);  // captures, replays, times out
    EXPECT_EQ(step.captures(), 1);
    const torch::Tensor after = ddptest::flat_parameters(*net).cpu();
    EXPECT_TRUE(torch::equal(before, after))
        << "the failed replay stepped: max |diff| " << (before - after).abs().max().item<double>();
    EXPECT_EQ(step_count(*opt, net->parameters()[0]), count);
  });
}
#endif

TEST(CapturedStep, AnOptimizerThatCannotBeCapturedSaysWhichSettingToChange) {
  Mlp net = ddptest::seeded_model<Mlp>(7);
  ddp::AdamW foreach(net->parameters(), torch::optim::AdamWOptions(1e-3), ddp::OptimizerImpl::kForeach);
  EXPECT_NE(foreach.why_not_capturable(torch::kCPU).find("kFused or kAuto"), std::string::npos)
      << foreach.why_not_capturable(torch::kCPU);
  ddp::AdamW plain(net->parameters(), torch::optim::AdamWOptions(1e-3), ddp::OptimizerImpl::kPerParameter);
  EXPECT_NE(plain.why_not_capturable(torch::kCPU).find("kPerParameter"), std::string::npos);
  if (ddp::fused_adam_available(c10::DeviceType::CUDA)) {
    ddp::AdamW fused(net->parameters(), torch::optim::AdamWOptions(1e-3), ddp::OptimizerImpl::kFused);
    EXPECT_EQ(fused.why_not_capturable(torch::kCPU), "");
    // Parameters on the CPU, a graph on the GPU: not one device.
    EXPECT_NE(fused.why_not_capturable(torch::Device(torch::kCUDA, 0)).find("mixes devices"), std::string::npos);
    ddp::AdamW ams(net->parameters(), torch::optim::AdamWOptions(1e-3).amsgrad(true), ddp::OptimizerImpl::kFused);
    EXPECT_NE(ams.why_not_capturable(torch::kCPU).find("amsgrad"), std::string::npos);
  }
}

}  // namespace
