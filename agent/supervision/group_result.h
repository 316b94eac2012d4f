// How one attempt of a node's workers ended: one vocabulary for the
// GroupPolicy that decides it, the WorkerGroup that reports it, the Attempt
// that names its root cause and the Lifecycle that acts on it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "agent/output/failure_report.h"

namespace ddprun {

enum class GroupOutcome {
  kSucceeded,
  kWorkerFailed,
  kStoppedBySignal,
  kStoppedForRound,  // news from outside the node: a new round, the job failed
  // The node stopped its workers to hand its place to a waiting node (it
  // was the job's straggler); it leaves and exits 0. Only the agent's
  // Attempt says so, of a group stopped for the round.
  kHandedOver,
};

struct GroupResult {
  using Outcome = GroupOutcome;
  using enum GroupOutcome;
  Outcome outcome = kSucceeded;
  int signal = 0;  // kStoppedBySignal
  // kWorkerFailed: the root cause (the Attempt names it from `failures`),
  // told to the rendezvous with the restart; kStoppedForRound: the news
  // that stopped the group; kHandedOver: why, told with the leave.
  std::string why;
  std::vector<WorkerExit> failures;  // workers that failed on their own
  std::vector<WorkerExit> healed;    // of each worker replaced while the others went on, its newest failure
  int heals = 0;                     // replacements in all
  uint32_t heal_generation = 0;      // the last heal's (0: none)
  int stopped_count = 0;             // workers the group stopped
  std::vector<LogLoss> log_losses;   // log files that did not get everything
};

}  // namespace ddprun
