#include "fashion_mnist.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <vector>

#include "ddp/atomic_file.h"

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

// The uncompressed size a gzip file records in its last 4 bytes (mod 2^32),
// or nullopt when it cannot be read.
std::optional<uint32_t> gzip_isize(const std::string& gz_path) {
  std::ifstream in(gz_path, std::ios::binary | std::ios::ate);
  if (!in || in.tellg() < 4) return std::nullopt;
  in.seekg(-4, std::ios::end);
  uint8_t b[4];
  if (!in.read(reinterpret_cast<char*>(b), 4)) return std::nullopt;
  return uint32_t(b[3]) << 24 | uint32_t(b[2]) << 16 | uint32_t(b[1]) << 8 | b[0];  // little-endian
}

// Why `n` bytes are not a whole IDX file of unsigned bytes as decompressed
// from a .gz that recorded `isize`, or "" when they are: the header's
// dimensions must account for every byte.
std::string idx_problem(const uint8_t* b, size_t n, std::optional<uint32_t> isize) {
  if (isize && static_cast<uint32_t>(n) != *isize) {
    return std::to_string(n) + " bytes where the source holds " + std::to_string(*isize);
  }
  if (n < 4 || b[0] != 0 || b[1] != 0 || b[2] != 0x08 || b[3] < 1 || b[3] > 4) return "no IDX header";
  const size_t dims = b[3];
  if (n < 4 + 4 * dims) return "a cut header";
  size_t want = 4 + 4 * dims, items = 1;
  for (size_t i = 0; i < dims; ++i) items *= be32(b + 4 + 4 * i);
  want += items;
  if (n != want) return std::to_string(n) + " bytes where its header says " + std::to_string(want);
  return "";
}

torch::Tensor from_memory(const std::vector<uint8_t>& bytes) {
  auto t = torch::empty({static_cast<int64_t>(bytes.size())}, torch::kUInt8);
  std::memcpy(t.data_ptr(), bytes.data(), bytes.size());
  return t;
}

// The cached copy mapped, if it is whole; nullopt (with a warning if it was
// there but damaged, and then removed) otherwise.
std::optional<torch::Tensor> map_cached(const std::string& cached, std::optional<uint32_t> isize) {
  int fd = ::open(cached.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  struct stat cst {};
  std::string problem;
  void* map = MAP_FAILED;
  size_t len = 0;
  if (::fstat(fd, &cst) != 0 || !S_ISREG(cst.st_mode)) {
    problem = "not a regular file";
  } else {
    len = static_cast<size_t>(cst.st_size);
    map = len > 0 ? ::mmap(nullptr, len, PROT_READ, MAP_PRIVATE, fd, 0) : MAP_FAILED;
    problem = map == MAP_FAILED ? "cannot be mapped" : idx_problem(static_cast<const uint8_t*>(map), len, isize);
  }
  ::close(fd);
  if (problem.empty()) {
    return torch::from_blob(map, {static_cast<int64_t>(len)}, [len](void* p) { ::munmap(p, len); },
                            torch::kUInt8);
  }
  if (map != MAP_FAILED) ::munmap(map, len);
  std::fprintf(stderr, "warning: dataset cache %s is damaged (%s); reading the source instead\n", cached.c_str(),
               problem.c_str());
  ::unlink(cached.c_str());
  return std::nullopt;
}

// The decompressed IDX bytes of a .gz file as a uint8 tensor backed by a
// mapping of the cached copy (made on first use, atomically). A damaged cache
// is replaced; one that cannot be written is a warning, and the bytes come
// from memory.
torch::Tensor idx_bytes(const std::string& gz_path) {
  struct stat st {};
  if (::stat(gz_path.c_str(), &st) != 0) {
    throw std::runtime_error("cannot open " + gz_path + " (install dataset-fashion-mnist, or pass --data DIR)");
  }
  // The cache name carries the source's size and time: a changed source is re-read.
  const std::string cached = cache_dir() + "/" + fs::path(gz_path).stem().string() + "-" +
                             std::to_string(st.st_size) + "-" + std::to_string(st.st_mtime) + ".idx";
  const std::optional<uint32_t> isize = gzip_isize(gz_path);
  if (auto mapped = map_cached(cached, isize)) return *mapped;
  const std::vector<uint8_t> bytes = read_gz(gz_path);
  if (const std::string problem = idx_problem(bytes.data(), bytes.size(), isize); !problem.empty()) {
    throw std::runtime_error(gz_path + ": not a whole IDX file (" + problem + ")");
  }
  std::error_code ec;
  fs::create_directories(cache_dir(), ec);
  try {
    if (ec) throw std::runtime_error("cannot create " + cache_dir() + ": " + ec.message());
    ddp::write_file_atomically(cached, cached + ".tmp" + std::to_string(::getpid()), bytes.data(), bytes.size());
  } catch (const std::exception& e) {
    std::fprintf(stderr,
                 "warning: dataset cache not written (%s); working from memory (DDPRUN_CACHE_DIR picks the "
                 "folder)\n",
                 e.what());
  }
  return from_memory(bytes);
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
