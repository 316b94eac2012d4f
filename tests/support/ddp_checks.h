// Checks that DistributedDataParallel trains exactly like one process: each
// rank trains on its shard of a batch, and the result is compared with
// single-process training on the whole batch. Used by the thread-per-rank
// unit tests and by the worker run under ddprun.
#pragma once

#include <torch/torch.h>

#include <mutex>
#include <string>

#include "ddp/distributed_data_parallel.h"

namespace ddptest {

struct MlpImpl : torch::nn::Module {
  MlpImpl() : fc1(register_module("fc1", torch::nn::Linear(64, 32))),
              fc2(register_module("fc2", torch::nn::Linear(32, 10))) {}
  torch::Tensor forward(torch::Tensor x) { return fc2(torch::relu(fc1(x.flatten(1)))); }
  torch::nn::Linear fc1, fc2;
};
TORCH_MODULE(Mlp);

struct CnnImpl : torch::nn::Module {
  CnnImpl()
      : conv(register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 4, 3).padding(1)))),
        fc(register_module("fc", torch::nn::Linear(4 * 4 * 4, 10))) {}
  torch::Tensor forward(torch::Tensor x) {
    x = torch::max_pool2d(torch::relu(conv(x.view({-1, 1, 8, 8}))), 2);
    return fc(x.flatten(1));
  }
  torch::nn::Conv2d conv;
  torch::nn::Linear fc;
};
TORCH_MODULE(Cnn);

struct TrainCase {
  std::string model = "mlp";  // or "cnn"
  ddp::DdpOptions options;
  int steps = 3;
  int accumulation = 1;  // micro-batches per step (no_sync on all but the last)
  int per_rank_batch = 4;
  // Call finalize() after each synchronised backward. Off: rely on the
  // reducer finalizing itself at the end of backward (hook-driven strategies).
  bool finalize_by_hand = true;
};

inline std::string describe(const TrainCase& c) {
  return c.model + "/" + ddp::to_string(c.options.strategy) + "/cap" +
         std::to_string(c.options.bucket_cap_bytes) + "/accum" + std::to_string(c.accumulation) +
         (c.finalize_by_hand ? "" : "/auto-finalize") +
         (c.options.comm_dtype == ddp::CommDtype::kParam ? "" : "/comm-" + ddp::to_string(c.options.comm_dtype));
}

// All parameters of a module, flattened into one tensor.
inline torch::Tensor flat_parameters(const torch::nn::Module& m) {
  std::vector<torch::Tensor> v;
  for (const auto& p : m.parameters()) v.push_back(p.detach().reshape(-1));
  return torch::cat(v);
}

struct TrainResult {
  torch::Tensor distributed;  // this rank's final parameters
  torch::Tensor reference;    // single-process training on the whole batches
};

// torch::manual_seed sets one generator for the whole process: ranks that
// are threads take turns seeding and building their models.
inline std::mutex& seed_mutex() {
  static std::mutex mu;
  return mu;
}

// Seeds the global generator and builds a model, alone.
template <typename Holder>
Holder seeded_model(uint64_t seed) {
  std::lock_guard lock(seed_mutex());
  torch::manual_seed(seed);
  return Holder();
}

// Trains the same model twice from the same seed: under DDP on this rank's
// shards, and alone on the whole batches. Deterministic data, the same on
// every rank.
template <typename Holder>
TrainResult train_both(ddp::Communicator& comm, const TrainCase& c) {
  const int ws = comm.size(), rank = comm.rank();
  const int64_t global_batch = int64_t(ws) * c.per_rank_batch;
  auto gen = at::detail::createCPUGenerator(1234);
  const int micro = c.steps * c.accumulation;
  torch::Tensor x = at::randn({micro, global_batch, 64}, gen);
  torch::Tensor y = at::randint(0, 10, {micro, global_batch}, gen, at::kLong);

  auto sgd = [](torch::nn::Module& m) {
    return torch::optim::SGD(m.parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  };
  auto loss_of = [&](Holder& m, const torch::Tensor& xb, const torch::Tensor& yb) {
    return torch::nn::functional::cross_entropy(m->forward(xb), yb) / c.accumulation;
  };

  // Single process, whole batches.
  Holder ref = seeded_model<Holder>(7);
  auto ref_opt = sgd(*ref);
  for (int s = 0; s < c.steps; ++s) {
    ref_opt.zero_grad();
    for (int j = 0; j < c.accumulation; ++j) {
      const int k = s * c.accumulation + j;
      loss_of(ref, x[k], y[k]).backward();
    }
    ref_opt.step();
  }

  // DDP, this rank's shard of each batch.
  ddp::DistributedDataParallel<Holder> model(seeded_model<Holder>(7), comm, c.options);
  auto opt = sgd(*model.module());
  for (int s = 0; s < c.steps; ++s) {
    opt.zero_grad();
    for (int j = 0; j < c.accumulation; ++j) {
      const int k = s * c.accumulation + j;
      torch::Tensor xb = x[k].narrow(0, rank * c.per_rank_batch, c.per_rank_batch);
      torch::Tensor yb = y[k].narrow(0, rank * c.per_rank_batch, c.per_rank_batch);
      if (j + 1 < c.accumulation) {
        auto no_sync = model.no_sync();
        loss_of(model.module(), xb, yb).backward();
      } else {
        loss_of(model.module(), xb, yb).backward();
        if (c.finalize_by_hand) model.finalize();
      }
    }
    opt.step();
  }
  return {flat_parameters(*model.module()), flat_parameters(*ref)};
}

inline TrainResult train_both(ddp::Communicator& comm, const TrainCase& c) {
  return c.model == "cnn" ? train_both<Cnn>(comm, c) : train_both<Mlp>(comm, c);
}

// Whether every rank holds bitwise the same parameters (collective).
inline bool identical_on_all_ranks(ddp::Communicator& comm, const torch::Tensor& params) {
  torch::Tensor all = comm.all_gather(params);
  for (int r = 1; r < comm.size(); ++r) {
    if (!torch::equal(all[r], all[0])) return false;
  }
  return true;
}

// Every strategy, with and without gradient accumulation, for both models;
// bucketed also with tiny caps so that gradients spread over many buckets.
inline std::vector<TrainCase> all_train_cases() {
  std::vector<TrainCase> cases;
  for (const char* model : {"mlp", "cnn"}) {
    for (auto s : {ddp::SyncStrategy::kNaive, ddp::SyncStrategy::kFlat, ddp::SyncStrategy::kOverlap,
                   ddp::SyncStrategy::kBucketed}) {
      for (int accumulation : {1, 3}) {
        TrainCase c;
        c.model = model;
        c.options.strategy = s;
        c.accumulation = accumulation;
        cases.push_back(c);
      }
    }
    // backward → step, as in PyTorch: the reducer finalizes itself.
    for (auto s : {ddp::SyncStrategy::kOverlap, ddp::SyncStrategy::kBucketed}) {
      for (int accumulation : {1, 3}) {
        TrainCase c;
        c.model = model;
        c.options.strategy = s;
        c.accumulation = accumulation;
        c.finalize_by_hand = false;
        cases.push_back(c);
      }
    }
    TrainCase tiny;
    tiny.model = model;
    tiny.options.bucket_cap_bytes = 512;
    tiny.options.first_bucket_cap_bytes = 128;
    cases.push_back(tiny);
  }
  return cases;
}

}  // namespace ddptest
