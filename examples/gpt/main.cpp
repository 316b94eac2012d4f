// A GPT-2-like language model trained data-parallel with worker_lib: the
// GPU benchmark job of issue 10, and a CPU-sized model for tests.
//
//   ddprun --nproc 1 gpt --model small --device cuda --dtype bf16 --peak h100
//   ddprun --nproc 2 gpt --model tiny --steps 40        # CPU, Gloo
//
// The loop reads like PyTorch's: forward under autocast, backward (which
// ends with the gradients averaged over the ranks), clip, AdamW step. On a
// GPU that step is captured once as a CUDA graph and replayed
// (ddp::CapturedStep; --capture off runs it kernel by kernel). The
// learning rate warms up linearly and then follows a cosine down to a tenth
// of its peak. Rank 0 prints loss, tokens/s and MFU; --summary-json writes
// the final figures and a checksum of the final parameters.
#include <CLI/CLI.hpp>
#include <torch/cuda.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

#include "autocast.h"
#include "data.h"
#include "ddp/ddp.h"
#include "model.h"
#include "profile.h"

namespace {

// A flag value that is wrong: main prints it on one line and exits 2.
struct FlagError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Options {
  std::string model = "tiny";
  int64_t layers = 0, heads = 0, dim = 0, context = 0, vocab = 0;  // 0: the preset's
  int64_t seq_len = 0;     // tokens per sample; 0: the context
  int64_t batch_size = 8;  // sequences per micro-batch per rank
  int grad_accum = 1;
  int64_t steps = 50;
  double lr = 1e-3;
  int64_t warmup = 0;  // 0: a tenth of the steps
  double weight_decay = 0.1;
  double clip = 1.0;
  std::string device = "cpu";
  std::string dtype = "fp32";
  std::string comm_dtype = "fp32";
  double bucket_mb = 25;
  std::string data;        // a file; empty: the Debian corpus
  std::string data_cache;  // empty: $XDG_CACHE_HOME or ~/.cache
  uint64_t seed = 0;
  std::string checkpoint_dir;
  int64_t checkpoint_every = 0;
  int keep_checkpoints = 3;
  double peak_tflops = 0;
  std::string peak;  // h100 | h200
  int64_t log_every = 10;
  std::string summary_json;
  bool print_steps = false;
  std::string optimizer = "auto";  // ddp::OptimizerImpl: auto, plain, foreach, fused
  std::string capture = "auto";    // the step as a CUDA graph: auto, on, off
  bool breakdown = false;
  std::string profile;  // a Chrome trace of a few steps (rank 0)
  int profile_steps = 3;
};

// Dense bf16 tensor-core peaks per GPU (NVIDIA's datasheets, SXM parts).
double peak_tflops_of(const std::string& gpu) {
  if (gpu == "h100" || gpu == "h200") return 989.4;
  throw FlagError("--peak " + gpu + ": unknown GPU (expected h100 or h200, or give --peak-tflops)");
}

std::string default_cache() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  std::string base = xdg && *xdg ? xdg : std::string(home && *home ? home : "/tmp") + "/.cache";
  return base + "/ddprun/gpt-debian-corpus-v1.bin";
}

// FNV-1a over the bytes of every parameter: equal checksums, equal models.
std::string checksum(const torch::Tensor& flat) {
  torch::Tensor t = flat.contiguous();
  uint64_t h = 1469598103934665603ull;
  const auto* bytes = static_cast<const uint8_t*>(t.data_ptr());
  for (size_t i = 0; i < t.nbytes(); ++i) h = (h ^ bytes[i]) * 1099511628211ull;
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

torch::Tensor flat_parameters_cpu(const torch::nn::Module& m) {
  std::vector<torch::Tensor> v;
  for (const auto& p : m.parameters()) v.push_back(p.detach().to(torch::kCPU).to(torch::kFloat).reshape(-1));
  return torch::cat(v);
}

// Linear warmup to the peak, then a cosine down to a tenth of it.
double lr_at(const Options& o, int64_t step, int64_t warmup) {
  if (step < warmup) return o.lr * static_cast<double>(step + 1) / static_cast<double>(warmup);
  const double progress = static_cast<double>(step - warmup) / std::max<int64_t>(1, o.steps - warmup);
  const double min_lr = 0.1 * o.lr;
  return min_lr + 0.5 * (o.lr - min_lr) * (1 + std::cos(M_PI * std::min(1.0, progress)));
}

// AdamW with weight decay on matrices (embeddings included) only, as GPT-2
// trainers do; biases and LayerNorm gains are not decayed. worker_lib's
// AdamW steps all parameters in a few fused (or foreach) kernels; "plain"
// is LibTorch's own, about ten kernels per parameter.
std::unique_ptr<ddp::AdamW> make_optimizer(gpt::Gpt& model, const Options& o) {
  std::vector<torch::Tensor> decay, no_decay;
  for (const auto& p : model->parameters()) (p.dim() >= 2 ? decay : no_decay).push_back(p);
  auto opts = [&](double wd) {
    return std::make_unique<torch::optim::AdamWOptions>(
        torch::optim::AdamWOptions(o.lr).betas({0.9, 0.95}).eps(1e-8).weight_decay(wd));
  };
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay, opts(o.weight_decay));
  groups.emplace_back(no_decay, opts(0.0));
  return std::make_unique<ddp::AdamW>(std::move(groups), torch::optim::AdamWOptions(o.lr).betas({0.9, 0.95}),
                                      ddp::parse_optimizer_impl(o.optimizer));
}

// Per-phase times of the timed steps for --breakdown: mark(phase) waits for
// the device and adds the time since the last mark to that phase.
class Breakdown {
 public:
  enum Phase { kData, kForward, kBackward, kClip, kOptimizer, kCount };
  Breakdown(bool on, bool cuda) : on_(on), cuda_(cuda) {}
  void mark(Phase p) {
    if (!on_) return;
    if (cuda_) torch::cuda::synchronize();
    const auto now = std::chrono::steady_clock::now();
    step_[p] += std::chrono::duration<double>(now - last_).count();
    last_ = now;
  }
  void keep() {  // the step just done is a timed one
    for (int i = 0; i < kCount; ++i) total_[i] += step_[i];
    ++steps_;
  }
  void restart() {
    step_.fill(0);
    last_ = std::chrono::steady_clock::now();
  }
  nlohmann::json milliseconds() const {
    nlohmann::json j = nlohmann::json::object();
    if (!on_ || steps_ == 0) return j;
    static const char* names[kCount] = {"data", "forward", "backward", "clip", "optimizer"};
    for (int i = 0; i < kCount; ++i) j[names[i]] = 1e3 * total_[i] / steps_;
    return j;
  }

 private:
  bool on_, cuda_;
  std::array<double, kCount> step_{}, total_{};
  int64_t steps_ = 0;
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
};

int run(Options opt) {
  // Flags first, before any process joins the job.
  gpt::GptConfig cfg = gpt::GptConfig::preset(opt.model);
  if (opt.layers) cfg.layers = opt.layers;
  if (opt.heads) cfg.heads = opt.heads;
  if (opt.dim) cfg.dim = opt.dim;
  if (opt.context) cfg.context = opt.context;
  if (opt.vocab) cfg.vocab = opt.vocab;
  try {
    cfg.validate();
  } catch (const std::invalid_argument& e) {
    throw FlagError(e.what());
  }
  if (cfg.vocab < 256) throw FlagError("--vocab " + std::to_string(cfg.vocab) + ": byte-level data needs at least 256");
  const int64_t T = opt.seq_len ? opt.seq_len : cfg.context;
  if (T > cfg.context) {
    throw FlagError("--seq-len " + std::to_string(T) + " exceeds the context " + std::to_string(cfg.context));
  }
  const bool cuda = opt.device == "cuda";
  if (cuda && !torch::cuda::is_available()) {
    throw FlagError("--device cuda: no CUDA device visible (or this LibTorch is built without CUDA)");
  }
  if (!opt.peak.empty()) opt.peak_tflops = peak_tflops_of(opt.peak);
  if (opt.optimizer == "fused" && !ddp::fused_adam_available(cuda ? c10::DeviceType::CUDA : c10::DeviceType::CPU)) {
    throw FlagError("--optimizer fused: this LibTorch (" + std::string(TORCH_VERSION) + ") has no fused AdamW for " +
                    opt.device + " (LibTorch >= 2.4); use foreach or auto");
  }
  const int64_t warmup = opt.warmup ? opt.warmup : std::max<int64_t>(1, opt.steps / 10);
  if (opt.capture == "on" && opt.device != "cuda") {
    throw FlagError("--capture on: CUDA graphs need a GPU (--device cuda); on " + opt.device +
                    " --capture auto runs the same step uncaptured");
  }
  if (opt.breakdown && opt.capture == "on") {
    throw FlagError("--breakdown times each phase apart, which a captured step cannot: use --capture off");
  }
  // auto: the step through ddp::CapturedStep, captured on a GPU where the
  // optimizer allows (eager everywhere else); off: the loop kernel by kernel.
  const bool through_captured = opt.capture != "off" && !opt.breakdown;

  auto world = ddp::init();
  // Both change when the job shrinks (a node lost, no spare): read again
  // after every step.
  int rank = world->rank(), ws = world->size();
  const torch::Device device = cuda ? torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(
                                                                      world->local_rank() % torch::cuda::device_count()))
                                    : torch::Device(torch::kCPU);

  // Data: every rank loads the same bytes and reads its shard of the windows.
  torch::Tensor tokens = opt.data.empty()
                             ? gpt::load_debian_corpus(opt.data_cache.empty() ? default_cache() : opt.data_cache)
                             : gpt::read_bytes(opt.data);
  gpt::TokenWindows windows(tokens, T);
  ddp::SamplerOptions so;
  so.dataset_size = windows.size();
  so.rank = rank;
  so.world_size = ws;
  so.seed = opt.seed;
  so.drop_last = true;
  ddp::DistributedSampler sampler(so);
  if (sampler.num_samples() < opt.batch_size) {
    throw FlagError("--batch-size " + std::to_string(opt.batch_size) + " exceeds the " +
                    std::to_string(sampler.num_samples()) + " windows of " + std::to_string(T) +
                    " tokens each rank has");
  }

  torch::manual_seed(opt.seed);  // the same model on every rank; DDP also broadcasts rank 0's
  gpt::Gpt net(cfg);
  net->to(device);
  ddp::DdpOptions ddp_options;
  ddp_options.comm_dtype = ddp::parse_comm_dtype(opt.comm_dtype);
  ddp_options.bucket_cap_bytes = static_cast<size_t>(opt.bucket_mb * (1 << 20));
  ddp_options.broadcast_buffers = false;  // the model has no buffers
  ddp::DistributedDataParallel<gpt::Gpt> model(net, *world, ddp_options);
  auto optimizer = make_optimizer(net, opt);
  const std::string not_capturable = cuda ? optimizer->why_not_capturable(device) : "";
  if (opt.capture == "on" && !not_capturable.empty()) throw FlagError("--capture on: " + not_capturable);

  int64_t step = 0, epoch = 0;
  std::unique_ptr<ddp::Checkpointer> ckpt;
  if (!opt.checkpoint_dir.empty()) {
    ddp::CheckpointOptions co;
    co.dir = opt.checkpoint_dir;
    co.every_steps = opt.checkpoint_every;
    co.keep = opt.keep_checkpoints;
    ckpt = std::make_unique<ddp::Checkpointer>(*world, co);  // records into the World's trace and progress
    if (auto state = ckpt->restore()) {
      ddp::apply_state(*state, *net, *optimizer);
      step = state->step;
      epoch = state->epoch;
      sampler.set_epoch(epoch);
      sampler.set_global_position(state->sampler_position);  // any world size: the rest is shared out
      if (rank == 0) {
        std::printf("resumed from %s at step %lld\n", ckpt->last_path().c_str(), static_cast<long long>(step));
      }
    } else {
      sampler.set_epoch(0);
    }
  }
  const int64_t start_step = step;

  const double flops_per_token = net->flops_per_token(T);
  // Tokens of one step over the world (it shrinks when a node is lost).
  auto tokens_per_step = [&] { return static_cast<double>(opt.batch_size) * T * opt.grad_accum * ws; };
  if (rank == 0) {
    std::printf("gpt %s: %.2fM parameters, %lld layers, %lld heads, %lld wide, context %lld, vocab %lld; "
                "%d ranks x batch %lld x %d micro-batches x %lld tokens; %s %s, grads all-reduced in %s; "
                "%s AdamW; data %lld tokens\n",
                opt.model.c_str(), net->num_parameters() / 1e6, static_cast<long long>(cfg.layers),
                static_cast<long long>(cfg.heads), static_cast<long long>(cfg.dim),
                static_cast<long long>(cfg.context), static_cast<long long>(cfg.vocab), ws,
                static_cast<long long>(opt.batch_size), opt.grad_accum, static_cast<long long>(T),
                device.str().c_str(), opt.dtype.c_str(), opt.comm_dtype.c_str(), ddp::to_string(optimizer->impl()),
                static_cast<long long>(tokens.numel()));
    std::fflush(stdout);
  }

  // The next micro-batch of this rank: a full batch always, so a short tail
  // of an epoch is skipped and the next epoch begins.
  auto next_batch = [&]() {
    if (sampler.position() + opt.batch_size > sampler.num_samples()) sampler.set_epoch(++epoch);
    auto idx = *sampler.next_batch(opt.batch_size);
    auto [x, y] = windows.batch(idx);
    return std::make_pair(x.to(device, /*non_blocking=*/true), y.to(device, /*non_blocking=*/true));
  };
  auto save = [&] { ckpt->save(*net, *optimizer, step, epoch, sampler.global_position()); };

  const bool bf16 = opt.dtype == "bf16";
  // --breakdown: the device is waited for at each phase's end, so each
  // phase's time is its own (and the step slower: no overlap between them).
  Breakdown phases(opt.breakdown, cuda);
  // --profile: steps 3.. of this run (after the warm-up), rank 0 only.
  gpt::StepProfiler profiler(rank == 0 ? opt.profile : std::string(), start_step + 3, opt.profile_steps);
  const bool plain = optimizer->impl() == ddp::OptimizerImpl::kPerParameter;
  double first_loss = -1, last_loss = 0;
  double timed_seconds = 0;
  int64_t timed_steps = 0;
  double timed_tokens = 0;
  // --trace: step boundaries, data and optimizer (DDP records forward,
  // backward and the all-reduces). CPU times: on a GPU they end when the
  // work is queued, not done.
  ddp::Tracer& tracer = world->tracer();
  // Checkpointless recovery: a peer that dies inside a step is healed
  // around (a replacement takes this state from a survivor) and the step
  // runs again; the epoch travels with the sampler.
  ddp::Healer healer(*world, {.module = net.get(),
                              .optimizer = optimizer.get(),
                              .sampler = &sampler,
                              .step = &step,
                              .counters = {&epoch}});
  if (healer.joined()) {
    std::printf("rank %d joined at step %lld with the state of its peers\n", rank, static_cast<long long>(step));
  }

  // The parts of a step. Zero the gradients in place: after the first step
  // each .grad is a view of its DDP bucket, and keeping it so spares a copy
  // per parameter per step (and a captured step must keep its tensors).
  // (LibTorch 2.x's zero_grad() sets them to none by default; 1.13's zeroes
  // in place and takes no argument.)
  auto zero_grads = [&] {
#if TORCH_VERSION_MAJOR >= 2
    optimizer->zero_grad(/*set_to_none=*/false);
#else
    optimizer->zero_grad();
#endif
  };
  // Forward and backward of micro-batch j; the last one's backward returns
  // with the gradients averaged over the ranks. Returns its loss.
  auto forward_backward = [&](const torch::Tensor& x, const torch::Tensor& y, int j) {
    torch::Tensor loss;
    {
      gpt::AutocastGuard autocast(device.type(), torch::kBFloat16, bf16);
      torch::Tensor logits = model(x);
      loss = torch::nn::functional::cross_entropy(logits.view({-1, cfg.vocab}), y.view({-1}));
    }
    phases.mark(Breakdown::kForward);
    if (j + 1 < opt.grad_accum) {
      auto no_sync = model.no_sync();  // accumulate locally
      (loss / opt.grad_accum).backward();
    } else {
      (loss / opt.grad_accum).backward();
    }
    phases.mark(Breakdown::kBackward);
    return loss.detach();
  };
  // Clip and the optimizer step; returns the norm before clipping. LibTorch's
  // clip returns a double, so it waits for the device every step;
  // worker_lib's returns the norm as a tensor.
  auto clip_and_step = [&] {
    ddp::TraceSpan optimizer_span(tracer, ddp::TracePhase::kOptimizer);
    torch::Tensor n = plain ? torch::full({}, torch::nn::utils::clip_grad_norm_(net->parameters(), opt.clip),
                                          torch::kDouble)
                            : ddp::clip_grad_norm_(net->parameters(), opt.clip);
    phases.mark(Breakdown::kClip);
    optimizer->step();
    phases.mark(Breakdown::kOptimizer);
    return n;
  };
  // The whole step on this step's micro-batches (x0, y0, x1, y1, ...):
  // what a CUDA graph captures. Returns the summed loss and the norm.
  std::unique_ptr<ddp::CapturedStep> captured;
  if (through_captured) {
    ddp::CapturedStepOptions co;
    co.capture = cuda && not_capturable.empty();
    captured = std::make_unique<ddp::CapturedStep>(
        *world, *optimizer,
        [&](const std::vector<torch::Tensor>& in) {
          zero_grads();
          torch::Tensor sum = torch::zeros({}, torch::TensorOptions().device(device));
          for (int j = 0; j < opt.grad_accum; ++j) sum += forward_backward(in[2 * j], in[2 * j + 1], j);
          torch::Tensor n = clip_and_step();
          return std::vector<torch::Tensor>{sum, n};
        },
        co);
  }
  while (step < opt.steps) {
    profiler.at_step(step);
    const auto t0 = std::chrono::steady_clock::now();
    phases.restart();
    const double lr = lr_at(opt, step, warmup);
    torch::Tensor norm;  // on the device: read only when printed
    torch::Tensor loss_sum;
    healer.step([&] {
      tracer.step(step);
      for (auto& group : optimizer->param_groups()) {
        static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
      }
      if (captured) {
        std::vector<torch::Tensor> in;
        for (int j = 0; j < opt.grad_accum; ++j) {
          ddp::TraceSpan data(tracer, ddp::TracePhase::kData);
          auto [x, y] = next_batch();
          in.push_back(x);
          in.push_back(y);
        }
        std::vector<torch::Tensor> out = captured->run(in);  // the graph's tensors: read before the next run
        loss_sum = out[0];
        norm = out[1];
      } else {
        zero_grads();
        loss_sum = torch::zeros({}, torch::TensorOptions().device(device));
        for (int j = 0; j < opt.grad_accum; ++j) {
          ddp::TraceSpan data(tracer, ddp::TracePhase::kData);
          auto [x, y] = next_batch();
          data.finish();
          phases.mark(Breakdown::kData);
          loss_sum += forward_backward(x, y, j);
        }
        norm = clip_and_step();
      }
      ++step;  // the commit (ddp::Healer)
    });
    rank = world->rank();
    ws = world->size();
    // Reading the loss waits for the GPU: the step's time is then real.
    const double loss = loss_sum.item<double>() / opt.grad_accum;
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    world->report_progress({.step = step,
                            .total_steps = opt.steps,
                            .epoch = static_cast<int32_t>(epoch),
                            .loss = loss,
                            .samples = step * opt.batch_size * opt.grad_accum * ws});  // sequences
    if (first_loss < 0) first_loss = loss;
    last_loss = loss;
    if (step > start_step + 1) {  // the first step warms caches and allocators
      timed_seconds += secs;
      timed_tokens += tokens_per_step();
      ++timed_steps;
      phases.keep();
    }
    if (rank == 0 && (step % opt.log_every == 0 || step == opt.steps || step == start_step + 1)) {
      const double tps = tokens_per_step() / secs;
      std::string mfu = "n/a";
      if (opt.peak_tflops > 0) {
        char b[32];
        std::snprintf(b, sizeof(b), "%.1f%%", 100 * tps * flops_per_token / (opt.peak_tflops * 1e12 * ws));
        mfu = b;
      }
      std::printf("step %lld/%lld | loss %.4f | lr %.2e | norm %.3f | %.1f ms | %.0f tok/s | MFU %s\n",
                  static_cast<long long>(step), static_cast<long long>(opt.steps), loss, lr, norm.item<double>(),
                  secs * 1e3,
                  tps, mfu.c_str());
      std::fflush(stdout);
    }
    if (opt.print_steps && rank == 0) {
      std::printf("step %lld done\n", static_cast<long long>(step));
      std::fflush(stdout);
    }
    if (ckpt && ckpt->due(step)) save();
  }
  tracer.end_step();
  profiler.finish();
  ddp::CheckpointReport saved;
  if (ckpt) {
    if (ckpt->last_saved_step() != step && step > start_step) save();
    saved = ckpt->finish();
  }
  const std::string step_kind = captured ? captured->describe() : std::string("kernel by kernel (--capture off)");
  if (rank == 0) std::printf("step: %s\n", step_kind.c_str());

  // Every rank must end with rank 0's parameters, bit for bit.
  torch::Tensor mine = flat_parameters_cpu(*net);
  torch::Tensor all = world->cpu().all_gather(mine);
  for (int r = 1; r < ws; ++r) {
    if (!torch::equal(all[r], all[0])) {
      throw std::runtime_error("parameters differ between rank 0 and rank " + std::to_string(r));
    }
  }
  const double tokens_per_s = timed_steps ? timed_tokens / timed_seconds : 0;
  const double mfu = opt.peak_tflops > 0 ? tokens_per_s * flops_per_token / (opt.peak_tflops * 1e12 * ws) : 0;
  if (rank == 0) {
    const std::string sum = checksum(mine);
    std::printf("done: %lld steps, loss %.4f -> %.4f, %.0f tokens/s over %lld timed steps, MFU %s; "
                "parameters identical on all %d ranks (checksum %s)\n",
                static_cast<long long>(step - start_step), first_loss, last_loss, tokens_per_s,
                static_cast<long long>(timed_steps),
                opt.peak_tflops > 0 ? (std::to_string(100 * mfu).substr(0, 5) + "%").c_str() : "n/a", ws,
                sum.c_str());
    if (!opt.summary_json.empty()) {
      nlohmann::json j = {{"steps", step},
                          {"start_step", start_step},
                          {"first_loss", first_loss},
                          {"final_loss", last_loss},
                          {"tokens_per_s", tokens_per_s},
                          {"mfu", mfu},
                          {"flops_per_token", flops_per_token},
                          {"params", net->num_parameters()},
                          {"world_size", ws},
                          {"model", opt.model},
                          {"device", device.str()},
                          {"dtype", opt.dtype},
                          {"param_checksum", sum},
                          {"checkpoints_written", saved.written},
                          // What the saves cost the training thread (stall) and the copies in the background.
                          {"checkpoint_stall_s", saved.stall_seconds},
                          {"checkpoint_copy_s", saved.copy_seconds},
                          {"step_s", timed_steps ? timed_seconds / timed_steps : 0.0},
                          // The comparisons of the replicas (ddprun --verify-every): how many, and what they cost.
                          {"replica_checks", healer.report().checks},
                          {"replica_check_s", healer.report().verify_seconds},
                          {"optimizer", ddp::to_string(optimizer->impl())},
                          {"step", step_kind},
                          {"breakdown_ms", phases.milliseconds()}};
      if (opt.breakdown) std::printf("breakdown (ms per step, device waited for): %s\n", phases.milliseconds().dump().c_str());
      std::ofstream out(opt.summary_json);
      out << j.dump(2) << "\n";
      if (!out) throw std::runtime_error("cannot write --summary-json " + opt.summary_json);
    }
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"GPT-2-like language model, trained data-parallel (run it under ddprun)", "gpt"};
  Options o;
  app.add_option("--model", o.model, "Preset: tiny (CPU) or small (GPT-2 small) [tiny]")
      ->check(CLI::IsMember({"tiny", "small"}));
  app.add_option("--layers", o.layers, "Transformer blocks [preset]");
  app.add_option("--heads", o.heads, "Attention heads [preset]");
  app.add_option("--dim", o.dim, "Embedding width [preset]");
  app.add_option("--context", o.context, "Longest sequence [preset]");
  app.add_option("--vocab", o.vocab, "Vocabulary size, >= 256 [preset]");
  app.add_option("--seq-len", o.seq_len, "Tokens per sequence [the context]")->check(CLI::PositiveNumber);
  app.add_option("--batch-size", o.batch_size, "Sequences per micro-batch on each rank [8]")->check(CLI::PositiveNumber);
  app.add_option("--grad-accum", o.grad_accum, "Micro-batches per step [1]")->check(CLI::PositiveNumber);
  app.add_option("--steps", o.steps, "Optimizer steps [50]")->check(CLI::PositiveNumber);
  app.add_option("--lr", o.lr, "Peak learning rate [1e-3]")->check(CLI::PositiveNumber);
  app.add_option("--warmup", o.warmup, "Warmup steps [a tenth of --steps]")->check(CLI::NonNegativeNumber);
  app.add_option("--weight-decay", o.weight_decay, "AdamW weight decay of matrices [0.1]")->check(CLI::NonNegativeNumber);
  app.add_option("--clip", o.clip, "Gradient norm clip [1.0]")->check(CLI::PositiveNumber);
  app.add_option("--device", o.device, "cpu or cuda; cuda picks GPU LOCAL_RANK [cpu]")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--dtype", o.dtype, "fp32, or bf16 autocast for the forward [fp32]")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  app.add_option("--comm-dtype", o.comm_dtype, "Gradients all-reduced in fp32 or bf16 [fp32]")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  app.add_option("--bucket-mb", o.bucket_mb, "DDP bucket cap in MiB [25]")->check(CLI::PositiveNumber);
  app.add_option("--data", o.data, "Train on this file's bytes [the Debian corpus]")->check(CLI::ExistingFile);
  app.add_option("--data-cache", o.data_cache, "Where the Debian corpus is cached [~/.cache/ddprun/...]");
  app.add_option("--seed", o.seed, "Seed of the model and the shuffling [0]");
  app.add_option("--checkpoint-dir", o.checkpoint_dir, "Resume from the newest checkpoint here and write new ones");
  app.add_option("--checkpoint-every", o.checkpoint_every, "Checkpoint every N steps [0: at the end]")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--keep-checkpoints", o.keep_checkpoints, "Checkpoints kept [3]")->check(CLI::PositiveNumber);
  app.add_option("--peak-tflops", o.peak_tflops, "Peak TFLOPS per rank for MFU")->check(CLI::PositiveNumber);
  app.add_option("--peak", o.peak, "MFU against this GPU's dense bf16 peak: h100 or h200");
  app.add_option("--log-every", o.log_every, "Print every N steps [10]")->check(CLI::PositiveNumber);
  app.add_option("--summary-json", o.summary_json, "Write final figures and a parameter checksum here");
  app.add_flag("--print-steps", o.print_steps, "Rank 0 prints \"step N done\" after every step (tests)");
  app.add_option("--optimizer", o.optimizer,
                 "AdamW implementation: auto (fused where LibTorch has it, else foreach), fused, foreach, "
                 "or plain (LibTorch's own, with its clip that waits for the device) [auto]")
      ->check(CLI::IsMember({"auto", "plain", "foreach", "fused"}));
  app.add_option("--profile", o.profile,
                 "Write a Chrome trace (CPU ops, CUDA kernels) of steps 3.. to this file (LibTorch 2.x)");
  app.add_option("--profile-steps", o.profile_steps, "Steps in the --profile trace [3]")->check(CLI::PositiveNumber);
  app.add_option("--capture", o.capture,
                 "The step as a CUDA graph: auto (on a GPU where the optimizer allows; eager through the same "
                 "path elsewhere), on (an error where it cannot), off (kernel by kernel) [auto]")
      ->check(CLI::IsMember({"auto", "on", "off"}));
  app.add_flag("--breakdown", o.breakdown,
               "Time data, forward, backward, clip and optimizer apart (waits for the device after each)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {
    return app.exit(e);  // --help
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "gpt: %s\n", e.what());
    return 2;
  }
  try {
    return run(o);
  } catch (const FlagError& e) {
    std::fprintf(stderr, "gpt: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpt: %s\n", e.what());
    return 1;
  }
}
