// The worker → launcher contract for `ddprun --trace DIR`: each worker
// records the phases of its steps into a file of its own, mapped shared, so
// that what it recorded survives even a SIGKILL (the page cache keeps it).
// The launcher merges every rank's file, with the agents' event logs and
// clock offsets, into one Chrome-trace JSON (trace/). No LibTorch, no gRPC.
//
// File: a 64-byte TraceHeader, then `capacity` 48-byte TraceRecords. A
// writer takes a record's index with one atomic add on header.next, fills
// it, and sets `valid` last (release); a reader skips records not valid.
// Indexes at or past capacity are dropped (counted by next - capacity).
//
// Times are CLOCK_MONOTONIC nanoseconds of the worker's host
// (std::chrono::steady_clock on Linux); the agent's clock.json gives the
// offset that puts them on the job's reference clock.
#pragma once

#include <cstdint>
#include <string>

namespace ddprun::channel {

inline constexpr uint32_t kTraceMagic = 0x54505044;  // "DDPT"
inline constexpr uint32_t kTraceVersion = 1;

// What a record times. Tracks: main (the training loop), comm (DDP's
// communication thread), checkpoint (the background writer).
enum class TracePhase : uint16_t {
  kStep = 1,         // one whole step, from step begin to the next (or end)
  kData = 2,         // getting the batch
  kForward = 3,
  kBackward = 4,     // loss.backward() (first gradient hook → end of backward)
  kAllReduce = 5,    // one bucket's all-reduce; arg: bucket index, bytes
  kFinalizeWait = 6, // waiting, after backward, for the buckets still in flight
  kOptimizer = 7,
  kCheckpointCopy = 8,   // copy of the state: background (checkpoint track); main track: training waits for it
  kCheckpointWrite = 9,  // writing it out (background thread)
  kCollective = 10,      // a collective outside DDP; arg: CollectiveKind, bytes
  kRestore = 11,         // loading a checkpoint at start
  kInit = 12,            // ddp::init(): rendezvous and connecting to peers
  // A heal (ddp::Healer): a peer failed inside a step.
  kHealWait = 13,        // waiting for ddprun to name the heal generation; arg: the one it failed in
  kHealConnect = 14,     // connecting that generation's communicator; arg: the generation
  kHealTransfer = 15,    // agreeing on the newest state and sending it; arg: the generation, bytes
};

enum class TraceTrack : uint8_t { kMain = 0, kComm = 1, kCheckpoint = 2 };

enum class CollectiveKind : int64_t {
  kAllReduce = 0, kBroadcast = 1, kAllGather = 2, kBarrier = 3,
};

struct TraceHeader {
  uint32_t magic;
  uint32_t version;
  int32_t rank;        // global rank
  int32_t local_rank;
  int32_t world_size;
  int32_t attempt;     // the agent's attempt number (attempt_N)
  int32_t pid;
  uint32_t record_bytes;  // sizeof(TraceRecord), checked by readers
  uint64_t capacity;      // records after the header
  uint64_t next;          // next free index (atomic add); may exceed capacity
  uint8_t reserved[16];
};
static_assert(sizeof(TraceHeader) == 64);

struct TraceRecord {
  int64_t begin_ns;
  int64_t end_ns;    // == begin_ns for an instant
  int64_t step;      // the step it belongs to (-1: outside any step)
  int64_t arg;       // bucket index, CollectiveKind, ...
  int64_t bytes;     // payload, where it has one
  uint16_t phase;    // TracePhase
  uint8_t track;     // TraceTrack
  uint8_t valid;     // set last, with release
  uint32_t reserved;
};
static_assert(sizeof(TraceRecord) == 48);

// Layout of DIR (made by the agents; merged by the launcher that hosts the
// rendezvous once every node has left):
//   DIR/<node>/events.jsonl              the agent's event log (see event_log.h)
//   DIR/<node>/clock.json                {"offset_ns": N}: reference = local + N
//   DIR/<node>/attempt_<A>/rank<R>.trace a worker's records
//   DIR/trace.json, DIR/summary.txt      the merged result
// <node> is the agent's node id made file-safe (host.pid).
inline std::string trace_rank_file(const std::string& node_dir, int attempt, int rank) {
  return node_dir + "/attempt_" + std::to_string(attempt) + "/rank" + std::to_string(rank) + ".trace";
}

}  // namespace ddprun::channel
