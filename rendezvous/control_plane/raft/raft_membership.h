// Who votes in a job's embedded control plane. While its member leads, it
// keeps the Raft group's voters among the job's live nodes:
//   - every node that can vote (its agent sent a control address), up to
//     five, in an odd number, once the job has three: the leader and the
//     nodes that came first. Any minority of them may be lost and a majority
//     still commits; and a partition leaves the control plane on the side
//     with most of the job's nodes (up to five nodes; beyond, on the side
//     with most voters). A fourth voter would add no tolerance, a sixth
//     or seventh little for their cost on every commit;
//   - one (the leader) while it has fewer: two voters would need both, and
//     losing either would stop the job, where one voter loses only the
//     control plane with its own node - as without a control plane;
//   - a voter whose node left the job or was lost is removed, and another
//     live node takes its place.
// One change at a time (Raft's rule), checked again after each. Which
// change is next_membership_change's (raft_voters.h, pure, unit-tested);
// this class reads the job, carries the change out and waits for it.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "rendezvous/server/periodic_task.h"
#include "rendezvous/control_plane/raft/raft_node.h"
#include "rendezvous/server/registry.h"

namespace ddprun {

// A node's Raft id: a hash of its node id (every agent computes the same).
uint64_t raft_id_of(const std::string& node_id);

class RaftMembership {
 public:
  // on_change (may be empty) hears what each change did, on its thread.
  RaftMembership(RaftNode& node, JobRegistry& registry, std::string job_id,
                 std::function<void(const std::string&)> on_change = {},
                 std::chrono::milliseconds every = std::chrono::milliseconds(200));
  ~RaftMembership();  // stops its thread
  RaftMembership(const RaftMembership&) = delete;
  RaftMembership& operator=(const RaftMembership&) = delete;

  // One pass: at most one change, made and waited for. What it did, for the
  // log ("" when nothing).
  std::string reconcile();

 private:
  RaftNode& node_;
  JobRegistry& registry_;
  std::string job_id_;
  std::function<void(const std::string&)> on_change_;
  PeriodicTask task_;  // last: it stops before the rest goes
};

}  // namespace ddprun
