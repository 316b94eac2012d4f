// Checkpoints copied in the background (ddp::Checkpointer, staged_state.h):
// training waits only for what forward changes, the parameters and the
// optimizer's tensors are copied while the next step runs, and nothing
// changes them before that copy is done.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <set>

#include "checkpoint/staged_state.h"
#include "ddp/ddp.h"
#include "support/ddp_checks.h"
#include "support/thread_ranks.h"

namespace {

namespace fs = std::filesystem;

fs::path fresh_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("ddprun-staged-" + name + "-" + std::to_string(getpid()));
  fs::remove_all(d);
  return d;
}

// Linear layers with a batch norm between: a buffer that forward changes.
torch::nn::Sequential net_with_buffers(int width) {
  torch::manual_seed(5);
  return torch::nn::Sequential(torch::nn::Linear(64, width), torch::nn::BatchNorm1d(width), torch::nn::ReLU(),
                               torch::nn::Linear(width, width), torch::nn::ReLU(), torch::nn::Linear(width, 10));
}

void step(torch::nn::Sequential& net, torch::optim::Optimizer& opt, uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  opt.zero_grad();
  torch::nn::functional::cross_entropy(net->forward(at::randn({16, 64}, gen)), at::randint(0, 10, {16}, gen, at::kLong))
      .backward();
  opt.step();
}

// The newest checkpoint in dir, decoded.
ddp::TrainingState newest(const fs::path& dir) {
  auto files = ddp::list_checkpoints(dir.string());
  EXPECT_FALSE(files.empty());
  std::string problem;
  auto bytes = ddp::read_checkpoint(files.at(0), &problem);
  EXPECT_TRUE(bytes) << problem;
  return ddp::decode_state(*bytes);
}

std::map<std::string, at::Tensor> clone_state(const torch::nn::Module& m) {
  std::map<std::string, at::Tensor> out;
  for (const auto& p : m.named_parameters(true)) out[p.key()] = p.value().detach().clone();
  for (const auto& b : m.named_buffers(true)) out[b.key()] = b.value().detach().clone();
  return out;
}

void expect_model_is(const ddp::TrainingState& s, const std::map<std::string, at::Tensor>& want) {
  ASSERT_EQ(s.model.size(), want.size());
  for (const auto& [name, t] : want) {
    ASSERT_TRUE(s.model.count(name)) << name;
    EXPECT_TRUE(torch::equal(s.model.at(name), t)) << name << " is not what it was at the save";
  }
}

TEST(StagedState, BuffersAreCopiedAtOnceTheRestOnlyWhenStaged) {
  auto net = net_with_buffers(32);
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  step(net, opt, 1);
  const auto at_save = clone_state(*net);
  ddp::StagedState staged = ddp::refer_to_state(*net, opt, 1, 0, 0, nullptr);

  // Before staging the parameters are the module's own memory (no copy on
  // the training thread), the buffers already copies.
  for (const auto& p : net->named_parameters(true)) {
    EXPECT_EQ(staged.state.model.at(p.key()).data_ptr(), p.value().data_ptr()) << p.key();
  }
  for (const auto& b : net->named_buffers(true)) {
    EXPECT_NE(staged.state.model.at(b.key()).data_ptr(), b.value().data_ptr()) << b.key();
  }
  // The next forward changes the running statistics: the save keeps its own.
  {
    at::NoGradGuard no_grad;
    net->forward(at::randn({16, 64}));
  }
  ddp::stage_state(staged, nullptr);
  // The optimizer step after the fence changes the rest: staged, unchanged.
  step(net, opt, 2);
  expect_model_is(staged.state, at_save);
  for (const auto& entry : staged.state.optimizer.params) {
    for (const auto& [key, t] : entry) {
      for (const auto& p : net->parameters()) EXPECT_NE(t.data_ptr(), p.data_ptr()) << key;
    }
  }
}

TEST(StagedState, AnEarlierStateLendsItsBuffers) {
  auto net = net_with_buffers(32);
  torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(0.01));
  step(net, opt, 1);
  auto first = ddp::refer_to_state(*net, opt, 1, 0, 0, nullptr);
  ddp::stage_state(first, nullptr);
  std::set<const void*> lent;
  for (const auto& [name, t] : first.state.model) lent.insert(t.data_ptr());
  for (const auto& e : first.state.optimizer.params) {
    for (const auto& [k, t] : e) {
      if (k != "step") lent.insert(t.data_ptr());
    }
  }
  step(net, opt, 2);
  const auto at_save = clone_state(*net);
  auto second = ddp::refer_to_state(*net, opt, 2, 0, 0, &first.state);
  ddp::stage_state(second, &first.state);
  expect_model_is(second.state, at_save);
  // Every tensor of the second save sits in memory of the first: no allocation.
  for (const auto& [name, t] : second.state.model) EXPECT_TRUE(lent.count(t.data_ptr())) << name;
  for (const auto& e : second.state.optimizer.params) {
    for (const auto& [k, t] : e) {
      if (k != "step") {
        EXPECT_TRUE(lent.count(t.data_ptr())) << k;
      }
    }
  }
}

// The copy runs beside the next step's forward and backward; DDP's backward
// ends with the World's state fence, so the optimizer step right after it
// cannot reach the checkpoint.
TEST(Checkpointer, DdpsBackwardWaitsForTheCopyBeforeTheOptimizerStep) {
  const fs::path dir = fresh_dir("ddp-fence");
  ddptest::run_ranks(2, [&](ddp::World& w) {
    ddp::DistributedDataParallel<torch::nn::Sequential> model(net_with_buffers(1024), w);
    torch::optim::SGD opt(model.module()->parameters(), torch::optim::SGDOptions(0.5).momentum(0.9));
    ddp::CheckpointOptions o;
    o.dir = w.rank() == 0 ? dir.string() : (dir.string() + "-unused");
    ddp::Checkpointer ckpt(w, o);
    auto gen = at::detail::createCPUGenerator(10 + w.rank());
    auto one_step = [&] {
      opt.zero_grad();
      torch::nn::functional::cross_entropy(model(at::randn({4, 64}, gen)), at::randint(0, 10, {4}, gen, at::kLong))
          .backward();
      opt.step();
    };
    one_step();
    const auto at_save = clone_state(*model.module());
    ckpt.save(*model.module(), opt, 1, 0, 0);
    one_step();  // forward, backward (fenced at its end), then the optimizer step
    const ddp::CheckpointReport r = ckpt.finish();
    if (w.rank() != 0) return;
    EXPECT_EQ(r.written, 1);
    EXPECT_GT(r.copy_seconds, 0);
    const ddp::TrainingState s = newest(dir);
    EXPECT_EQ(s.step, 1);
    expect_model_is(s, at_save);
  });
  EXPECT_FALSE(fs::exists(dir.string() + "-unused"));
  fs::remove_all(dir);
}

// Made on a bare Communicator no DDP fences for it: save() returns with the
// copy done, and the loop may change the parameters at once.
TEST(Checkpointer, OnABareCommunicatorSaveReturnsWithTheCopyDone) {
  const fs::path dir = fresh_dir("bare");
  ddptest::run_ranks(1, [&](ddp::World& w) {
    auto net = net_with_buffers(1024);
    torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.5).momentum(0.9));
    step(net, opt, 1);
    ddp::CheckpointOptions o;
    o.dir = dir.string();
    ddp::Checkpointer ckpt(w.cpu(), o);
    const auto at_save = clone_state(*net);
    ckpt.save(*net, opt, 1, 0, 0);
    {
      at::NoGradGuard no_grad;
      for (auto& p : net->parameters()) p.fill_(7);
    }
    ASSERT_TRUE(ckpt.wait());
    expect_model_is(newest(dir), at_save);
    // With the copy in the background and no DDP: fence() is the wait.
    ddp::CheckpointOptions by_hand = o;
    by_hand.copy = ddp::CheckpointOptions::Copy::kBackground;
    ddp::Checkpointer background(w.cpu(), by_hand);
    const auto at_second = clone_state(*net);
    background.save(*net, opt, 2, 0, 0);
    background.fence();
    {
      at::NoGradGuard no_grad;
      for (auto& p : net->parameters()) p.fill_(8);
    }
    ASSERT_TRUE(background.wait());
    const ddp::TrainingState s = newest(dir);
    EXPECT_EQ(s.step, 2);
    expect_model_is(s, at_second);
  });
  fs::remove_all(dir);
}

}  // namespace
