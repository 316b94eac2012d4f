// The agent's side of hang detection and progress: a small file of one
// slot per local worker (channel/heartbeat_layout.h), mapped by the agent
// and by each worker (worker_lib's ddp::Heartbeat). Workers increment their
// counter and report their progress; the agent watches both.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "channel/heartbeat_layout.h"

namespace ddprun {

class HeartbeatTable {
 public:
  // Creates (or truncates) path with `slots` zeroed counters and maps it.
  // Throws std::runtime_error naming the file.
  HeartbeatTable(std::string path, int slots);
  ~HeartbeatTable();  // unmaps and removes the file
  HeartbeatTable(const HeartbeatTable&) = delete;
  HeartbeatTable& operator=(const HeartbeatTable&) = delete;

  const std::string& path() const { return path_; }
  // The stack file of `slot` (channel/stack_dump.h), made beside the table
  // and removed with it.
  std::string stack_file(int slot) const;
  // The last collectives the worker in `slot` ran (its flight record),
  // oldest first.
  std::vector<channel::FlightEntry> flight(int slot) const;
  // The worker's progress counter (flight_record.h's `advanced`).
  uint64_t advanced(int slot) const;
  uint64_t read(int slot) const;
  // What the worker in `slot` last reported; false when it was mid-write
  // (try again on the next tick). Nothing reported: flags == 0.
  bool progress(int slot, channel::Progress* out) const;
  // What the worker in `slot` last found comparing the ranks' replicas;
  // false when it was mid-write (try again on the next tick).
  bool replicas(int slot, channel::ReplicaReport* out) const;
  void reset();  // every counter back to 0, before a new attempt starts
  // The stop reason the worker in `slot` reads when the agent's signal
  // reaches it (channel::StopReason); reset() clears it.
  void set_stop_reason(int slot, channel::StopReason reason);
  // Whether the worker in `slot` says it can heal around a failed peer.
  bool heal_ready(int slot) const;
  // Whether the worker in `slot` is inside a ddp::Healer step.
  bool in_step(int slot) const;
  // Whether every worker is inside a ddp::Healer step (and, with
  // in_collective, inside a collective of it: its flight record's newest
  // entry under way).
  bool all_in_step(bool in_collective = false) const;
  // What the worker in `slot` announces it does (kNone: nothing).
  channel::Phase phase(int slot) const;
  // Tells the worker in `slot` to heal in `generation` (and wakes it if it
  // sleeps on the word).
  void set_heal_generation(int slot, uint32_t generation);
  // The generation last told to the worker in `slot` (0: none this attempt).
  uint32_t heal_generation(int slot) const;
  // Whether a worker whose peer fails should give up at once rather than
  // wait for a heal generation: the workers are being stopped, or (across
  // nodes) a member's workers cannot heal. A worker that waits for a
  // generation is woken to give up.
  void set_no_heal_coming(int slot, bool none);
  // The running round shrank: the worker in `slot` is now global rank
  // `rank` of `world_size`, on node `node_rank` of `num_nodes`, from heal
  // `generation` on (set before that generation is named).
  void set_placement(int slot, uint32_t generation, int rank, int world_size, int node_rank, int num_nodes);
  // A replacement's slot: counter, progress and heal-ready cleared, the
  // generation it starts in set (the other workers' slots are untouched).
  void reset_slot(int slot, uint32_t generation);

 private:
  std::string path_;
  int slots_;
  void* map_ = nullptr;
};

}  // namespace ddprun
