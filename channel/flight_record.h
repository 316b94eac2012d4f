// The agent ↔ worker contract, part 5: the flight record. Each worker's
// heartbeat slot (heartbeat_layout.h) holds, from byte kFlightOffset, a ring
// of the last kFlightEntries collectives it ran: which one (its number in
// its communicator and heal generation, so that the same collective has the
// same number on every rank), its size, and when it started and finished.
// worker_lib writes it on every collective (ddp::SwappableCommunicator);
// the agent reads it when a worker hangs, to say who waits for whom.
// Beside the ring, `advanced` counts the worker's progress: every
// collective that returned (worker_lib), or every optimizer step (a Python
// script, through its start-up's hooks). Beats say a worker lives (a pulse
// beats while it waits); `advanced` says its training moves: a job whose
// ranks all stop advancing is hung whatever their processes do
// (agent/health/progress_watch.h).
//
// Writers never lock and never wait: a record is claimed with one atomic
// add, its fields are written as relaxed atomics, and its id (the claim's
// number + 1; 0 while it is being rewritten) is stored last with release.
// A reader copies an entry and keeps it only if the id is the same before
// and after the copy. Several threads of a worker may write (a record each).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

namespace ddprun::channel {

enum class FlightOp : uint32_t { kNone = 0, kAllReduce, kBroadcast, kAllGather, kBarrier, kOther };

inline const char* flight_op_name(FlightOp op) {
  switch (op) {
    case FlightOp::kAllReduce: return "all_reduce";
    case FlightOp::kBroadcast: return "broadcast";
    case FlightOp::kAllGather: return "all_gather";
    case FlightOp::kBarrier: return "barrier";
    case FlightOp::kOther: return "collective";
    case FlightOp::kNone: break;
  }
  return "?";
}

// kStarted: the worker called it and it has not returned; kFinished: it
// returned; kFailed: it threw (a lost peer, a timeout, an abort).
enum class FlightState : uint32_t { kNone = 0, kStarted, kFinished, kFailed };

struct FlightEntry {
  uint64_t id = 0;          // the record's number + 1 in this slot; 0: none
  uint32_t op = 0;          // FlightOp
  uint32_t state = 0;       // FlightState
  uint64_t seq = 0;         // the collective's number in its communicator and generation, from 1
  uint64_t bytes = 0;       // the tensor's size
  int64_t started_ns = 0;   // CLOCK_MONOTONIC
  int64_t finished_ns = 0;  // when it returned or threw (0: not yet)
  uint32_t generation = 0;  // the heal generation of the connection it ran on
  uint32_t comm = 0;        // which communicator: 0 the CPU one, 1 the CUDA one
  uint64_t reserved = 0;
};
static_assert(sizeof(FlightEntry) == 64);

inline constexpr size_t kFlightOffset = 128;  // in the slot, after the heartbeat words
inline constexpr size_t kFlightEntries = 16;

struct FlightRing {
  uint64_t next;      // records claimed so far
  uint64_t advanced;  // the worker's progress (see the top of this file)
  uint64_t reserved[6];
  FlightEntry entries[kFlightEntries];
};
static_assert(sizeof(FlightRing) == 64 + 64 * kFlightEntries);

inline FlightRing* flight_ring(char* slot) { return reinterpret_cast<FlightRing*>(slot + kFlightOffset); }

namespace flight_detail {
inline void store64(uint64_t* p, uint64_t v) { __atomic_store_n(p, v, __ATOMIC_RELAXED); }
inline void store32(uint32_t* p, uint32_t v) { __atomic_store_n(p, v, __ATOMIC_RELAXED); }
}  // namespace flight_detail

// The worker: a new record in state kStarted; returns its id for
// flight_end (0 without a ring).
inline uint64_t flight_begin(FlightRing* ring, FlightOp op, uint64_t seq, uint64_t bytes, uint32_t generation,
                             uint32_t comm, int64_t now_ns) {
  if (!ring) return 0;
  using namespace flight_detail;
  const uint64_t n = __atomic_fetch_add(&ring->next, 1, __ATOMIC_RELAXED);
  FlightEntry& e = ring->entries[n % kFlightEntries];
  store64(&e.id, 0);
  __atomic_thread_fence(__ATOMIC_RELEASE);
  store32(&e.op, static_cast<uint32_t>(op));
  store32(&e.state, static_cast<uint32_t>(FlightState::kStarted));
  store64(&e.seq, seq);
  store64(&e.bytes, bytes);
  store64(reinterpret_cast<uint64_t*>(&e.started_ns), static_cast<uint64_t>(now_ns));
  store64(reinterpret_cast<uint64_t*>(&e.finished_ns), 0);
  store32(&e.generation, generation);
  store32(&e.comm, comm);
  __atomic_store_n(&e.id, n + 1, __ATOMIC_RELEASE);
  return n + 1;
}

// The worker: record `id` finished (or failed) at now_ns. Nothing when the
// ring has gone round since (the record was overwritten).
inline void flight_end(FlightRing* ring, uint64_t id, bool failed, int64_t now_ns) {
  if (!ring || id == 0) return;
  FlightEntry& e = ring->entries[(id - 1) % kFlightEntries];
  if (__atomic_load_n(&e.id, __ATOMIC_RELAXED) != id) return;
  flight_detail::store64(reinterpret_cast<uint64_t*>(&e.finished_ns), static_cast<uint64_t>(now_ns));
  const FlightState state = failed ? FlightState::kFailed : FlightState::kFinished;
  __atomic_store_n(&e.state, static_cast<uint32_t>(state), __ATOMIC_RELEASE);
  if (!failed) __atomic_fetch_add(&ring->advanced, 1, __ATOMIC_RELAXED);
}

// The agent: the worker's progress counter (0 without a ring).
inline uint64_t flight_advanced(const FlightRing* ring) {
  return ring ? __atomic_load_n(&ring->advanced, __ATOMIC_RELAXED) : 0;
}

// Whether the newest record is a collective under way (started, not yet
// returned): the worker's own pulse beats while it waits in one.
inline bool flight_in_progress(const FlightRing* ring) {
  if (!ring) return false;
  const uint64_t n = __atomic_load_n(&ring->next, __ATOMIC_RELAXED);
  if (n == 0) return false;
  const FlightEntry& e = ring->entries[(n - 1) % kFlightEntries];
  return __atomic_load_n(&e.state, __ATOMIC_ACQUIRE) == static_cast<uint32_t>(FlightState::kStarted);
}

// The agent: the records that read whole, oldest first.
inline std::vector<FlightEntry> read_flight(const FlightRing* ring) {
  std::vector<FlightEntry> out;
  for (const FlightEntry& e : ring->entries) {
    const uint64_t id = __atomic_load_n(&e.id, __ATOMIC_ACQUIRE);
    if (id == 0) continue;
    FlightEntry copy;
    copy.id = id;
    copy.state = __atomic_load_n(&e.state, __ATOMIC_ACQUIRE);
    copy.op = __atomic_load_n(&e.op, __ATOMIC_RELAXED);
    copy.seq = __atomic_load_n(&e.seq, __ATOMIC_RELAXED);
    copy.bytes = __atomic_load_n(&e.bytes, __ATOMIC_RELAXED);
    copy.started_ns = static_cast<int64_t>(__atomic_load_n(reinterpret_cast<const uint64_t*>(&e.started_ns), __ATOMIC_RELAXED));
    copy.finished_ns = static_cast<int64_t>(__atomic_load_n(reinterpret_cast<const uint64_t*>(&e.finished_ns), __ATOMIC_RELAXED));
    copy.generation = __atomic_load_n(&e.generation, __ATOMIC_RELAXED);
    copy.comm = __atomic_load_n(&e.comm, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    if (__atomic_load_n(&e.id, __ATOMIC_RELAXED) != id) continue;  // rewritten meanwhile
    out.push_back(copy);
  }
  std::sort(out.begin(), out.end(), [](const FlightEntry& a, const FlightEntry& b) { return a.id < b.id; });
  return out;
}

}  // namespace ddprun::channel
