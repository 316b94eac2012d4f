#include "fashion_mnist.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <vector>

namespace examples {
namespace {

namespace fs = std::filesystem;

// Fashion-MNIST's mean and standard deviation.
constexpr float kMean = 0.2860f, kStd = 0.3530f;

std::vector<uint8_t> read_gz(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) {
    throw std::runtime_error("cannot open " + path + " (install dataset-fashion-mnist, or pass --data DIR)");
  }
  std::vector<uint8_t> out;
  uint8_t buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof(buf))) > 0) out.insert(out.end(), buf, buf + n);
  const bool failed = n < 0;
  gzclose(f);
  if (failed) throw std::runtime_error("cannot decompress " + path);
  return out;
}

uint32_t be32(const uint8_t* b) { return uint32_t(b[0]) << 24 | uint32_t(b[1]) << 16 | uint32_t(b[2]) << 8 | b[3]; }

// The decompressed IDX bytes of a .gz file as a uint8 tensor backed by a
// mapping of the cached copy (made on first use, atomically).
torch::Tensor idx_bytes(const std::string& gz_path) {
  struct stat st {};
  if (::stat(gz_path.c_str(), &st) != 0) {
    throw std::runtime_error("cannot open " + gz_path + " (install dataset-fashion-mnist, or pass --data DIR)");
  }
  // The cache name carries the source's size and time: a changed source is re-read.
  const std::string cached = cache_dir() + "/" + fs::path(gz_path).stem().string() + "-" +
                             std::to_string(st.st_size) + "-" + std::to_string(st.st_mtime) + ".idx";
  int fd = ::open(cached.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const std::vector<uint8_t> bytes = read_gz(gz_path);
    std::error_code ec;
    fs::create_directories(cache_dir(), ec);
    const std::string tmp = cached + ".tmp" + std::to_string(::getpid());
    {
      std::ofstream out(tmp, std::ios::binary);
      out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    }
    if (ec || std::rename(tmp.c_str(), cached.c_str()) != 0) {
      // No usable cache folder: work from memory.
      fs::remove(tmp, ec);
      auto t = torch::empty({static_cast<int64_t>(bytes.size())}, torch::kUInt8);
      std::memcpy(t.data_ptr(), bytes.data(), bytes.size());
      return t;
    }
    fd = ::open(cached.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw std::runtime_error("cannot open " + cached);
  }
  struct stat cst {};
  ::fstat(fd, &cst);
  const size_t len = static_cast<size_t>(cst.st_size);
  void* map = ::mmap(nullptr, len, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) throw std::runtime_error("cannot map " + cached);
  return torch::from_blob(map, {static_cast<int64_t>(len)}, [len](void* p) { ::munmap(p, len); },
                          torch::kUInt8);
}

torch::Tensor normalise(const torch::Tensor& bytes) {
  return bytes.to(torch::kFloat32).div_(255.0f).sub_(kMean).div_(kStd);
}

}  // namespace

std::string cache_dir() {
  if (const char* d = std::getenv("DDPRUN_CACHE_DIR"); d && *d) return d;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/ddprun";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/ddprun";
  return "/tmp/ddprun-cache";
}

torch::Tensor Dataset::batch(const torch::Tensor& idx) const { return normalise(images.index_select(0, idx)); }

torch::Tensor Dataset::slice(int64_t begin, int64_t n) const { return normalise(images.narrow(0, begin, n)); }

Dataset load_fashion_mnist(const std::string& dir, const std::string& split) {
  const std::string img_path = dir + "/" + split + "-images-idx3-ubyte.gz";
  const std::string lbl_path = dir + "/" + split + "-labels-idx1-ubyte.gz";
  torch::Tensor img = idx_bytes(img_path);
  torch::Tensor lbl = idx_bytes(lbl_path);
  const auto* ib = img.data_ptr<uint8_t>();
  const auto* lb = lbl.data_ptr<uint8_t>();
  // IDX: big-endian magic (0x803 images, 0x801 labels), then the dimensions.
  if (img.numel() < 16 || be32(ib) != 0x803) throw std::runtime_error(img_path + ": not an IDX image file");
  if (lbl.numel() < 8 || be32(lb) != 0x801) throw std::runtime_error(lbl_path + ": not an IDX label file");
  const int64_t n = be32(ib + 4), rows = be32(ib + 8), cols = be32(ib + 12);
  if (be32(lb + 4) != n || img.numel() != 16 + n * rows * cols || lbl.numel() != 8 + n) {
    throw std::runtime_error(img_path + " and " + lbl_path + " do not match in size");
  }
  Dataset d;
  d.images = img.narrow(0, 16, n * rows * cols).view({n, 1, rows, cols});
  d.labels = lbl.narrow(0, 8, n).to(torch::kInt64);
  return d;
}

}  // namespace examples
