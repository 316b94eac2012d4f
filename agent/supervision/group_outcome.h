// How one attempt of a node's workers ended: one vocabulary for the
// GroupPolicy that decides it, the WorkerGroup that reports it and the
// Lifecycle that acts on it.
#pragma once

namespace ddprun {

enum class GroupOutcome {
  kSucceeded,
  kWorkerFailed,
  kStoppedBySignal,
  kStoppedForRound,  // news from outside the node: a new round, the job failed
  // The node stopped its workers to hand its place to a waiting node (it
  // was the job's straggler); it leaves and exits 0. Only the agent's
  // Attempt says so (GroupEnd).
  kHandedOver,
};

}  // namespace ddprun
