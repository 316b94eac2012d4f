#include "agent/lifecycle.h"

namespace ddprun {

NodeCommand Lifecycle::start() {
  state_ = NodeState::kJoining;
  NodeCommand a;
  a.kind = NodeCommand::kJoin;
  a.intent = JoinIntent{-1, false};
  return a;
}

NodeCommand Lifecycle::leave_then_exit(LeaveKind kind, std::string message, int exit_code) {
  state_ = NodeState::kLeaving;
  pending_exit_ = exit_code;
  leave_kind_ = kind;
  NodeCommand a;
  a.kind = NodeCommand::kLeave;
  a.leave = kind;
  a.message = std::move(message);
  a.exit_code = exit_code;
  return a;
}

NodeCommand Lifecycle::on_join(const JoinEnd& end) {
  if (end.joined) {
    state_ = NodeState::kRunning;
    assignment_ = end.joined->assignment;
    NodeCommand a;
    a.kind = NodeCommand::kRunWorkers;
    return a;
  }
  if (end.signal != 0) return leave_then_exit(LeaveKind::kStopped, "", 128 + end.signal);
  // The job is over: nothing to leave; say why and stop.
  if (end.job_ended) {
    state_ = NodeState::kDone;
    NodeCommand a;
    a.kind = NodeCommand::kExit;
    a.message = end.error;
    a.exit_code = 1;
    return a;
  }
  // A join that failed (timed out, refused) ends this node only: a node
  // started with a wrong command line must not take a running job down, and
  // the nodes waiting in the same round time out by themselves.
  return leave_then_exit(LeaveKind::kStopped, end.error, 1);
}

bool Lifecycle::can_restart() const {
  return assignment_ && assignment_->restart_count < options_.max_restarts;
}

NodeCommand Lifecycle::on_group_end(const GroupResult& end) {
  const int64_t round = assignment_ ? assignment_->round : -1;
  switch (end.outcome) {
    case GroupResult::kSucceeded:
      return leave_then_exit(LeaveKind::kSucceeded, "", 0);
    case GroupResult::kStoppedBySignal:
      return leave_then_exit(LeaveKind::kStopped, "", 128 + end.signal);
    case GroupResult::kHandedOver:
      return leave_then_exit(LeaveKind::kHandedOver, end.why, 0);
    case GroupResult::kWorkerFailed: {
      if (!can_restart()) {
        return leave_then_exit(LeaveKind::kFailed,
                               "workers failed and the job has used all " +
                                   std::to_string(options_.max_restarts) +
                                   " restart(s) (raise --max-restarts)",
                               1);
      }
      // The rendezvous counts the restart (once, whichever node reports it
      // first) and opens the next round for every node.
      state_ = NodeState::kRestarting;
      NodeCommand a;
      a.kind = NodeCommand::kJoin;
      a.intent = JoinIntent{round, true, end.why};
      return a;
    }
    case GroupResult::kStoppedForRound: {
      state_ = NodeState::kRestarting;
      NodeCommand a;
      a.kind = NodeCommand::kJoin;
      a.intent = JoinIntent{round, false};
      return a;
    }
  }
  return NodeCommand{};
}

NodeCommand Lifecycle::on_left() {
  // The host keeps the rendezvous up for the others after the job ended
  // here (it succeeded, or failed and they must hear it) — not when it was
  // stopped by a signal: then the user wants it gone.
  if (options_.hosts_rendezvous && leave_kind_ != LeaveKind::kStopped) {
    NodeCommand a;
    a.kind = NodeCommand::kAwaitOthers;
    a.leave = leave_kind_;
    a.exit_code = pending_exit_;
    return a;
  }
  return on_others_gone();
}

NodeCommand Lifecycle::on_success_refused(const std::string& why) {
  return leave_then_exit(LeaveKind::kFailed, why, 1);
}

NodeCommand Lifecycle::on_others_gone() {
  state_ = NodeState::kDone;
  NodeCommand a;
  a.kind = NodeCommand::kExit;
  a.exit_code = pending_exit_;
  return a;
}

std::optional<std::string> Lifecycle::on_view(const NodeView& view) {
  if (state_ != NodeState::kRunning || !assignment_) return std::nullopt;
  std::optional<std::string> why;
  if (!view.known) {
    why = "this node was dropped from the job (its lease ran out)";
  } else if (view.phase == JobPhase::kFailed) {
    why = "the job failed: " + view.detail;
  } else if (view.phase == JobPhase::kSucceeded) {
    // Another node finished: so will this one's workers; let them.
  } else if (view.round > assignment_->round) {  // (an older view may arrive late)
    why = "round " + std::to_string(assignment_->round) + " was superseded by round " +
          std::to_string(view.round) + " (" +
          (view.detail.empty() ? to_string(view.reason) : view.detail) + ")";
  }
  if (why) state_ = NodeState::kStopping;
  return why;
}

std::string Lifecycle::on_contact_lost() {
  state_ = NodeState::kStopping;
  return "lost contact with the rendezvous for longer than the lease";
}

}  // namespace ddprun
