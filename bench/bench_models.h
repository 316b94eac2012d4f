// The benchmark's models; bench/ddp_step_torch.py builds the same ones.
#pragma once

#include <torch/torch.h>

namespace bench {

// examples/train's CNN (206k parameters), on flat 784-value inputs.
struct CnnImpl : torch::nn::Module {
  CnnImpl()
      : conv1(register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 16, 3).padding(1)))),
        conv2(register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(16, 32, 3).padding(1)))),
        fc1(register_module("fc1", torch::nn::Linear(32 * 7 * 7, 128))),
        fc2(register_module("fc2", torch::nn::Linear(128, 10))) {}
  torch::Tensor forward(torch::Tensor x) {
    x = torch::max_pool2d(torch::relu(conv1(x.view({-1, 1, 28, 28}))), 2);
    x = torch::max_pool2d(torch::relu(conv2(x)), 2);
    return fc2(torch::relu(fc1(x.flatten(1))));
  }
  torch::nn::Conv2d conv1, conv2;
  torch::nn::Linear fc1, fc2;
};
TORCH_MODULE(Cnn);

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
