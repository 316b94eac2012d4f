// The benchmark's models (bench/ddp_step_torch.py builds the same ones):
// examples/train's CNN, and this wide MLP.
#pragma once

#include <torch/torch.h>

#include "train/models.h"

namespace bench {

using examples::Cnn;

// 784-2048-2048-2048-10 (10M parameters, 40 MB of gradients): big enough
// that communication and the bucket size matter.
struct WideMlpImpl : torch::nn::Module {
  WideMlpImpl()
      : fc1(register_module("fc1", torch::nn::Linear(784, 2048))),
        fc2(register_module("fc2", torch::nn::Linear(2048, 2048))),
        fc3(register_module("fc3", torch::nn::Linear(2048, 2048))),
        fc4(register_module("fc4", torch::nn::Linear(2048, 10))) {}
  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(fc1(x));
    x = torch::relu(fc2(x));
    x = torch::relu(fc3(x));
    return fc4(x);
  }
  torch::nn::Linear fc1, fc2, fc3, fc4;
};
TORCH_MODULE(WideMlp);

// 784-4096 (x7)-10, ReLU between: 104M parameters, for what grows with the
// model's bytes (checkpoint copies, heals).
struct Mlp100mImpl : torch::nn::Module {
  Mlp100mImpl() {
    layers = register_module("layers", torch::nn::Sequential());
    layers->push_back(torch::nn::Linear(784, 4096));
    for (int i = 0; i < 6; ++i) {
      layers->push_back(torch::nn::ReLU());
      layers->push_back(torch::nn::Linear(4096, 4096));
    }
    layers->push_back(torch::nn::ReLU());
    layers->push_back(torch::nn::Linear(4096, 10));
  }
  torch::Tensor forward(torch::Tensor x) { return layers->forward(x); }
  torch::nn::Sequential layers{nullptr};
};
TORCH_MODULE(Mlp100m);

}  // namespace bench
