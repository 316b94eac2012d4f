#include "ddp/trace.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "channel/output_file.h"

namespace ddp {
namespace {

namespace ch = ddprun::channel;

// The N of a folder named attempt_N (how the agent lays out DIR), or -1.
int attempt_of_folder(const std::filesystem::path& file) {
  const std::string name = file.parent_path().filename().string();
  const std::string prefix = "attempt_";
  if (name.rfind(prefix, 0) != 0 || name.size() == prefix.size()) return -1;
  char* end = nullptr;
  const long n = std::strtol(name.c_str() + prefix.size(), &end, 10);
  return *end == '\0' && n >= 0 ? static_cast<int>(n) : -1;
}

}  // namespace

Tracer::Tracer(const TraceOptions& o)
    : file_(o.file), capacity_(o.capacity), first_step_(o.first_step), end_step_(o.end_step) {
  if (file_.empty()) return;
  const std::filesystem::path path(file_);
  std::error_code ec;
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path(), ec);
  const int fd = ch::open_output_file(file_, O_RDWR | O_TRUNC);
  if (fd < 0) {
    throw std::runtime_error("ddp: cannot create trace file " + file_ + " (DDPRUN_TRACE_FILE): " +
                             ch::open_error_text(errno));
  }
  // Allocated up front, not sparse: a record landing on a page that a full
  // file system cannot give would kill the worker with SIGBUS.
  map_len_ = sizeof(ch::TraceHeader) + capacity_ * sizeof(ch::TraceRecord);
  if (const int err = ch::allocate_file(fd, map_len_)) {
    ::close(fd);
    ::unlink(file_.c_str());
    throw std::runtime_error("ddp: cannot allocate trace file " + file_ + " (" +
                             std::to_string(map_len_ >> 20) + " MiB, DDPRUN_TRACE_FILE; ddprun --trace names its folder): " +
                             std::strerror(err));
  }
  map_ = ::mmap(nullptr, map_len_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int err = errno;
  ::close(fd);
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    throw std::runtime_error("ddp: cannot map trace file " + file_ + ": " + std::strerror(err));
  }
  header_ = static_cast<ch::TraceHeader*>(map_);
  header_->version = ch::kTraceVersion;
  header_->rank = o.rank;
  header_->local_rank = o.local_rank;
  header_->world_size = o.world_size;
  const int folder_attempt = attempt_of_folder(path);
  header_->attempt = folder_attempt >= 0 ? folder_attempt : o.attempt;
  header_->pid = static_cast<int32_t>(::getpid());
  header_->record_bytes = sizeof(ch::TraceRecord);
  header_->capacity = capacity_;
  header_->next = 0;
  // The magic last: a reader that sees it sees the whole header.
  __atomic_store_n(&header_->magic, ch::kTraceMagic, __ATOMIC_RELEASE);
  records_ = reinterpret_cast<ch::TraceRecord*>(static_cast<char*>(map_) + sizeof(ch::TraceHeader));
  recording_.store(true, std::memory_order_relaxed);  // outside any step until step()
}

Tracer::~Tracer() {
  if (!map_) return;
  end_step();
  if (const uint64_t lost = dropped()) {
    std::fprintf(stderr,
                 "ddp: warning: trace file %s is full: %llu records dropped; raise DDPRUN_TRACE_CAPACITY (now %llu) "
                 "or narrow DDPRUN_TRACE_STEPS\n",
                 file_.c_str(), static_cast<unsigned long long>(lost), static_cast<unsigned long long>(capacity_));
  }
  ::munmap(map_, map_len_);
}

void Tracer::step(int64_t n) {
  if (!on()) return;
  const int64_t now = now_ns();
  const int64_t prev = step_.load(std::memory_order_relaxed);
  if (prev >= 0 && in_window(prev)) record(TracePhase::kStep, TraceTrack::kMain, step_begin_ns_, now, prev);
  step_begin_ns_ = now;
  step_.store(n, std::memory_order_relaxed);
  recording_.store(in_window(n), std::memory_order_relaxed);
}

void Tracer::end_step() {
  if (!on()) return;
  const int64_t prev = step_.load(std::memory_order_relaxed);
  if (prev >= 0 && in_window(prev)) record(TracePhase::kStep, TraceTrack::kMain, step_begin_ns_, now_ns(), prev);
  // Past the last step: what follows (a final checkpoint) is outside any step.
  step_.store(-1, std::memory_order_relaxed);
  recording_.store(true, std::memory_order_relaxed);
}

void Tracer::record(TracePhase phase, TraceTrack track, int64_t begin_ns, int64_t end_ns, int64_t step,
                    int64_t arg, int64_t bytes) {
  if (!records_) return;
  const uint64_t i = __atomic_fetch_add(&header_->next, 1, __ATOMIC_RELAXED);
  if (i >= capacity_) return;  // full: counted as next - capacity
  ch::TraceRecord& r = records_[i];
  r.begin_ns = begin_ns;
  r.end_ns = end_ns;
  r.step = step;
  r.arg = arg;
  r.bytes = bytes;
  r.phase = static_cast<uint16_t>(phase);
  r.track = static_cast<uint8_t>(track);
  r.reserved = 0;
  __atomic_store_n(&r.valid, uint8_t{1}, __ATOMIC_RELEASE);
}

uint64_t Tracer::dropped() const {
  if (!header_) return 0;
  const uint64_t next = __atomic_load_n(&header_->next, __ATOMIC_RELAXED);
  return next > capacity_ ? next - capacity_ : 0;
}

}  // namespace ddp
