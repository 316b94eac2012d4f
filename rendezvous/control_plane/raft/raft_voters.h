// Who votes in a job's embedded control plane, as a pure function: from
// the Raft group as its leader sees it and the job's live nodes, the one
// change to make next (Raft's rule: one at a time, checked again after
// each). RaftMembership carries it out and asks again. The rules (see
// raft_membership.h): a voter whose node is gone goes first, then a
// non-voting member whose node is gone; then the voters are brought to the
// job's live nodes, up to five, in an odd number (one below three), the
// leader and the nodes that came first; a node to vote gets the log as a
// standby first and votes once every one to be added has it.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "rendezvous/control_plane/raft/raft_node.h"

namespace ddprun {

struct MembershipChange {
  enum Kind { kNone, kRemove, kAddStandby, kAddVoter };
  Kind kind = kNone;
  uint64_t id = 0;
  std::string address;  // kAddStandby, kAddVoter
  // What it does, for the log; `voting`: the voters change, so the log
  // says what they tolerate afterwards.
  std::string what;
  bool voting = false;
};

// `live`: the job's nodes that can vote (their agents sent a control
// address), as (Raft id, address), in the job's order (members by node
// rank, then the waiting ones). `s`: the leader's status (its leader_id is
// itself).
MembershipChange next_membership_change(const RaftStatus& s,
                                        const std::vector<std::pair<uint64_t, std::string>>& live);

// How many voters `live` nodes warrant: all of them up to five, in an odd
// number; one below three.
size_t voters_for(size_t live);

}  // namespace ddprun
