// Benchmark worker: per-step time of ddp::DistributedDataParallel on a
// fixed batch of random data (no data loading), run under ddprun. Rank 0
// prints one JSON line: {"impl": "ddprun", "ms_per_step": ..., ...}.
// bench/ddp_step_torch.py is the same benchmark for PyTorch's DDP.
#include <CLI/CLI.hpp>
#include <torch/torch.h>

#include <chrono>
#include <cstdio>

#include "bench_models.h"
#include "ddp/ddp.h"

namespace {

struct Options {
  std::string model = "cnn";
  int batch = 32;
  int steps = 20;
  int warmup = 3;
  std::string sync = "bucketed";
  double bucket_mb = 25;
  double first_bucket_mb = 1;
};

template <typename Net>
double run(ddp::World& world, const Options& o, std::vector<int64_t> input_shape, int64_t* param_count) {
  torch::manual_seed(0);
  ddp::DdpOptions d;
  d.strategy = ddp::parse_sync_strategy(o.sync);
  d.bucket_cap_bytes = static_cast<size_t>(o.bucket_mb * (1 << 20));
  d.first_bucket_cap_bytes = static_cast<size_t>(o.first_bucket_mb * (1 << 20));
  ddp::DistributedDataParallel<Net> model(Net(), world, d);
  *param_count = 0;
  for (const auto& p : model.module()->parameters()) *param_count += p.numel();
  torch::optim::SGD opt(model.module()->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
  auto gen = at::detail::createCPUGenerator(100 + world.rank());
  input_shape.insert(input_shape.begin(), o.batch);
  torch::Tensor x = at::randn(input_shape, gen);
  torch::Tensor y = at::randint(0, 10, {o.batch}, gen, at::kLong);
  auto step = [&] {
    opt.zero_grad();
    torch::nn::functional::cross_entropy(model(x), y).backward();
    model.finalize();
    opt.step();
  };
  for (int i = 0; i < o.warmup; ++i) step();
  world.barrier();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < o.steps; ++i) step();
  world.barrier();
  // The slowest rank's time is the step time.
  torch::Tensor secs = torch::tensor(
      {std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()}, torch::kFloat64);
  world.all_reduce(secs, ddp::ReduceOp::kMax);
  return secs.item<double>() * 1000 / o.steps;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Per-step time of ddprun's DistributedDataParallel", "ddp_step_bench"};
  Options o;
  app.add_option("--model", o.model, "cnn or wide-mlp")->check(CLI::IsMember({"cnn", "wide-mlp"}));
  app.add_option("--batch", o.batch, "Batch per rank");
  app.add_option("--steps", o.steps, "Timed steps");
  app.add_option("--warmup", o.warmup, "Untimed steps first");
  app.add_option("--sync", o.sync, "naive, flat, overlap or bucketed");
  app.add_option("--bucket-mb", o.bucket_mb, "Bucket cap in MiB");
  app.add_option("--first-bucket-mb", o.first_bucket_mb, "First bucket cap in MiB");
  CLI11_PARSE(app, argc, argv);

  auto world = ddp::init();
  int64_t params = 0;
  const double ms = o.model == "cnn" ? run<bench::Cnn>(*world, o, {1, 28, 28}, &params)
                                     : run<bench::WideMlp>(*world, o, {784}, &params);
  if (world->rank() == 0) {
    std::printf("{\"impl\": \"ddprun\", \"model\": \"%s\", \"params\": %lld, \"ranks\": %d, \"batch\": %d, "
                "\"sync\": \"%s\", \"bucket_mb\": %g, \"ms_per_step\": %.3f}\n",
                o.model.c_str(), static_cast<long long>(params), world->size(), o.batch, o.sync.c_str(),
                o.bucket_mb, ms);
  }
  return 0;
}
