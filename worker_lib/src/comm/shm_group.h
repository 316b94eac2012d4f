// Collectives between the ranks of one node through a shared-memory segment:
// all_reduce, broadcast, all_gather and barrier on raw buffers. No LibTorch
// here (ShmCommunicator puts tensors on top).
//
// The segment is made by rank 0 and found through the group's store (a
// fresh name per group and round), mapped by every rank, then unlinked at
// once. It holds one control line per rank and two buffers of one slot per
// rank. Ranks move in lock step: each chunk of a collective has two phases;
// after each a rank bumps its sequence number and the segment's arrival
// count, and waiting ranks sleep on that count with futex (after a short
// spin only where every rank has a core of its own), so waiting never
// starves the compute of oversubscribed cores. An all_reduce chunk goes:
//
//   1. publish: copy my part of the chunk into my slot       → seq += 1
//   2. reduce:  once every rank published, reduce my share
//               (1/size of the chunk) over every rank's slot
//               into my slot                                    → seq += 1
//   3. gather:  once every rank reduced, copy every share out
//
// so every rank reduces its share in parallel. Consecutive chunks alternate
// between the two buffers, so chunk c+1's publish never overwrites what a
// slower rank still gathers from chunk c. A broadcast is a pipeline with
// one phase per chunk: root copies chunk c in while the others copy chunk
// c-1 out of the other buffer (a heal's state moves at one copy's speed).
//
// A rank that waits past the timeout, or sees a peer process gone, marks
// the segment aborted (waking everyone) and throws CollectiveError naming
// the peer and the setting; every other rank then fails at once instead of
// waiting out its own timeout. The group is unusable afterwards.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/shm_reduce.h"
#include "comm/shm_segment.h"
#include "ddp/reduce_op.h"
#include "base/heartbeat.h"
#include "rendezvous/store/store.h"

namespace ddp {

// The CPUs this process may run on (its affinity mask; all online ones if
// that cannot be read): what the spin choice below and
// ShmCommunicator::overlap_pays weigh the ranks against.
int cpus_available();

struct ShmGroupOptions {
  int rank = 0;
  int size = 1;
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
  // Bytes of one rank's slot in one buffer: the chunk an all_reduce moves at
  // a time is size x slot_bytes. The segment holds 2 x size slots.
  size_t slot_bytes = size_t{1} << 20;
  // How often a sleeping waiter wakes to check the deadline, that its peer
  // is alive and the abort mark, and to beat the heartbeat.
  std::chrono::milliseconds check_every{100};
  // Spin iterations (a pause each) before sleeping; -1 picks: some where
  // this machine has a core per rank, none where ranks share cores.
  int spin = -1;
  std::shared_ptr<Heartbeat> heartbeat;  // may be null
};

class ShmGroup {
 public:
  // Collective: rank 0 makes the segment and publishes its name under
  // "shm/segment" in `store` (prefix it per group and round); the others
  // open it and say so; rank 0 unlinks it once all have. Throws
  // CollectiveError (a peer that does not come, /dev/shm without room, a
  // segment that is not this user's).
  ShmGroup(ddprun::Store& store, const ShmGroupOptions& options);
  ~ShmGroup();
  ShmGroup(const ShmGroup&) = delete;
  ShmGroup& operator=(const ShmGroup&) = delete;

  int rank() const { return options_.rank; }
  int size() const { return options_.size; }
  const ShmGroupOptions& options() const { return options_; }

  // In place, over `count` elements of every rank's `data`.
  void all_reduce(void* data, size_t count, ShmDtype type, ReduceOp op, std::chrono::milliseconds timeout);
  // Every rank's `data` ends with root's `bytes` bytes.
  void broadcast(void* data, size_t bytes, int root, std::chrono::milliseconds timeout);
  // out holds size() x bytes: rank r's input at r x bytes.
  void all_gather(const void* in, size_t bytes, void* out, std::chrono::milliseconds timeout);
  void barrier(std::chrono::milliseconds timeout);

  // Whether a failure (this rank's or a peer's) left the group unusable.
  bool aborted() const;
  // Marks the group failed with `why` (unless it failed already) and wakes
  // every rank waiting in it: their collectives throw. Any thread may call it.
  void abort(const std::string& why);

 private:
  struct Header;
  struct Line;
  using Clock = std::chrono::steady_clock;

  // What a collective is, published by every rank before its first chunk
  // so that mismatched calls fail with both sides named instead of mixing.
  struct Call {
    uint32_t kind = 0;  // 1 all_reduce, 2 broadcast, 3 all_gather, 4 barrier
    uint32_t detail = 0;  // dtype and op, or the root
    uint64_t bytes = 0;
  };

  Line& line(int r) const;
  char* slot(int buffer, int r) const;
  // Phase bookkeeping: chunk_ counts chunks since the group was made, on
  // every rank alike; a rank's seq is 2 x chunks done (+1 after publish).
  uint32_t published_seq() const { return static_cast<uint32_t>(2 * chunk_ + 1); }
  uint32_t reduced_seq() const { return static_cast<uint32_t>(2 * chunk_ + 2); }
  void signal(uint32_t seq);
  // Blocks until every rank's seq reaches `target`.
  void wait_all(uint32_t target, const char* op, Clock::time_point deadline, std::chrono::milliseconds timeout);
  void begin(const char* op, const Call& call, Clock::time_point deadline, std::chrono::milliseconds timeout);
  std::string where(const char* op) const;  // "ddp: all_reduce on rank 0 of 4"
  void check_usable(const char* op) const;
  void check_calls(const char* op, const Call& call);
  [[noreturn]] void give_up(const std::string& why);
  [[noreturn]] void peer_failed(const char* op);
  bool peer_alive(int peer) const;
  // Whether peer r (never this rank) has not yet reached seq target.
  bool behind(int r, uint32_t target) const;
  int first_behind(uint32_t target) const;
  void beat() {
    if (options_.heartbeat) options_.heartbeat->beat();
  }

  ShmGroupOptions options_;
  ShmSegment segment_;
  Header* header_ = nullptr;
  char* lines_ = nullptr;
  char* data_ = nullptr;
  uint64_t chunk_ = 0;  // chunks begun so far (the same on every rank)
  uint64_t calls_ = 0;  // collectives begun so far
  int spin_ = 0;
  uint64_t my_pid_ns_ = 0;
};

}  // namespace ddp
