#include "rendezvous/control_plane/raft/raft_membership.h"

#include <algorithm>
#include <vector>

namespace ddprun {

namespace {
using Clock = std::chrono::steady_clock;
constexpr auto kChangeTimeout = std::chrono::seconds(10);
constexpr int kChangesAPass = 8;

// What `voters` voters tolerate, for the log.
std::string tolerance(size_t voters) {
  if (voters >= 3) {
    return std::to_string(voters) + " voters: the job survives the loss of any " + std::to_string((voters - 1) / 2) +
           " node(s), the serving one included";
  }
  return std::to_string(voters) + " voter(s): losing the serving node ends the job until it has 3 nodes";
}
}  // namespace

uint64_t raft_id_of(const std::string& node_id) {
  // FNV-1a: the same on every node whatever its standard library; never 0.
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : node_id) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h == 0 ? 1 : h;
}

RaftMembership::RaftMembership(RaftNode& node, JobRegistry& registry, std::string job_id,
                               std::function<void(const std::string&)> on_change, std::chrono::milliseconds every)
    : node_(node),
      registry_(registry),
      job_id_(std::move(job_id)),
      on_change_(std::move(on_change)),
      task_(every, [this] {
        // Changes one after another while there are any: a voter to be is
        // promoted as soon as it caught up, not a period later.
        for (int i = 0; i < kChangesAPass; ++i) {
          const std::string did = reconcile();
          if (did.empty()) break;
          if (on_change_) on_change_(did);
        }
      }) {}

RaftMembership::~RaftMembership() = default;

std::string RaftMembership::reconcile() {
  const RaftStatus s = node_.status();
  if (s.role != RaftStatus::Role::kLeader) return "";
  const uint64_t self = s.leader_id;
  JobStatus job;
  try {
    job = registry_.status(job_id_);
  } catch (const std::exception&) {
    return "";  // nobody joined yet
  }
  // The live nodes that can vote, in the job's order (members by node rank,
  // then the waiting ones): the first ones are the voters.
  std::vector<std::pair<uint64_t, std::string>> live;
  for (const NodeStatus& n : job.nodes) {
    if (!n.control_address.empty()) live.emplace_back(raft_id_of(n.node_id), n.control_address);
  }
  auto is_live = [&](uint64_t id) {
    return id == self || std::any_of(live.begin(), live.end(), [id](const auto& c) { return c.first == id; });
  };
  auto is_voter = [&](uint64_t id) { return std::find(s.voters.begin(), s.voters.end(), id) != s.voters.end(); };
  auto is_standby = [&](uint64_t id) { return std::find(s.standbys.begin(), s.standbys.end(), id) != s.standbys.end(); };
  const auto deadline = Clock::now() + kChangeTimeout;
  auto now_voting = [&] { return " (" + tolerance(node_.status().voters.size()) + ")"; };
  // 1. A voter whose node is gone (left, lost) goes first; then a standby's.
  for (uint64_t v : s.voters) {
    if (v != self && !is_live(v)) {
      return node_.remove(v, deadline)
                 ? "removed the vote of a node that is gone (Raft id " + std::to_string(v) + ")" + now_voting()
                 : "";
    }
  }
  for (uint64_t m : s.members) {
    if (m != self && !is_voter(m) && !is_live(m)) {
      return node_.remove(m, deadline) ? "removed a node that is gone (Raft id " + std::to_string(m) + ")" : "";
    }
  }
  // All of them up to five, in an odd number; one below three.
  const size_t target = live.size() >= 5 ? 5 : live.size() >= 3 ? 3 : 1;
  // 2. More voters than the job's nodes warrant: the newest other one goes.
  if (s.voters.size() > target) {
    for (auto it = s.voters.rbegin(); it != s.voters.rend(); ++it) {
      if (*it != self) {
        return node_.remove(*it, deadline) ? "fewer than three nodes can vote: Raft id " + std::to_string(*it) +
                                                 " steps back" + now_voting()
                                           : "";
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
    for (const auto& c : live) {
      if (s.voters.size() + to_vote.size() >= target) break;
      if (!is_voter(c.first)) to_vote.push_back(c);
    }
    for (const auto& [id, address] : to_vote) {
      if (!is_standby(id)) {
        return node_.add_standby(id, address, deadline)
                   ? "the node at " + address + " gets the control plane's log, to vote once caught up"
                   : "";
      }
    }
    for (const auto& [id, address] : to_vote) {
      return node_.add_voter(id, address, deadline) ? "the node at " + address + " votes" + now_voting() : "";
    }
  }
  return "";
}

}  // namespace ddprun
