// The default ddprun job: data-parallel training of a small network on
// Fashion-MNIST. Each rank trains on its shard of every epoch's shuffled
// data; after backward, gradients are averaged over all ranks (the seeds'
// sync_gradients), so every rank takes the same step. At the end the ranks
// check that their parameters are identical and rank 0 prints the test
// accuracy.
//
//   ddprun --nproc 4 train --epochs 1
#include <CLI/CLI.hpp>
#include <torch/torch.h>

#include <chrono>
#include <cstdio>

#include "ddp/ddp.h"
#include "fashion_mnist.h"

namespace {

struct Options {
  int epochs = 1;
  int batch_size = 64;  // per rank
  double lr = 0.05;
  uint64_t seed = 0;
  std::string data = examples::kFashionMnistDir;
  int64_t limit = 0;  // use only the first N training images (0: all)
};

struct MlpImpl : torch::nn::Module {
  MlpImpl()
      : fc1(register_module("fc1", torch::nn::Linear(784, 256))),
        fc2(register_module("fc2", torch::nn::Linear(256, 128))),
        fc3(register_module("fc3", torch::nn::Linear(128, 10))) {}
  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(fc1(x.flatten(1)));
    x = torch::relu(fc2(x));
    return fc3(x);
  }
  torch::nn::Linear fc1, fc2, fc3;
};
TORCH_MODULE(Mlp);

// Every rank must start from rank 0's parameters: the seed makes them equal,
// and this says so loudly when it did not.
void check_same_start(ddp::World& world, Mlp& model) {
  for (const auto& p : model->named_parameters()) {
    torch::Tensor theirs = p.value().detach().clone();
    world.broadcast(theirs, 0);
    if (!torch::equal(theirs, p.value().detach())) {
      throw std::runtime_error("parameter " + p.key() + " on rank " + std::to_string(world.rank()) +
                               " differs from rank 0's; seed every rank the same before building "
                               "the model");
    }
  }
}

// Averages every gradient over the ranks, one all_reduce per parameter.
void sync_gradients(ddp::World& world, Mlp& model) {
  for (auto& p : model->parameters()) {
    if (p.grad().defined()) world.all_reduce(p.mutable_grad(), ddp::ReduceOp::kAvg);
  }
}

// Whether all ranks hold bitwise identical parameters (collective).
bool parameters_agree(ddp::World& world, Mlp& model) {
  std::vector<torch::Tensor> flat;
  for (const auto& p : model->parameters()) flat.push_back(p.detach().flatten());
  torch::Tensor mine = torch::cat(flat);
  torch::Tensor rank0 = mine.clone();
  world.broadcast(rank0, 0);
  torch::Tensor differs = torch::tensor({torch::equal(mine, rank0) ? 0 : 1}, torch::kInt64);
  world.all_reduce(differs, ddp::ReduceOp::kSum);
  return differs.item<int64_t>() == 0;
}

int run(const Options& opt) {
  auto world = ddp::init();
  const int rank = ddp::get("rank"), ws = ddp::get("ws");
  torch::manual_seed(opt.seed);

  examples::Dataset train = examples::load_fashion_mnist(opt.data, "train");
  examples::Dataset test = examples::load_fashion_mnist(opt.data, "t10k");
  if (opt.limit > 0 && opt.limit < train.size()) {
    train.images = train.images.narrow(0, 0, opt.limit);
    train.labels = train.labels.narrow(0, 0, opt.limit);
  }

  Mlp model;
  check_same_start(*world, model);
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(opt.lr).momentum(0.9));

  // Contiguous shards of an epoch's permutation; every rank gets as many
  // samples (the remainder is dropped), so all ranks run the same steps.
  const int64_t per_rank = train.size() / ws;
  const int64_t steps = (per_rank + opt.batch_size - 1) / opt.batch_size;
  if (rank == 0) {
    std::printf("training on %lld images (%lld per rank, %d ranks), %lld steps per epoch\n",
                static_cast<long long>(per_rank * ws), static_cast<long long>(per_rank), ws,
                static_cast<long long>(steps));
  }
  for (int epoch = 0; epoch < opt.epochs; ++epoch) {
    const auto start = std::chrono::steady_clock::now();
    auto gen = at::detail::createCPUGenerator(opt.seed + 1 + epoch);
    torch::Tensor order = torch::randperm(train.size(), gen, torch::kInt64);
    torch::Tensor shard = order.narrow(0, rank * per_rank, per_rank);
    model->train();
    torch::Tensor loss_sum = torch::zeros({1}, torch::kFloat64);
    for (int64_t s = 0; s < steps; ++s) {
      const int64_t begin = s * opt.batch_size;
      const int64_t len = std::min<int64_t>(opt.batch_size, per_rank - begin);
      torch::Tensor idx = shard.narrow(0, begin, len);
      torch::Tensor x = train.images.index_select(0, idx);
      torch::Tensor y = train.labels.index_select(0, idx);
      optimizer.zero_grad();
      torch::Tensor loss = torch::nn::functional::cross_entropy(model->forward(x), y);
      loss.backward();
      sync_gradients(*world, model);
      optimizer.step();
      loss_sum += loss.detach().to(torch::kFloat64);
    }
    world->all_reduce(loss_sum, ddp::ReduceOp::kAvg);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (rank == 0) {
      std::printf("epoch %d/%d: mean loss %.4f, %.0f samples/s\n", epoch + 1, opt.epochs,
                  loss_sum.item<double>() / steps, per_rank * ws / secs);
    }
  }

  if (!parameters_agree(*world, model)) {
    throw std::runtime_error("parameters differ between ranks after training");
  }

  // Each rank scores a shard of the test set; the counts are summed.
  torch::NoGradGuard no_grad;
  model->eval();
  const int64_t test_per_rank = (test.size() + ws - 1) / ws;
  const int64_t tbegin = std::min<int64_t>(rank * test_per_rank, test.size());
  const int64_t tlen = std::min<int64_t>(test_per_rank, test.size() - tbegin);
  torch::Tensor counts = torch::zeros({2}, torch::kInt64);
  if (tlen > 0) {
    torch::Tensor pred = model->forward(test.images.narrow(0, tbegin, tlen)).argmax(1);
    counts[0] = pred.eq(test.labels.narrow(0, tbegin, tlen)).sum();
    counts[1] = tlen;
  }
  world->all_reduce(counts, ddp::ReduceOp::kSum);
  if (rank == 0) {
    const auto correct = counts[0].item<int64_t>(), total = counts[1].item<int64_t>();
    std::printf("parameters identical on all %d ranks\n", ws);
    std::printf("test accuracy: %.2f%% (%lld/%lld)\n", 100.0 * correct / total,
                static_cast<long long>(correct), static_cast<long long>(total));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Data-parallel training on Fashion-MNIST (run it under ddprun)", "train"};
  Options opt;
  app.add_option("--epochs", opt.epochs, "Passes over the training set")->check(CLI::PositiveNumber);
  app.add_option("--batch-size", opt.batch_size, "Images per step on each rank")
      ->check(CLI::PositiveNumber);
  app.add_option("--lr", opt.lr, "Learning rate (SGD with momentum 0.9)")->check(CLI::PositiveNumber);
  app.add_option("--seed", opt.seed, "Seed of the model and the shuffling");
  app.add_option("--data", opt.data, "Folder with Fashion-MNIST's .gz files");
  app.add_option("--limit", opt.limit, "Train on the first N images only (0: all)")
      ->check(CLI::NonNegativeNumber);
  CLI11_PARSE(app, argc, argv);
  return run(opt);
}
