#include "rendezvous/control_plane/raft/raft_membership.h"

#include "rendezvous/control_plane/raft/raft_voters.h"

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
  const MembershipChange c = next_membership_change(s, live);
  const auto deadline = Clock::now() + kChangeTimeout;
  bool done = false;
  switch (c.kind) {
    case MembershipChange::kNone: return "";
    case MembershipChange::kRemove: done = node_.remove(c.id, deadline); break;
    case MembershipChange::kAddStandby: done = node_.add_standby(c.id, c.address, deadline); break;
    case MembershipChange::kAddVoter: done = node_.add_voter(c.id, c.address, deadline); break;
  }
  if (!done) return "";
  return c.voting ? c.what + " (" + tolerance(node_.status().voters.size()) + ")" : c.what;
}

}  // namespace ddprun
