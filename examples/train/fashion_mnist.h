// Fashion-MNIST from Debian's dataset-fashion-mnist (gzip'd IDX files).
#pragma once

#include <torch/torch.h>

#include <string>

namespace examples {

struct Dataset {
  torch::Tensor images;  // [N, 1, 28, 28] float32, normalised
  torch::Tensor labels;  // [N] int64, 0..9
  int64_t size() const { return labels.size(0); }
};

constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

// split: "train" (60000 images) or "t10k" (10000). Throws std::runtime_error
// naming the file when it is missing or malformed.
Dataset load_fashion_mnist(const std::string& dir, const std::string& split);

}  // namespace examples
