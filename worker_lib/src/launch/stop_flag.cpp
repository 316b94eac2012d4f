#include "ddp/stop_flag.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "channel/env_names.h"
#include "channel/heartbeat_layout.h"

namespace ddp {
namespace {

// Written by the signal handler: lock-free atomics only.
std::atomic<int> received{0};
std::atomic<bool> alive{false};
struct sigaction previous_term, previous_int;

// This worker's slot of ddprun's heartbeat file, mapped read-only while the
// StopFlag lives (null when not run by ddprun): the agent writes there
// whether the stop it is about to signal is its own decision.
void* slot_map = nullptr;
size_t slot_map_len = 0;
std::atomic<const uint32_t*> stop_reason{nullptr};

void on_signal(int sig) {
  const uint32_t* reason = stop_reason.load(std::memory_order_relaxed);
  if (reason && __atomic_load_n(reason, __ATOMIC_ACQUIRE) == ddprun::channel::kAgentDecided) {
    // ddprun stops this attempt itself (a peer failed, a new round): this
    // is no preemption to checkpoint for and agree on with the other ranks
    // (that would end the whole job as finished). Die of the signal, as a
    // program without a StopFlag would; it is delivered when this returns.
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(sig, &dfl, nullptr);
    raise(sig);
    return;
  }
  received.store(sig, std::memory_order_relaxed);
}

// Maps the slot ddprun gave this worker (DDPRUN_HEARTBEAT_FILE and _SLOT);
// nothing when they are absent or unusable (then every signal is a stop
// request, as without ddprun).
void map_stop_reason() {
  const char* path = std::getenv(ddprun::channel::kHeartbeatFile);
  const char* slot_text = std::getenv(ddprun::channel::kHeartbeatSlot);
  if (!path || !*path) return;
  if (!slot_text) slot_text = std::getenv("LOCAL_RANK");  // the slot's default, as in ddp::init()
  const int slot = slot_text ? std::atoi(slot_text) : 0;
  if (slot < 0) return;
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  struct stat st {};
  const size_t need = ddprun::channel::heartbeat_file_bytes(slot + 1);
  if (::fstat(fd, &st) == 0 && static_cast<size_t>(st.st_size) >= need) {
    void* map = ::mmap(nullptr, need, PROT_READ, MAP_SHARED, fd, 0);
    if (map != MAP_FAILED) {
      slot_map = map;
      slot_map_len = need;
      stop_reason.store(ddprun::channel::stop_reason_word(map, slot), std::memory_order_release);
    }
  }
  ::close(fd);
}

}  // namespace

StopFlag::StopFlag() {
  bool expected = false;
  if (!alive.compare_exchange_strong(expected, true)) {
    throw std::logic_error("ddp::StopFlag: only one may exist at a time");
  }
  received = 0;
  map_stop_reason();
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &sa, &previous_term);
  sigaction(SIGINT, &sa, &previous_int);
}

StopFlag::~StopFlag() {
  sigaction(SIGTERM, &previous_term, nullptr);
  sigaction(SIGINT, &previous_int, nullptr);
  stop_reason.store(nullptr, std::memory_order_release);
  if (slot_map) ::munmap(slot_map, slot_map_len);
  slot_map = nullptr;
  alive = false;
}

bool StopFlag::requested() const { return received.load(std::memory_order_relaxed) != 0; }
int StopFlag::signal() const { return received.load(std::memory_order_relaxed); }

}  // namespace ddp
