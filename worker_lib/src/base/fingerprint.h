// A 64-bit fingerprint of bytes, for comparing replicas (verify/) and
// checkpoints: not a float sum, so that one flipped low bit of one
// parameter changes it. No LibTorch here.
//
// Four lanes read 8-byte words in turn; each word goes into its lane as
// lane = rotl(lane + word * kMul1, 29) * kMul2, a bijection of the lane for
// a given word and of the word for a given lane (both multipliers odd). So
// a change confined to one word (any number of its bits) always changes
// the fingerprint: that lane differs from there on, and the lanes' merge
// and the final mix are bijections in each lane. Larger changes collide
// with probability about 2^-64. The tail (under 8 bytes) and the length go
// in last. 14 GB/s from the cache and 4.2 from memory on the 2-core
// machine (a 100 MB model in 25 ms: as fast as its memory reads).
#pragma once

#include <cstddef>
#include <cstdint>

namespace ddp {

class Fingerprint {
 public:
  // Adds `n` bytes; calls may split the bytes anywhere only at multiples of
  // 32 (each tensor is one call in practice).
  void add(const void* data, size_t n);
  // Adds one 64-bit word (a tensor's dtype and shape, a count).
  void add_word(uint64_t w);
  // The fingerprint of everything added so far.
  uint64_t value() const;

 private:
  uint64_t lanes_[4] = {0x243f6a8885a308d3ull, 0x13198a2e03707344ull, 0xa4093822299f31d0ull, 0x082efa98ec4e6c89ull};
  uint64_t length_ = 0;
};

// The fingerprint of one buffer.
uint64_t fingerprint_bytes(const void* data, size_t n);

// Combines fingerprints in order (the whole model's from its tensors').
uint64_t combine_fingerprints(uint64_t seed, uint64_t next);

}  // namespace ddp
