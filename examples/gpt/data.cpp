#include "data.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <unistd.h>

namespace fs = std::filesystem;

namespace gpt {

std::vector<std::string> debian_corpus_files() {
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& dir : {"/usr/share/common-licenses"}) {
    for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      if (it->is_regular_file(ec)) files.push_back(it->path().string());
    }
  }
  for (fs::directory_iterator it("/usr/share/doc", ec), end; !ec && it != end; it.increment(ec)) {
    fs::path copyright = it->path() / "copyright";
    if (fs::is_regular_file(copyright, ec)) files.push_back(copyright.string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

torch::Tensor read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read data file " + path);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  torch::Tensor t = torch::empty({static_cast<int64_t>(bytes.size())}, torch::kUInt8);
  std::copy(bytes.begin(), bytes.end(), reinterpret_cast<char*>(t.data_ptr<uint8_t>()));
  return t;
}

torch::Tensor load_debian_corpus(const std::string& cache) {
  std::error_code ec;
  if (!cache.empty() && fs::is_regular_file(cache, ec)) return read_bytes(cache);
  std::string all;
  for (const auto& f : debian_corpus_files()) {
    std::ifstream in(f, std::ios::binary);
    if (!in) continue;  // unreadable files are skipped, as in any tarball
    all.append(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    all.push_back('\n');
  }
  if (all.empty()) {
    throw std::runtime_error("no text under /usr/share/common-licenses or /usr/share/doc/*/copyright; "
                             "pass --data FILE");
  }
  if (!cache.empty()) {
    // Temporary name unique to this process, then rename: a reader never
    // sees half a file even when several ranks build the cache at once.
    fs::create_directories(fs::path(cache).parent_path(), ec);
    const std::string tmp = cache + ".tmp." + std::to_string(::getpid());
    std::ofstream out(tmp, std::ios::binary);
    out.write(all.data(), static_cast<std::streamsize>(all.size()));
    out.close();
    if (out) fs::rename(tmp, cache, ec);
    if (!out || ec) fs::remove(tmp, ec);  // a cache we cannot write is only slower next time
  }
  torch::Tensor t = torch::empty({static_cast<int64_t>(all.size())}, torch::kUInt8);
  std::copy(all.begin(), all.end(), reinterpret_cast<char*>(t.data_ptr<uint8_t>()));
  return t;
}

TokenWindows::TokenWindows(torch::Tensor tokens, int64_t seq_len)
    : tokens_(std::move(tokens)), seq_(seq_len), count_((tokens_.numel() - 1) / seq_len) {
  if (count_ < 1) {
    throw std::invalid_argument("data of " + std::to_string(tokens_.numel()) +
                                " tokens is shorter than one window of " + std::to_string(seq_len + 1));
  }
}

std::pair<torch::Tensor, torch::Tensor> TokenWindows::batch(const std::vector<int64_t>& indices) const {
  const int64_t B = static_cast<int64_t>(indices.size());
  torch::Tensor window = torch::empty({B, seq_ + 1}, torch::kLong);
  for (int64_t b = 0; b < B; ++b) {
    window[b].copy_(tokens_.narrow(0, indices[b] * seq_, seq_ + 1));
  }
  return {window.narrow(1, 0, seq_).contiguous(), window.narrow(1, 1, seq_).contiguous()};
}

}  // namespace gpt
