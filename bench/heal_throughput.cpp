// Heal throughput: how fast a replacement gets the training state from a
// peer, through the real path (ddp::Healer under ddprun). Run under
// `ddprun --nproc 2`: an MLP of --width (square layers, --layers of them)
// with Adam takes steps; at --kill-at, the last rank SIGKILLs itself; ddprun
// starts a replacement, which joins with the survivors' state and prints
//   heal: <bytes> bytes of state in <s> s (<GB/s>), <params> parameters
// (bytes over the replacement's time from connecting to holding the state:
// agreeing on the newest step, the sender encoding it, the broadcast,
// decoding and applying it). Both ranks then check their parameters agree.
//
//   build/bin/ddprun --nproc 2 build/bin/heal_throughput --width 2236 --layers 2   # 10M
#include <CLI/CLI.hpp>
#include <signal.h>
#include <torch/torch.h>

#include <cstdio>

#include "ddp/ddp.h"

namespace {

struct Options {
  int width = 2236;
  int layers = 2;
  int steps = 6;
  int kill_at = 3;
};

torch::nn::Sequential mlp(const Options& o) {
  torch::nn::Sequential net;
  for (int i = 0; i < o.layers; ++i) net->push_back(torch::nn::Linear(o.width, o.width));
  return net;
}

int run(const Options& o) {
  auto world = ddp::init();
  torch::manual_seed(0);
  ddp::DistributedDataParallel<torch::nn::Sequential> model(mlp(o), *world);
  torch::optim::Adam optimizer(model.module()->parameters(), torch::optim::AdamOptions(1e-3));
  int64_t params = 0;
  for (const auto& p : model.module()->parameters()) params += p.numel();
  int64_t step = 0;
  ddp::Healer healer(*world, {.module = model.module().get(), .optimizer = &optimizer, .sampler = nullptr, .step = &step, .counters = {}});
  if (healer.joined()) {
    const ddp::HealReport& r = healer.report();
    std::printf("heal: %lld bytes of state in %.3f s (%.2f GB/s), %lld parameters, joined at step %lld\n",
                static_cast<long long>(r.bytes), r.transfer_seconds, r.bytes / r.transfer_seconds / 1e9,
                static_cast<long long>(params), static_cast<long long>(step));
    std::fflush(stdout);
  }
  torch::Tensor x = torch::randn({8, o.width});
  while (step < o.steps) {
    healer.step([&] {
      if (step == o.kill_at && world->rank() == world->size() - 1 && !healer.joined()) raise(SIGKILL);
      optimizer.zero_grad();
      model(x).square().mean().backward();
      optimizer.step();
      ++step;
    });
  }
  std::vector<torch::Tensor> flats;
  for (const auto& p : model.module()->parameters()) flats.push_back(p.detach().reshape({-1}));
  torch::Tensor all = world->all_gather(torch::cat(flats));
  if (!torch::equal(all[0], all[world->size() - 1])) throw std::runtime_error("parameters differ after the heal");
  if (world->rank() == 0) std::printf("parameters agree on all %d ranks\n", world->size());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Heal throughput: a replacement takes the state from a peer (run under ddprun --nproc 2)"};
  Options o;
  app.add_option("--width", o.width, "Units per layer [2236: 10M parameters with 2 layers]")->check(CLI::PositiveNumber);
  app.add_option("--layers", o.layers, "Square linear layers [2]")->check(CLI::PositiveNumber);
  app.add_option("--steps", o.steps, "Adam steps [6]")->check(CLI::PositiveNumber);
  app.add_option("--kill-at", o.kill_at, "Step at which the last rank kills itself [3]")->check(CLI::NonNegativeNumber);
  CLI11_PARSE(app, argc, argv);
  try {
    return run(o);
  } catch (const std::exception& e) {
    ddp::record_error(e);
    return 1;
  }
}
