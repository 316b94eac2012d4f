#include "rendezvous/round.h"

#include <algorithm>
#include <numeric>

namespace ddprun {
namespace {

std::string describe(const RoundSettings& s) {
  return "min_nodes=" + std::to_string(s.min_nodes) + " max_nodes=" +
         std::to_string(s.max_nodes) + " last_call=" + std::to_string(s.last_call.count()) + "ms";
}

void validate(const RoundSettings& s) {
  if (s.min_nodes < 1 || s.max_nodes < s.min_nodes) {
    throw RendezvousError("rendezvous: need 1 <= min_nodes <= max_nodes, got " + describe(s));
  }
  if (s.last_call.count() < 0) {
    throw RendezvousError("rendezvous: last_call must not be negative, got " + describe(s));
  }
}

}  // namespace

RoundState::RoundState(RoundSettings settings) : settings_(settings) { validate(settings_); }

int64_t RoundState::join(const NodeSpec& node, const RoundSettings& settings, TimePoint now) {
  if (!(settings == settings_)) {
    throw RendezvousError("rendezvous: node '" + node.node_id + "' joined with " +
                          describe(settings) + " but the job uses " + describe(settings_) +
                          "; every node must pass the same --nnodes");
  }
  if (node.node_id.empty()) throw RendezvousError("rendezvous: empty node_id");
  if (node.local_world_size < 1) {
    throw RendezvousError("rendezvous: node '" + node.node_id +
                          "' has local_world_size " + std::to_string(node.local_world_size) +
                          "; it must run at least one worker");
  }
  if (node.node_rank_hint >= settings_.max_nodes) {
    throw RendezvousError("rendezvous: node '" + node.node_id + "' asks for node rank " +
                          std::to_string(node.node_rank_hint) + " but max_nodes is " +
                          std::to_string(settings_.max_nodes));
  }
  if (closed_) open_next_round();

  auto same = [&](const NodeSpec& m) { return m.node_id == node.node_id; };
  auto it = std::find_if(members_.begin(), members_.end(), same);
  if (it != members_.end()) {
    *it = node;  // a repeated join of the open round refreshes the spec
  } else {
    if (static_cast<int>(members_.size()) >= settings_.max_nodes) {
      throw RendezvousError("rendezvous: round " + std::to_string(round_) + " is full (" +
                            std::to_string(settings_.max_nodes) + " nodes)");
    }
    if (node.node_rank_hint >= 0) {
      for (const auto& m : members_) {
        if (m.node_rank_hint == node.node_rank_hint) {
          throw RendezvousError("rendezvous: nodes '" + m.node_id + "' and '" + node.node_id +
                                "' both ask for node rank " +
                                std::to_string(node.node_rank_hint) + " (check --node-rank)");
        }
      }
    }
    members_.push_back(node);
  }
  if (!min_reached_at_ && static_cast<int>(members_.size()) >= settings_.min_nodes) {
    min_reached_at_ = now;
  }
  advance(now);
  return round_;
}

bool RoundState::advance(TimePoint now) {
  if (closed_) return false;
  const int n = static_cast<int>(members_.size());
  const bool full = n >= settings_.max_nodes;
  const bool last_call_over = min_reached_at_ && now >= *min_reached_at_ + settings_.last_call;
  if (full || last_call_over) {
    close_round();
    return true;
  }
  return false;
}

void RoundState::close_round() {
  // Node ranks: nodes that asked for a rank get it; the others fill the
  // remaining ranks in join order.
  const int n = static_cast<int>(members_.size());
  std::vector<int> order(n, -1);  // order[node_rank] = member index
  std::vector<bool> placed(n, false);
  for (int i = 0; i < n; ++i) {
    int hint = members_[i].node_rank_hint;
    if (hint >= 0 && hint < n) {
      order[hint] = i;
      placed[i] = true;
    }
  }
  int next = 0;
  for (int i = 0; i < n; ++i) {
    if (placed[i]) continue;
    while (order[next] != -1) ++next;
    order[next] = i;
  }
  int world = 0;
  for (const auto& m : members_) world += m.local_world_size;

  assignments_.clear();
  int first = 0;
  for (int rank = 0; rank < n; ++rank) {
    const NodeSpec& m = members_[order[rank]];
    assignments_[m.node_id] = Assignment{round_, rank, n, world, first};
    first += m.local_world_size;
  }
  closed_ = true;
}

void RoundState::open_next_round() {
  ++round_;
  closed_ = false;
  members_.clear();
  assignments_.clear();
  min_reached_at_.reset();
}

std::optional<Assignment> RoundState::assignment(int64_t round, const std::string& node_id) const {
  if (round != round_) {
    throw RendezvousError("rendezvous: round " + std::to_string(round) +
                          " was superseded by round " + std::to_string(round_) + "; join again");
  }
  if (!closed_) return std::nullopt;
  auto it = assignments_.find(node_id);
  if (it == assignments_.end()) {
    throw RendezvousError("rendezvous: node '" + node_id + "' is not a member of round " +
                          std::to_string(round));
  }
  return it->second;
}

std::optional<RoundState::TimePoint> RoundState::next_deadline() const {
  if (closed_ || !min_reached_at_) return std::nullopt;
  return *min_reached_at_ + settings_.last_call;
}

bool RoundState::wants_nccl_id() const {
  return std::any_of(members_.begin(), members_.end(),
                     [](const NodeSpec& m) { return m.wants_nccl_id; });
}

}  // namespace ddprun
