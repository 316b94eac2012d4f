// agent/attempt_policy.h: what a keep-alive's view means for the workers.
#include <gtest/gtest.h>

#include "agent/attempt_policy.h"

namespace {

using ddprun::NodeView;
using ddprun::Placement;
using ddprun::ViewNews;

const Placement kHere{.node_rank = 1, .num_nodes = 3, .world_size = 6, .first_global_rank = 2};

NodeView view_of(int64_t round, uint32_t generation, Placement p = kHere) {
  NodeView v;
  v.round = round;
  v.heal_generation = generation;
  v.placement = p;
  return v;
}

TEST(AttemptPolicy, ANewerGenerationOfThisRoundHealsTheWorkersInPlace) {
  const ViewNews n = news_of(view_of(4, 2), 4, 1, kHere);
  EXPECT_EQ(n.heal, ViewNews::Heal::kHealWithOthers);
  EXPECT_TRUE(n.tell_heals_come);
}

TEST(AttemptPolicy, AGenerationThatPlacesTheNodeElsewhereMovesIt) {
  const Placement shrunk{.node_rank = 0, .num_nodes = 2, .world_size = 4, .first_global_rank = 0};
  EXPECT_EQ(news_of(view_of(4, 2, shrunk), 4, 1, kHere).heal, ViewNews::Heal::kMove);
  // Not a member of a closed round (node_rank -1): no move to make.
  const Placement none{.node_rank = -1};
  EXPECT_EQ(news_of(view_of(4, 2, none), 4, 1, kHere).heal, ViewNews::Heal::kHealWithOthers);
}

TEST(AttemptPolicy, AGenerationAlreadyToldOrAnotherRoundIsNoNews) {
  EXPECT_EQ(news_of(view_of(4, 1), 4, 1, kHere).heal, ViewNews::Heal::kNone);
  EXPECT_TRUE(news_of(view_of(4, 1), 4, 1, kHere).tell_heals_come);
  const ViewNews next_round = news_of(view_of(5, 7), 4, 1, kHere);
  EXPECT_EQ(next_round.heal, ViewNews::Heal::kNone);
  EXPECT_FALSE(next_round.tell_heals_come);
}

TEST(AttemptPolicy, ADroppedNodesWorkersNeverHealIntoTheOthersGeneration) {
  NodeView v = view_of(4, 3);
  v.known = false;
  const ViewNews n = news_of(v, 4, 1, kHere);
  EXPECT_EQ(n.heal, ViewNews::Heal::kNone);
  EXPECT_FALSE(n.tell_heals_come);
}

TEST(AttemptPolicy, AHealAnswerIsForItsOwnRequestOnly) {
  NodeView v = view_of(4, 5);
  v.heal_request_id = 7;
  v.heal_request_generation = 5;
  EXPECT_FALSE(answer_of(nullptr, 7, 4, kHere).has_value());
  EXPECT_FALSE(answer_of(&v, 8, 4, kHere).has_value());
  const auto a = answer_of(&v, 7, 4, kHere);
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->generation, 5u);
  EXPECT_FALSE(a->move);
  v.heal_request_generation = 0;  // refused
  EXPECT_EQ(answer_of(&v, 7, 4, kHere)->generation, 0u);
}

TEST(AttemptPolicy, AHealAnswerWhoseGenerationAlsoMovesTheNodeSaysSo) {
  const Placement moved{.node_rank = 0, .num_nodes = 2, .world_size = 4, .first_global_rank = 0};
  NodeView v = view_of(4, 5, moved);
  v.heal_request_id = 3;
  v.heal_request_generation = 5;
  EXPECT_TRUE(answer_of(&v, 3, 4, kHere)->move);
  v.heal_generation = 6;  // the move belongs to a later generation than the answer's
  EXPECT_FALSE(answer_of(&v, 3, 4, kHere)->move);
  v.heal_generation = 5;
  EXPECT_FALSE(answer_of(&v, 3, 3, kHere)->move);  // another round's view
}

// A straggler hands over only when replacing is asked for, it does not
// serve the round, and a waiting node would take its place; otherwise it
// goes on, told why. A view that names no straggler is no verdict.
TEST(AttemptPolicy, AStragglerHandsOverOnlyWhenANodeWaitsToTakeItsPlace) {
  using ddprun::StragglerNews;
  NodeView named = view_of(4, 0);
  named.straggler_score = 0.9;
  named.nodes_waiting = 1;
  named.takeover_ready = true;
  const ddprun::StragglerRules replace{.replace_stragglers = true, .hosts_rendezvous = false};
  EXPECT_EQ(straggler_news_of(named, replace).verdict, StragglerNews::kHandOver);

  NodeView healthy = named;
  healthy.straggler_score = 0;
  EXPECT_EQ(straggler_news_of(healthy, replace).verdict, StragglerNews::kNotNamed);

  StragglerNews warn = straggler_news_of(named, {.replace_stragglers = false});
  EXPECT_EQ(warn.verdict, StragglerNews::kKeep);
  EXPECT_EQ(warn.kept, "--straggler-action warn");

  StragglerNews host = straggler_news_of(named, {.replace_stragglers = true, .hosts_rendezvous = true});
  EXPECT_EQ(host.verdict, StragglerNews::kKeep);
  EXPECT_EQ(host.kept, "this node hosts the rendezvous");

  for (auto [waiting, ready] : {std::pair{0, true}, std::pair{1, false}}) {
    NodeView alone = named;
    alone.nodes_waiting = waiting;
    alone.takeover_ready = ready;
    StragglerNews n = straggler_news_of(alone, replace);
    EXPECT_EQ(n.verdict, StragglerNews::kKeep) << waiting << " waiting, ready " << ready;
    EXPECT_EQ(n.kept, "no waiting node would take its place");
  }
}

// A node to hand its place over stops its workers once, and only while
// every one of them is inside a step's collective (the others then heal
// around them); without heartbeats nobody can tell, so never.
TEST(AttemptPolicy, ANodeHandsItsPlaceOverOnceAndOnlyWithEveryWorkerInAStepsCollective) {
  using ddprun::hand_over_now;
  EXPECT_TRUE(hand_over_now(false, true));
  EXPECT_FALSE(hand_over_now(false, false)) << "a worker outside a step's collective";
  EXPECT_FALSE(hand_over_now(true, true)) << "handed over already";
  EXPECT_FALSE(hand_over_now(false, std::nullopt)) << "no heartbeats";
}

}  // namespace
