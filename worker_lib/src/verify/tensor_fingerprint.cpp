#include "verify/tensor_fingerprint.h"

#include <mutex>

#include "base/fingerprint.h"

namespace ddp {
namespace {

// The tensor's dtype and shape, so that equal bytes of another shape differ.
uint64_t with_shape(uint64_t bytes_fingerprint, const at::Tensor& t) {
  Fingerprint f;
  f.add_word(static_cast<uint64_t>(t.scalar_type()));
  f.add_word(static_cast<uint64_t>(t.dim()));
  for (int64_t d : t.sizes()) f.add_word(static_cast<uint64_t>(d));
  f.add_word(bytes_fingerprint);
  return f.value();
}

// Words per chunk of the weighted sum: what it allocates at a time (two
// int64 tensors of this many elements), whatever the tensor's size.
constexpr int64_t kChunkWords = int64_t{1} << 22;

// Odd 64-bit weights from a counter (splitmix64), one per word of a chunk,
// made once per device and dtype of words.
at::Tensor weights_for(const at::Device& device) {
  static std::mutex mu;
  static std::vector<std::pair<at::Device, at::Tensor>> made;  // a cache of constants, not communication state
  std::lock_guard<std::mutex> lock(mu);
  for (const auto& [d, w] : made) {
    if (d == device) return w;
  }
  std::vector<int64_t> host(static_cast<size_t>(kChunkWords));
  uint64_t x = 0x6a09e667f3bcc909ull;
  for (auto& w : host) {
    x += 0x9e3779b97f4a7c15ull;
    uint64_t z = x;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    w = static_cast<int64_t>(z | 1);
  }
  // A copy (on the host too): `host` goes at the end of this call.
  at::Tensor w = at::from_blob(host.data(), {kChunkWords}, at::kLong).to(device, /*non_blocking=*/false, /*copy=*/true);
  made.emplace_back(device, w);
  return w;
}

}  // namespace

uint64_t fingerprint_by_weighted_sum(const at::Tensor& t) {
  at::NoGradGuard no_grad;
  at::Tensor flat = t.detach().contiguous().reshape({-1});
  // Its bytes as words: 8 bytes each when they (and where they start in
  // memory) divide by 8, else 4, else 1.
  const int64_t nbytes = static_cast<int64_t>(flat.nbytes());
  const int64_t offset = flat.storage_offset() * static_cast<int64_t>(flat.element_size());
  at::Tensor bytes = flat.view(at::kByte);
  at::Tensor words = nbytes % 8 == 0 && offset % 8 == 0   ? bytes.view(at::kLong)
                     : nbytes % 4 == 0 && offset % 4 == 0 ? bytes.view(at::kInt).to(at::kLong)
                                                          : bytes.to(at::kLong);
  const at::Tensor weights = weights_for(t.device());
  // Chunk by chunk: sum(word * weight) wraps modulo 2^64 (integer
  // arithmetic, exact in any order), and the chunks' sums are combined in
  // order.
  uint64_t h = static_cast<uint64_t>(words.numel());
  for (int64_t at_ = 0; at_ < words.numel(); at_ += kChunkWords) {
    const int64_t n = std::min(kChunkWords, words.numel() - at_);
    const int64_t sum = words.narrow(0, at_, n).mul(weights.narrow(0, 0, n)).sum().item<int64_t>();
    h = combine_fingerprints(h, static_cast<uint64_t>(sum));
  }
  return with_shape(h, t);
}

uint64_t fingerprint_of(const at::Tensor& t) {
  if (!t.defined()) return 0;
  if (!t.device().is_cpu()) return fingerprint_by_weighted_sum(t);
  const at::Tensor c = t.is_contiguous() ? t : t.contiguous();
  return with_shape(fingerprint_bytes(c.data_ptr(), c.nbytes()), t);
}

std::vector<uint64_t> fingerprints_of(const std::vector<at::Tensor>& tensors) {
  std::vector<uint64_t> out;
  out.reserve(tensors.size());
  for (const at::Tensor& t : tensors) out.push_back(fingerprint_of(t));
  return out;
}

uint64_t fingerprint_of_all(const std::vector<uint64_t>& fingerprints) {
  uint64_t h = fingerprints.size();
  for (uint64_t f : fingerprints) h = combine_fingerprints(h, f);
  return h;
}

}  // namespace ddp
