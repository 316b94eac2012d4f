// The smallest ddprun trainer: fit y = 3x + 1 on every rank's share of the
// data, with gradients averaged over the ranks. Run: ddprun --nproc 2 hello
#include <ddp/ddp.h>
#include <torch/torch.h>

#include <cstdio>

int main() {
  auto world = ddp::init();  // rank, world size and the communicator, from ddprun
  torch::manual_seed(0);     // every rank starts from the same model
  ddp::DistributedDataParallel<torch::nn::Linear> model(torch::nn::Linear(1, 1), *world);
  torch::optim::SGD optimizer(model.module()->parameters(), /*lr=*/0.1);
  const auto x = torch::rand({1024, 1}), y = 3 * x + 1;  // the same 1024 points everywhere
  ddp::DistributedSampler sampler({.dataset_size = 1024, .rank = world->rank(), .world_size = world->size()});
  for (int epoch = 0; epoch < 20; ++epoch) {
    sampler.set_epoch(epoch);
    while (auto batch = sampler.next_batch(32)) {
      const auto idx = torch::tensor(*batch);
      optimizer.zero_grad();
      torch::mse_loss(model(x.index({idx})), y.index({idx})).backward();  // averaged over the ranks
      optimizer.step();
    }
  }
  const auto w = model.module()->weight.item<float>(), b = model.module()->bias.item<float>();
  if (world->rank() == 0) std::printf("%d ranks learned y = %.2fx + %.2f\n", world->size(), w, b);
}
