// The agent ↔ worker contract, part 2: the heartbeat file. One 2048-byte slot
// per local rank (no false sharing between workers), mapped by the agent
// (agent/heartbeat_table) and by each worker (worker_lib's ddp::Heartbeat).
// Its first 128 bytes are the heartbeat words below; the rest is the
// worker's flight record (flight_record.h):
//
//   bytes 0..7    beats: a counter the worker increments and the agent reads,
//                 both with relaxed atomics (hang detection, standby warm-up);
//   bytes 8..79   progress: what the training loop last reported (step,
//                 epoch, loss, samples, checkpoints), written by the worker
//                 under a sequence lock and read by the agent for the
//                 progress line, the event log and `ddprun status`;
//   bytes 80..83  heal ready: 1 while the worker can heal around a failed
//                 peer (a ddp::Healer lives), written by the worker;
//   bytes 84..87  heal generation: written by the agent when it replaces
//                 failed workers (then a futex wake); the survivors wait
//                 for it to pass the one they run in, then connect their
//                 communicators afresh under that generation's keys;
//   bytes 88..91  no heal coming: written by the agent, 1 when a failed
//                 peer will not be healed around (the agent stops the
//                 workers; across nodes, a member's workers cannot heal), so
//                 a worker whose peer fails exits at once instead of waiting
//                 for a generation (one that waits is woken), else 0;
//   bytes 92..111 placement: written by the agent when the running round
//                 shrank (a lost node's ranks went, the survivors' moved
//                 down): the heal generation it belongs to (0: none; the
//                 launch environment holds), then the worker's new global
//                 rank, the world size, its node's rank and the number of
//                 nodes. Written before the heal generation names it; the
//                 worker connects that generation with these ranks;
//   bytes 112..115 phase: written by the worker, nonzero while the program
//                 announces a long stretch without collectives (start-up,
//                 a checkpoint, an evaluation: channel::Phase); the learned
//                 hang timeout (--hang-timeout auto) does not judge it; and
//                 kFinishing once it is past its last step (its World ends,
//                 its interpreter exits): never judged hung at all;
//   bytes 116..119 in step: written by the worker, 1 while it is inside a
//                 ddp::Healer step (a heal named now is handled there; one
//                 named outside, in an evaluation say, fails the worker's
//                 next collective); the agent replaces a straggler only
//                 while every worker is;
//   bytes 120..123 stop reason: written by the agent just before it signals
//                 the worker to stop, read by the worker's signal handler
//                 (worker_lib's StopFlag): whether the stop is the agent's own
//                 decision (a peer failed, a new round, a hang) or a signal
//                 the user sent ddprun (preemption, Ctrl-C).
//   bytes 128..1215 the flight record (flight_record.h), with the worker's
//                 progress counter at 136 (collectives that returned, or a
//                 Python script's optimizer steps): hang detection's
//                 measure of a job that moves (agent/health/progress_watch.h);
//   bytes 1216..1663 replicas: written by the worker after each comparison
//                 of the ranks' parameter fingerprints (--verify-every):
//                 the newest step they agreed at, and the newest verdict
//                 when they did not (which ranks were apart, what was done),
//                 read by the agent for the console, the event log and
//                 `ddprun status`, and to replace a rank found apart twice.
//
// The agent zeroes the file before each attempt: a zero progress block means
// "nothing reported yet".
//
// This header is the layout's one definition, for Python too: the Python
// package ships a copy of it and python/ddprun/_slot.py reads the
// `inline constexpr size_t kName = N;` lines below (keep them in that form).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "channel/flight_record.h"

namespace ddprun::channel {

inline constexpr size_t kHeartbeatSlotBytes = 2048;
inline constexpr size_t kHeartbeatWordsBytes = 128;  // the flight record follows
inline constexpr size_t kBeatsOffset = 0;             // the uint64_t counter

inline size_t heartbeat_file_bytes(int slots) {
  return static_cast<size_t>(slots) * kHeartbeatSlotBytes;
}

inline char* heartbeat_slot(void* map, int slot) {
  return static_cast<char*>(map) + static_cast<size_t>(slot) * kHeartbeatSlotBytes;
}

// The counter of `slot` in a mapping of the file.
inline uint64_t* heartbeat_counter(void* map, int slot) {
  return reinterpret_cast<uint64_t*>(heartbeat_slot(map, slot) + kBeatsOffset);
}

// What a worker last reported of its training. Steps and epochs count from
// 0; a field without its flag is unknown.
struct Progress {
  enum Flags : uint32_t {
    kHasStep = 1u << 0,
    kHasLoss = 1u << 1,
    kHasTotalSteps = 1u << 2,
    kHasSaved = 1u << 3,     // saved_step: newest checkpoint this rank wrote
    kHasRestored = 1u << 4,  // restored_step: checkpoint this attempt resumed from
    kHasEpoch = 1u << 5,
  };
  int64_t step = 0;         // the step the worker is on (or just finished)
  int64_t total_steps = 0;  // for an ETA
  int64_t samples = 0;      // samples of the whole job so far, as the program counts them
  int64_t saved_step = 0;
  int64_t restored_step = 0;
  int64_t updated_ns = 0;   // CLOCK_MONOTONIC of the report
  double loss = 0;
  int32_t epoch = 0;
  uint32_t flags = 0;
};
static_assert(sizeof(Progress) == 64);

// The progress block of a slot: a sequence number (odd while a write is
// under way) and the Progress it guards. One writer (the worker), one or
// more readers (the agent); neither ever waits on the other.
struct ProgressBlock {
  uint64_t seq;
  Progress value;
};
static_assert(sizeof(ProgressBlock) + 8 <= 120);  // below the stop reason

inline ProgressBlock* progress_block(void* map, int slot) {
  return reinterpret_cast<ProgressBlock*>(heartbeat_slot(map, slot) + 8);
}

// A block of one writer (the worker) and readers (the agent) that never
// wait on each other: a sequence number, odd while a write is under way,
// and the value it guards (a multiple of 8 bytes, trivially copyable).
// The writer: seq odd, the fields, seq even (release); a reader that sees
// the same even seq before and after its copy saw one write. Field by field
// as relaxed atomics: a plain memcpy racing the other side's would be a
// data race (the seq check throws a torn copy away anyway).
template <typename T>
inline void seq_write(uint64_t* seq_word, T* dst, const T& value) {
  static_assert(sizeof(T) % 8 == 0);
  const uint64_t seq = __atomic_load_n(seq_word, __ATOMIC_RELAXED);
  __atomic_store_n(seq_word, seq + 1, __ATOMIC_RELAXED);
  __atomic_thread_fence(__ATOMIC_RELEASE);
  const auto* src = reinterpret_cast<const uint64_t*>(&value);
  auto* out = reinterpret_cast<uint64_t*>(dst);
  for (size_t i = 0; i < sizeof(T) / 8; ++i) __atomic_store_n(out + i, src[i], __ATOMIC_RELAXED);
  __atomic_store_n(seq_word, seq + 2, __ATOMIC_RELEASE);
}

// The reader's side: false when the writer was mid-write every try (the
// agent then reads again on its next tick).
template <typename T>
inline bool seq_read(const uint64_t* seq_word, const T* src, T* out) {
  static_assert(sizeof(T) % 8 == 0);
  for (int attempt = 0; attempt < 4; ++attempt) {
    const uint64_t before = __atomic_load_n(seq_word, __ATOMIC_ACQUIRE);
    if (before & 1) continue;
    uint64_t copy[sizeof(T) / 8];
    const auto* in = reinterpret_cast<const uint64_t*>(src);
    for (size_t i = 0; i < sizeof(T) / 8; ++i) copy[i] = __atomic_load_n(in + i, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    if (__atomic_load_n(seq_word, __ATOMIC_RELAXED) == before) {
      std::memcpy(static_cast<void*>(out), copy, sizeof(T));
      return true;
    }
  }
  return false;
}

inline void write_progress(ProgressBlock* block, const Progress& p) { seq_write(&block->seq, &block->value, p); }
inline bool read_progress(const ProgressBlock* block, Progress* out) { return seq_read(&block->seq, &block->value, out); }

// The heal words (see the top of this file): 32-bit, so that a worker can
// sleep on the generation with a futex (the file is a shared mapping).
inline constexpr size_t kHealReadyOffset = 80;
inline constexpr size_t kHealGenerationOffset = 84;
inline constexpr size_t kNoHealComingOffset = 88;
static_assert(8 + sizeof(ProgressBlock) <= kHealReadyOffset);

inline uint32_t* heal_ready_word(void* map, int slot) {
  return reinterpret_cast<uint32_t*>(heartbeat_slot(map, slot) + kHealReadyOffset);
}
inline uint32_t* heal_generation_word(void* map, int slot) {
  return reinterpret_cast<uint32_t*>(heartbeat_slot(map, slot) + kHealGenerationOffset);
}
inline uint32_t* no_heal_coming_word(void* map, int slot) {
  return reinterpret_cast<uint32_t*>(heartbeat_slot(map, slot) + kNoHealComingOffset);
}

// The placement words, in this order (all uint32_t).
enum PlacementWord { kPlacedGeneration = 0, kPlacedRank, kPlacedWorldSize, kPlacedNodeRank, kPlacedNumNodes, kPlacementWords };
inline constexpr size_t kPlacementOffset = 92;
inline constexpr size_t kPlacementWordCount = 5;  // for Python, which reads no enum
static_assert(kPlacementWordCount == kPlacementWords);
static_assert(kNoHealComingOffset + 4 <= kPlacementOffset);

inline uint32_t* placement_words(void* map, int slot) {
  return reinterpret_cast<uint32_t*>(heartbeat_slot(map, slot) + kPlacementOffset);
}

// What a worker announces it does (the slot's phase word): while one is
// announced, silence is expected and the learned hang timeout waits.
enum class Phase : uint32_t { kNone = 0, kStartup = 1, kCheckpoint = 2, kEvaluation = 3, kOther = 4, kFinishing = 5 };

inline const char* phase_name(Phase p) {
  switch (p) {
    case Phase::kStartup: return "start-up";
    case Phase::kCheckpoint: return "checkpoint";
    case Phase::kEvaluation: return "evaluation";
    case Phase::kOther: return "announced phase";
    case Phase::kFinishing: return "finishing";
    case Phase::kNone: break;
  }
  return "none";
}

inline constexpr size_t kPhaseOffset = 112;
// How often a worker that waits for its peers (a collective, a heal) beats,
// in milliseconds, whoever beats for it (worker_lib's pulse, the Python
// package's, the agent's own Python): well inside any --hang-timeout.
inline constexpr size_t kWaitPulseMs = 50;
static_assert(kPlacementOffset + 4 * kPlacementWords <= kPhaseOffset);

inline uint32_t* phase_word(void* map, int slot) {
  return reinterpret_cast<uint32_t*>(heartbeat_slot(map, slot) + kPhaseOffset);
}

inline constexpr size_t kInStepOffset = 116;
static_assert(kPhaseOffset + 4 <= kInStepOffset);

inline uint32_t* in_step_word(void* map, int slot) {
  return reinterpret_cast<uint32_t*>(heartbeat_slot(map, slot) + kInStepOffset);
}

// Why the agent stops a worker (the slot's stop-reason word). kForwarded
// (0, also "not stopping"): a signal the user sent ddprun, which a program
// may take as preemption (checkpoint, exit 0). kAgentDecided: ddprun's own
// stop; the attempt is over and nothing the worker does now can finish the
// job, so a StopFlag lets the signal kill the worker instead.
enum StopReason : uint32_t { kForwarded = 0, kAgentDecided = 1 };

inline constexpr size_t kStopReasonOffset = 120;
static_assert(kInStepOffset + 4 <= kStopReasonOffset);
static_assert(kStopReasonOffset + 4 <= kHeartbeatWordsBytes);
static_assert(kFlightOffset >= kHeartbeatWordsBytes && kFlightOffset + sizeof(FlightRing) <= kHeartbeatSlotBytes);

// The progress counter (flight_record.h's FlightRing::advanced), for
// Python, which reads no struct.
inline constexpr size_t kAdvancedOffset = 136;
static_assert(kAdvancedOffset == kFlightOffset + offsetof(FlightRing, advanced));

inline uint32_t* stop_reason_word(void* map, int slot) {
  return reinterpret_cast<uint32_t*>(heartbeat_slot(map, slot) + kStopReasonOffset);
}

// The replicas block (see the top of this file): what the worker's last
// comparison of the ranks' fingerprints found. Written by worker_lib's
// Healer and by the Python package's (python/ddprun/_verify.py, through the
// offsets below: keep them in the `inline constexpr size_t` form).
enum class ReplicaVerdict : uint32_t {
  kNone = 0,        // no verdict yet
  kRepaired = 1,    // ranks apart from a majority took its state; the job goes on
  kNoMajority = 2,  // no majority to repair from: the ranks stop (a restart from a checkpoint)
  kByDesign = 3,    // ranks of different hardware differ alike: said once, never repaired
  kStopped = 4,     // ranks apart and nothing to repair them (a program without a Healer): the ranks stop
};

// What this rank itself is in the newest verdict.
enum class ReplicaSelf : uint32_t {
  kAgrees = 0,   // with the majority (or no majority was found)
  kApart = 1,    // among the ranks apart: repaired
  kReplace = 2,  // apart a second time: ddprun replaces the process (it is repaired meanwhile)
};

struct ReplicaReport {
  int64_t agreed_step = -1;   // the newest step at which every rank agreed (-1: none yet)
  uint64_t checks = 0;        // comparisons this process took part in
  uint32_t verdicts = 0;      // the times they found ranks apart (the newest one below)
  uint32_t verdict = 0;       // ReplicaVerdict
  int64_t verdict_step = -1;  // the step of the newest verdict
  uint32_t self = 0;          // ReplicaSelf
  uint32_t every = 0;         // the interval this process compares at (--verify-every; 0: off)
  char text[400] = {};        // the newest verdict's line, NUL-terminated ("rank 2's parameters differ ...")
};
static_assert(sizeof(ReplicaReport) == 440);

struct ReplicaBlock {
  uint64_t seq;
  ReplicaReport value;
};

inline constexpr size_t kReplicaOffset = 1216;
// Offsets in the block (from kReplicaOffset), for Python.
inline constexpr size_t kReplicaSeqOffset = 0;
inline constexpr size_t kReplicaAgreedStepOffset = 8;
inline constexpr size_t kReplicaChecksOffset = 16;
inline constexpr size_t kReplicaVerdictsOffset = 24;
inline constexpr size_t kReplicaVerdictOffset = 28;
inline constexpr size_t kReplicaVerdictStepOffset = 32;
inline constexpr size_t kReplicaSelfOffset = 40;
inline constexpr size_t kReplicaEveryOffset = 44;
inline constexpr size_t kReplicaTextOffset = 48;
inline constexpr size_t kReplicaTextBytes = 400;
static_assert(kReplicaOffset == kFlightOffset + sizeof(FlightRing));
static_assert(kReplicaOffset + sizeof(ReplicaBlock) <= kHeartbeatSlotBytes);
static_assert(offsetof(ReplicaBlock, seq) == kReplicaSeqOffset);
static_assert(offsetof(ReplicaBlock, value) + offsetof(ReplicaReport, agreed_step) == kReplicaAgreedStepOffset);
static_assert(offsetof(ReplicaBlock, value) + offsetof(ReplicaReport, checks) == kReplicaChecksOffset);
static_assert(offsetof(ReplicaBlock, value) + offsetof(ReplicaReport, verdicts) == kReplicaVerdictsOffset);
static_assert(offsetof(ReplicaBlock, value) + offsetof(ReplicaReport, verdict) == kReplicaVerdictOffset);
static_assert(offsetof(ReplicaBlock, value) + offsetof(ReplicaReport, verdict_step) == kReplicaVerdictStepOffset);
static_assert(offsetof(ReplicaBlock, value) + offsetof(ReplicaReport, self) == kReplicaSelfOffset);
static_assert(offsetof(ReplicaBlock, value) + offsetof(ReplicaReport, every) == kReplicaEveryOffset);
static_assert(offsetof(ReplicaBlock, value) + offsetof(ReplicaReport, text) == kReplicaTextOffset);
static_assert(sizeof(ReplicaReport::text) == kReplicaTextBytes);

inline ReplicaBlock* replica_block(void* map, int slot) {
  return reinterpret_cast<ReplicaBlock*>(heartbeat_slot(map, slot) + kReplicaOffset);
}
inline void write_replicas(ReplicaBlock* block, const ReplicaReport& r) { seq_write(&block->seq, &block->value, r); }
inline bool read_replicas(const ReplicaBlock* block, ReplicaReport* out) { return seq_read(&block->seq, &block->value, out); }


}  // namespace ddprun::channel
