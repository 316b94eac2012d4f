#include "agent/health/heartbeat_table.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "channel/heartbeat_layout.h"
#include "channel/output_file.h"
#include "channel/stack_dump.h"

namespace ddprun {

HeartbeatTable::HeartbeatTable(std::string path, int slots) : path_(std::move(path)), slots_(slots) {
  int fd = channel::open_output_file(path_, O_RDWR | O_TRUNC, 0600);
  if (fd < 0) {
    throw std::runtime_error("cannot create heartbeat file " + path_ + ": " + channel::open_error_text(errno));
  }
  // Allocated, not just sized: a store to a page a full file system cannot
  // give would kill ddprun with SIGBUS.
  const size_t len = channel::heartbeat_file_bytes(slots_);
  if (const int err = channel::allocate_file(fd, len)) {
    ::close(fd);
    ::unlink(path_.c_str());
    throw std::runtime_error("cannot allocate heartbeat file " + path_ + " (" + std::to_string(len) +
                             " bytes): " + std::strerror(err));
  }
  map_ = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    ::unlink(path_.c_str());
    throw std::runtime_error("cannot map heartbeat file " + path_ + ": " + std::strerror(errno));
  }
  // The workers append their stacks there; without one a hang shows none.
  for (int i = 0; i < slots_; ++i) {
    const int sfd = channel::open_output_file(stack_file(i), O_WRONLY | O_TRUNC, 0600);
    if (sfd >= 0) ::close(sfd);
  }
}

HeartbeatTable::~HeartbeatTable() {
  if (map_) ::munmap(map_, channel::heartbeat_file_bytes(slots_));
  ::unlink(path_.c_str());
  for (int i = 0; i < slots_; ++i) ::unlink(stack_file(i).c_str());
}

std::string HeartbeatTable::stack_file(int slot) const { return channel::stack_file_path(path_, slot); }

std::vector<channel::FlightEntry> HeartbeatTable::flight(int slot) const {
  return channel::read_flight(channel::flight_ring(channel::heartbeat_slot(map_, slot)));
}

uint64_t HeartbeatTable::advanced(int slot) const {
  return channel::flight_advanced(channel::flight_ring(channel::heartbeat_slot(map_, slot)));
}

uint64_t HeartbeatTable::read(int slot) const {
  auto* counter = channel::heartbeat_counter(map_, slot);
  return __atomic_load_n(counter, __ATOMIC_RELAXED);
}

bool HeartbeatTable::progress(int slot, channel::Progress* out) const {
  return channel::read_progress(channel::progress_block(map_, slot), out);
}

void HeartbeatTable::set_stop_reason(int slot, channel::StopReason reason) {
  // Release: the word is visible before the signal that follows it is.
  __atomic_store_n(channel::stop_reason_word(map_, slot), static_cast<uint32_t>(reason), __ATOMIC_RELEASE);
}

bool HeartbeatTable::heal_ready(int slot) const {
  return __atomic_load_n(channel::heal_ready_word(map_, slot), __ATOMIC_ACQUIRE) == 1;
}

bool HeartbeatTable::in_step(int slot) const {
  return __atomic_load_n(channel::in_step_word(map_, slot), __ATOMIC_RELAXED) == 1;
}

bool HeartbeatTable::all_in_step(bool in_collective) const {
  for (int slot = 0; slot < slots_; ++slot) {
    if (!in_step(slot)) return false;
    if (in_collective && !channel::flight_in_progress(channel::flight_ring(channel::heartbeat_slot(map_, slot)))) {
      return false;
    }
  }
  return true;
}

channel::Phase HeartbeatTable::phase(int slot) const {
  return static_cast<channel::Phase>(__atomic_load_n(channel::phase_word(map_, slot), __ATOMIC_RELAXED));
}

uint32_t HeartbeatTable::heal_generation(int slot) const {
  return __atomic_load_n(channel::heal_generation_word(map_, slot), __ATOMIC_ACQUIRE);
}

void HeartbeatTable::set_heal_generation(int slot, uint32_t generation) {
  uint32_t* word = channel::heal_generation_word(map_, slot);
  __atomic_store_n(word, generation, __ATOMIC_RELEASE);
  // Not FUTEX_PRIVATE: the worker sleeps on its own mapping of the file.
  syscall(SYS_futex, word, FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

void HeartbeatTable::set_no_heal_coming(int slot, bool none) {
  __atomic_store_n(channel::no_heal_coming_word(map_, slot), none ? 1u : 0u, __ATOMIC_RELEASE);
  // A worker that sleeps on its generation word wakes, sees it and gives up.
  if (none) syscall(SYS_futex, channel::heal_generation_word(map_, slot), FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

void HeartbeatTable::set_placement(int slot, uint32_t generation, int rank, int world_size, int node_rank,
                                   int num_nodes) {
  uint32_t* w = channel::placement_words(map_, slot);
  // The generation last, released: a worker that reads it reads the rest.
  __atomic_store_n(w + channel::kPlacedGeneration, 0u, __ATOMIC_RELEASE);
  __atomic_store_n(w + channel::kPlacedRank, static_cast<uint32_t>(rank), __ATOMIC_RELAXED);
  __atomic_store_n(w + channel::kPlacedWorldSize, static_cast<uint32_t>(world_size), __ATOMIC_RELAXED);
  __atomic_store_n(w + channel::kPlacedNodeRank, static_cast<uint32_t>(node_rank), __ATOMIC_RELAXED);
  __atomic_store_n(w + channel::kPlacedNumNodes, static_cast<uint32_t>(num_nodes), __ATOMIC_RELAXED);
  __atomic_store_n(w + channel::kPlacedGeneration, generation, __ATOMIC_RELEASE);
}

bool HeartbeatTable::replicas(int slot, channel::ReplicaReport* out) const {
  return channel::read_replicas(channel::replica_block(map_, slot), out);
}

void HeartbeatTable::reset_slot(int slot, uint32_t generation) {
  char* s = channel::heartbeat_slot(map_, slot);
  // A replacement keeps the placement: it runs where the worker it replaces
  // ran (after a shrink, not where its launch environment says).
  uint32_t placement[channel::kPlacementWords];
  std::memcpy(placement, channel::placement_words(map_, slot), sizeof(placement));
  std::memset(s, 0, channel::kHeartbeatSlotBytes);
  std::memcpy(channel::placement_words(map_, slot), placement, sizeof(placement));
  __atomic_store_n(channel::heal_generation_word(map_, slot), generation, __ATOMIC_RELEASE);
}

void HeartbeatTable::reset() {
  // The whole slot, counter and progress: no worker of the next attempt runs
  // yet (a waiting standby neither beats nor reports).
  for (int i = 0; i < slots_; ++i) {
    auto* words = reinterpret_cast<uint64_t*>(channel::heartbeat_slot(map_, i));
    for (size_t w = 0; w < channel::kHeartbeatSlotBytes / 8; ++w) __atomic_store_n(words + w, 0, __ATOMIC_RELAXED);
  }
}

}  // namespace ddprun
