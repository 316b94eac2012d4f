// RoundState, heals: whether every member's workers heal, a lost node's
// ranks taken over by a spare or shrunk past, a newcomer grown into the
// running round, and a worker's heal generation named. The rest of the
// round (joins, rounds opened and closed, leases, leaves, views) is in
// round.cpp.
#include <algorithm>

#include "rendezvous/server/round.h"
#include "rendezvous/server/round_parts.h"

namespace ddprun {

bool RoundState::members_heal(const std::string& except) const {
  return std::all_of(members_.begin(), members_.end(), [&](const std::string& m) {
    if (m == except) return true;
    auto it = nodes_.find(m);
    return it != nodes_.end() && it->second.workers_heal_round == round_;
  });
}

bool RoundState::take_over(const std::string& lost, const Node& gone, const std::string& how) {
  auto held = assignments_.find(lost);
  if (held == assignments_.end()) return false;
  // Someone must hold the state, and every holder must be able to heal.
  if (members_.size() < 2 || !members_heal(lost)) return false;
  // The first waiting node that heals, runs as many workers and does not
  // insist on another node rank.
  auto spare = std::find_if(waiting_.begin(), waiting_.end(), [&](const std::string& w) {
    auto it = nodes_.find(w);
    if (it == nodes_.end()) return false;
    const NodeSpec& s = it->second.spec;
    return s.heals && s.local_world_size == gone.spec.local_world_size &&
           (s.node_rank_hint < 0 || s.node_rank_hint == held->second.node_rank);
  });
  if (spare == waiting_.end()) return false;
  const std::string id = *spare;
  waiting_.erase(spare);

  // The newcomer holds the lost member's ranks, in the next heal generation.
  Assignment a = held->second;
  assignments_.erase(held);
  a.heal_generation = ++heal_generation_;
  heal_reason_ = HealReason::kTakeover;
  a.lost_since_last_round = take_unreported_losses();
  assignments_[id] = a;
  std::replace(members_.begin(), members_.end(), lost, id);
  member_set_.erase(lost);
  member_set_.insert(id);
  last_ranks_.erase(lost);
  last_ranks_[id] = a.node_rank;
  detail_ = "node " + quote_id(id) + " (" + nodes_.at(id).spec.host + ") took over node rank " +
            std::to_string(a.node_rank) + " from node " + quote_id(lost) + " (" + gone.spec.host +
            "), lost: " + how;
  return true;
}

uint32_t RoundState::name_worker_heal(const std::string& id, const std::string& detail) {
  // The round runs with this node in it, and every other member's workers
  // hold the state and heal (the node's own replied for themselves: its
  // agent let the failed one be replaced only if the others there heal, or
  // other nodes hold the state). A lone member names its heals here too, so
  // that the generations stay one sequence when the round grows.
  if (phase_ != JobPhase::kActive || !closed_ || !is_member(id) || !members_heal(id)) return 0;
  ++heal_generation_;
  heal_reason_ = HealReason::kWorker;
  const Node& n = nodes_.at(id);
  detail_ = "node " + quote_id(id) + " (" + n.spec.host + "): " + detail + "; replaced there in heal generation " +
            std::to_string(heal_generation_);
  return heal_generation_;
}

bool RoundState::grow(const std::string& id, TimePoint now, bool any_rank) {
  const NodeSpec& spec = nodes_.at(id).spec;
  const int n = static_cast<int>(members_.size());
  // Someone holds the state and every holder heals; the newcomer's workers
  // heal too (they start as replacements); and it takes the next node rank.
  if (n < 1 || assignments_.size() != members_.size() || !spec.heals || !members_heal() ||
      (!any_rank && spec.node_rank_hint >= 0 && spec.node_rank_hint != n)) {
    return false;
  }
  int world = 0;
  for (const auto& [member, a] : assignments_) world += nodes_.at(member).spec.local_world_size;
  ++heal_generation_;
  heal_reason_ = HealReason::kGrow;
  for (auto& [member, a] : assignments_) {
    a.num_nodes = n + 1;
    a.world_size = world + spec.local_world_size;
  }
  Assignment a = assignments_.begin()->second;  // the round, its master, the restart count
  a.node_rank = n;
  a.first_global_rank = world;
  a.lost_since_last_round.clear();
  a.heal_generation = heal_generation_;
  add_member(id, now);
  assignments_[id] = a;
  last_ranks_[id] = n;
  ++generation_;  // its parked join completes
  detail_ = "node " + quote_id(id) + " (" + spec.host + ") joined the running round as node rank " +
            std::to_string(n) + ": the job goes on with " + std::to_string(n + 1) + " node(s), world size " +
            std::to_string(a.world_size) + ", heal generation " + std::to_string(heal_generation_);
  return true;
}

bool RoundState::shrink(const std::string& lost, const Node& gone, const std::string& how) {
  auto held = assignments_.find(lost);
  if (held == assignments_.end()) return false;
  // The survivors hold the state and all heal; the job may run on fewer
  // nodes; and no waiting node would rather have the place (a new round
  // takes it in, or it takes the lost node's ranks over).
  const int left = static_cast<int>(members_.size()) - 1;
  if (left < 1 || left < settings_.min_nodes || !waiting_.empty() || !members_heal(lost)) return false;
  assignments_.erase(held);
  members_.erase(std::remove(members_.begin(), members_.end(), lost), members_.end());
  member_set_.erase(lost);
  last_ranks_.erase(lost);

  // The survivors close ranks in their order: node ranks 0..left-1, and the
  // global ranks after them move down by the lost node's workers.
  std::vector<std::pair<int, std::string>> by_rank;
  int world = 0;
  for (const auto& [id, a] : assignments_) {
    by_rank.emplace_back(a.node_rank, id);
    world += nodes_.at(id).spec.local_world_size;
  }
  std::sort(by_rank.begin(), by_rank.end());
  const NodeSpec& master = nodes_.at(by_rank.front().second).spec;
  const std::vector<std::string> losses = take_unreported_losses();
  ++heal_generation_;
  heal_reason_ = HealReason::kShrink;
  int first = 0;
  for (int rank = 0; rank < left; ++rank) {
    const std::string& id = by_rank[size_t(rank)].second;
    Assignment& a = assignments_.at(id);
    a.node_rank = rank;
    a.num_nodes = left;
    a.world_size = world;
    a.first_global_rank = first;
    a.master_addr = master.local_addr;
    a.master_port = master.master_port;
    a.lost_since_last_round = losses;
    last_ranks_[id] = rank;
    first += nodes_.at(id).spec.local_world_size;
  }
  detail_ = "node " + quote_id(lost) + " (" + gone.spec.host + ") was lost: " + how + "; the job goes on with " +
            std::to_string(left) + " node(s), world size " + std::to_string(world) + ", heal generation " +
            std::to_string(heal_generation_);
  return true;
}

}  // namespace ddprun
