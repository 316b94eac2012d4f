#include "ddp/checkpoint_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#if DDPRUN_HAVE_ISAL
#include <isa-l/crc.h>
#endif

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

namespace ddp {
namespace {

namespace fs = std::filesystem;

constexpr const char* kPrefix = "ckpt-";
constexpr const char* kSuffix = ".pt";

// Parses "ckpt-000000000100-1a2b3c4d.pt".
std::optional<CheckpointFile> parse_name(const std::string& dir, const std::string& name) {
  long long step = 0;
  unsigned crc = 0;
  char tail[8] = {0};
  if (name.size() != std::strlen(kPrefix) + 12 + 1 + 8 + std::strlen(kSuffix)) return std::nullopt;
  if (std::sscanf(name.c_str(), "ckpt-%12lld-%8x%3s", &step, &crc, tail) != 3) return std::nullopt;
  if (std::string(tail) != kSuffix || checkpoint_file_name(step, crc) != name) return std::nullopt;
  return CheckpointFile{dir + "/" + name, step, crc};
}

// The whole file, or nullopt and why.
std::optional<std::vector<char>> read_regular_file(const std::string& path, std::string* problem) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    *problem = std::string("cannot be opened: ") + std::strerror(errno);
    return std::nullopt;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    *problem = S_ISDIR(st.st_mode) ? "is a folder, not a checkpoint file" : "is not a regular file";
    ::close(fd);
    return std::nullopt;
  }
  std::vector<char> bytes(static_cast<size_t>(st.st_size));
  size_t got = 0;
  while (got < bytes.size()) {
    ssize_t r = ::read(fd, bytes.data() + got, bytes.size() - got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      *problem = std::string("cannot be read: ") + std::strerror(errno);
      ::close(fd);
      return std::nullopt;
    }
    if (r == 0) break;  // shrank while we read: the checksum says so below
    got += static_cast<size_t>(r);
  }
  bytes.resize(got);
  ::close(fd);
  return bytes;
}

}  // namespace

uint32_t checkpoint_crc(uint32_t crc, const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  // Both take a 32-bit length: feed them in pieces.
  for (size_t off = 0; off < n;) {
    const size_t k = std::min<size_t>(n - off, 1u << 30);
#if DDPRUN_HAVE_ISAL
    crc = crc32_gzip_refl(crc, p + off, k);  // zlib's crc32, with carry-less multiplies
#else
    crc = static_cast<uint32_t>(crc32(crc, p + off, static_cast<uInt>(k)));
#endif
    off += k;
  }
  return crc;
}

uint32_t checkpoint_crc(const std::vector<char>& bytes) { return checkpoint_crc(0, bytes.data(), bytes.size()); }

std::string checkpoint_file_name(int64_t step, uint32_t crc) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%s%012lld-%08x%s", kPrefix, static_cast<long long>(step), crc, kSuffix);
  return buf;
}

std::vector<CheckpointFile> list_checkpoints(const std::string& dir) {
  std::vector<CheckpointFile> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (auto f = parse_name(dir, e.path().filename().string())) out.push_back(*f);
  }
  std::sort(out.begin(), out.end(),
            [](const CheckpointFile& a, const CheckpointFile& b) { return a.step > b.step; });
  return out;
}

std::optional<std::vector<char>> read_checkpoint(const CheckpointFile& f, std::string* problem) {
  auto bytes = read_regular_file(f.path, problem);
  if (!bytes) return std::nullopt;
  const uint32_t crc = checkpoint_crc(*bytes);
  if (crc != f.crc) {
    char buf[128];
    std::snprintf(buf, sizeof(buf), "checksum %08x does not match the %08x in its name (%zu bytes)", crc,
                  f.crc, bytes->size());
    *problem = buf;
    return std::nullopt;
  }
  return bytes;
}

std::string set_aside(const CheckpointFile& f, std::string* problem, const std::string& suffix) {
  struct stat st {};
  if (::lstat(f.path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return "";  // not ours to move
  const std::string to = f.path + suffix;
  if (std::rename(f.path.c_str(), to.c_str()) != 0) {
    *problem = "cannot rename it to " + to + ": " + std::strerror(errno);
    return "";
  }
  return to;
}

}  // namespace ddp
