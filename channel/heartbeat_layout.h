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

// The worker's write: seq odd, fields, seq even (release), so a reader
// that sees the same even seq before and after its copy saw one report.
inline void write_progress(ProgressBlock* block, const Progress& p) {
  const uint64_t seq = __atomic_load_n(&block->seq, __ATOMIC_RELAXED);
  __atomic_store_n(&block->seq, seq + 1, __ATOMIC_RELAXED);
  __atomic_thread_fence(__ATOMIC_RELEASE);
  // Field by field as relaxed atomics: a plain memcpy racing the reader's
  // would be a data race (the seq check throws a torn copy away anyway).
  const auto* src = reinterpret_cast<const uint64_t*>(&p);
  auto* dst = reinterpret_cast<uint64_t*>(&block->value);
  for (size_t i = 0; i < sizeof(Progress) / 8; ++i) __atomic_store_n(dst + i, src[i], __ATOMIC_RELAXED);
  __atomic_store_n(&block->seq, seq + 2, __ATOMIC_RELEASE);
}

// The agent's read: false when the worker was mid-write every try (it
// then reads again on its next tick).
inline bool read_progress(const ProgressBlock* block, Progress* out) {
  for (int attempt = 0; attempt < 4; ++attempt) {
    const uint64_t before = __atomic_load_n(&block->seq, __ATOMIC_ACQUIRE);
    if (before & 1) continue;
    uint64_t copy[sizeof(Progress) / 8];
    const auto* src = reinterpret_cast<const uint64_t*>(&block->value);
    for (size_t i = 0; i < sizeof(Progress) / 8; ++i) copy[i] = __atomic_load_n(src + i, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    if (__atomic_load_n(&block->seq, __ATOMIC_RELAXED) == before) {
      std::memcpy(out, copy, sizeof(Progress));
      return true;
    }
  }
  return false;
}

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

inline uint32_t* stop_reason_word(void* map, int slot) {
  return reinterpret_cast<uint32_t*>(heartbeat_slot(map, slot) + kStopReasonOffset);
}

// The words the agent's own Python (python_startup.h, python_standby.h)
// reads, as Python assignments taken from the constants above.
inline std::string python_slot_words() {
  return "_DDPRUN_SLOT_BYTES = " + std::to_string(kHeartbeatSlotBytes) + "\n_DDPRUN_PHASE_OFFSET = " +
         std::to_string(kPhaseOffset) + "\n";
}

}  // namespace ddprun::channel
