// The default ddprun job: data-parallel training of a small CNN on
// Fashion-MNIST with ddp::DistributedDataParallel.
//
// Each rank reads its shard of every epoch's shuffled order (a
// DistributedSampler), gradients are averaged over the ranks during backward
// (bucketed all-reduce, or another --sync strategy), and every rank takes the
// same optimizer step. Rank 0 prints per-epoch loss, test accuracy and
// throughput; --summary-json writes the final figures and a checksum of the
// final parameters so that runs can be compared from outside.
//
//   ddprun --nproc 4 train
//   ddprun --nproc 2 train --epochs 3 --grad-accum 2 --sync overlap
#include <CLI/CLI.hpp>
#include <torch/torch.h>

#include <bit>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "ddp/ddp.h"
#include "fashion_mnist.h"
#include "models.h"

namespace {

struct Options {
  int epochs = 3;
  int batch_size = 32;  // per rank, per micro-batch
  double lr = 0.05;
  uint64_t seed = 0;
  int grad_accum = 1;
  double bucket_mb = 25;
  double first_bucket_mb = 1;
  std::string sync = "bucketed";
  std::string overlap = "auto";
  std::string model = "cnn";
  std::string data = examples::kFashionMnistDir;
  int64_t limit = 0;  // use only the first N training images (0: all)
  std::string summary_json;
  std::string checkpoint_dir;
  int64_t checkpoint_every = 0;  // steps
  double checkpoint_every_seconds = 0;
  int keep_checkpoints = 3;
  bool print_steps = false;
  bool keep_global_batch = false;  // when the job shrinks, each rank reads more per step
  // --flip-bit RANK:STEP[:BIT] (for tests): silent data corruption, one bit.
  struct Flip {
    int rank;
    int64_t step;
    int bit;
  };
  std::vector<Flip> flips;
};

// A test's stand-in for a faulty chip: one bit of the first parameter's
// first element flips, on this rank only. ddprun's comparison of the
// replicas (--verify-every) finds it and repairs it. (The lowest bits of a
// float can wash out in training's rounding within a few steps: the
// default is bit 16, a change of about 1%, which stays.)
void flip_bit(torch::nn::Module& m, int bit) {
  torch::NoGradGuard no_grad;
  torch::Tensor first = m.parameters().front();
  first.view(torch::kInt32).view({-1}).narrow(0, 0, 1).bitwise_xor_(1 << bit);
}

// FNV-1a over the bytes of every parameter: equal checksums, equal models.
std::string checksum(const torch::nn::Module& m) {
  uint64_t h = 1469598103934665603ull;
  for (const auto& p : m.parameters()) {
    torch::Tensor t = p.detach().contiguous();
    const auto* bytes = static_cast<const uint8_t*>(t.data_ptr());
    for (size_t i = 0; i < t.nbytes(); ++i) h = (h ^ bytes[i]) * 1099511628211ull;
  }
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

// Rank 0's last word on its checkpoints: failed saves are counted, never fatal.
void print_checkpoint_report(const ddp::CheckpointReport& r) {
  std::printf("checkpoints: %lld written, %lld failed%s%s; training waited %.1f ms for them\n",
              static_cast<long long>(r.written), static_cast<long long>(r.failed), r.failed ? " (newest failure: " : "",
              r.failed ? (r.last_error + ")").c_str() : "", 1000 * r.stall_seconds);
  std::fflush(stdout);
}

// Test accuracy over the whole test set: each rank scores a shard and the
// counts are summed.
template <typename Net>
double test_accuracy(ddp::World& world, Net& net, const examples::Dataset& test) {
  torch::NoGradGuard no_grad;
  // No collectives until the end: say so, and no learned hang timeout
  // (--hang-timeout auto) takes the silence for a hang.
  const ddp::PhaseScope evaluating = world.announce(ddp::Phase::kEvaluation);
  net->eval();
  const int ws = world.size(), rank = world.rank();
  const int64_t per_rank = (test.size() + ws - 1) / ws;
  const int64_t begin = std::min<int64_t>(rank * per_rank, test.size());
  const int64_t len = std::min<int64_t>(per_rank, test.size() - begin);
  torch::Tensor counts = torch::zeros({2}, torch::kInt64);
  for (int64_t at = 0; at < len; at += 1000) {
    world.heartbeat();  // for an explicit --hang-timeout, which counts announced silence too
    const int64_t n = std::min<int64_t>(1000, len - at);
    torch::Tensor pred = net->forward(test.slice(begin + at, n)).argmax(1);
    counts[0] += pred.eq(test.labels.narrow(0, begin + at, n)).sum();
    counts[1] += n;
  }
  world.all_reduce(counts, ddp::ReduceOp::kSum);
  net->train();
  return static_cast<double>(counts[0].item<int64_t>()) / counts[1].item<int64_t>();
}

template <typename Net>
int run(const Options& opt) {
  // The data first: a standby worker (waiting in ddp::init() for a restart
  // or a heal) then has it loaded by the time it is called.
  examples::Dataset train = examples::load_fashion_mnist(opt.data, "train");
  examples::Dataset test = examples::load_fashion_mnist(opt.data, "t10k");
  if (opt.limit > 0 && opt.limit < train.size()) {
    train.images = train.images.narrow(0, 0, opt.limit);
    train.labels = train.labels.narrow(0, 0, opt.limit);
  }

  auto world = ddp::init();
  // Both change when a lost node's ranks go and the job goes on without
  // them (ddp::Healer): read again after every step.
  int rank = world->rank(), ws = world->size();

  torch::manual_seed(opt.seed);  // the same on every rank; DDP also broadcasts rank 0's
  ddp::DdpOptions ddp_options;
  ddp_options.strategy = ddp::parse_sync_strategy(opt.sync);
  ddp_options.bucket_cap_bytes = static_cast<size_t>(opt.bucket_mb * (1 << 20));
  ddp_options.first_bucket_cap_bytes = static_cast<size_t>(opt.first_bucket_mb * (1 << 20));
  ddp_options.overlap = ddp::parse_overlap(opt.overlap);
  ddp::DistributedDataParallel<Net> model(Net(), *world, ddp_options);
  torch::optim::SGD optimizer(model.module()->parameters(),
                              torch::optim::SGDOptions(opt.lr).momentum(0.9));

  ddp::SamplerOptions so;
  so.dataset_size = train.size();
  so.rank = rank;
  so.world_size = ws;
  so.seed = opt.seed;
  ddp::DistributedSampler sampler(so);
  if (rank == 0) {
    std::printf("%s on %lld images: %d ranks x %lld per epoch, batch %d per rank x %d micro-batches, "
                "sync %s over %s%s\n",
                opt.model.c_str(), static_cast<long long>(train.size()), ws,
                static_cast<long long>(sampler.num_samples()), opt.batch_size, opt.grad_accum,
                opt.sync.c_str(), world->cpu().backend().c_str(),
                model.reducer().overlaps_backward() ? "" : " (buckets after backward)");
  }

  int64_t steps = 0;
  int64_t start_epoch = 0, start_global = 0;  // start_global: samples of the epoch the world has read
  // The world size the global batch was set for (--keep-global-batch).
  int64_t batch_world = ws;

  // Checkpoints: rank 0 writes them in the background; at start, the newest
  // sound one (if any) is read by rank 0 and broadcast, and training goes on
  // from its step. SIGTERM/SIGINT then mean: checkpoint and stop.
  std::unique_ptr<ddp::Checkpointer> ckpt;
  std::unique_ptr<ddp::StopFlag> stop;
  if (!opt.checkpoint_dir.empty()) {
    ddp::CheckpointOptions co;
    co.dir = opt.checkpoint_dir;
    co.every_steps = opt.checkpoint_every;
    co.every_seconds = opt.checkpoint_every_seconds;
    co.keep = opt.keep_checkpoints;
    ckpt = std::make_unique<ddp::Checkpointer>(*world, co);  // records into the World's trace and progress
    stop = std::make_unique<ddp::StopFlag>();
    if (auto state = ckpt->restore()) {
      ddp::apply_state(*state, *model.module(), optimizer);
      steps = state->step;
      start_epoch = state->epoch;
      // Checkpoints count the samples the whole world has read this epoch,
      // so a job that resumes with more or fewer nodes starts at the same
      // point of the epoch (each rank then reads its share of the rest).
      start_global = state->sampler_position;
      if (rank == 0) {
        std::printf("resumed from %s at step %lld (epoch %lld, sample %lld)\n", ckpt->last_path().c_str(),
                    static_cast<long long>(steps), static_cast<long long>(start_epoch + 1),
                    static_cast<long long>(start_global));
      }
    }
  }
  // The state after `steps`, as the next run must see it: an epoch read to
  // its end continues with the next one.
  auto save = [&](int64_t epoch) {
    const bool epoch_done = sampler.position() >= sampler.num_samples();
    ckpt->save(*model.module(), optimizer, steps, epoch_done ? epoch + 1 : epoch,
               epoch_done ? 0 : sampler.global_position());
  };

  // Checkpointless recovery: when a peer dies inside a step, the survivors
  // keep running, ddprun starts a replacement, and the replacement gets
  // this state from a survivor (here, in its constructor) instead of anyone
  // reading a checkpoint. The epoch and the global batch's world travel with
  // it. Across nodes, with no spare node to take a lost node's place, the
  // survivors go on as a smaller world instead (rank and ws change).
  int64_t epoch = start_epoch;
  // The epoch's loss so far, the same on every rank: the world's sum of its
  // micro-batches' losses and how many there were (the sum's bits in an
  // int64). They travel with the healed state and are put back with an
  // abandoned step, so a heal changes no reported loss.
  int64_t epoch_loss_bits = std::bit_cast<int64_t>(0.0), epoch_losses = 0;
  ddp::Healer healer(*world, {.module = model.module().get(),
                              .optimizer = &optimizer,
                              .sampler = &sampler,
                              .step = &steps,
                              .counters = {&epoch, &batch_world, &epoch_loss_bits, &epoch_losses}});
  if (healer.joined()) {
    start_epoch = epoch;
    start_global = sampler.global_position();
    std::printf("rank %d joined at step %lld (epoch %lld, sample %lld) with the state of its peers (%lld of its "
                "%lld bytes into memory it prepared while it started)\n",
                rank, static_cast<long long>(steps), static_cast<long long>(epoch + 1),
                static_cast<long long>(start_global), static_cast<long long>(healer.report().prepared_bytes),
                static_cast<long long>(healer.report().bytes));
    std::fflush(stdout);
  }
  // The learning rate falls linearly to zero over the run's samples (not
  // its steps: their number changes with the world size).
  const double run_samples = static_cast<double>(train.size()) * opt.epochs;
  auto learning_rate = [&](int64_t epoch_now, int64_t global) {
    const double progress = (static_cast<double>(epoch_now) * train.size() + global) / run_samples;
    return opt.lr * (1 - std::clamp(progress, 0.0, 1.0));
  };
  // Samples each rank reads per optimizer step: batch x grad_accum, or with
  // --keep-global-batch the global batch's share of this world.
  auto per_rank_step = [&] {
    const int64_t mine = int64_t(opt.batch_size) * opt.grad_accum;
    const int64_t now = world->size();  // a step redone after a shrink runs in the smaller world
    return opt.keep_global_batch ? (mine * batch_world + now - 1) / now : mine;
  };

  const auto start = std::chrono::steady_clock::now();
  double last_loss = 0, accuracy = 0;
  ddp::Tracer& tracer = world->tracer();
  torch::Tensor step_loss = torch::zeros({});
  bool stopped = false;
  for (epoch = start_epoch; epoch < opt.epochs && !stopped; ++epoch) {
    const auto epoch_start = std::chrono::steady_clock::now();
    sampler.set_epoch(epoch);
    if (epoch == start_epoch) sampler.set_global_position(start_global);
    if (epoch != start_epoch) {
      epoch_loss_bits = std::bit_cast<int64_t>(0.0);
      epoch_losses = 0;
    }
    const int64_t first_sample = sampler.global_position();
    // One optimizer step per grad_accum micro-batches; the last, short group
    // of an epoch still steps. Every rank has as many micro-batches.
    while (sampler.position() < sampler.num_samples() && !stopped) {
      // One step; if a peer dies inside, it is healed around and the step
      // runs again (ddp::Healer), so the loss adds up only once it is done.
      healer.step([&] {
        torch::Tensor step_loss_sum = torch::zeros({1}, torch::kFloat64);
        int64_t step_loss_count = 0;
        // Step boundaries and the data and optimizer phases for --trace (DDP
        // records forward, backward and the all-reduces itself).
        tracer.step(steps);
        optimizer.zero_grad();
        const double lr = learning_rate(epoch, sampler.global_position());
        // This step's micro-batches: grad_accum of batch_size (the last
        // group of an epoch may be short); with --keep-global-batch as many
        // as it takes to read this rank's share, each loss weighed by its
        // samples.
        const int64_t step_samples = std::min(per_rank_step(), sampler.num_samples() - sampler.position());
        const int64_t group = (step_samples + opt.batch_size - 1) / opt.batch_size;
        for (int64_t j = 0; j < group; ++j) {
          ddp::TraceSpan data(tracer, ddp::TracePhase::kData);
          const int64_t take = std::min<int64_t>(opt.batch_size, step_samples - j * opt.batch_size);
          auto idx_vec = *sampler.next_batch(take);
          torch::Tensor idx = torch::tensor(idx_vec, torch::kInt64);
          torch::Tensor x = train.batch(idx);
          torch::Tensor y = train.labels.index_select(0, idx);
          data.finish();
          torch::Tensor loss = torch::nn::functional::cross_entropy(model(x), y);
          step_loss_sum += loss.detach().to(torch::kFloat64);
          step_loss = loss.detach();
          ++step_loss_count;
          // Each micro-batch's share of the step's loss.
          torch::Tensor part = opt.keep_global_batch ? loss * (static_cast<double>(take) / step_samples) : loss / group;
          if (j + 1 < group) {
            auto no_sync = model.no_sync();  // accumulate locally
            part.backward();
          } else {
            // With bucketed or overlap sync, gradients are averaged over the
            // ranks by the time backward returns; naive and flat sync happen
            // here, in finalize() (a no-op for the others).
            part.backward();
            model.finalize();
          }
        }
        // The world's loss of this step (a tiny all_reduce: every rank adds
        // the same to the epoch's, so its report needs no other rank).
        torch::Tensor totals = torch::cat({step_loss_sum, torch::full({1}, double(step_loss_count), torch::kFloat64)});
        world->all_reduce(totals, ddp::ReduceOp::kSum);
        // The learning rate falls linearly to zero over the run: the last
        // steps settle instead of bouncing around the minimum.
        {
          ddp::TraceSpan optimizer_span(tracer, ddp::TracePhase::kOptimizer);
          for (auto& group : optimizer.param_groups()) static_cast<torch::optim::SGDOptions&>(group.options()).lr(lr);
          optimizer.step();
        }
        epoch_loss_bits = std::bit_cast<int64_t>(std::bit_cast<double>(epoch_loss_bits) + totals[0].item<double>());
        epoch_losses += static_cast<int64_t>(totals[1].item<double>());
        ++steps;  // the commit (ddp::Healer): from here on the step is done
        for (const auto& f : opt.flips) {
          // A fault strikes once: not again in a restart that redoes the step.
          if (f.rank == world->rank() && f.step == steps && world->info().restart_count == 0) {
            flip_bit(*model.module(), f.bit);
          }
        }
        // For the agent's progress line and `ddprun status` (rank 0 prints it
        // itself when run without ddprun): samples of the whole job so far,
        // and the steps the rest of the run takes at this world size.
        const int64_t per_step = per_rank_step() * world->size();
        const int64_t left = (opt.epochs - epoch) * train.size() - sampler.global_position();
        world->report_progress({.step = steps,
                                .total_steps = steps + std::max<int64_t>(0, (left + per_step - 1) / per_step),
                                .epoch = static_cast<int32_t>(epoch),
                                .loss = step_loss.item<double>(),
                                .samples = epoch * train.size() + sampler.global_position()});
        if (opt.print_steps && rank == 0) {
          const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
          std::printf("step %lld done at %.3f\n", static_cast<long long>(steps), now);
          std::fflush(stdout);
        }
        if (ckpt && ckpt->due(steps)) save(epoch);
        if (stop && ddp::stop_agreed(*stop, world->cpu())) {
          // Asked to stop (preemption): every rank agreed at this step; rank 0
          // writes a final checkpoint, and running the command again resumes.
          stopped = true;
        }
      });
      if (world->size() != ws || world->rank() != rank) {
        // The world changed inside that step: it shrank (the survivors
        // healed among themselves and go on as a smaller world) or grew, or
        // both at once (a lost node came back within one heal: the same
        // size, but the ranks moved).
        rank = world->rank();
        ws = world->size();
        if (rank == 0) {
          // The step the resized world went on from: where the heal left
          // the state (this step ran again after it, or ran first after a
          // grow healed at its start).
          const int64_t from = healer.report().step;
          std::printf("world size now %d, going on from step %lld (epoch %lld)%s\n", ws,
                      static_cast<long long>(from), static_cast<long long>(epoch + 1),
                      opt.keep_global_batch ? ", global batch kept" : "");
          std::fflush(stdout);
        }
      }
    }
    if (stopped) {
      if (ckpt->last_saved_step() != steps) save(epoch);
      const ddp::CheckpointReport saved = ckpt->finish();
      if (rank == 0) {
        std::printf("stopped by signal after step %lld; checkpoint %s\n", static_cast<long long>(steps),
                    ckpt->last_path().c_str());
        print_checkpoint_report(saved);
      }
      return 0;
    }
    // The epoch's evaluation is no part of its last step.
    tracer.end_step();
    if (epoch_losses > 0) last_loss = std::bit_cast<double>(epoch_loss_bits) / epoch_losses;
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - epoch_start).count();
    accuracy = test_accuracy(*world, model.module(), test);
    if (rank == 0) {
      std::printf("epoch %d/%d: loss %.4f, test accuracy %.2f%%, %.0f samples/s\n", static_cast<int>(epoch + 1),
                  opt.epochs, last_loss, 100 * accuracy,
                  (sampler.global_position() - first_sample) / secs);
      std::fflush(stdout);
    }
  }
  tracer.end_step();
  ddp::CheckpointReport saved;
  if (ckpt) {
    if (ckpt->last_saved_step() != steps) save(opt.epochs - 1);
    saved = ckpt->finish();
  }
  if (start_epoch >= opt.epochs) accuracy = test_accuracy(*world, model.module(), test);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  // Every rank must end with rank 0's parameters, bit for bit. All ranks
  // see the same gathered copy, so they all agree on the verdict.
  torch::Tensor all = world->all_gather(examples::flat_parameters(*model.module()));
  for (int r = 1; r < ws; ++r) {
    if (!torch::equal(all[r], all[0])) {
      throw std::runtime_error("parameters differ between rank 0 and rank " + std::to_string(r));
    }
  }
  if (rank == 0) {
    const std::string sum = checksum(*model.module());
    std::printf("parameters identical on all %d ranks (checksum %s)\n", ws, sum.c_str());
    std::printf("test accuracy: %.2f%%\n", 100 * accuracy);
    if (ckpt) print_checkpoint_report(saved);
    if (!opt.summary_json.empty()) {
      nlohmann::json j = {{"test_accuracy", accuracy}, {"steps", steps},        {"final_loss", last_loss},
                          {"wall_time_s", wall},       {"world_size", ws},      {"epochs", opt.epochs},
                          {"sync", opt.sync},          {"model", opt.model},    {"param_checksum", sum},
                          {"checkpoints_written", saved.written}, {"checkpoints_failed", saved.failed},
                          // The comparisons of the replicas (ddprun --verify-every): how many, and what they cost.
                          {"replica_checks", healer.report().checks}, {"replica_check_s", healer.report().verify_seconds}};
      std::ofstream out(opt.summary_json);
      out << j.dump(2) << "\n";
      if (!out) throw std::runtime_error("cannot write --summary-json " + opt.summary_json);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Data-parallel training on Fashion-MNIST (run it under ddprun)", "train"};
  Options opt;
  app.add_option("--epochs", opt.epochs, "Passes over the training set [3]")->check(CLI::PositiveNumber);
  app.add_option("--batch-size", opt.batch_size, "Images per micro-batch on each rank [32]")
      ->check(CLI::PositiveNumber);
  app.add_option("--lr", opt.lr, "Initial learning rate (SGD, momentum 0.9, linear decay to 0) [0.05]")->check(CLI::PositiveNumber);
  app.add_option("--seed", opt.seed, "Seed of the model and the shuffling [0]");
  app.add_option("--grad-accum", opt.grad_accum, "Micro-batches per optimizer step [1]")
      ->check(CLI::PositiveNumber);
  app.add_option("--bucket-mb", opt.bucket_mb, "Bucket cap in MiB [25]")->check(CLI::NonNegativeNumber);
  app.add_option("--first-bucket-mb", opt.first_bucket_mb, "First bucket's cap in MiB [1]")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--sync", opt.sync, "Gradient sync: naive, flat, overlap or bucketed [bucketed]")
      ->check(CLI::IsMember({"naive", "flat", "overlap", "bucketed"}));
  app.add_option("--overlap", opt.overlap,
                 "Bucketed/overlap sync during backward: auto (where it pays), on or off [auto]")
      ->check(CLI::IsMember({"auto", "on", "off"}));
  app.add_option("--model", opt.model, "cnn or mlp [cnn]")->check(CLI::IsMember({"cnn", "mlp"}));
  app.add_option("--data", opt.data, "Folder with Fashion-MNIST's .gz files");
  app.add_option("--limit", opt.limit, "Train on the first N images only (0: all)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--summary-json", opt.summary_json, "Write final metrics and a parameter checksum here");
  app.add_option("--checkpoint-dir", opt.checkpoint_dir,
                 "Resume from the newest checkpoint here, write new ones, and stop gracefully on SIGTERM");
  app.add_option("--checkpoint-every", opt.checkpoint_every, "Checkpoint every N optimizer steps [0: only at the end]")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--checkpoint-every-seconds", opt.checkpoint_every_seconds, "Also checkpoint every T seconds")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--keep-checkpoints", opt.keep_checkpoints, "Checkpoints kept [3]")->check(CLI::PositiveNumber);
  app.add_flag("--print-steps", opt.print_steps, "Rank 0 prints a line with the time after every step");
  app.add_flag("--keep-global-batch", opt.keep_global_batch,
               "When the job shrinks (a node lost, no spare), each rank reads more per step so that the "
               "global batch stays as it was");
  std::vector<std::string> flips;
  app.add_option("--flip-bit", flips,
                 "For tests: RANK:STEP[:BIT] flips bit BIT (0-30, default 16) of the first parameter's first "
                 "element on that rank after that step, in the job's first attempt (a faulty chip's silent "
                 "corruption; ddprun --verify-every finds and repairs it); repeatable")
      ->group("Testing");
  CLI11_PARSE(app, argc, argv);
  for (const std::string& f : flips) {
    try {
      // RANK:STEP[:BIT], each a whole number.
      std::vector<int64_t> parts;
      size_t at = 0;
      while (true) {
        const size_t colon = f.find(':', at);
        const std::string part = f.substr(at, colon == std::string::npos ? std::string::npos : colon - at);
        size_t used = 0;
        parts.push_back(std::stoll(part, &used));
        if (used != part.size()) throw std::invalid_argument(f);
        if (colon == std::string::npos) break;
        at = colon + 1;
      }
      if (parts.size() < 2 || parts.size() > 3) throw std::invalid_argument(f);
      const int64_t bit = parts.size() == 3 ? parts[2] : 16;
      if (parts[0] < 0 || parts[1] < 1 || bit < 0 || bit > 30) throw std::invalid_argument(f);
      opt.flips.push_back({static_cast<int>(parts[0]), parts[1], static_cast<int>(bit)});
    } catch (const std::exception&) {
      std::fprintf(stderr, "train: --flip-bit %s: expected RANK:STEP[:BIT] (a rank >= 0, a step >= 1, a bit 0-30)\n",
                   f.c_str());
      return 2;
    }
  }
  try {
    return opt.model == "cnn" ? run<examples::Cnn>(opt) : run<examples::Mlp>(opt);
  } catch (const std::exception& e) {
    // A peer died, a setting is wrong, a file is missing: one clear line on
    // stderr and in the error file ddprun's summary shows, exit code 1 (not
    // an abort and its core dump).
    ddp::record_error(e);
    return 1;
  }
}
