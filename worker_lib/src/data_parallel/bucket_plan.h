// Which gradients travel together: parameters grouped into buckets in
// reverse registration order (roughly the order backward produces their
// gradients), a bucket closing once it reaches its byte cap. The first
// bucket gets a small cap so that communication starts early. No LibTorch.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace ddp {

struct BucketParam {
  size_t bytes = 0;
  // Tensors only share a bucket with the same key (dtype and device).
  std::string key;
};

// params: in registration order. Returns buckets in launch order, each a
// list of parameter indices in the order they were added. A cap of 0 puts
// every parameter in a bucket of its own; a parameter larger than the cap
// gets a bucket to itself.
std::vector<std::vector<size_t>> assign_buckets(const std::vector<BucketParam>& params,
                                                size_t first_cap_bytes, size_t cap_bytes);

}  // namespace ddp
