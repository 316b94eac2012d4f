// Who votes in the embedded control plane, as a pure function: the one
// change to make next, from the leader's view of the Raft group and the
// job's live nodes (raft_voters.h).
#include <gtest/gtest.h>

#include "rendezvous/control_plane/raft/raft_voters.h"

namespace ddprun {
namespace {

using Live = std::vector<std::pair<uint64_t, std::string>>;

// Nodes 1..n, live, in the job's order; node 1 leads.
Live live_nodes(std::vector<uint64_t> ids) {
  Live live;
  for (uint64_t id : ids) live.emplace_back(id, "10.0.0." + std::to_string(id) + ":7000");
  return live;
}

RaftStatus group(std::vector<uint64_t> voters, std::vector<uint64_t> standbys = {}) {
  RaftStatus s;
  s.role = RaftStatus::Role::kLeader;
  s.leader_id = 1;
  s.voters = voters;
  s.standbys = standbys;
  s.members = voters;
  s.members.insert(s.members.end(), standbys.begin(), standbys.end());
  return s;
}

TEST(RaftVoters, OneVoterBelowThreeNodesThenThreeThenFiveInAnOddNumber) {
  EXPECT_EQ(voters_for(1), 1u);
  EXPECT_EQ(voters_for(2), 1u) << "two voters would need both";
  EXPECT_EQ(voters_for(3), 3u);
  EXPECT_EQ(voters_for(4), 3u);
  EXPECT_EQ(voters_for(5), 5u);
  EXPECT_EQ(voters_for(9), 5u);
  EXPECT_EQ(next_membership_change(group({1}), live_nodes({1, 2})).kind, MembershipChange::kNone);
}

// Growing to three: both new voters get the log as standbys first, then
// vote one after the other (never an even number of voters catching up).
TEST(RaftVoters, NodesToVoteGetTheLogFirstThenVoteInTheJobsOrder) {
  const Live live = live_nodes({1, 2, 3, 4});
  auto c = next_membership_change(group({1}), live);
  EXPECT_EQ(c.kind, MembershipChange::kAddStandby);
  EXPECT_EQ(c.id, 2u);
  EXPECT_EQ(c.address, "10.0.0.2:7000");
  EXPECT_FALSE(c.voting);
  c = next_membership_change(group({1}, {2}), live);
  EXPECT_EQ(c.kind, MembershipChange::kAddStandby);
  EXPECT_EQ(c.id, 3u) << "node 4 came later: it does not vote";
  c = next_membership_change(group({1}, {2, 3}), live);
  EXPECT_EQ(c.kind, MembershipChange::kAddVoter);
  EXPECT_EQ(c.id, 2u);
  EXPECT_TRUE(c.voting);
  EXPECT_EQ(c.what, "the node at 10.0.0.2:7000 votes");
  c = next_membership_change(group({1, 2}, {3}), live);
  EXPECT_EQ(c.kind, MembershipChange::kAddVoter);
  EXPECT_EQ(c.id, 3u);
  EXPECT_EQ(next_membership_change(group({1, 2, 3}), live).kind, MembershipChange::kNone);
}

// A voter whose node is gone goes before anything else; a standby's node
// next; then the group is brought back to what the live nodes warrant.
TEST(RaftVoters, AGoneVoterGoesFirstThenAGoneStandby) {
  auto c = next_membership_change(group({1, 2, 3}, {5}), live_nodes({1, 2, 4}));
  EXPECT_EQ(c.kind, MembershipChange::kRemove);
  EXPECT_EQ(c.id, 3u);
  EXPECT_TRUE(c.voting);
  EXPECT_NE(c.what.find("removed the vote of a node that is gone (Raft id 3)"), std::string::npos) << c.what;
  c = next_membership_change(group({1, 2}, {5}), live_nodes({1, 2, 4}));
  EXPECT_EQ(c.kind, MembershipChange::kRemove);
  EXPECT_EQ(c.id, 5u);
  EXPECT_FALSE(c.voting);
  c = next_membership_change(group({1, 2}), live_nodes({1, 2, 4}));
  EXPECT_EQ(c.kind, MembershipChange::kAddStandby);
  EXPECT_EQ(c.id, 4u);
}

// Four voters (a fifth one's node was lost): three is what four live nodes
// warrant, so the newest other voter steps back, never the leader.
TEST(RaftVoters, MoreVotersThanTheLiveNodesWarrantTheNewestOtherStepsBack) {
  const Live live = live_nodes({1, 2, 3, 4});
  const auto c = next_membership_change(group({1, 2, 3, 4}), live);
  EXPECT_EQ(c.kind, MembershipChange::kRemove);
  EXPECT_EQ(c.id, 4u);
  EXPECT_TRUE(c.voting);
  EXPECT_NE(c.what.find("steps back"), std::string::npos) << c.what;
  RaftStatus led_by_4 = group({1, 2, 3, 4});
  led_by_4.leader_id = 4;
  EXPECT_EQ(next_membership_change(led_by_4, live).id, 3u) << "the leader stays";
}

}  // namespace
}  // namespace ddprun
