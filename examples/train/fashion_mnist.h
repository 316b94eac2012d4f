// Fashion-MNIST from Debian's dataset-fashion-mnist (gzip'd IDX files).
//
// Images stay as bytes (47 MB for the training set) and are normalised per
// batch. The first load decompresses the .gz files into a cache folder; later
// loads (every restarted worker) map the cached bytes, which takes
// milliseconds instead of the ~0.4 s that decompressing takes. The cache is
// written atomically and checked when read (its IDX header and gzip's
// recorded size must account for every byte): a damaged one is replaced, and
// one that cannot be written (full disk) is a warning, not an error.
#pragma once

#include <torch/torch.h>

#include <string>

namespace examples {

struct Dataset {
  torch::Tensor images;  // [N, 1, 28, 28] uint8
  torch::Tensor labels;  // [N] int64, 0..9
  int64_t size() const { return labels.size(0); }
  // The images at idx as normalised float32 [n, 1, 28, 28].
  torch::Tensor batch(const torch::Tensor& idx) const;
  // Images [begin, begin + n) as normalised float32.
  torch::Tensor slice(int64_t begin, int64_t n) const;
};

constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

// The cache folder: $DDPRUN_CACHE_DIR, else $XDG_CACHE_HOME/ddprun, else
// ~/.cache/ddprun, else /tmp/ddprun-cache.
std::string cache_dir();

// split: "train" (60000 images) or "t10k" (10000). Throws std::runtime_error
// naming the file when it is missing or malformed.
Dataset load_fashion_mnist(const std::string& dir, const std::string& split);

}  // namespace examples
