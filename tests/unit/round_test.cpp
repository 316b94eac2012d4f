#include <gtest/gtest.h>

#include "rendezvous/round.h"

namespace ddprun {
namespace {

using namespace std::chrono_literals;
using TP = RoundState::TimePoint;

const TP t0{};

NodeSpec node(const std::string& id, int nproc = 2, int hint = -1) {
  NodeSpec n;
  n.node_id = id;
  n.host = id;
  n.local_world_size = nproc;
  n.node_rank_hint = hint;
  return n;
}

TEST(Round, OneNodeClosesAtOnce) {
  RoundSettings s{1, 1, 0ms};
  RoundState r(s);
  EXPECT_EQ(r.join(node("a", 4), s, t0), 0);
  auto a = r.assignment(0, "a");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->node_rank, 0);
  EXPECT_EQ(a->num_nodes, 1);
  EXPECT_EQ(a->world_size, 4);
  EXPECT_EQ(a->first_global_rank, 0);
}

TEST(Round, WaitsForMinNodesThenTheLastCallWindow) {
  RoundSettings s{2, 3, 500ms};
  RoundState r(s);
  r.join(node("a", 2), s, t0);
  EXPECT_FALSE(r.assignment(0, "a"));
  EXPECT_FALSE(r.next_deadline());  // only a join can help now
  r.join(node("b", 3), s, t0 + 100ms);
  EXPECT_FALSE(r.assignment(0, "a"));
  ASSERT_TRUE(r.next_deadline());
  EXPECT_EQ(*r.next_deadline(), t0 + 600ms);
  EXPECT_FALSE(r.advance(t0 + 599ms));
  EXPECT_TRUE(r.advance(t0 + 600ms));
  auto a = r.assignment(0, "a");
  auto b = r.assignment(0, "b");
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->world_size, 5);
  EXPECT_EQ(a->first_global_rank, 0);
  EXPECT_EQ(b->node_rank, 1);
  EXPECT_EQ(b->first_global_rank, 2);
}

TEST(Round, MaxNodesClosesWithoutWaiting) {
  RoundSettings s{1, 2, 10s};
  RoundState r(s);
  r.join(node("a"), s, t0);
  EXPECT_FALSE(r.closed());
  r.join(node("b"), s, t0);
  EXPECT_TRUE(r.closed());
}

TEST(Round, NodeRankHintsWinOverJoinOrder) {
  RoundSettings s{3, 3, 0ms};
  RoundState r(s);
  r.join(node("a", 1), s, t0);          // no hint
  r.join(node("b", 2, 0), s, t0);       // wants rank 0
  r.join(node("c", 4), s, t0);          // no hint
  EXPECT_EQ(r.assignment(0, "b")->node_rank, 0);
  EXPECT_EQ(r.assignment(0, "a")->node_rank, 1);
  EXPECT_EQ(r.assignment(0, "c")->node_rank, 2);
  EXPECT_EQ(r.assignment(0, "a")->first_global_rank, 2);
  EXPECT_EQ(r.assignment(0, "c")->first_global_rank, 3);
}

TEST(Round, RejoiningOpensTheNextRoundAndSupersedesTheOld) {
  RoundSettings s{2, 2, 0ms};
  RoundState r(s);
  r.join(node("a"), s, t0);
  r.join(node("b"), s, t0);
  ASSERT_TRUE(r.closed());
  EXPECT_EQ(r.join(node("a"), s, t0 + 1s), 1);  // a's workers failed
  EXPECT_FALSE(r.closed());
  EXPECT_THROW(r.assignment(0, "b"), RendezvousError);  // b must notice and rejoin
  EXPECT_EQ(r.join(node("b"), s, t0 + 2s), 1);
  EXPECT_TRUE(r.closed());
  EXPECT_EQ(r.assignment(1, "b")->round, 1);
}

TEST(Round, RejectsBadJoins) {
  RoundSettings s{2, 2, 0ms};
  RoundState r(s);
  EXPECT_THROW(r.join(node("a"), RoundSettings{1, 2, 0ms}, t0), RendezvousError);
  EXPECT_THROW(r.join(node("a", 0), s, t0), RendezvousError);
  EXPECT_THROW(r.join(node("a", 1, 5), s, t0), RendezvousError);
  r.join(node("a", 1, 1), s, t0);
  try {
    r.join(node("b", 1, 1), s, t0);
    FAIL();
  } catch (const RendezvousError& e) {
    EXPECT_NE(std::string(e.what()).find("both ask for node rank 1"), std::string::npos);
  }
  EXPECT_THROW(RoundState(RoundSettings{3, 2, 0ms}), RendezvousError);
}

TEST(Round, WantsNcclIdWhenAnyMemberDoes) {
  RoundSettings s{2, 2, 0ms};
  RoundState r(s);
  r.join(node("a"), s, t0);
  NodeSpec b = node("b");
  b.wants_nccl_id = true;
  r.join(b, s, t0);
  EXPECT_TRUE(r.wants_nccl_id());
}

}  // namespace
}  // namespace ddprun
