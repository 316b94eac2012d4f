#include "base/heartbeat.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "channel/heartbeat_layout.h"

namespace ddp {

Heartbeat::Heartbeat(const std::string& path, int slot) {
  if (path.empty()) return;
  int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    throw std::runtime_error("ddp: cannot open heartbeat file " + path + " (DDPRUN_HEARTBEAT_FILE): " +
                             std::strerror(errno));
  }
  struct stat st {};
  const size_t need = ddprun::channel::heartbeat_file_bytes(slot + 1);
  if (::fstat(fd, &st) != 0 || slot < 0 || static_cast<size_t>(st.st_size) < need) {
    ::close(fd);
    throw std::runtime_error("ddp: heartbeat file " + path + " has no slot " + std::to_string(slot) +
                             " (DDPRUN_HEARTBEAT_SLOT)");
  }
  map_len_ = need;
  map_ = ::mmap(nullptr, map_len_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    throw std::runtime_error("ddp: cannot map heartbeat file " + path + ": " + std::strerror(errno));
  }
  // The whole slot is mapped: the counter and the progress block after it.
  counter_ = ddprun::channel::heartbeat_counter(map_, slot);
  progress_ = ddprun::channel::progress_block(map_, slot);
  flight_ = ddprun::channel::flight_ring(ddprun::channel::heartbeat_slot(map_, slot));
  replicas_ = ddprun::channel::replica_block(map_, slot);
  heal_ready_ = ddprun::channel::heal_ready_word(map_, slot);
  heal_generation_ = ddprun::channel::heal_generation_word(map_, slot);
  no_heal_coming_ = ddprun::channel::no_heal_coming_word(map_, slot);
  placement_ = ddprun::channel::placement_words(map_, slot);
  phase_ = ddprun::channel::phase_word(map_, slot);
  in_step_ = ddprun::channel::in_step_word(map_, slot);
  pulse_ = std::thread([this] { pulse_loop(); });
}

void Heartbeat::enter_phase(uint32_t phase) {
  if (phase_depth_.fetch_add(1) == 0 && phase_ && !finished_) __atomic_store_n(phase_, phase, __ATOMIC_RELAXED);
  beat();  // the silence before it was the step's, not the phase's
}

void Heartbeat::leave_phase() {
  beat();
  if (phase_depth_.fetch_sub(1) == 1 && phase_ && !finished_) __atomic_store_n(phase_, 0u, __ATOMIC_RELAXED);
}

void Heartbeat::finish() {
  finished_ = true;
  beat();
  if (phase_) {
    __atomic_store_n(phase_, static_cast<uint32_t>(ddprun::channel::Phase::kFinishing), __ATOMIC_RELAXED);
  }
}

std::optional<HealPlacement> Heartbeat::placement() const {
  namespace ch = ddprun::channel;
  if (!placement_) return std::nullopt;
  while (true) {
    // The generation is written last (released) and cleared first: read it
    // before and after the rest, and again if the agent wrote meanwhile.
    const uint32_t g = __atomic_load_n(placement_ + ch::kPlacedGeneration, __ATOMIC_ACQUIRE);
    if (g == 0) return std::nullopt;
    HealPlacement p;
    p.generation = g;
    p.rank = static_cast<int>(__atomic_load_n(placement_ + ch::kPlacedRank, __ATOMIC_RELAXED));
    p.world_size = static_cast<int>(__atomic_load_n(placement_ + ch::kPlacedWorldSize, __ATOMIC_RELAXED));
    p.node_rank = static_cast<int>(__atomic_load_n(placement_ + ch::kPlacedNodeRank, __ATOMIC_RELAXED));
    p.num_nodes = static_cast<int>(__atomic_load_n(placement_ + ch::kPlacedNumNodes, __ATOMIC_RELAXED));
    std::atomic_thread_fence(std::memory_order_acquire);
    if (__atomic_load_n(placement_ + ch::kPlacedGeneration, __ATOMIC_RELAXED) == g) return p;
  }
}

void Heartbeat::set_heal_ready(bool ready) {
  if (heal_ready_) __atomic_store_n(heal_ready_, ready ? 1u : 0u, __ATOMIC_RELEASE);
}

uint32_t Heartbeat::heal_generation() const {
  return heal_generation_ ? __atomic_load_n(heal_generation_, __ATOMIC_ACQUIRE) : 0;
}

uint32_t Heartbeat::wait_heal_generation(uint32_t seen, std::chrono::milliseconds timeout,
                                         const std::atomic<bool>* cancel, bool heed_no_heal) const {
  if (!heal_generation_) return seen;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    const uint32_t now = heal_generation();
    if (now != seen || (heed_no_heal && no_heal_coming()) || (cancel && cancel->load(std::memory_order_acquire))) {
      return now;
    }
    const auto left = deadline - std::chrono::steady_clock::now();
    if (left <= std::chrono::nanoseconds(0)) return now;
    // The agent stores the word, then wakes every sleeper on it (a shared
    // futex: the file is mapped by both). If it changed before we sleep,
    // FUTEX_WAIT returns at once; a wake-up for nothing loops.
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
    timespec ts{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
    syscall(SYS_futex, heal_generation_, FUTEX_WAIT, seen, &ts, nullptr, 0);
  }
}

void Heartbeat::wake_heal_waiters() const {
  if (heal_generation_) syscall(SYS_futex, heal_generation_, FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

void Heartbeat::waiting(int delta) {
  if (!counter_) return;
  std::lock_guard lock(pulse_mu_);
  waiting_ += delta;
  if (delta > 0) beat();  // the pulse takes over from here
}

// Every kWaitPulse: a beat while the worker waits for its peers, in a heal
// (waiting_) or inside a collective (its flight record's newest entry is
// under way). A worker that computes beats by its own collectives; one that
// is stopped stops this thread with it.
void Heartbeat::pulse_loop() {
  std::unique_lock lock(pulse_mu_);
  while (!pulse_stop_) {
    if (waiting_ > 0 || ddprun::channel::flight_in_progress(flight_)) beat();
    pulse_cv_.wait_for(lock, kWaitPulse, [this] { return pulse_stop_; });
  }
}

Heartbeat::~Heartbeat() {
  {
    std::lock_guard lock(pulse_mu_);
    pulse_stop_ = true;
  }
  pulse_cv_.notify_all();
  if (pulse_.joinable()) pulse_.join();  // before the counter goes
  if (map_) ::munmap(map_, map_len_);
}

}  // namespace ddp
