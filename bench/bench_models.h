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

}  // namespace bench
