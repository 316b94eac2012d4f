// Token data for the GPT example: byte-level tokens (vocab 256) of a text
// corpus that every Debian system has, the license texts under
// /usr/share/common-licenses and the per-package copyright files under
// /usr/share/doc/*/copyright (about 20 MiB here), or of any file given.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

namespace gpt {

// The Debian corpus' files, sorted by path so every rank and run sees the
// same bytes on one machine.
std::vector<std::string> debian_corpus_files();

// The corpus' bytes, read from `cache` when it exists, else gathered from
// debian_corpus_files() and written there atomically (temporary file +
// rename, so ranks building it at once do no harm). Throws
// std::runtime_error when no corpus file can be read.
torch::Tensor load_debian_corpus(const std::string& cache);

// A file's bytes as a uint8 tensor. Throws std::runtime_error naming it.
torch::Tensor read_bytes(const std::string& path);

// Fixed windows over a token stream: sample i is tokens [i*T, i*T + T]
// (T + 1 tokens: the input and, shifted by one, the targets).
class TokenWindows {
 public:
  // Throws std::invalid_argument when the stream is shorter than one window.
  TokenWindows(torch::Tensor tokens, int64_t seq_len);
  int64_t size() const { return count_; }
  int64_t seq_len() const { return seq_; }
  // Inputs and targets [indices, seq_len] as int64 on the CPU.
  std::pair<torch::Tensor, torch::Tensor> batch(const std::vector<int64_t>& indices) const;

 private:
  torch::Tensor tokens_;  // uint8
  int64_t seq_;
  int64_t count_;
};

}  // namespace gpt
