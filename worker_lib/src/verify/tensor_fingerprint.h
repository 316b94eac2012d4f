// Fingerprints of tensors (base/fingerprint.h over their bytes): what the
// ranks compare to find a replica that drifted apart, and what a checkpoint
// records. A tensor in host memory is read where it lies (a copy only when
// it is not contiguous); one on a device is fingerprinted there, by a
// weighted sum of its 64-bit (or 32-bit) words with odd pseudo-random
// weights, wrapping (a change confined to one word always changes it; it
// never leaves the device but for the one number). The dtype and the shape
// go in too: equal fingerprints mean equal tensors.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

namespace ddp {

uint64_t fingerprint_of(const at::Tensor& t);

// The device way, for any tensor (tests run it on the CPU).
uint64_t fingerprint_by_weighted_sum(const at::Tensor& t);

// Each tensor's, in order.
std::vector<uint64_t> fingerprints_of(const std::vector<at::Tensor>& tensors);

// All of them as one (combine_fingerprints in order).
uint64_t fingerprint_of_all(const std::vector<uint64_t>& fingerprints);

}  // namespace ddp
