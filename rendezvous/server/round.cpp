#include "rendezvous/server/round.h"

#include <algorithm>

#include "rendezvous/server/round_parts.h"

namespace ddprun {
namespace {

std::string describe(const RoundSettings& s) {
  return "min_nodes=" + std::to_string(s.min_nodes) + " max_nodes=" + std::to_string(s.max_nodes) +
         " last_call=" + std::to_string(s.last_call.count()) + "ms max_restarts=" +
         std::to_string(s.max_restarts);
}

void validate(const RoundSettings& s) {
  if (s.min_nodes < 1 || s.max_nodes < s.min_nodes) {
    throw RendezvousError("rendezvous: need 1 <= min_nodes <= max_nodes, got " + describe(s));
  }
  if (s.last_call.count() < 0) {
    throw RendezvousError("rendezvous: last_call must not be negative, got " + describe(s));
  }
  if (s.max_restarts < 0) {
    throw RendezvousError("rendezvous: max_restarts must not be negative, got " + describe(s));
  }
}

// Compares every byte whatever the first difference (no timing hint).
bool same_key(const std::string& a, const std::string& b) {
  unsigned diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace

RoundState::RoundState(RoundSettings settings, std::function<std::string()> key_source)
    : settings_(settings), key_source_(key_source ? std::move(key_source) : random_lease_key) {
  validate(settings_);
}

void RoundState::check_lease(const std::string& node_id, const std::string& key) const {
  auto it = nodes_.find(node_id);
  if (it == nodes_.end() || same_key(it->second.lease_key, key)) return;
  throw NotThisNode("rendezvous: a call for node " + quote_id(node_id) +
                    " did not carry that node's lease key: only the agent that joined as " + quote_id(node_id) +
                    " may speak for it (a node speaks only for itself)");
}

std::string RoundState::lease_key(const std::string& node_id) const {
  auto it = nodes_.find(node_id);
  return it == nodes_.end() ? "" : it->second.lease_key;
}

bool RoundState::take_heal_credit(Node& n, TimePoint now) {
  if (n.heal_credit_at == TimePoint{}) n.heal_credit_at = now;
  if (now > n.heal_credit_at) {
    const double refill = std::chrono::duration<double>(now - n.heal_credit_at) / kHealRefill;
    n.heal_credit = std::min<double>(kHealBurst, n.heal_credit + refill);
    n.heal_credit_at = now;
  }
  if (n.heal_credit < 1) return false;
  n.heal_credit -= 1;
  return true;
}

void RoundState::validate_join(const NodeSpec& node, const RoundSettings& settings) const {
  if (node.node_id.empty()) throw RendezvousError("rendezvous: empty node_id");
  if (!(settings == settings_)) {
    throw RendezvousError("rendezvous: node " + quote_id(node.node_id) + " joined with " +
                          describe(settings) + " but the job uses " + describe(settings_) +
                          "; every node must pass the same --nnodes, --max-restarts and "
                          "--rdzv-conf");
  }
  if (node.local_world_size < 1) {
    throw RendezvousError("rendezvous: node " + quote_id(node.node_id) + " has local_world_size " +
                          std::to_string(node.local_world_size) +
                          "; it must run at least one worker");
  }
  if (node.node_rank_hint >= settings_.max_nodes) {
    throw RendezvousError("rendezvous: node " + quote_id(node.node_id) + " asks for node rank " +
                          std::to_string(node.node_rank_hint) + " but max_nodes is " +
                          std::to_string(settings_.max_nodes));
  }
}

void RoundState::join(const NodeSpec& node, const RoundSettings& settings, const JoinIntent& intent,
                      Duration lease, TimePoint now, const std::string& lease_key) {
  if (phase_ != JobPhase::kActive) {
    throw JobEnded("rendezvous: " + end_message_ + "; nothing more can join it (start a new job "
                   "with another --rdzv-id)");
  }
  validate_join(node, settings);
  const std::string& id = node.node_id;
  // A node asking for a rank another member of the open round holds.
  if (node.node_rank_hint >= 0 && !closed_) {
    for (const auto& m : members_) {
      if (m != id && nodes_.at(m).spec.node_rank_hint == node.node_rank_hint) {
        throw RendezvousError("rendezvous: nodes " + quote_id(m) + " and " + quote_id(id) +
                              " both ask for node rank " + std::to_string(node.node_rank_hint) +
                              " (check --node-rank)");
      }
    }
  }
  check_program(node, std::find(waiting_.begin(), waiting_.end(), id) != waiting_.end());
  // A node new to the job keeps the lease key it brought (or gets one);
  // one that is back keeps its key (the caller checked it) and what it
  // spent of its heal requests.
  Node fresh;
  fresh.spec = node;
  fresh.lease = lease;
  fresh.last_seen = now;
  if (auto known = nodes_.find(id); known != nodes_.end()) {
    fresh.lease_key = known->second.lease_key;
    fresh.heal_credit = known->second.heal_credit;
    fresh.heal_credit_at = known->second.heal_credit_at;
  } else {
    fresh.lease_key = lease_key.empty() ? key_source_() : lease_key;
  }
  nodes_[id] = std::move(fresh);
  if (lease.count() > 0 && (!lease_check_at_ || now + lease < *lease_check_at_)) {
    lease_check_at_ = now + lease;
  }

  const bool waiting = std::find(waiting_.begin(), waiting_.end(), id) != waiting_.end();
  if (!closed_ && reason_ == RoundReason::kWorkerFailure && intent.workers_failed &&
      intent.last_round == round_ - 1 && !intent.failure.empty() &&
      detail_.size() < kMaxRoundDetailBytes) {
    // A second node whose workers failed in the round just superseded: its
    // failure may be the cause of the first one's (a hung worker killed
    // there closed its peers' connections here), so the open round names
    // both, and every node hears both with its assignment.
    detail_ += "; node " + quote_id(id) + "'s workers failed: " + intent.failure;
    if (detail_.size() > kMaxRoundDetailBytes) detail_.resize(kMaxRoundDetailBytes);
  }
  if (is_member(id) && closed_ && intent.last_round >= round_) {
    // It ran in this round and is back: its workers failed there (one
    // restart), or it lost track of the job. Everyone starts again. (A
    // member that never ran in it was put in it while its join was on the
    // way - a spare that took a lost node's place while the rendezvous
    // moved to another agent - and sends that join again: below.)
    const bool failed_here = intent.workers_failed && intent.last_round == round_;
    std::string why = "node " + quote_id(id) + (failed_here ? "'s workers failed" : " rejoined");
    if (failed_here && !intent.failure.empty()) why += ": " + intent.failure;
    supersede(RoundReason::kWorkerFailure, std::move(why), failed_here, now);
    if (phase_ != JobPhase::kActive) throw JobEnded("rendezvous: " + end_message_);
    add_member(id, now);
  } else if (is_member(id) || waiting) {
    // A repeated join of the open round (or of the waiting list, or of a
    // round it was put in meanwhile) refreshes it: it hears its assignment.
    // (Placed already: its parked join is answered now, though the round
    // did not change.)
    if (closed_ && is_member(id)) ++generation_;
  } else if (static_cast<int>(members_.size()) < settings_.max_nodes) {
    // A node back after it was lost (it ran in an earlier round: paused or
    // cut off past its lease) takes the rank a grow gives, whatever rank it
    // asked for the first time: the others closed ranks meanwhile.
    if (closed_ && grow(id, now, /*any_rank=*/intent.last_round >= 0)) {
      // In the running round already.
    } else {
      if (closed_) supersede(RoundReason::kAdmit, "admitting node " + quote_id(id), false, now);
      add_member(id, now);
    }
  } else {
    waiting_.push_back(id);  // the round is full: wait for the next one
    ++generation_;
  }
  advance(now);
}

void RoundState::check_program(const NodeSpec& node, bool waiting) {
  if (!closed_ || members_.empty() || is_member(node.node_id) || waiting) return;
  const NodeSpec& member = nodes_.at(members_.front()).spec;
  if (node.program.empty() || member.program.empty() || node.program == member.program) return;
  // The program's name, then its arguments, as program_identity() wrote them.
  const auto words = [](const std::string& line) {
    std::vector<std::string> out;
    size_t at = 0;
    while (at < line.size()) {
      const size_t end = line.find(' ', at);
      out.push_back(line.substr(at, end == std::string::npos ? std::string::npos : end - at));
      if (end == std::string::npos) break;
      at = end + 1;
    }
    return out;
  };
  const std::vector<std::string> theirs = words(node.program), ours = words(member.program);
  ++refusals_;
  ++generation_;
  if (theirs.front() == ours.front()) {
    // The same program with other arguments: a per-node output or log path
    // is how multi-node scripts are written (torchrun compares nothing).
    // Admitted; the members say which argument differs, since one that
    // must agree (the model, the data, the steps) would train another job.
    size_t i = 1;
    while (i < theirs.size() && i < ours.size() && theirs[i] == ours[i]) ++i;
    const auto at = [](const std::vector<std::string>& w, size_t k) {
      return k < w.size() ? "`" + w[k] + "`" : std::string("nothing");
    };
    refusal_ = "admitted node " + quote_id(node.node_id) + " (" + node.host + "), whose arguments differ from the "
               "running round's nodes': its argument " + std::to_string(i) + " is " + at(theirs, i) + ", theirs " +
               at(ours, i) + " (`" + node.program + "` against `" + member.program + "`). A per-node argument (an "
               "output or log path) is fine; one that must agree (the model, the data, the steps, the seed) must "
               "be the same on every node";
    return;
  }
  refusal_ = "refused node " + quote_id(node.node_id) + " (" + node.host + "): it runs `" + node.program +
             "`, but the running round's nodes run `" + member.program + "`";
  throw ProgramMismatch("rendezvous: " + refusal_ +
                        "; a node joins a running job only with the same program (give it the others' command "
                        "line, or another --rdzv-id for another job)");
}

void RoundState::add_member(const std::string& id, TimePoint now) {
  members_.push_back(id);
  member_set_.insert(id);
  expected_.erase(id);
  if (!min_reached_at_ && static_cast<int>(members_.size()) >= settings_.min_nodes) {
    min_reached_at_ = now;
  }
}

void RoundState::remove_member(const std::string& id) {
  members_.erase(std::remove(members_.begin(), members_.end(), id), members_.end());
  member_set_.erase(id);
  if (static_cast<int>(members_.size()) < settings_.min_nodes) min_reached_at_.reset();
}

void RoundState::supersede(RoundReason reason, std::string detail, bool costs_restart,
                           TimePoint now) {
  if (costs_restart) {
    ++restarts_;
    if (restarts_ > settings_.max_restarts) {
      end_job(JobPhase::kFailed, detail + ", and the job has used all " +
                                     std::to_string(settings_.max_restarts) +
                                     " restart(s) (raise --max-restarts)");
      return;
    }
  }
  open_next_round(reason, std::move(detail), now);
}

void RoundState::open_next_round(RoundReason reason, std::string detail, TimePoint now) {
  ++round_;
  ++generation_;
  // Everyone of the running round still in the job is expected back.
  follows_running_round_ = closed_;
  expected_.clear();
  if (closed_) {
    for (const auto& id : members_) {
      if (nodes_.count(id)) expected_.insert(id);
    }
  }
  closed_ = false;
  heal_generation_ = 0;
  heal_reason_ = HealReason::kNone;
  reason_ = reason;
  detail_ = std::move(detail);
  members_.clear();
  member_set_.clear();
  assignments_.clear();
  min_reached_at_.reset();
  // Nodes that waited for room come in first, as many as fit.
  std::vector<std::string> waited = std::move(waiting_);
  waiting_.clear();
  for (const auto& id : waited) {
    if (static_cast<int>(members_.size()) < settings_.max_nodes) {
      add_member(id, now);
    } else {
      waiting_.push_back(id);
    }
  }
}

void RoundState::end_job(JobPhase phase, std::string message) {
  phase_ = phase;
  end_message_ = std::move(message);
  ++generation_;
}

bool RoundState::advance(TimePoint now, bool expire_leases) {
  bool changed = false;
  // Leases: drop every node silent for longer than its lease.
  std::vector<std::string> expired;
  if (expire_leases && lease_check_at_ && now >= *lease_check_at_) {
    lease_check_at_.reset();
    for (const auto& [id, n] : nodes_) {
      if (n.lease.count() == 0) continue;
      const TimePoint due = n.last_seen + n.lease;
      if (now >= due) {
        expired.push_back(id);
      } else if (!lease_check_at_ || due < *lease_check_at_) {
        lease_check_at_ = due;
      }
    }
  }
  std::sort(expired.begin(), expired.end());  // a stable order for tests and logs
  for (const auto& id : expired) {
    drop(id, now);
    changed = true;
  }
  if (phase_ != JobPhase::kActive || closed_ || members_.empty()) return changed;
  const bool full = static_cast<int>(members_.size()) >= settings_.max_nodes;
  bool ready = false;
  if (follows_running_round_) {
    ready = min_reached_at_ && expected_.empty();
  } else {
    ready = min_reached_at_ && now >= *min_reached_at_ + settings_.last_call;
  }
  if (full || ready) {
    close_round();
    changed = true;
  }
  return changed;
}

void RoundState::lose(const std::string& node_id, const std::string& why, TimePoint now) {
  drop(node_id, now, why);
}

void RoundState::connection_closed(const std::string& node_id, TimePoint now) {
  auto it = nodes_.find(node_id);
  if (it != nodes_.end()) it->second.closed_at = now;
}

bool RoundState::silent_since_closed(const std::string& node_id) const {
  auto it = nodes_.find(node_id);
  return it != nodes_.end() && it->second.closed_at.has_value();
}

std::string RoundState::probe_address(const std::string& node_id) const {
  auto it = nodes_.find(node_id);
  return it == nodes_.end() ? "" : it->second.spec.probe_address;
}

void RoundState::excuse(Duration stalled, TimePoint now) {
  if (stalled.count() <= 0) return;
  lease_check_at_.reset();
  for (auto& [id, n] : nodes_) {
    if (n.lease.count() == 0) continue;
    n.last_seen = std::min(n.last_seen + stalled, now);
    const TimePoint due = n.last_seen + n.lease;
    if (!lease_check_at_ || due < *lease_check_at_) lease_check_at_ = due;
  }
}

void RoundState::drop(const std::string& id, TimePoint now, const std::string& why) {
  auto it = nodes_.find(id);
  if (it == nodes_.end()) return;
  const Node n = it->second;
  nodes_.erase(it);
  const auto silent = std::chrono::duration_cast<Duration>(now - n.last_seen);
  std::string how = why;
  if (how.empty()) {
    how = "no keep-alive for " + std::to_string(silent.count()) + " ms";
    if (n.closed_at) {
      how += " (its agent's connection to the rendezvous had closed " +
             std::to_string(std::chrono::duration_cast<Duration>(now - *n.closed_at).count()) + " ms before)";
    }
  }
  lost_.push_back(LostNode{id, n.spec.host, n.last_seen, how, now, n.lease});
  expected_.erase(id);
  waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), id), waiting_.end());
  ++generation_;
  if (!is_member(id) || phase_ != JobPhase::kActive) return;
  if (closed_) {
    if (take_over(id, n, how) || shrink(id, n, how)) return;
    supersede(RoundReason::kNodeLost,
              "node " + quote_id(id) + " (" + n.spec.host + ") was lost: " + how, true, now);
  } else {
    remove_member(id);
  }
}

std::vector<std::string> RoundState::take_unreported_losses() {
  std::vector<std::string> out;
  for (size_t i = lost_reported_; i < lost_.size(); ++i) {
    out.push_back(quote_id(lost_[i].node_id) + " (" + lost_[i].host + "): " + lost_[i].why);
  }
  lost_reported_ = lost_.size();
  return out;
}

void RoundState::leave(const std::string& id, LeaveKind kind, const std::string& message,
                       TimePoint now, std::optional<int64_t> round) {
  if (kind == LeaveKind::kSucceeded && round && phase_ == JobPhase::kActive &&
      (!closed_ || *round != round_ || !is_member(id))) {
    // Workers that ran on in a round that is over (its node was paused past
    // its lease, or cut off) finished nothing: the job's current round has
    // other members, or none yet, and they have not trained to the end.
    throw RendezvousError("node " + quote_id(id) + " finished its workers in round " + std::to_string(*round) +
                          ", but the job had moved on to round " + std::to_string(round_) +
                          (nodes_.count(id) ? "" : " without it (its lease ran out)") +
                          ": their end is not the job's");
  }
  auto it = nodes_.find(id);
  if (it == nodes_.end()) return;
  if (kind == LeaveKind::kHandedOver) {
    // As if it were lost, now: a waiting node takes its place (or the round
    // shrinks, or is superseded, as for any lost member).
    drop(id, now, message.empty() ? "it handed its place over" : message);
    return;
  }
  nodes_.erase(it);
  expected_.erase(id);
  waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), id), waiting_.end());
  ++generation_;
  if (phase_ != JobPhase::kActive) return;
  switch (kind) {
    case LeaveKind::kHandedOver:
      return;  // above
    case LeaveKind::kSucceeded:
      // Its workers finished: so has the job. The other members finish
      // their own (the round they run stays as it is).
      end_job(JobPhase::kSucceeded, "job finished: node " + quote_id(id) + "'s workers succeeded");
      return;
    case LeaveKind::kFailed:
      end_job(JobPhase::kFailed, "job failed on node " + quote_id(id) +
                                     (message.empty() ? "" : ": " + message));
      return;
    case LeaveKind::kStopped:
      if (!is_member(id)) return;
      if (closed_) {
        supersede(RoundReason::kNodeLeft, "node " + quote_id(id) + " left", false, now);
      } else {
        remove_member(id);
      }
      return;
  }
}

NodeView RoundState::keep_alive(const std::string& node_id, TimePoint now, int64_t workers_heal_round,
                                const HealRequest& heal) {
  auto it = nodes_.find(node_id);
  if (it != nodes_.end()) {
    Node& n = it->second;
    n.last_seen = now;
    n.closed_at.reset();
    if (n.workers_heal_round != workers_heal_round) {
      // Whether its workers heal decides takeovers, shrinks and admissions:
      // a change of the job (parked joins look again; a successor must know).
      n.workers_heal_round = workers_heal_round;
      ++generation_;
    }
    // Each request is answered once: a repeat (its answer was lost on the
    // way) must not name a second generation. One over the node's bound is
    // not answered yet: the keep-alives that repeat it bring it back.
    if (heal.id != 0 && heal.id != n.heal_request_id && take_heal_credit(n, now)) {
      n.heal_request_id = heal.id;
      n.heal_request_generation = name_worker_heal(node_id, heal.detail);
    }
  }
  return view(node_id);
}

NodeView RoundState::view(const std::string& node_id) const {
  NodeView v;
  v.known = nodes_.count(node_id) > 0;
  v.round = round_;
  v.closed = closed_;
  v.phase = phase_;
  v.reason = reason_;
  v.detail = phase_ == JobPhase::kActive ? detail_ : end_message_;
  v.nodes_waiting = static_cast<int>(waiting_.size());
  v.restart_count = restarts_;
  v.heal_generation = heal_generation_;
  v.heal_reason = heal_reason_;
  v.refusals = refusals_;
  v.refusal = refusal_;
  v.takeover_ready = closed_ && members_.size() >= 2 && members_heal();
  if (auto a = assignment(node_id)) v.placement = a->placement();
  if (auto it = nodes_.find(node_id); it != nodes_.end()) {
    v.heal_request_id = it->second.heal_request_id;
    v.heal_request_generation = it->second.heal_request_generation;
  }
  return v;
}

void RoundState::close_round() {
  // Node ranks: nodes that asked for a rank get it; then nodes keep the
  // rank they had in the last round where it still exists; the others fill
  // the free ranks in join order.
  const int n = static_cast<int>(members_.size());
  std::vector<int> order(n, -1);  // order[node_rank] = member index
  std::vector<bool> placed(n, false);
  auto place = [&](int i, int rank) {
    if (rank < 0 || rank >= n || order[rank] != -1 || placed[i]) return;
    order[rank] = i;
    placed[i] = true;
  };
  for (int i = 0; i < n; ++i) place(i, nodes_.at(members_[i]).spec.node_rank_hint);
  std::vector<std::pair<int, int>> previous;  // (old rank, member index)
  for (int i = 0; i < n; ++i) {
    auto it = last_ranks_.find(members_[i]);
    if (it != last_ranks_.end()) previous.emplace_back(it->second, i);
  }
  std::sort(previous.begin(), previous.end());
  for (auto [rank, i] : previous) place(i, rank);
  int next = 0;
  for (int i = 0; i < n; ++i) {
    if (placed[i]) continue;
    while (order[next] != -1) ++next;
    place(i, next);
  }

  int world = 0;
  for (const auto& id : members_) world += nodes_.at(id).spec.local_world_size;
  const NodeSpec& master = nodes_.at(members_[order[0]]).spec;
  const std::vector<std::string> lost = take_unreported_losses();
  assignments_.clear();
  last_ranks_.clear();
  int first = 0;
  for (int rank = 0; rank < n; ++rank) {
    const NodeSpec& m = nodes_.at(members_[order[rank]]).spec;
    assignments_[m.node_id] = Assignment{round_, rank, n, world, first, master.local_addr, master.master_port, restarts_,
                                         lost, 0, reason_ == RoundReason::kWorkerFailure ? detail_ : ""};
    last_ranks_[m.node_id] = rank;
    first += m.local_world_size;
  }
  closed_ = true;
  ++generation_;
}

std::optional<Assignment> RoundState::assignment(const std::string& node_id) const {
  if (!closed_) return std::nullopt;
  auto it = assignments_.find(node_id);
  if (it == assignments_.end()) return std::nullopt;
  return it->second;
}

std::optional<RoundState::TimePoint> RoundState::next_deadline() const {
  std::optional<TimePoint> next;
  auto consider = [&](TimePoint t) {
    if (!next || t < *next) next = t;
  };
  if (phase_ == JobPhase::kActive && !closed_ && min_reached_at_ && !follows_running_round_) {
    consider(*min_reached_at_ + settings_.last_call);
  }
  if (lease_check_at_) consider(*lease_check_at_);
  return next;
}

bool RoundState::wants_nccl_id() const {
  return std::any_of(members_.begin(), members_.end(),
                     [&](const std::string& id) { return nodes_.at(id).spec.wants_nccl_id; });
}

}  // namespace ddprun
