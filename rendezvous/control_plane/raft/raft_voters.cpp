#include "rendezvous/control_plane/raft/raft_voters.h"

#include <algorithm>

namespace ddprun {

size_t voters_for(size_t live) { return live >= 5 ? 5 : live >= 3 ? 3 : 1; }

MembershipChange next_membership_change(const RaftStatus& s,
                                        const std::vector<std::pair<uint64_t, std::string>>& live) {
  const uint64_t self = s.leader_id;
  auto in = [](const std::vector<uint64_t>& ids, uint64_t id) {
    return std::find(ids.begin(), ids.end(), id) != ids.end();
  };
  auto is_live = [&](uint64_t id) {
    return id == self || std::any_of(live.begin(), live.end(), [id](const auto& c) { return c.first == id; });
  };
  MembershipChange c;
  // 1. A voter whose node is gone (left, lost) goes first; then a standby's.
  for (uint64_t v : s.voters) {
    if (v != self && !is_live(v)) {
      return {MembershipChange::kRemove, v, "",
              "removed the vote of a node that is gone (Raft id " + std::to_string(v) + ")", true};
    }
  }
  for (uint64_t m : s.members) {
    if (m != self && !in(s.voters, m) && !is_live(m)) {
      return {MembershipChange::kRemove, m, "", "removed a node that is gone (Raft id " + std::to_string(m) + ")",
              false};
    }
  }
  const size_t target = voters_for(live.size());
  // 2. More voters than the job's nodes warrant: the newest other one goes.
  if (s.voters.size() > target) {
    for (auto it = s.voters.rbegin(); it != s.voters.rend(); ++it) {
      if (*it != self) {
        return {MembershipChange::kRemove, *it, "",
                "more voters than " + std::to_string(live.size()) + " live node(s) warrant: Raft id " +
                    std::to_string(*it) + " steps back",
                true};
      }
    }
  }
  // 3. Fewer: the first live nodes that do not vote yet. Each becomes a
  //    standby first (it gets the log and catches up while the voters stay
  //    as they are); once all of them are, each is made a voter, a quick
  //    change. So the group spends no catch-up with an even number of
  //    voters (two need both: losing either stops the control plane).
  if (s.voters.size() < target) {
    std::vector<std::pair<uint64_t, std::string>> to_vote;
    for (const auto& n : live) {
      if (s.voters.size() + to_vote.size() >= target) break;
      if (!in(s.voters, n.first)) to_vote.push_back(n);
    }
    for (const auto& [id, address] : to_vote) {
      if (!in(s.standbys, id)) {
        return {MembershipChange::kAddStandby, id, address,
                "the node at " + address + " gets the control plane's log, to vote once caught up", false};
      }
    }
    if (!to_vote.empty()) {
      const auto& [id, address] = to_vote.front();
      return {MembershipChange::kAddVoter, id, address, "the node at " + address + " votes", true};
    }
  }
  return c;
}

}  // namespace ddprun
