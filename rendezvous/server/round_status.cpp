// RoundState's report of a job for `ddprun status` (JobStatus): the round,
// its members by node rank and the nodes waiting for a place. Read-only;
// the state machine itself is round.cpp.
#include <algorithm>

#include "rendezvous/server/round.h"

namespace ddprun {

JobStatus RoundState::status(TimePoint now) const {
  JobStatus s;
  s.phase = phase_;
  s.round = round_;
  s.round_closed = closed_;
  s.reason = reason_;
  s.detail = phase_ == JobPhase::kActive ? detail_ : end_message_;
  s.restart_count = restarts_;
  s.settings = settings_;
  s.nodes_waiting = static_cast<int>(waiting_.size());
  s.heal_generation = heal_generation_;
  auto node_status = [&](const std::string& id) {
    const Node& n = nodes_.at(id);
    NodeStatus ns;
    ns.node_id = id;
    ns.host = n.spec.host;
    ns.local_world_size = n.spec.local_world_size;
    // A node without a lease sends no keep-alives: when it was last seen
    // says nothing about it.
    ns.last_seen_ago = n.lease.count() > 0 ? std::chrono::duration_cast<Duration>(now - n.last_seen)
                                           : Duration(-1);
    ns.heals = n.workers_heal_round == round_;
    ns.control_address = n.spec.control_address;
    if (auto a = assignment(id)) {
      ns.node_rank = a->node_rank;
      ns.first_global_rank = a->first_global_rank;
    }
    return ns;
  };
  // Members by node rank (join order while the round is open), then the
  // nodes that wait for a place.
  for (const auto& id : members_) {
    s.nodes.push_back(node_status(id));
    s.world_size += s.nodes.back().local_world_size;
  }
  std::stable_sort(s.nodes.begin(), s.nodes.end(), [](const NodeStatus& a, const NodeStatus& b) {
    return a.node_rank < b.node_rank;
  });
  for (const auto& id : waiting_) {
    if (!nodes_.count(id)) continue;
    s.nodes.push_back(node_status(id));
    s.nodes.back().waiting = true;
  }
  return s;
}

}  // namespace ddprun
