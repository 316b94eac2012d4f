#include "fashion_mnist.h"

#include <zlib.h>

#include <stdexcept>
#include <vector>

namespace examples {
namespace {

std::vector<uint8_t> read_gz(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) {
    throw std::runtime_error("cannot open " + path +
                             " (install dataset-fashion-mnist, or pass --data DIR)");
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

uint32_t be32(const std::vector<uint8_t>& b, size_t at) {
  return uint32_t(b[at]) << 24 | uint32_t(b[at + 1]) << 16 | uint32_t(b[at + 2]) << 8 | b[at + 3];
}

}  // namespace

Dataset load_fashion_mnist(const std::string& dir, const std::string& split) {
  const std::string img_path = dir + "/" + split + "-images-idx3-ubyte.gz";
  const std::string lbl_path = dir + "/" + split + "-labels-idx1-ubyte.gz";
  auto img = read_gz(img_path);
  auto lbl = read_gz(lbl_path);
  // IDX: big-endian magic (0x803 images, 0x801 labels), then the dimensions.
  if (img.size() < 16 || be32(img, 0) != 0x803) throw std::runtime_error(img_path + ": not an IDX image file");
  if (lbl.size() < 8 || be32(lbl, 0) != 0x801) throw std::runtime_error(lbl_path + ": not an IDX label file");
  const int64_t n = be32(img, 4), rows = be32(img, 8), cols = be32(img, 12);
  if (be32(lbl, 4) != n || img.size() != size_t(16 + n * rows * cols) || lbl.size() != size_t(8 + n)) {
    throw std::runtime_error(img_path + " and " + lbl_path + " do not match in size");
  }
  auto images = torch::from_blob(img.data() + 16, {n, 1, rows, cols}, torch::kUInt8)
                    .to(torch::kFloat32)
                    .div_(255.0f);
  // Fashion-MNIST's mean and standard deviation.
  images.sub_(0.2860f).div_(0.3530f);
  auto labels = torch::from_blob(lbl.data() + 8, {n}, torch::kUInt8).to(torch::kInt64);
  return Dataset{images, labels};
}

}  // namespace examples
