// Benchmark worker: per-step time of ddp::DistributedDataParallel on a
// fixed batch of random data (no data loading), run under ddprun. Rank 0
// prints one JSON line: {"impl": "ddprun", "ms_per_step": ..., ...}.
// bench/ddp_step_torch.py is the same benchmark for PyTorch's DDP.
#include <CLI/CLI.hpp>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

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
  std::string overlap = "auto";
  std::string checkpoint_dir;  // with checkpoint_every > 0: rank 0 checkpoints
  int checkpoint_every = 0;
  // The limit: the same processes, threads and batch, forward, backward and
  // the optimizer step of the module itself, no DDP and no communication.
  bool no_comm = false;
};

struct Timing {
  double ms_per_step = 0;
  // Rank 0, per checkpoint: the training thread's time in save() and
  // waiting for the copy at the end of the next backward (the stall), and
  // the background copy's own time.
  double stall_ms = 0;
  double stall_median_ms = 0;  // the median save() plus the mean wait in fence()
  double copy_ms = 0;
  int checkpoints = 0;
  // Rank 0's step times: the steps right after a save (their forward and
  // backward ran beside the copy and the write), and the others.
  double ms_after_save = 0;
  double ms_other = 0;
};

template <typename Net>
Timing run(ddp::World& world, const Options& o, std::vector<int64_t> input_shape, int64_t* param_count) {
  torch::manual_seed(0);
  ddp::DdpOptions d;
  d.strategy = ddp::parse_sync_strategy(o.sync);
  d.bucket_cap_bytes = static_cast<size_t>(o.bucket_mb * (1 << 20));
  d.first_bucket_cap_bytes = static_cast<size_t>(o.first_bucket_mb * (1 << 20));
  d.overlap = ddp::parse_overlap(o.overlap);
  Net net;
  std::unique_ptr<ddp::DistributedDataParallel<Net>> model;
  if (!o.no_comm) model = std::make_unique<ddp::DistributedDataParallel<Net>>(net, world, d);
  *param_count = 0;
  for (const auto& p : net->parameters()) *param_count += p.numel();
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
  auto gen = at::detail::createCPUGenerator(100 + world.rank());
  input_shape.insert(input_shape.begin(), o.batch);
  torch::Tensor x = at::randn(input_shape, gen);
  torch::Tensor y = at::randint(0, 10, {o.batch}, gen, at::kLong);
  std::unique_ptr<ddp::Checkpointer> ckpt;
  if (o.checkpoint_every > 0) {
    ddp::CheckpointOptions co;
    co.dir = o.checkpoint_dir;
    co.every_steps = o.checkpoint_every;
    ckpt = std::make_unique<ddp::Checkpointer>(world, co);  // DDP's backward fences its copies
  }
  Timing timing;
  int64_t steps = 0;
  bool saved = false;  // the previous step saved
  double after_save = 0, other = 0;
  int after_saves = 0, others = 0;
  std::vector<double> save_ms;  // each save()'s time on the training thread
  // Marked like a training loop (examples/train) so that, with
  // DDPRUN_TRACE_FILE set, the bench measures what recording costs.
  ddp::Tracer& tracer = world.tracer();
  auto step = [&] {
    const auto t0 = std::chrono::steady_clock::now();
    tracer.step(steps);
    opt.zero_grad();
    if (model) {
      torch::nn::functional::cross_entropy((*model)(x), y).backward();
      model->finalize();
    } else {
      // Marked as DDP marks them, so that --trace compares phase by phase.
      ddp::TraceSpan forward(tracer, ddp::TracePhase::kForward);
      torch::Tensor loss = torch::nn::functional::cross_entropy(net->forward(x), y);
      forward.finish();
      ddp::TraceSpan backward(tracer, ddp::TracePhase::kBackward);
      loss.backward();
    }
    {
      ddp::TraceSpan optimizer_span(tracer, ddp::TracePhase::kOptimizer);
      opt.step();
    }
    ++steps;
    world.report_progress({.step = steps, .total_steps = o.warmup + o.steps, .samples = steps * o.batch * world.size()});
    const bool save = ckpt && ckpt->due(steps);
    if (save) {
      const auto s0 = std::chrono::steady_clock::now();
      ckpt->save(*net, opt, steps, 0, 0);
      save_ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - s0).count());
      ++timing.checkpoints;
    }
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    (saved ? after_save : other) += ms;
    ++(saved ? after_saves : others);
    saved = save;
  };
  for (int i = 0; i < o.warmup; ++i) step();
  if (ckpt) {
    // Steady state: one checkpoint already written, its buffers reusable.
    ckpt->save(*net, opt, steps, 0, 0);
    ckpt->wait();
  }
  const ddp::CheckpointReport before = ckpt ? ckpt->report() : ddp::CheckpointReport{};
  timing.checkpoints = 0;
  saved = false;
  after_save = other = 0;
  after_saves = others = 0;
  save_ms.clear();
  world.barrier();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < o.steps; ++i) step();
  tracer.end_step();
  world.barrier();
  // The slowest rank's time is the step time.
  torch::Tensor secs = torch::tensor(
      {std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()}, torch::kFloat64);
  world.all_reduce(secs, ddp::ReduceOp::kMax);
  timing.ms_per_step = secs.item<double>() * 1000 / o.steps;
  if (ckpt) {
    ckpt->wait();
    const ddp::CheckpointReport r = ckpt->report();
    const int n = std::max(1, timing.checkpoints);
    timing.stall_ms = (r.stall_seconds - before.stall_seconds) * 1000 / n;
    if (!save_ms.empty()) {
      double saves = 0;
      for (double x : save_ms) saves += x;
      const double fence_mean = timing.stall_ms - saves / n;
      std::sort(save_ms.begin(), save_ms.end());
      timing.stall_median_ms = save_ms[save_ms.size() / 2] + std::max(0.0, fence_mean);
    }
    timing.copy_ms = (r.copy_seconds - before.copy_seconds) * 1000 / n;
  }
  timing.ms_after_save = after_saves ? after_save / after_saves : 0;
  timing.ms_other = others ? other / others : 0;
  return timing;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Per-step time of ddprun's DistributedDataParallel", "ddp_step_bench"};
  Options o;
  app.add_option("--model", o.model, "cnn, wide-mlp (10M parameters) or mlp-100m")
      ->check(CLI::IsMember({"cnn", "wide-mlp", "mlp-100m"}));
  app.add_option("--batch", o.batch, "Batch per rank");
  app.add_option("--steps", o.steps, "Timed steps");
  app.add_option("--warmup", o.warmup, "Untimed steps first");
  app.add_option("--sync", o.sync, "naive, flat, overlap or bucketed");
  app.add_option("--bucket-mb", o.bucket_mb, "Bucket cap in MiB");
  app.add_option("--first-bucket-mb", o.first_bucket_mb, "First bucket cap in MiB");
  app.add_option("--overlap", o.overlap, "Buckets during backward: auto, on or off")
      ->check(CLI::IsMember({"auto", "on", "off"}));
  app.add_option("--checkpoint-dir", o.checkpoint_dir, "Where rank 0 checkpoints");
  app.add_option("--checkpoint-every", o.checkpoint_every, "Checkpoint every N steps (0: never)");
  app.add_flag("--no-comm", o.no_comm, "The module without DDP: forward, backward and step, no communication");
  CLI11_PARSE(app, argc, argv);

  auto world = ddp::init();
  int64_t params = 0;
  const Timing t = o.model == "cnn"        ? run<bench::Cnn>(*world, o, {1, 28, 28}, &params)
                   : o.model == "wide-mlp" ? run<bench::WideMlp>(*world, o, {784}, &params)
                                           : run<bench::Mlp100m>(*world, o, {784}, &params);
  if (world->rank() == 0) {
    std::printf("{\"impl\": \"%s\", \"model\": \"%s\", \"params\": %lld, \"ranks\": %d, \"batch\": %d, "
                "\"sync\": \"%s\", \"bucket_mb\": %g, \"ms_per_step\": %.3f, \"checkpoint_every\": %d, "
                "\"checkpoint_stall_ms\": %.3f, \"checkpoint_stall_median_ms\": %.3f, \"checkpoint_copy_ms\": %.3f, \"ms_after_save\": %.3f, "
                "\"ms_other\": %.3f}\n",
                o.no_comm ? "ddprun-no-comm" : "ddprun", o.model.c_str(), static_cast<long long>(params), world->size(),
                o.batch, o.no_comm ? "none" : o.sync.c_str(),
                o.bucket_mb, t.ms_per_step, o.checkpoint_every, t.stall_ms, t.stall_median_ms, t.copy_ms, t.ms_after_save, t.ms_other);
  }
  return 0;
}
