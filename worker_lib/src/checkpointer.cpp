#include "ddp/checkpointer.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "serial_worker.h"

namespace ddp {
namespace {

namespace fs = std::filesystem;

constexpr const char* kPrefix = "ckpt-";
constexpr const char* kSuffix = ".pt";
constexpr const char* kTempSuffix = ".tmp";

uint32_t crc_of(const std::vector<char>& bytes) {
  uLong crc = crc32(0L, Z_NULL, 0);
  size_t off = 0;
  // crc32 takes a uInt length: feed it in pieces.
  while (off < bytes.size()) {
    const size_t n = std::min<size_t>(bytes.size() - off, 1u << 30);
    crc = crc32(crc, reinterpret_cast<const Bytef*>(bytes.data() + off), static_cast<uInt>(n));
    off += n;
  }
  return static_cast<uint32_t>(crc);
}

std::string file_name(int64_t step, uint32_t crc) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%s%012lld-%08x%s", kPrefix, static_cast<long long>(step), crc, kSuffix);
  return buf;
}

// Parses "ckpt-000000000100-1a2b3c4d.pt".
std::optional<CheckpointFile> parse_name(const std::string& dir, const std::string& name) {
  long long step = 0;
  unsigned crc = 0;
  char tail[8] = {0};
  if (name.size() != std::strlen(kPrefix) + 12 + 1 + 8 + std::strlen(kSuffix)) return std::nullopt;
  if (std::sscanf(name.c_str(), "ckpt-%12lld-%8x%3s", &step, &crc, tail) != 3) return std::nullopt;
  if (std::string(tail) != kSuffix || file_name(step, crc) != name) return std::nullopt;
  return CheckpointFile{dir + "/" + name, step, crc};
}

void write_all_fd(int fd, const char* data, size_t n, const std::string& path) {
  while (n > 0) {
    ssize_t w = ::write(fd, data, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error("ddp: writing checkpoint " + path + " failed: " + std::strerror(errno));
    }
    data += w;
    n -= static_cast<size_t>(w);
  }
}

void fsync_dir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

}  // namespace

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
  std::ifstream in(f.path, std::ios::binary);
  if (!in) {
    *problem = "cannot be opened";
    return std::nullopt;
  }
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), {});
  const uint32_t crc = crc_of(bytes);
  if (crc != f.crc) {
    char buf[128];
    std::snprintf(buf, sizeof(buf), "checksum %08x does not match the %08x in its name (%zu bytes)", crc,
                  f.crc, bytes.size());
    *problem = buf;
    return std::nullopt;
  }
  return bytes;
}

Checkpointer::Checkpointer(Communicator& comm, CheckpointOptions options)
    : comm_(comm), options_(std::move(options)), last_save_(std::chrono::steady_clock::now()) {
  if (options_.dir.empty()) throw std::invalid_argument("ddp::Checkpointer: no folder given");
  if (options_.keep < 1) throw std::invalid_argument("ddp::Checkpointer: keep must be at least 1");
  if (comm_.rank() != 0) return;
  std::error_code ec;
  fs::create_directories(options_.dir, ec);
  if (ec) {
    throw std::runtime_error("ddp: cannot create checkpoint folder " + options_.dir + ": " + ec.message());
  }
  // A write that was killed leaves its temporary file behind.
  for (const auto& e : fs::directory_iterator(options_.dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(std::string(".") + kPrefix, 0) == 0 && name.size() > 4 &&
        name.compare(name.size() - 4, 4, kTempSuffix) == 0) {
      fs::remove(e.path(), ec);
    }
  }
  writer_ = std::make_unique<SerialWorker>();
}

Checkpointer::~Checkpointer() {
  if (in_flight_.valid()) in_flight_.wait();
}

std::optional<TrainingState> Checkpointer::restore() {
  std::vector<char> bytes;
  std::optional<TrainingState> state;
  if (comm_.rank() == 0) {
    for (const auto& f : list_checkpoints(options_.dir)) {
      std::string problem;
      auto read = read_checkpoint(f, &problem);
      if (read) {
        try {
          state = decode_state(*read);
          bytes = std::move(*read);
          std::lock_guard lock(path_mu_);
          last_path_ = f.path;
          break;
        } catch (const std::exception& e) {
          problem = e.what();
        }
      }
      std::fprintf(stderr, "ddp: warning: skipping checkpoint %s: %s; trying an older one\n",
                   f.path.c_str(), problem.c_str());
    }
  }
  // Rank 0's choice travels to everyone: the size first (0: none), then the bytes.
  at::Tensor size = at::tensor({static_cast<int64_t>(bytes.size())}, at::kLong);
  comm_.broadcast(size, 0);
  const int64_t n = size.item<int64_t>();
  if (n == 0) return std::nullopt;
  at::Tensor buffer = at::empty({n}, at::kByte);
  if (comm_.rank() == 0) std::memcpy(buffer.data_ptr(), bytes.data(), bytes.size());
  comm_.broadcast(buffer, 0);
  if (comm_.rank() == 0) return state;
  const auto* p = static_cast<const char*>(buffer.data_ptr());
  return decode_state(std::vector<char>(p, p + n));
}

std::string Checkpointer::last_path() const {
  std::lock_guard lock(path_mu_);
  return last_path_;
}

bool Checkpointer::due(int64_t step) const {
  if (comm_.rank() != 0 || step == last_step_) return false;
  if (options_.every_steps > 0 && step % options_.every_steps == 0) return true;
  if (options_.every_seconds > 0) {
    const double since = std::chrono::duration<double>(std::chrono::steady_clock::now() - last_save_).count();
    if (since >= options_.every_seconds) return true;
  }
  return false;
}

void Checkpointer::save(TrainingState state) {
  if (comm_.rank() != 0) return;
  wait();  // at most one write in flight; surfaces the last one's failure
  last_save_ = std::chrono::steady_clock::now();
  last_step_ = state.step;
  auto shared = std::make_shared<TrainingState>(std::move(state));
  in_flight_ = writer_->submit([this, shared] {
    write(*shared);
    recycled_ = shared;  // read by save() only after wait(): no race
  });
}

void Checkpointer::save(const torch::nn::Module& model, torch::optim::Optimizer& optimizer, int64_t step,
                        int64_t epoch, int64_t sampler_position) {
  if (comm_.rank() != 0) return;
  wait();  // the previous write is done: its buffers are free
  auto reuse = std::move(recycled_);
  save(capture_state(model, optimizer, step, epoch, sampler_position, reuse.get()));
}

void Checkpointer::wait() {
  if (!in_flight_.valid()) return;
  auto f = std::move(in_flight_);
  f.get();
}

// Encode, checksum, write to a temporary name, fsync, rename, fsync the
// folder, and drop checkpoints beyond the newest `keep`.
void Checkpointer::write(const TrainingState& state) {
  const std::vector<char> bytes = encode_state(state);
  const std::string name = file_name(state.step, crc_of(bytes));
  const std::string final_path = options_.dir + "/" + name;
  const std::string temp_path = options_.dir + "/." + name + kTempSuffix;
  int fd = ::open(temp_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    throw std::runtime_error("ddp: cannot write checkpoint " + temp_path + ": " + std::strerror(errno));
  }
  try {
    write_all_fd(fd, bytes.data(), bytes.size(), temp_path);
    if (::fsync(fd) != 0) {
      throw std::runtime_error("ddp: fsync of checkpoint " + temp_path + " failed: " + std::strerror(errno));
    }
  } catch (...) {
    ::close(fd);
    ::unlink(temp_path.c_str());
    throw;
  }
  ::close(fd);
  if (std::rename(temp_path.c_str(), final_path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    ::unlink(temp_path.c_str());
    throw std::runtime_error("ddp: cannot rename checkpoint to " + final_path + ": " + why);
  }
  fsync_dir(options_.dir);
  {
    std::lock_guard lock(path_mu_);
    last_path_ = final_path;
  }
  const auto files = list_checkpoints(options_.dir);
  for (size_t i = static_cast<size_t>(options_.keep); i < files.size(); ++i) {
    std::error_code ec;
    fs::remove(files[i].path, ec);
  }
}

}  // namespace ddp
