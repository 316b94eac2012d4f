#include "ddp/distributed_data_parallel.h"

namespace ddp {

std::vector<NamedTensor> trainable_parameters(const torch::nn::Module& module) {
  std::vector<NamedTensor> out;
  for (const auto& p : module.named_parameters(/*recurse=*/true)) {
    if (p.value().requires_grad()) out.push_back({p.key(), p.value()});
  }
  return out;
}

std::vector<NamedTensor> named_buffers(const torch::nn::Module& module) {
  std::vector<NamedTensor> out;
  for (const auto& b : module.named_buffers(/*recurse=*/true)) out.push_back({b.key(), b.value()});
  return out;
}

}  // namespace ddp
