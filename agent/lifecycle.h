// The per-node lifecycle of an agent as data: a pure policy that takes
// events (a join's outcome, the end of a worker group, what a keep-alive
// learned, a signal) and answers with the next command (join, run the
// workers, stop them, leave, wait for the other nodes, exit). The agent's
// I/O loop only carries the commands out, so every decision here is
// unit-tested without processes or a clock.
//
// Each level of supervision speaks one vocabulary: a worker's exit counts
// as a WorkerEnd and a group of them commands GroupCommands (GroupPolicy,
// supervision/group_policy.h); the group ends as a GroupResult
// (supervision/group_result.h); the node is in a NodeState, hears a JoinEnd
// or a GroupResult and answers a NodeCommand (here).
//
//   joining ──joined──▶ running ──workers succeeded──▶ leaving ─▶ (barrier) ─▶ done
//      ▲                  │  │
//      │   workers failed │  └─round superseded / job failed (keep-alive)─▶ stopping
//      └─── restarting ◀──┘                                                     │
//      ▲                                                                        │
//      └──────────────────────────── next round ◀───────────────────────────────┘
#pragma once

#include <optional>
#include <string>

#include "agent/supervision/group_result.h"
#include "rendezvous/store/types.h"

namespace ddprun {

enum class NodeState { kJoining, kRunning, kStopping, kRestarting, kLeaving, kDone };

// How a join ended.
struct JoinEnd {
  std::optional<JoinResult> joined;
  int signal = 0;          // a stop signal cancelled it
  bool job_ended = false;  // the job is over (finished or failed)
  std::string error;       // otherwise: why it failed
  std::string fenced;      // it was given up: this node may not act for the job (AgentConfig::fenced)
};

// What the agent carries out next.
struct NodeCommand {
  enum Kind { kJoin, kRunWorkers, kLeave, kAwaitOthers, kExit };
  Kind kind = kExit;
  JoinIntent intent;                    // kJoin
  LeaveKind leave = LeaveKind::kStopped;  // kLeave, kAwaitOthers (how this node left)
  std::string message;                  // kLeave (why), kExit (error to print, may be empty)
  int exit_code = 0;                    // kExit, and after kLeave/kAwaitOthers
};

struct LifecycleOptions {
  int max_restarts = 0;
  bool hosts_rendezvous = false;  // waits for the other nodes before exiting
};

class Lifecycle {
 public:
  explicit Lifecycle(LifecycleOptions options) : options_(options) {}

  NodeCommand start();
  NodeCommand on_join(const JoinEnd& end);
  NodeCommand on_group_end(const GroupResult& end);
  // After a kLeave command was carried out (successfully or not).
  NodeCommand on_left();
  // After the rendezvous refused this node's success (its workers finished
  // in a round that was over, e.g. its node had been paused or cut off past
  // its lease): the job did not finish; this node leaves it failed, so the
  // others hear so at once, and exits non-zero.
  NodeCommand on_success_refused(const std::string& why);
  // After kAwaitOthers (the hosting node, after it left: the others may
  // still run, or must hear that the job failed).
  NodeCommand on_others_gone();
  // While the workers run: what a keep-alive says. Returns why the workers
  // must stop now (the round was superseded, the job failed, this node was
  // dropped), or nullopt to let them run.
  std::optional<std::string> on_view(const NodeView& view);
  // While the workers run: the rendezvous has not answered for a lease.
  std::string on_contact_lost();

  NodeState state() const { return state_; }
  const std::optional<Assignment>& assignment() const { return assignment_; }
  // Whether the last group failure leaves a restart to spend.
  bool can_restart() const;

 private:
  NodeCommand leave_then_exit(LeaveKind kind, std::string message, int exit_code);

  LifecycleOptions options_;
  NodeState state_ = NodeState::kJoining;
  std::optional<Assignment> assignment_;  // of the round the workers run or ran in
  int pending_exit_ = 0;
  LeaveKind leave_kind_ = LeaveKind::kStopped;
};

}  // namespace ddprun
