// What a process found comparing the ranks' replicas, told to its agent
// through the heartbeat slot's replicas block (channel/heartbeat_layout.h):
// the newest step they agreed at, how many comparisons it took part in, and
// the newest verdict when they did not agree (the agent tells it on the
// console, in the event log and `ddprun status`, and replaces a rank that
// says it cannot be trusted). Without a slot (not under ddprun) rank 0
// prints the verdict itself. The Healer and a DistributedDataParallel
// without one both report through it.
#pragma once

#include <cstdint>
#include <string>

#include "channel/heartbeat_layout.h"

namespace ddp {

class Heartbeat;

class ReplicaReporter {
 public:
  // `heartbeat` may be null or have no slot; `rank`: this process's.
  ReplicaReporter(Heartbeat* heartbeat, int rank, int64_t every);

  // A comparison ended: every rank agreed at `step` (-1: not in steps).
  void compared(bool agreed, int64_t step);
  // A verdict at `step` (ReplicaVerdict, ReplicaSelf), and its line.
  void verdict(ddprun::channel::ReplicaVerdict verdict, ddprun::channel::ReplicaSelf self, int64_t step,
               const std::string& text);

 private:
  void publish();
  Heartbeat* heartbeat_;
  int rank_;
  ddprun::channel::ReplicaReport report_;
};

}  // namespace ddp
