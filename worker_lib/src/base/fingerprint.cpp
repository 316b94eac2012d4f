#include "base/fingerprint.h"

#include <bit>
#include <cstring>

namespace ddp {
namespace {

constexpr uint64_t kMul1 = 0x9e3779b97f4a7c15ull;  // odd: multiplying by it is a bijection
constexpr uint64_t kMul2 = 0xc2b2ae3d27d4eb4full;

inline uint64_t mix_word(uint64_t lane, uint64_t word) { return std::rotl(lane + word * kMul1, 29) * kMul2; }

// A bijection that spreads every input bit over the output (a finaliser in
// the splitmix64 style): equal inputs, equal outputs; different, different.
inline uint64_t avalanche(uint64_t x) {
  x ^= x >> 31;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 29;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 32;
  return x;
}

inline uint64_t load64(const unsigned char* p) {
  uint64_t w;
  std::memcpy(&w, p, 8);
  return w;
}

}  // namespace

void Fingerprint::add(const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  length_ += n;
  uint64_t a = lanes_[0], b = lanes_[1], c = lanes_[2], d = lanes_[3];
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    a = mix_word(a, load64(p + i));
    b = mix_word(b, load64(p + i + 8));
    c = mix_word(c, load64(p + i + 16));
    d = mix_word(d, load64(p + i + 24));
  }
  // The rest: whole words into the lanes in turn, then the bytes left as
  // one word with its length in the top byte (so "x" and "x\0" differ).
  uint64_t* lane[4] = {&a, &b, &c, &d};
  int next = 0;
  for (; i + 8 <= n; i += 8) {
    *lane[next] = mix_word(*lane[next], load64(p + i));
    next = (next + 1) & 3;
  }
  if (i < n) {
    uint64_t w = 0;
    std::memcpy(&w, p + i, n - i);
    w ^= static_cast<uint64_t>(n - i) << 56;
    *lane[next] = mix_word(*lane[next], w);
  }
  lanes_[0] = a;
  lanes_[1] = b;
  lanes_[2] = c;
  lanes_[3] = d;
}

void Fingerprint::add_word(uint64_t w) { add(&w, sizeof(w)); }

uint64_t Fingerprint::value() const {
  uint64_t h = std::rotl(lanes_[0], 1) + std::rotl(lanes_[1], 7) + std::rotl(lanes_[2], 12) + std::rotl(lanes_[3], 18);
  return avalanche(h ^ length_);
}

uint64_t fingerprint_bytes(const void* data, size_t n) {
  Fingerprint f;
  f.add(data, n);
  return f.value();
}

uint64_t combine_fingerprints(uint64_t seed, uint64_t next) { return avalanche(mix_word(seed, next)); }

}  // namespace ddp
