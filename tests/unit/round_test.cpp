// The rendezvous rounds as pure logic with a fake clock: closing rules,
// stable ranks, leases, late joiners, leaving, restarts, the end of a job.
#include <gtest/gtest.h>

#include "rendezvous/server/round.h"

namespace ddprun {
namespace {

using namespace std::chrono_literals;
using TP = RoundState::TimePoint;

const TP t0{};
const JoinIntent kFirst{-1, false};

NodeSpec node(const std::string& id, int nproc = 2, int hint = -1) {
  NodeSpec n;
  n.node_id = id;
  n.host = id + "-host";
  n.local_world_size = nproc;
  n.node_rank_hint = hint;
  n.local_addr = "10.0.0." + std::to_string(id[0] - 'a' + 1);
  n.master_port = 1000 + (id[0] - 'a');
  return n;
}

// A job of `ids` with the given settings whose first round has closed.
RoundState running(const RoundSettings& s, const std::vector<std::string>& ids,
                   std::chrono::milliseconds lease = 0ms) {
  RoundState r(s);
  for (const auto& id : ids) r.join(node(id), s, kFirst, lease, t0);
  r.advance(t0 + s.last_call);
  EXPECT_TRUE(r.closed());
  return r;
}

TEST(Round, OneNodeClosesAtOnce) {
  RoundSettings s{1, 1, 0ms};
  RoundState r(s);
  r.join(node("a", 4), s, kFirst, 0ms, t0);
  auto a = r.assignment("a");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->round, 0);
  EXPECT_EQ(a->node_rank, 0);
  EXPECT_EQ(a->num_nodes, 1);
  EXPECT_EQ(a->world_size, 4);
  EXPECT_EQ(a->first_global_rank, 0);
  EXPECT_EQ(a->master_addr, "10.0.0.1");
  EXPECT_EQ(a->master_port, 1000);
}

TEST(Round, WaitsForMinNodesThenTheLastCallWindow) {
  RoundSettings s{2, 3, 500ms};
  RoundState r(s);
  r.join(node("a", 2), s, kFirst, 0ms, t0);
  EXPECT_FALSE(r.assignment("a"));
  EXPECT_FALSE(r.next_deadline());  // only a join can help now
  r.join(node("b", 3), s, kFirst, 0ms, t0 + 100ms);
  EXPECT_FALSE(r.assignment("a"));
  ASSERT_TRUE(r.next_deadline());
  EXPECT_EQ(*r.next_deadline(), t0 + 600ms);
  EXPECT_FALSE(r.advance(t0 + 599ms));
  EXPECT_TRUE(r.advance(t0 + 600ms));
  auto a = r.assignment("a");
  auto b = r.assignment("b");
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->world_size, 5);
  EXPECT_EQ(a->first_global_rank, 0);
  EXPECT_EQ(b->node_rank, 1);
  EXPECT_EQ(b->first_global_rank, 2);
  // Everyone's MASTER_ADDR is node 0's address.
  EXPECT_EQ(b->master_addr, "10.0.0.1");
}

TEST(Round, WithoutALastCallWindowTheFirstMinNodesStartAlone) {
  RoundSettings s{1, 2, 0ms};
  RoundState r(s);
  r.join(node("a"), s, kFirst, 0ms, t0);
  EXPECT_TRUE(r.closed());
  EXPECT_EQ(r.assignment("a")->num_nodes, 1);
}

TEST(Round, MaxNodesClosesWithoutWaiting) {
  RoundSettings s{1, 2, 10s};
  RoundState r(s);
  r.join(node("a"), s, kFirst, 0ms, t0);
  EXPECT_FALSE(r.closed());
  r.join(node("b"), s, kFirst, 0ms, t0);
  EXPECT_TRUE(r.closed());
}

TEST(Round, NodeRankHintsWinOverJoinOrder) {
  RoundSettings s{3, 3, 0ms};
  RoundState r(s);
  r.join(node("a", 1), s, kFirst, 0ms, t0);     // no hint
  r.join(node("b", 2, 0), s, kFirst, 0ms, t0);  // wants rank 0
  r.join(node("c", 4), s, kFirst, 0ms, t0);     // no hint
  EXPECT_EQ(r.assignment("b")->node_rank, 0);
  EXPECT_EQ(r.assignment("a")->node_rank, 1);
  EXPECT_EQ(r.assignment("c")->node_rank, 2);
  EXPECT_EQ(r.assignment("a")->first_global_rank, 2);
  EXPECT_EQ(r.assignment("c")->first_global_rank, 3);
}

TEST(Round, AFailureOpensTheNextRoundForEveryNodeAndCostsOneRestart) {
  RoundSettings s{2, 2, 0ms, 3};
  RoundState r = running(s, {"a", "b"});
  // b's workers failed in round 0: a rank hung, and b says why.
  r.join(node("b"), s, JoinIntent{0, true, "rank 1 hung: no heartbeat for 15.0 s; rank 1 never entered it"}, 0ms,
         t0 + 1s);
  EXPECT_EQ(r.current_round(), 1);
  EXPECT_FALSE(r.closed());
  EXPECT_EQ(r.restart_count(), 1);
  EXPECT_EQ(r.reason(), RoundReason::kWorkerFailure);
  // a hears of it by keep-alive, stops its workers and joins; its own
  // workers failed too (their peers died), but round 0 is over already:
  // that costs nothing more.
  NodeView v = r.keep_alive("a", t0 + 1s);
  EXPECT_EQ(v.round, 1);
  EXPECT_NE(v.detail.find("node 'b''s workers failed: rank 1 hung: no heartbeat for 15.0 s; rank 1 never entered it"),
            std::string::npos)
      << v.detail;
  r.join(node("a"), s, JoinIntent{0, true}, 0ms, t0 + 2s);
  EXPECT_TRUE(r.closed());
  EXPECT_EQ(r.restart_count(), 1);
  EXPECT_EQ(r.assignment("a")->restart_count, 1);
}

// a's worker failed only because b killed its hung rank (a closed
// connection), and a's report arrived first: the next round still names b's
// hang, to both nodes, and costs one restart.
TEST(Round, ASecondFailureOfTheSameRoundIsNamedWithTheRoundItOpened) {
  RoundSettings s{2, 2, 0ms, 3};
  RoundState r = running(s, {"a", "b"});
  r.join(node("a"), s, JoinIntent{0, true, "rank 0 peer rank 1 closed the connection"}, 0ms, t0 + 1s);
  r.join(node("b"), s, JoinIntent{0, true, "rank 1 hung: no heartbeat for 2.0 s"}, 0ms, t0 + 2s);
  ASSERT_TRUE(r.closed());
  EXPECT_EQ(r.restart_count(), 1);
  for (auto id : {"a", "b"}) {
    const std::string why = r.assignment(id)->opened_because;
    EXPECT_NE(why.find("node 'a''s workers failed: rank 0 peer rank 1 closed"), std::string::npos) << why;
    EXPECT_NE(why.find("node 'b''s workers failed: rank 1 hung"), std::string::npos) << why;
  }
}

TEST(Round, NodeRanksStayWhereTheyWereWhenTheSameNodesReturn) {
  RoundSettings s{3, 3, 0ms, 5};
  RoundState r(s);
  for (auto id : {"c", "a", "b"}) r.join(node(id), s, kFirst, 0ms, t0);
  const int ra = r.assignment("a")->node_rank, rb = r.assignment("b")->node_rank,
            rc = r.assignment("c")->node_rank;
  EXPECT_EQ(rc, 0);
  // They come back in another order.
  r.join(node("b"), s, JoinIntent{0, true}, 0ms, t0 + 1s);
  r.join(node("a"), s, JoinIntent{0, false}, 0ms, t0 + 1s);
  r.join(node("c"), s, JoinIntent{0, false}, 0ms, t0 + 1s);
  EXPECT_EQ(r.assignment("a")->node_rank, ra);
  EXPECT_EQ(r.assignment("b")->node_rank, rb);
  EXPECT_EQ(r.assignment("c")->node_rank, rc);
}

TEST(Round, RankZeroStaysRankZeroWhileItLives) {
  RoundSettings s{2, 3, 1s, 5};
  RoundState r = running(s, {"a", "b", "c"});
  ASSERT_EQ(r.assignment("a")->node_rank, 0);
  r.leave("b", LeaveKind::kStopped, "", t0 + 1s);  // rank 1 goes away
  r.join(node("c"), s, JoinIntent{0, false}, 0ms, t0 + 1s);
  r.join(node("a"), s, JoinIntent{0, false}, 0ms, t0 + 1s);
  r.advance(t0 + 2s);
  ASSERT_TRUE(r.closed());
  EXPECT_EQ(r.assignment("a")->node_rank, 0);
  EXPECT_EQ(r.assignment("c")->node_rank, 1);
  EXPECT_EQ(r.assignment("c")->world_size, 4);
}

TEST(Round, ALateNodeIsAdmittedInANewRoundThatCostsNoRestart) {
  RoundSettings s{1, 3, 1s, 0};
  RoundState r = running(s, {"a", "b"});
  ASSERT_EQ(r.assignment("b")->num_nodes, 2);
  r.join(node("c"), s, kFirst, 0ms, t0 + 5s);
  EXPECT_EQ(r.current_round(), 1);
  EXPECT_EQ(r.reason(), RoundReason::kAdmit);
  EXPECT_EQ(r.restart_count(), 0);
  EXPECT_FALSE(r.assignment("c"));  // the running nodes must join first
  EXPECT_EQ(r.keep_alive("a", t0 + 5s).round, 1);
  r.join(node("a"), s, JoinIntent{0, false}, 0ms, t0 + 6s);
  r.join(node("b"), s, JoinIntent{0, false}, 0ms, t0 + 6s);
  ASSERT_TRUE(r.closed());
  EXPECT_EQ(r.assignment("c")->node_rank, 2);
  EXPECT_EQ(r.assignment("c")->world_size, 6);
  EXPECT_EQ(r.assignment("a")->node_rank, 0);
}

TEST(Round, ALateNodeWaitsWhileTheRoundIsFullAndComesInWithTheNext) {
  RoundSettings s{1, 2, 1s, 2};
  RoundState r = running(s, {"a", "b"});
  r.join(node("c"), s, kFirst, 0ms, t0 + 1s);
  EXPECT_EQ(r.current_round(), 0);  // the job is not disturbed
  EXPECT_TRUE(r.closed());
  EXPECT_EQ(r.keep_alive("a", t0 + 1s).nodes_waiting, 1);
  // b leaves (preempted): c takes its place in the next round.
  r.leave("b", LeaveKind::kStopped, "", t0 + 2s);
  EXPECT_EQ(r.current_round(), 1);
  EXPECT_FALSE(r.closed());
  r.join(node("a"), s, JoinIntent{0, false}, 0ms, t0 + 3s);
  ASSERT_TRUE(r.closed());
  EXPECT_EQ(r.assignment("a")->node_rank, 0);
  EXPECT_EQ(r.assignment("c")->node_rank, 1);
  EXPECT_EQ(r.num_waiting(), 0u);
}

TEST(Round, ANodeThatMissesItsLeaseIsDroppedAndTheSurvivorsGoOn) {
  RoundSettings s{1, 2, 1s, 3};
  RoundState r = running(s, {"a", "b"}, 2s);
  r.keep_alive("a", t0 + 1500ms);  // b stays silent
  EXPECT_EQ(*r.next_deadline(), t0 + 2s);
  EXPECT_FALSE(r.advance(t0 + 1999ms));
  EXPECT_TRUE(r.advance(t0 + 2s));
  EXPECT_FALSE(r.knows("b"));
  ASSERT_EQ(r.lost().size(), 1u);
  EXPECT_EQ(r.lost()[0].node_id, "b");
  EXPECT_EQ(r.lost()[0].host, "b-host");
  EXPECT_EQ(r.lost()[0].last_seen, t0);
  EXPECT_EQ(r.current_round(), 1);
  EXPECT_EQ(r.reason(), RoundReason::kNodeLost);
  EXPECT_EQ(r.restart_count(), 1);
  NodeView gone = r.keep_alive("b", t0 + 3s);  // too late
  EXPECT_FALSE(gone.known);
  // The only survivor is back: no last-call window to wait out.
  r.join(node("a"), s, JoinIntent{0, true}, 2s, t0 + 2100ms);
  ASSERT_TRUE(r.closed());
  EXPECT_EQ(r.assignment("a")->world_size, 2);
  EXPECT_EQ(r.assignment("a")->lost_since_last_round,
            std::vector<std::string>{"'b' (b-host): no keep-alive for 2000 ms"});
  EXPECT_EQ(r.restart_count(), 1);  // the failure a saw was the same incident
}

TEST(Round, ARestartWaitsForEveryNodeOfTheRunningRoundHoweverSlowlyItStops) {
  RoundSettings s{1, 3, 1s, 3};
  RoundState r = running(s, {"a", "b", "c"}, 5s);
  r.join(node("a"), s, JoinIntent{0, true}, 5s, t0 + 1s);
  r.join(node("b"), s, JoinIntent{0, false}, 5s, t0 + 1100ms);
  r.advance(t0 + 4s);  // far past the last-call window: c is still stopping
  EXPECT_FALSE(r.closed());
  EXPECT_FALSE(r.next_deadline() && *r.next_deadline() < t0 + 5s);  // only c's lease
  r.join(node("c"), s, JoinIntent{0, false}, 5s, t0 + 4500ms);
  ASSERT_TRUE(r.closed());
  EXPECT_EQ(r.assignment("c")->num_nodes, 3);
}

TEST(Round, ARestartStopsWaitingForANodeWhoseLeaseRanOut) {
  RoundSettings s{1, 2, 1s, 3};
  RoundState r = running(s, {"a", "b"}, 2s);
  r.join(node("a"), s, JoinIntent{0, true}, 2s, t0 + 500ms);
  r.advance(t0 + 1900ms);
  EXPECT_FALSE(r.closed());
  r.advance(t0 + 2s);  // b is lost while a waits for it
  ASSERT_TRUE(r.closed());
  EXPECT_EQ(r.assignment("a")->num_nodes, 1);
}

TEST(Round, KeepAlivesHoldTheLease) {
  RoundSettings s{2, 2, 0ms};
  RoundState r = running(s, {"a", "b"}, 1s);
  for (auto t = 500ms; t < 10s; t += 500ms) {
    r.keep_alive("a", t0 + t);
    r.keep_alive("b", t0 + t);
    r.advance(t0 + t);
  }
  EXPECT_EQ(r.current_round(), 0);
  EXPECT_TRUE(r.lost().empty());
}

// A closed connection is no proof of death (a blip, a reconnect, a new
// leader): the node stays until its lease runs out, and a keep-alive in
// time clears the matter. Only then does the loss name the closed
// connection.
TEST(Round, AClosedConnectionIsNotALossOnlyTheLeaseIs) {
  RoundSettings s{2, 2, 0ms};
  RoundState r = running(s, {"a", "b"}, 1s);
  r.connection_closed("b", t0 + 100ms);
  r.keep_alive("a", t0 + 200ms);
  r.advance(t0 + 200ms);
  EXPECT_EQ(r.current_round(), 0);
  EXPECT_TRUE(r.lost().empty());
  r.keep_alive("b", t0 + 800ms);  // back within its lease: nothing happened
  r.keep_alive("a", t0 + 1500ms);
  r.advance(t0 + 1500ms);
  EXPECT_TRUE(r.lost().empty());
  r.connection_closed("b", t0 + 1600ms);  // and this time it does not come back
  r.keep_alive("a", t0 + 1700ms);
  r.advance(t0 + 1700ms);
  EXPECT_TRUE(r.lost().empty());
  r.advance(t0 + 1800ms);  // b's lease: 1 s from 800 ms
  ASSERT_EQ(r.lost().size(), 1u);
  EXPECT_EQ(r.lost()[0].node_id, "b");
  EXPECT_NE(r.lost()[0].why.find("no keep-alive for 1000 ms (its agent's connection to the rendezvous "
                                 "had closed 200 ms before)"),
            std::string::npos)
      << r.lost()[0].why;
}

// The rendezvous' own stall (its timer woke late) is nobody's silence:
// every lease moves on by it.
TEST(Round, AStallOfTheRendezvousItselfExtendsEveryLease) {
  RoundSettings s{2, 2, 0ms};
  RoundState r = running(s, {"a", "b"}, 1s);
  // Not running from 500 ms to 3 s: a's and b's keep-alives wait in its sockets.
  r.excuse(2500ms, t0 + 3s);
  r.advance(t0 + 3s);
  EXPECT_TRUE(r.lost().empty()) << r.lost()[0].why;
  EXPECT_EQ(r.next_deadline(), t0 + 3500ms);  // last seen at 2.5 s (0 + 2.5 s), lease 1 s
  r.keep_alive("a", t0 + 3100ms);
  r.advance(t0 + 3500ms);  // b never came back after all
  ASSERT_EQ(r.lost().size(), 1u);
  EXPECT_EQ(r.lost()[0].node_id, "b");
  // A stall never moves anyone's last sign of life past now.
  RoundState q = running(s, {"a", "b"}, 1s);
  q.excuse(10s, t0 + 2s);
  q.advance(t0 + 2s);
  EXPECT_TRUE(q.lost().empty());
  q.advance(t0 + 3s);
  EXPECT_EQ(q.lost().size(), 2u);
}

// Leases run out only when the caller says so (the registry's timer, after
// it excused its own stall), not on the first call served after one.
TEST(Round, LeasesRunOutOnlyWhenTheCallerExpiresThem) {
  RoundSettings s{2, 2, 0ms};
  RoundState r = running(s, {"a", "b"}, 1s);
  r.keep_alive("a", t0 + 5s);
  r.advance(t0 + 5s, /*expire_leases=*/false);
  EXPECT_TRUE(r.lost().empty());
  r.advance(t0 + 5s);
  EXPECT_EQ(r.lost().size(), 1u);
}

TEST(Round, TooFewSurvivorsLeaveTheRoundOpen) {
  RoundSettings s{2, 2, 0ms, 3};
  RoundState r = running(s, {"a", "b"}, 1s);
  r.keep_alive("a", t0 + 900ms);
  r.advance(t0 + 1s);  // b lost
  r.join(node("a"), s, JoinIntent{0, true}, 1s, t0 + 1100ms);
  r.advance(t0 + 1200ms);
  EXPECT_FALSE(r.closed());  // min 2: a waits for a replacement
  EXPECT_FALSE(r.assignment("a"));
  r.join(node("d"), s, kFirst, 1s, t0 + 1300ms);  // a replacement node
  EXPECT_TRUE(r.closed());
}

TEST(Round, ALostNodeInTheOpenRoundOnlyLeavesIt) {
  RoundSettings s{3, 3, 0ms};
  RoundState r(s);
  r.join(node("a"), s, kFirst, 1s, t0);
  r.join(node("b"), s, kFirst, 1s, t0);
  r.keep_alive("a", t0 + 900ms);
  r.advance(t0 + 1s);  // b lost before the round closed
  EXPECT_EQ(r.num_members(), 1u);
  EXPECT_EQ(r.current_round(), 0);
  EXPECT_EQ(r.restart_count(), 0);
}

TEST(Round, UsingUpTheRestartsFailsTheJob) {
  RoundSettings s{2, 2, 0ms, 1};
  RoundState r = running(s, {"a", "b"});
  r.join(node("a"), s, JoinIntent{0, true}, 0ms, t0);
  r.join(node("b"), s, JoinIntent{0, false}, 0ms, t0);
  ASSERT_TRUE(r.closed());
  EXPECT_THROW(r.join(node("a"), s, JoinIntent{1, true}, 0ms, t0), JobEnded);
  EXPECT_EQ(r.phase(), JobPhase::kFailed);
  EXPECT_NE(r.end_message().find("--max-restarts"), std::string::npos);
  EXPECT_EQ(r.keep_alive("b", t0).phase, JobPhase::kFailed);
}

TEST(Round, SuccessFinishesTheJobAndLateJoinersAreTold) {
  RoundSettings s{2, 2, 0ms};
  RoundState r = running(s, {"a", "b"});
  r.leave("a", LeaveKind::kSucceeded, "", t0 + 1s);
  EXPECT_EQ(r.phase(), JobPhase::kSucceeded);
  // b's workers keep running to their own end: its round is untouched.
  NodeView v = r.keep_alive("b", t0 + 1s);
  EXPECT_EQ(v.round, 0);
  EXPECT_EQ(v.phase, JobPhase::kSucceeded);
  r.leave("b", LeaveKind::kSucceeded, "", t0 + 2s);
  EXPECT_EQ(r.num_nodes(), 0u);
  try {
    r.join(node("c"), s, kFirst, 0ms, t0 + 3s);
    FAIL();
  } catch (const JobEnded& e) {
    EXPECT_NE(std::string(e.what()).find("job finished"), std::string::npos) << e.what();
  }
}

// A node paused past its lease (the whole host, SIGSTOP) wakes with workers
// that finished a round the job has left behind: their success finishes
// nothing, and the refusal changes nothing either.
TEST(Round, ASuccessInARoundThatIsOverIsRefused) {
  RoundSettings s{2, 2, 0ms, 3};
  RoundState r = running(s, {"a", "b"}, 2s);
  ASSERT_EQ(r.current_round(), 0);
  r.keep_alive("b", t0 + 2500ms);
  r.advance(t0 + 3s);  // a lost; b must join round 1
  ASSERT_EQ(r.current_round(), 1);
  try {
    r.leave("a", LeaveKind::kSucceeded, "", t0 + 4s, 0);
    FAIL() << "a success in round 0 was taken";
  } catch (const RendezvousError& e) {
    EXPECT_NE(std::string(e.what()).find("finished its workers in round 0, but the job had moved on to round 1"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(r.phase(), JobPhase::kActive);
  // A member of the running round whose success names an old round: the same.
  r.join(node("a"), s, JoinIntent{0, false}, 2s, t0 + 4s);
  r.join(node("b"), s, JoinIntent{0, false}, 2s, t0 + 4s);
  ASSERT_TRUE(r.closed());
  EXPECT_THROW(r.leave("b", LeaveKind::kSucceeded, "", t0 + 5s, 0), RendezvousError);
  EXPECT_EQ(r.phase(), JobPhase::kActive);
  // Its own round: the job is finished.
  r.leave("b", LeaveKind::kSucceeded, "", t0 + 5s, 1);
  EXPECT_EQ(r.phase(), JobPhase::kSucceeded);
}

TEST(Round, AStoppedNodeLetsTheOthersGoOnWithoutARestart) {
  RoundSettings s{1, 3, 1s, 0};
  RoundState r = running(s, {"a", "b", "c"});
  r.leave("c", LeaveKind::kStopped, "", t0 + 1s);
  EXPECT_EQ(r.phase(), JobPhase::kActive);
  EXPECT_EQ(r.current_round(), 1);
  EXPECT_EQ(r.reason(), RoundReason::kNodeLeft);
  EXPECT_EQ(r.restart_count(), 0);
}

TEST(Round, AFailedLeaveFailsTheJob) {
  RoundSettings s{2, 2, 0ms};
  RoundState r = running(s, {"a", "b"});
  r.leave("a", LeaveKind::kFailed, "join timed out", t0);
  EXPECT_EQ(r.phase(), JobPhase::kFailed);
  EXPECT_NE(r.keep_alive("b", t0).detail.find("join timed out"), std::string::npos);
}

TEST(Round, RejectsBadJoins) {
  RoundSettings s{2, 2, 0ms};
  RoundState r(s);
  EXPECT_THROW(r.join(node("a"), RoundSettings{1, 2, 0ms}, kFirst, 0ms, t0), RendezvousError);
  EXPECT_THROW(r.join(node("a"), RoundSettings{2, 2, 0ms, 3}, kFirst, 0ms, t0), RendezvousError);
  EXPECT_THROW(r.join(node("a", 0), s, kFirst, 0ms, t0), RendezvousError);
  EXPECT_THROW(r.join(node("a", 1, 5), s, kFirst, 0ms, t0), RendezvousError);
  r.join(node("a", 1, 1), s, kFirst, 0ms, t0);
  try {
    r.join(node("b", 1, 1), s, kFirst, 0ms, t0);
    FAIL();
  } catch (const RendezvousError& e) {
    EXPECT_NE(std::string(e.what()).find("both ask for node rank 1"), std::string::npos);
  }
  EXPECT_THROW(RoundState(RoundSettings{3, 2, 0ms}), RendezvousError);
}

TEST(Round, WantsNcclIdWhenAnyMemberDoes) {
  RoundSettings s{2, 2, 0ms};
  RoundState r(s);
  r.join(node("a"), s, kFirst, 0ms, t0);
  NodeSpec b = node("b");
  b.wants_nccl_id = true;
  r.join(b, s, kFirst, 0ms, t0);
  EXPECT_TRUE(r.wants_nccl_id());
}

TEST(Round, GenerationMovesOnlyWhenWaitersHaveSomethingToLearn) {
  RoundSettings s{3, 3, 0ms};
  RoundState r(s);
  const auto g0 = r.generation();
  r.join(node("a"), s, kFirst, 0ms, t0);
  r.join(node("b"), s, kFirst, 0ms, t0);
  EXPECT_EQ(r.generation(), g0);  // nothing closed: no waiter can be answered
  r.join(node("c"), s, kFirst, 0ms, t0);
  EXPECT_GT(r.generation(), g0);
}

// Takeover: a waiting node that heals takes a lost member's place in the
// running round when every other member's workers heal in place.
NodeSpec healing(const std::string& id, int nproc = 2, int hint = -1) {
  NodeSpec n = node(id, nproc, hint);
  n.heals = true;
  return n;
}

// a, b, c of 2 workers each run round 0 and say their workers heal in it.
RoundState running_healers(const RoundSettings& s) {
  RoundState r(s);
  for (const char* id : {"a", "b", "c"}) r.join(healing(id), s, kFirst, 0ms, t0);
  r.advance(t0 + s.last_call);
  EXPECT_TRUE(r.closed());
  for (const char* id : {"a", "b", "c"}) r.keep_alive(id, t0, 0);
  return r;
}

TEST(Round, AWaitingNodeTakesOverALostMembersRanksInTheRunningRound) {
  RoundSettings s{3, 3, 0ms, 5};
  RoundState r = running_healers(s);
  const Assignment b = *r.assignment("b");
  r.join(healing("d"), s, kFirst, 0ms, t0 + 1s);
  EXPECT_EQ(r.num_waiting(), 1u);
  EXPECT_TRUE(r.keep_alive("d", t0 + 1s).takeover_ready);  // d warms its workers up
  const uint64_t g0 = r.generation();
  r.lose("b", "its agent's connection closed", t0 + 2s);
  EXPECT_GT(r.generation(), g0);  // the parked join of d learns it
  EXPECT_EQ(r.current_round(), 0);
  EXPECT_TRUE(r.closed());
  EXPECT_EQ(r.restart_count(), 0);
  EXPECT_EQ(r.num_waiting(), 0u);
  EXPECT_FALSE(r.assignment("b"));
  auto d = r.assignment("d");
  ASSERT_TRUE(d);
  EXPECT_EQ(d->node_rank, b.node_rank);
  EXPECT_EQ(d->first_global_rank, b.first_global_rank);
  EXPECT_EQ(d->world_size, 6);
  EXPECT_EQ(d->heal_generation, 1u);
  EXPECT_EQ(d->lost_since_last_round,
            std::vector<std::string>{"'b' (b-host): its agent's connection closed"});
  // The members keep their places and learn the generation to heal in.
  EXPECT_EQ(r.assignment("a")->heal_generation, 0u);
  NodeView v = r.keep_alive("a", t0 + 2s, 0);
  EXPECT_EQ(v.round, 0);
  EXPECT_EQ(v.heal_generation, 1u);
  EXPECT_NE(v.detail.find("took over node rank 1 from node 'b'"), std::string::npos) << v.detail;
  EXPECT_EQ(r.status(t0 + 2s).heal_generation, 1u);
  // A second loss with no node left waiting: a new round, one restart.
  r.keep_alive("d", t0 + 2s, 0);
  r.lose("c", "gone", t0 + 3s);
  EXPECT_EQ(r.current_round(), 1);
  EXPECT_EQ(r.restart_count(), 1);
  EXPECT_EQ(r.keep_alive("a", t0 + 3s).heal_generation, 0u);  // the new round starts at 0
}

// A member that hands its place over (it was the job's straggler,
// --straggler-action replace) is treated as lost at once: the waiting node
// takes its ranks in the running round, no restart.
TEST(Round, AMemberThatHandsItsPlaceOverIsTakenOverAtOnce) {
  RoundSettings s{3, 3, 0ms, 5};
  RoundState r = running_healers(s);
  const Assignment b = *r.assignment("b");
  r.join(healing("d"), s, kFirst, 0ms, t0 + 1s);
  r.keep_alive("d", t0 + 1s);
  r.leave("b", LeaveKind::kHandedOver, "node 'b' was the job's straggler (score 0.33)", t0 + 2s);
  EXPECT_EQ(r.current_round(), 0);
  EXPECT_EQ(r.restart_count(), 0);
  auto d = r.assignment("d");
  ASSERT_TRUE(d);
  EXPECT_EQ(d->first_global_rank, b.first_global_rank);
  EXPECT_EQ(d->heal_generation, 1u);
  ASSERT_EQ(d->lost_since_last_round.size(), 1u);
  EXPECT_NE(d->lost_since_last_round[0].find("straggler"), std::string::npos) << d->lost_since_last_round[0];
}

TEST(Round, NoTakeoverUnlessEveryOtherMembersWorkersHealInTheRunningRound) {
  RoundSettings s{3, 3, 0ms, 5};
  RoundState r = running_healers(s);
  r.keep_alive("c", t0 + 1s, -1);  // c's workers stopped saying so
  r.join(healing("d"), s, kFirst, 0ms, t0 + 1s);
  EXPECT_FALSE(r.keep_alive("d", t0 + 1s).takeover_ready);
  r.lose("b", "gone", t0 + 2s);
  EXPECT_EQ(r.current_round(), 1);
  EXPECT_EQ(r.restart_count(), 1);
  EXPECT_EQ(r.reason(), RoundReason::kNodeLost);
}

TEST(Round, NoTakeoverByANodeThatDoesNotHealOrDoesNotFit) {
  RoundSettings s{3, 3, 0ms, 5};
  for (const NodeSpec& spare : {node("d"), healing("d", 3), healing("d", 2, 2)}) {
    RoundState r = running_healers(s);
    r.join(spare, s, kFirst, 0ms, t0 + 1s);
    r.lose("b", "gone", t0 + 2s);  // b held node rank 1
    EXPECT_EQ(r.current_round(), 1) << "spare with " << spare.local_world_size << " workers, hint "
                                    << spare.node_rank_hint << ", heals " << spare.heals;
  }
}

TEST(Round, AWorkersHealRoundOfAnEarlierRoundDoesNotCount) {
  RoundSettings s{2, 2, 0ms, 5};
  RoundState r(s);
  r.join(healing("a"), s, kFirst, 0ms, t0);
  r.join(healing("b"), s, kFirst, 0ms, t0);
  r.keep_alive("a", t0, 0);
  r.keep_alive("b", t0, 0);
  r.join(healing("b"), s, JoinIntent{0, true}, 0ms, t0 + 1s);  // b's workers failed: round 1
  r.join(healing("a"), s, JoinIntent{0, false}, 0ms, t0 + 1s);
  ASSERT_TRUE(r.closed());
  ASSERT_EQ(r.current_round(), 1);
  r.join(healing("c"), s, kFirst, 0ms, t0 + 2s);
  r.lose("b", "gone", t0 + 3s);  // a said so for round 0 only
  EXPECT_EQ(r.current_round(), 2);
}

TEST(Round, ALoneMemberIsNeverTakenOver) {
  RoundSettings s{1, 1, 0ms, 5};
  RoundState r(s);
  r.join(healing("a"), s, kFirst, 0ms, t0);
  r.keep_alive("a", t0, 0);
  r.join(healing("b"), s, kFirst, 0ms, t0);
  r.lose("a", "gone", t0 + 1s);  // nobody holds its state
  EXPECT_EQ(r.current_round(), 1);
}

// Shrink: no node waits, so the survivors go on without the lost member in
// the running round, with their ranks closed up.
TEST(Round, TheRunningRoundShrinksPastALostMemberWhenNoNodeWaits) {
  RoundSettings s{2, 3, 100ms, 5};
  RoundState r = running_healers(s);
  r.lose("b", "its agent's connection closed", t0 + 1s);  // node rank 1, ranks 2..3
  EXPECT_EQ(r.current_round(), 0);
  EXPECT_TRUE(r.closed());
  EXPECT_EQ(r.restart_count(), 0);
  EXPECT_EQ(r.num_members(), 2u);
  EXPECT_FALSE(r.assignment("b"));
  auto a = r.assignment("a"), c = r.assignment("c");
  ASSERT_TRUE(a && c);
  EXPECT_EQ(a->node_rank, 0);
  EXPECT_EQ(a->first_global_rank, 0);
  EXPECT_EQ(c->node_rank, 1);
  EXPECT_EQ(c->first_global_rank, 2);
  EXPECT_EQ(c->num_nodes, 2);
  EXPECT_EQ(c->world_size, 4);
  NodeView v = r.keep_alive("c", t0 + 1s, 0);
  EXPECT_EQ(v.heal_generation, 1u);
  EXPECT_EQ(v.placement, (Placement{1, 2, 4, 2}));
  EXPECT_NE(v.detail.find("goes on with 2 node(s), world size 4"), std::string::npos) << v.detail;
  EXPECT_EQ(r.keep_alive("a", t0 + 1s, 0).placement, (Placement{0, 2, 4, 0}));
  // Node rank 0 goes too: c is alone, but --nnodes 2:3 needs two. A new
  // round waits for a second node, one restart spent.
  r.lose("a", "gone", t0 + 2s);
  EXPECT_EQ(r.current_round(), 1);
  EXPECT_EQ(r.restart_count(), 1);
  EXPECT_EQ(r.keep_alive("c", t0 + 2s).placement.node_rank, -1);  // no closed round holds it
}

TEST(Round, AShrinkPastNodeRankZeroMovesTheMaster) {
  RoundSettings s{1, 3, 100ms, 5};
  RoundState r = running_healers(s);
  r.lose("a", "gone", t0 + 1s);
  auto b = r.assignment("b");
  ASSERT_TRUE(b);
  EXPECT_EQ(b->node_rank, 0);
  EXPECT_EQ(b->first_global_rank, 0);
  EXPECT_EQ(b->master_addr, "10.0.0.2");
  EXPECT_EQ(b->master_port, 1001);
  EXPECT_EQ(r.assignment("c")->first_global_rank, 2);
  r.keep_alive("b", t0 + 1s, 0);
  r.keep_alive("c", t0 + 1s, 0);
  r.lose("c", "gone", t0 + 2s);  // down to one node: still the same round
  EXPECT_EQ(r.current_round(), 0);
  EXPECT_EQ(r.keep_alive("b", t0 + 2s, 0).placement, (Placement{0, 1, 2, 0}));
  EXPECT_EQ(r.heal_generation(), 2u);
  r.lose("b", "gone", t0 + 3s);  // nobody is left to hold the state
  EXPECT_EQ(r.current_round(), 1);
}

TEST(Round, NoShrinkBelowMinNodesWhileANodeWaitsOrUnlessEveryoneLeftHeals) {
  RoundSettings fixed{3, 3, 0ms, 5};
  RoundState at_min = running_healers(fixed);
  at_min.lose("b", "gone", t0 + 1s);
  EXPECT_EQ(at_min.current_round(), 1);

  RoundSettings s{2, 3, 100ms, 5};
  RoundState waiting = running_healers(s);
  waiting.join(healing("d", 3), s, kFirst, 0ms, t0 + 1s);  // cannot take b's place: the new round takes it in
  waiting.lose("b", "gone", t0 + 2s);
  EXPECT_EQ(waiting.current_round(), 1);

  RoundState not_healing = running_healers(s);
  not_healing.keep_alive("c", t0 + 1s, -1);
  not_healing.lose("b", "gone", t0 + 2s);
  EXPECT_EQ(not_healing.current_round(), 1);
  EXPECT_EQ(not_healing.reason(), RoundReason::kNodeLost);
}

// A member's worker failed: its agent asks for a heal generation. The round
// runs on, every member heals in the generation named, and each request is
// answered once (a repeat, its answer lost, names no second generation).
TEST(Round, AMembersFailedWorkerIsHealedInAGenerationTheRoundNamesOnce) {
  RoundSettings s{3, 3, 0ms, 5};
  RoundState r = running_healers(s);
  NodeView v = r.keep_alive("b", t0 + 1s, 0, HealRequest{1, "rank 2 failed (SIGKILL)"});
  EXPECT_EQ(v.heal_request_id, 1u);
  EXPECT_EQ(v.heal_request_generation, 1u);
  EXPECT_EQ(v.heal_generation, 1u);
  EXPECT_EQ(v.heal_reason, HealReason::kWorker);
  EXPECT_NE(v.detail.find("'b' (b-host): rank 2 failed (SIGKILL)"), std::string::npos) << v.detail;
  EXPECT_EQ(r.current_round(), 0);
  EXPECT_EQ(r.restart_count(), 0);
  // The others learn the generation, with no request of their own answered.
  NodeView a = r.keep_alive("a", t0 + 1s, 0);
  EXPECT_EQ(a.heal_generation, 1u);
  EXPECT_EQ(a.heal_request_id, 0u);
  EXPECT_EQ(a.heal_reason, HealReason::kWorker);
  // The same request again: the same answer, no new generation.
  v = r.keep_alive("b", t0 + 2s, 0, HealRequest{1, "rank 2 failed (SIGKILL)"});
  EXPECT_EQ(v.heal_request_generation, 1u);
  EXPECT_EQ(r.heal_generation(), 1u);
  // A later failure: the next generation.
  v = r.keep_alive("c", t0 + 3s, 0, HealRequest{1, "rank 4 failed (exit code 1)"});
  EXPECT_EQ(v.heal_request_generation, 2u);
  EXPECT_EQ(r.heal_generation(), 2u);
}

// No member can make the job heal without end: a node's heal requests are
// bounded (a burst, then one a second). One over the bound names nothing
// yet; the keep-alive that repeats it a second later gets its generation.
// The bound is the node's own: another member's request goes through.
TEST(Round, HealRequestsAreBoundedPerNodeAndOneOverTheBoundIsAnsweredLater) {
  RoundSettings s{3, 3, 0ms, 5};
  RoundState r = running_healers(s);
  uint64_t id = 0;
  for (int i = 0; i < RoundState::kHealBurst; ++i) {
    EXPECT_EQ(r.keep_alive("b", t0 + 1s, 0, HealRequest{++id, "burst"}).heal_request_generation, id);
  }
  // One more at once waits, and still waits half a second later.
  NodeView v = r.keep_alive("b", t0 + 1s, 0, HealRequest{++id, "one more"});
  EXPECT_EQ(v.heal_request_id, id - 1);
  EXPECT_EQ(r.keep_alive("b", t0 + 1500ms, 0, HealRequest{id, "one more"}).heal_request_id, id - 1);
  EXPECT_EQ(r.heal_generation(), static_cast<uint32_t>(RoundState::kHealBurst));
  // A second on, its repeat is answered.
  v = r.keep_alive("b", t0 + 2100ms, 0, HealRequest{id, "one more"});
  EXPECT_EQ(v.heal_request_id, id);
  EXPECT_EQ(v.heal_request_generation, RoundState::kHealBurst + 1u);
  // 100 requests a second for 5 s name about one generation a second.
  const uint32_t before = r.heal_generation();
  for (auto t = 3000ms; t < 8000ms; t += 10ms) r.keep_alive("b", t0 + t, 0, HealRequest{++id, "spam"});
  EXPECT_LE(r.heal_generation() - before, 6u) << "500 requests in 5 s";
  EXPECT_GE(r.heal_generation() - before, 4u);
  // The bound is b's own: a's request goes through.
  const uint32_t now = r.heal_generation();
  EXPECT_EQ(r.keep_alive("a", t0 + 8000ms, 0, HealRequest{1, "rank 0 failed"}).heal_request_generation, now + 1);
}

// A node that arrives while a round runs must run the members' program:
// its workers would take their state. Another program is refused, whatever
// it would have done (grow the round, wait as a spare, be admitted),
// nothing changes, and the members' view says so. The same program with
// other arguments (a per-node output path) is admitted, and the members'
// view names the argument that differs. A forming round takes what comes,
// as torchrun does.
TEST(Round, ANodeRunningAnotherProgramIsRefusedByARunningRound) {
  RoundSettings s{1, 4, 0ms, 5};
  auto runs = [](NodeSpec n, const std::string& program) {
    n.program = program;
    return n;
  };
  RoundState r(s);
  r.join(runs(healing("a"), "train --limit 8000 --summary-json s0.json"), s, kFirst, 0ms, t0);
  ASSERT_TRUE(r.closed());
  r.keep_alive("a", t0, 0);
  const uint64_t g0 = r.generation();
  try {
    r.join(runs(healing("b"), "hello --limit 8000"), s, kFirst, 0ms, t0 + 1s);
    FAIL() << "a node running another program joined";
  } catch (const ProgramMismatch& e) {
    EXPECT_NE(std::string(e.what()).find("runs `hello --limit 8000`, but the running round's nodes run "
                                         "`train --limit 8000 --summary-json s0.json`"),
              std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(r.knows("b"));
  EXPECT_EQ(r.num_members(), 1u);
  EXPECT_EQ(r.current_round(), 0);
  EXPECT_EQ(r.heal_generation(), 0u);
  EXPECT_GT(r.generation(), g0);  // news for the members
  NodeView a = r.keep_alive("a", t0 + 2s, 0);
  EXPECT_EQ(a.refusals, 1u);
  EXPECT_NE(a.refusal.find("refused node 'b'"), std::string::npos) << a.refusal;
  // The same program with a per-node argument grows the round, named.
  r.join(runs(healing("c"), "train --limit 8000 --summary-json s1.json"), s, kFirst, 0ms, t0 + 3s);
  EXPECT_EQ(r.num_members(), 2u);
  EXPECT_EQ(r.heal_generation(), 1u);
  a = r.keep_alive("a", t0 + 4s, 0);
  EXPECT_EQ(a.refusals, 2u);
  EXPECT_NE(a.refusal.find("admitted node 'c'"), std::string::npos) << a.refusal;
  EXPECT_NE(a.refusal.find("its argument 4 is `s1.json`, theirs `s0.json`"), std::string::npos) << a.refusal;
  // The same program and arguments: nothing to say.
  EXPECT_NO_THROW(r.join(runs(healing("d"), "train --limit 8000 --summary-json s0.json"), s, kFirst, 0ms, t0 + 5s));
  EXPECT_EQ(r.keep_alive("a", t0 + 6s, 0).refusals, 2u);
  // While a round forms, nothing is compared.
  RoundSettings two{2, 2, 0ms, 5};
  RoundState forming(two);
  forming.join(runs(node("a"), "train"), two, kFirst, 0ms, t0);
  EXPECT_NO_THROW(forming.join(runs(node("b"), "hello"), two, kFirst, 0ms, t0));
  EXPECT_TRUE(forming.closed());
}

// Each node new to the job gets a lease key; its later calls must show it
// (a stranger with the job's token cannot speak for it), and it keeps the
// same key when it joins again.
TEST(Round, ANodesLeaseKeyIsItsOwnAndOutlivesItsRejoins) {
  RoundSettings s{2, 2, 0ms, 5};
  int made = 0;
  RoundState r(s, [&] { return "key" + std::to_string(++made); });
  r.join(node("a"), s, kFirst, 0ms, t0);
  r.join(node("b"), s, kFirst, 0ms, t0);
  EXPECT_EQ(r.lease_key("a"), "key1");
  EXPECT_EQ(r.lease_key("b"), "key2");
  EXPECT_EQ(r.lease_key("nobody"), "");
  EXPECT_NO_THROW(r.check_lease("a", "key1"));
  EXPECT_THROW(r.check_lease("a", "key2"), NotThisNode);
  EXPECT_THROW(r.check_lease("a", ""), NotThisNode);
  EXPECT_THROW(r.check_lease("a", "key1 "), NotThisNode);
  EXPECT_NO_THROW(r.check_lease("nobody", "anything"));  // a node new to the job
  r.join(node("a"), s, JoinIntent{0, true}, 0ms, t0 + 1s);  // its workers failed: it joins again
  EXPECT_EQ(r.lease_key("a"), "key1");
  r.leave("a", LeaveKind::kStopped, "", t0 + 2s);
  r.join(node("a"), s, kFirst, 0ms, t0 + 3s);  // gone, then back: new to the job
  EXPECT_EQ(r.lease_key("a"), "key3");
}

TEST(Round, AWorkerHealIsRefusedUnlessTheRoundRunsAndEveryOtherMemberHeals) {
  RoundSettings s{3, 3, 0ms, 5};
  RoundState not_healing = running_healers(s);
  not_healing.keep_alive("c", t0 + 1s, -1);  // c's workers cannot heal
  NodeView v = not_healing.keep_alive("b", t0 + 1s, 0, HealRequest{1, "rank 2 failed"});
  EXPECT_EQ(v.heal_request_id, 1u);
  EXPECT_EQ(v.heal_request_generation, 0u);
  EXPECT_EQ(not_healing.heal_generation(), 0u);
  // The asking member's own word does not count against it (its failed
  // worker no longer says it heals).
  RoundState own = running_healers(s);
  EXPECT_EQ(own.keep_alive("b", t0 + 1s, -1, HealRequest{7, "rank 2 failed"}).heal_request_generation, 1u);
  // Not while a round is open, nor for a node that waits.
  RoundState open(s);
  open.join(healing("a"), s, kFirst, 0ms, t0);
  open.join(healing("b"), s, kFirst, 0ms, t0);
  EXPECT_EQ(open.keep_alive("a", t0, 0, HealRequest{1, "x"}).heal_request_generation, 0u);
  RoundState full = running_healers(s);
  full.join(healing("d"), s, kFirst, 0ms, t0 + 1s);
  EXPECT_EQ(full.keep_alive("d", t0 + 1s, 0, HealRequest{1, "x"}).heal_request_generation, 0u);
  EXPECT_EQ(full.heal_generation(), 0u);
}

// A node arriving while the running round has room joins it in place when
// everyone heals: the next node rank, the global ranks after everyone's, a
// bigger world for all, one heal generation more; no new round, no restart.
TEST(Round, ANodeArrivingWithRoomJoinsTheRunningRoundWhenEveryoneHeals) {
  RoundSettings s{2, 4, 100ms, 5};
  RoundState r = running_healers(s);  // a, b, c: ranks 0..5
  const uint64_t g0 = r.generation();
  r.join(healing("d", 3), s, kFirst, 0ms, t0 + 1s);
  EXPECT_GT(r.generation(), g0);  // d's parked join learns it
  EXPECT_EQ(r.current_round(), 0);
  EXPECT_EQ(r.restart_count(), 0);
  EXPECT_EQ(r.num_members(), 4u);
  auto d = r.assignment("d");
  ASSERT_TRUE(d);
  EXPECT_EQ(d->node_rank, 3);
  EXPECT_EQ(d->first_global_rank, 6);
  EXPECT_EQ(d->world_size, 9);
  EXPECT_EQ(d->num_nodes, 4);
  EXPECT_EQ(d->heal_generation, 1u);
  EXPECT_TRUE(d->lost_since_last_round.empty());
  EXPECT_EQ(d->master_addr, r.assignment("a")->master_addr);
  NodeView v = r.keep_alive("b", t0 + 1s, 0);
  EXPECT_EQ(v.placement, (Placement{1, 4, 9, 2}));
  EXPECT_EQ(v.heal_generation, 1u);
  EXPECT_EQ(v.heal_reason, HealReason::kGrow);
  EXPECT_NE(v.detail.find("joined the running round as node rank 3"), std::string::npos) << v.detail;
  // At --nnodes' maximum the next one waits, as before.
  r.join(healing("e"), s, kFirst, 0ms, t0 + 2s);
  EXPECT_EQ(r.num_waiting(), 1u);
  EXPECT_EQ(r.current_round(), 0);
}

TEST(Round, ANodeIsAdmittedByANewRoundUnlessEveryoneHealsAndItTakesTheNextRank) {
  RoundSettings s{2, 4, 100ms, 5};
  RoundState not_healing = running_healers(s);
  not_healing.keep_alive("c", t0 + 1s, -1);
  not_healing.join(healing("d"), s, kFirst, 0ms, t0 + 1s);
  EXPECT_EQ(not_healing.current_round(), 1);
  EXPECT_EQ(not_healing.reason(), RoundReason::kAdmit);

  RoundState newcomer_cannot = running_healers(s);
  newcomer_cannot.join(node("d"), s, kFirst, 0ms, t0 + 1s);  // its workers do not heal
  EXPECT_EQ(newcomer_cannot.current_round(), 1);

  RoundState wants_rank_0 = running_healers(s);
  wants_rank_0.join(healing("d", 2, 0), s, kFirst, 0ms, t0 + 1s);
  EXPECT_EQ(wants_rank_0.current_round(), 1);
  EXPECT_EQ(wants_rank_0.heal_generation(), 0u);
}

// A node that was lost (paused or cut off past its lease) and comes back
// asks for the node rank it had the first time (--node-rank 0), which the
// others took when they closed ranks: it grows the round at the next rank
// instead of restarting everyone for its old one.
TEST(Round, ANodeBackAfterItWasLostGrowsTheRoundWhateverRankItFirstAskedFor) {
  RoundSettings s{2, 4, 100ms, 5};
  RoundState r = running_healers(s);
  r.lose("a", "paused past its lease", t0 + 1s);  // the round shrinks: b, c are node ranks 0, 1
  EXPECT_EQ(r.num_members(), 2u);
  r.join(healing("a", 2, 0), s, JoinIntent{0, false}, 0ms, t0 + 2s);  // back, asking for rank 0
  EXPECT_EQ(r.current_round(), 0) << "a restart for everyone";
  ASSERT_TRUE(r.assignment("a"));
  EXPECT_EQ(r.assignment("a")->node_rank, 2);
  EXPECT_EQ(r.heal_generation(), 2u);  // the shrink, then the grow
}

}  // namespace
}  // namespace ddprun
