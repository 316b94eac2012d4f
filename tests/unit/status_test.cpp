// `ddprun status` on the service side: the job's round, restarts and nodes as
// the registry sees them, progress reports (only from nodes of the job,
// checked before they are stored) and the Status call behind its token.
#include <gtest/gtest.h>

#include <cmath>
#include <future>
#include <limits>

#include <grpcpp/grpcpp.h>
#include <nlohmann/json.hpp>

#include "ddprun/v1/rendezvous.grpc.pb.h"
#include "launcher/status_command.h"
#include "rendezvous/client/client.h"
#include "rendezvous/server/node_scores.h"
#include "rendezvous/server/registry.h"
#include "rendezvous/wire/security.h"
#include "rendezvous/server/server.h"
#include "support/no_nccl.h"

namespace ddprun {
namespace {

using namespace std::chrono_literals;

using ddptest::no_nccl;

JoinCall node(const std::string& id, int nproc, int nodes = 2, int max_restarts = 3) {
  JoinCall c;
  c.lease_key = "key-" + id;  // the same node brings the same key each time
  c.job_id = "job";
  c.node = NodeSpec{id, id + "-host", nproc, "10.0.0.1", -1, false, 0, false, "", "", ""};
  c.settings = RoundSettings{nodes, nodes, 0ms, max_restarts};
  c.timeout = 5s;
  return c;
}

// Joins every call at once and waits for the round to close; the nodes'
// lease keys, in the calls' order.
std::vector<std::string> join_all(JobRegistry& reg, std::vector<JoinCall> calls) {
  std::vector<std::promise<JoinOutcome>> done(calls.size());
  for (size_t i = 0; i < calls.size(); ++i) {
    reg.join_async(std::move(calls[i]), [&done, i](JoinOutcome o) { done[i].set_value(std::move(o)); });
  }
  std::vector<std::string> keys;
  for (auto& d : done) {
    JoinOutcome o = d.get_future().get();
    if (o.error) std::rethrow_exception(o.error);
    keys.push_back(o.result->lease_key);
  }
  return keys;
}

ProgressInfo step(int64_t s) {
  ProgressInfo p;
  p.step = s;
  p.total_steps = 100;
  p.saved_step = s - s % 10;
  p.loss = 0.5;
  return p;
}

TEST(JobStatus, ShowsTheRoundItsNodesByRankAndTheirGlobalRanks) {
  JobRegistry reg(no_nccl);
  join_all(reg, {node("a", 2), node("b", 3)});
  const JobStatus s = reg.status("job");
  EXPECT_EQ(s.phase, JobPhase::kActive);
  EXPECT_EQ(s.round, 0);
  EXPECT_TRUE(s.round_closed);
  EXPECT_EQ(s.restart_count, 0);
  EXPECT_EQ(s.settings.max_restarts, 3);
  EXPECT_EQ(s.world_size, 5);
  ASSERT_EQ(s.nodes.size(), 2u);
  for (int r = 0; r < 2; ++r) EXPECT_EQ(s.nodes[r].node_rank, r);
  // The node at rank 0 holds global ranks from 0, the other from its size.
  EXPECT_EQ(s.nodes[0].first_global_rank, 0);
  EXPECT_EQ(s.nodes[1].first_global_rank, s.nodes[0].local_world_size);
  EXPECT_EQ(s.nodes[0].host, s.nodes[0].node_id + "-host");
  EXPECT_EQ(s.nodes[0].last_seen_ago, -1ms);  // no lease: it sends no keep-alives
  EXPECT_FALSE(s.progress.has_value());
}

TEST(JobStatus, ANodeWithALeaseShowsWhenItWasLastSeen) {
  JobRegistry reg(no_nccl);
  JoinCall c = node("a", 1, 1);
  c.lease = 60s;
  join_all(reg, {c});
  const JobStatus s = reg.status("job");
  ASSERT_EQ(s.nodes.size(), 1u);
  EXPECT_GE(s.nodes[0].last_seen_ago, 0ms);
  EXPECT_LT(s.nodes[0].last_seen_ago, 30s);
}

TEST(JobStatus, AnOpenRoundShowsItsMembersWithoutRanks) {
  JobRegistry reg(no_nccl);
  reg.join_async(node("a", 2), [](JoinOutcome) {});
  const JobStatus s = reg.status("job");
  EXPECT_FALSE(s.round_closed);
  ASSERT_EQ(s.nodes.size(), 1u);
  EXPECT_EQ(s.nodes[0].node_rank, -1);
  EXPECT_EQ(s.nodes[0].first_global_rank, -1);
  reg.close();
}

TEST(JobStatus, ARestartShowsInTheRoundAndTheCount) {
  JobRegistry reg(no_nccl);
  join_all(reg, {node("a", 1, 1)});
  JoinCall again = node("a", 1, 1);
  again.intent = JoinIntent{0, true};  // its workers failed in round 0
  join_all(reg, {again});
  const JobStatus s = reg.status("job");
  EXPECT_EQ(s.round, 1);
  EXPECT_EQ(s.restart_count, 1);
  EXPECT_EQ(s.reason, RoundReason::kWorkerFailure);
}

TEST(JobStatus, AnUnknownJobIsNotFound) {
  JobRegistry reg(no_nccl);
  EXPECT_THROW(reg.status("nope"), UnknownJob);
}

TEST(ProgressReports, TheNewestReportShowsWithItsAge) {
  JobRegistry reg(no_nccl);
  const std::string key = join_all(reg, {node("a", 1, 1)})[0];
  reg.report_progress("job", "a", key, step(7));
  ProgressInfo p = step(12);
  p.age = 3000ms;  // the worker made it three seconds before it was sent
  reg.report_progress("job", "a", key, p);
  const JobStatus s = reg.status("job");
  ASSERT_TRUE(s.progress.has_value());
  EXPECT_EQ(s.progress->step, 12);
  EXPECT_EQ(s.progress->saved_step, 10);
  EXPECT_EQ(s.progress->total_steps, 100);
  EXPECT_GE(s.progress->age, 3000ms);
  EXPECT_LT(s.progress->age, 60000ms);
}

TEST(ProgressReports, ANodeNotInTheJobCannotReport) {
  JobRegistry reg(no_nccl);
  const std::string key = join_all(reg, {node("a", 1, 1)})[0];
  EXPECT_THROW(reg.report_progress("job", "stranger", key, step(5)), RendezvousError);
  EXPECT_THROW(reg.report_progress("other-job", "a", key, step(5)), UnknownJob);
  // Nor can anyone report for a node of the job without its lease key.
  EXPECT_THROW(reg.report_progress("job", "a", "", step(5)), NotThisNode);
  EXPECT_THROW(reg.report_progress("job", "a", key + "0", step(5)), NotThisNode);
  EXPECT_FALSE(reg.status("job").progress.has_value());
}

// The service, over gRPC, with a token.
struct Service {
  Service() : server(ServerOptions{"127.0.0.1", 0, {kToken, {}}, {}}, no_nccl) {
    JoinArgs a;
    a.job_id = "job";
    a.node.node_id = "n0";
    a.node.host = "h0";
    a.node.local_world_size = 2;
    a.settings.max_restarts = 2;
    a.timeout = 5s;
    client.join(a);
  }
  static constexpr const char* kToken = "s3cret-token";
  RendezvousServer server;
  RendezvousClient client{server.address(), RendezvousAuth{kToken, {}}};
};

int call_code(const std::function<void()>& fn) {
  try {
    fn();
    return 0;
  } catch (const RendezvousCallError& e) {
    return e.code();
  }
}

TEST(StatusCall, AnswersWithTheJobAndItsProgress) {
  Service svc;
  svc.client.report_progress("job", "n0", step(42), 5s);
  const JobStatus s = svc.client.status("job", 5s);
  EXPECT_EQ(s.world_size, 2);
  EXPECT_EQ(s.settings.max_restarts, 2);
  ASSERT_EQ(s.nodes.size(), 1u);
  EXPECT_EQ(s.nodes[0].node_id, "n0");
  EXPECT_EQ(s.nodes[0].host, "h0");
  ASSERT_TRUE(s.progress.has_value());
  EXPECT_EQ(s.progress->step, 42);
  EXPECT_EQ(s.progress->saved_step, 40);
  EXPECT_EQ(s.progress->loss, 0.5);
  EXPECT_FALSE(s.progress->restored_step.has_value());
  EXPECT_FALSE(s.progress->epoch.has_value());
}

// A takeover end to end over gRPC: keep-alives carry "my workers heal in
// this round" up and the heal generation down, the spare's join returns
// its place, and the status counts it.
TEST(StatusCall, ASpareTakesOverALostNodeOverTheWire) {
  static constexpr const char* kToken = "s3cret-token";
  RendezvousServer server(ServerOptions{"127.0.0.1", 0, {kToken, {}}, {}}, no_nccl);
  RendezvousClient client{server.address(), RendezvousAuth{kToken, {}}};
  auto args = [](const std::string& id) {
    JoinArgs a;
    a.job_id = "job";
    a.node.node_id = id;
    a.node.host = id + "-host";
    a.node.local_world_size = 2;
    a.node.heals = true;
    a.settings = RoundSettings{2, 2, 0ms, 3};
    a.lease = id == "b" ? 3s : 60s;  // b is the one to be lost
    a.timeout = 20s;
    return a;
  };
  auto a = std::async(std::launch::async, [&] { return client.join(args("a")); });
  const JoinResult b = client.join(args("b"));
  const int64_t round = a.get().assignment.round;
  auto spare = std::async(std::launch::async, [&] { return client.join(args("c")); });
  // c waits; once a and b say their workers heal, c hears a takeover is possible.
  // c's own keep-alives only once the rendezvous has its join (the client
  // made c's lease key before sending it; a keep-alive sent before that
  // carries none, and on a loaded machine may arrive after the join: refused).
  NodeView view;
  do {
    for (const char* id : {"a", "b"}) view = client.keep_alive("job", id, 5s, round);
  } while (view.nodes_waiting == 0);
  NodeView cv;
  do {
    for (const char* id : {"a", "b"}) client.keep_alive("job", id, 5s, round);
    cv = client.keep_alive("job", "c", 5s);  // answers at once: c is known while it waits
  } while (cv.nodes_waiting == 0 || !cv.takeover_ready);
  // b's agent dies: its keep-alives stop, and its lease runs out.
  const JoinResult c = spare.get();
  EXPECT_EQ(c.assignment.round, round);
  EXPECT_EQ(c.assignment.node_rank, b.assignment.node_rank);
  EXPECT_EQ(c.assignment.first_global_rank, b.assignment.first_global_rank);
  EXPECT_EQ(c.assignment.heal_generation, 1u);
  const NodeView av = client.keep_alive("job", "a", 5s, round);
  EXPECT_EQ(av.round, round);
  EXPECT_EQ(av.heal_generation, 1u);
  EXPECT_EQ(client.status("job", 5s).heal_generation, 1u);
}

TEST(StatusCall, IsRefusedWithoutTheTokenAndForAnUnknownJob) {
  Service svc;
  RendezvousClient wrong(svc.server.address(), RendezvousAuth{"not-the-token", {}});
  RendezvousClient none(svc.server.address());
  EXPECT_EQ(call_code([&] { wrong.status("job", 5s); }), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(call_code([&] { none.status("job", 5s); }), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(call_code([&] { wrong.report_progress("job", "n0", step(1), 5s); }),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(call_code([&] { svc.client.status("nope", 5s); }), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(call_code([&] { svc.client.status("", 5s); }), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_FALSE(svc.client.status("job", 5s).progress.has_value());
}

// A job at its end: its rendezvous is shutting down. `ddprun status` says
// the job is ending, not that nothing answers.
TEST(StatusCall, AJobWhoseRendezvousShutsDownIsEndingNotUnreachable) {
  Service svc;
  svc.server.registry().close();
  try {
    svc.client.status("job", 5s);
    FAIL() << "a closed registry answered";
  } catch (const RendezvousCallError& e) {
    EXPECT_EQ(status_call_failure("job", "h:1", e), "job 'job' at h:1: the job is ending (its rendezvous is shutting down)");
  }
  const RendezvousCallError unreachable("failed to connect", grpc::StatusCode::UNAVAILABLE);
  EXPECT_NE(status_call_failure("job", "h:1", unreachable).find("does not answer"), std::string::npos);
}

TEST(StatusCall, BadProgressValuesAreRefusedAndNotStored) {
  Service svc;
  auto code_of = [&](ProgressInfo p) {
    return call_code([&] { svc.client.report_progress("job", "n0", p, 5s); });
  };
  EXPECT_EQ(code_of(step(-1)), grpc::StatusCode::INVALID_ARGUMENT);
  ProgressInfo p = step(3);
  p.saved_step = -5;
  EXPECT_EQ(code_of(p), grpc::StatusCode::INVALID_ARGUMENT);
  p = step(3);
  p.samples = -1;
  EXPECT_EQ(code_of(p), grpc::StatusCode::INVALID_ARGUMENT);
  p = step(3);
  p.samples_per_sec = std::numeric_limits<double>::infinity();
  EXPECT_EQ(code_of(p), grpc::StatusCode::INVALID_ARGUMENT);
  p = step(3);
  p.age = -1ms;
  EXPECT_EQ(code_of(p), grpc::StatusCode::INVALID_ARGUMENT);
  for (double score : {-0.1, 1.5, std::nan("")}) {
    p = step(3);
    p.slowest_rank = 1;
    p.slowest_score = score;
    EXPECT_EQ(code_of(p), grpc::StatusCode::INVALID_ARGUMENT) << score;
  }
  p = step(3);
  p.slowest_rank = -2;
  EXPECT_EQ(code_of(p), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_FALSE(svc.client.status("job", 5s).progress.has_value());
  // A stranger with the token is refused too.
  EXPECT_EQ(call_code([&] { svc.client.report_progress("job", "x", step(3), 5s); }),
            grpc::StatusCode::FAILED_PRECONDITION);
  // A NaN loss is news (training diverged), not an error.
  p = step(3);
  p.loss = std::nan("");
  EXPECT_EQ(code_of(p), 0);
  EXPECT_TRUE(std::isnan(*svc.client.status("job", 5s).progress->loss));
  // The reporting node's slowest rank goes through as given.
  p = step(4);
  p.slowest_rank = 2;
  p.slowest_score = 0.41;
  p.slowest_is_straggler = true;
  EXPECT_EQ(code_of(p), 0);
  const auto got = *svc.client.status("job", 5s).progress;
  EXPECT_EQ(got.slowest_rank, 2);
  EXPECT_DOUBLE_EQ(got.slowest_score, 0.41);
  EXPECT_TRUE(got.slowest_is_straggler);
  // What rank 0 found comparing the replicas goes through as given; a
  // verdict longer than a heartbeat slot holds, or a negative step, is refused.
  p = step(5);
  p.verify_every = 20;
  p.replicas_agreed_step = -1;
  EXPECT_EQ(code_of(p), grpc::StatusCode::INVALID_ARGUMENT);
  p.replicas_agreed_step = 0;
  p.replica_verdict = std::string(400, 'x');
  EXPECT_EQ(code_of(p), grpc::StatusCode::INVALID_ARGUMENT);
  p.replicas_agreed_step = 40;
  p.replica_verdicts = 1;
  p.replica_verdict = "rank 2's parameters differ from ranks 0, 1, 3 at step 40";
  EXPECT_EQ(code_of(p), 0);
  const auto replicas = *svc.client.status("job", 5s).progress;
  EXPECT_EQ(replicas.verify_every, 20);
  EXPECT_EQ(replicas.replicas_agreed_step, 40);
  EXPECT_EQ(replicas.replica_verdicts, 1u);
  EXPECT_EQ(replicas.replica_verdict, p.replica_verdict);
}

TEST(StatusText, TheReplicasShowWhereTheyAgreedAndTheNewestVerdict) {
  JobStatus s;
  s.round_closed = true;
  s.world_size = 4;
  ProgressInfo p;
  p.step = 60;
  p.verify_every = 20;
  p.replicas_agreed_step = 60;
  s.progress = p;
  std::string text = format_status("job", "h:1", s, 0);
  EXPECT_NE(text.find("  replicas    agree at step 60 (compared every 20 steps)\n"), std::string::npos) << text;
  s.progress->replica_verdicts = 2;
  s.progress->replica_verdict = "rank 2's parameters differ from ranks 0, 1, 3 at step 40";
  text = format_status("job", "h:1", s, 0);
  EXPECT_NE(text.find("agree at step 60 (compared every 20 steps); found apart 2 times, the last: rank 2's "
                      "parameters differ from ranks 0, 1, 3 at step 40"),
            std::string::npos)
      << text;
  auto j = nlohmann::json::parse(format_status_json("job", "h:1", s, 0));
  EXPECT_EQ(j["progress"]["verify_every"], 20);
  EXPECT_EQ(j["progress"]["replicas_agreed_step"], 60);
  EXPECT_EQ(j["progress"]["replica_verdicts"], 2);
  EXPECT_EQ(j["progress"]["replica_verdict"], s.progress->replica_verdict);
  s.progress->verify_every = 0;
  text = format_status("job", "h:1", s, 0);
  EXPECT_NE(text.find("  replicas    not compared"), std::string::npos) << text;
}


// A node's timings at collectives: its ranks spend wait_ms inside each one,
// one every period_ms, over `samples` of them.
NodeCollectives timings(double wait_ms, double period_ms = 10, int64_t samples = 60) {
  NodeCollectives c;
  c.wait_ms = wait_ms;
  c.period_ms = period_ms;
  c.samples = samples;
  return c;
}

TEST(NodeScores, TheNodeTheOthersWaitForScoresWhatTheyWaitAsAShareOfThePeriod) {
  // b computes 1.5x as long: a's ranks wait 5 ms of every 15 inside each
  // collective for it; b's wait only the transfer (0.5 ms).
  const NodeCollectives a = timings(5.5, 15), b = timings(0.5, 15), c = timings(5.4, 15);
  const auto s = node_scores({&a, &b, &c});
  ASSERT_TRUE(s[0] && s[1] && s[2]);
  EXPECT_NEAR(s[1]->score, 4.9 / 15, 1e-9);  // against the others' lower median, 5.4
  EXPECT_TRUE(s[1]->straggler);
  EXPECT_FALSE(s[0]->straggler);
  EXPECT_EQ(s[2]->score, 0);  // against b's and a's lower median, b's 0.5
  EXPECT_FALSE(s[2]->straggler);
}

TEST(NodeScores, EvenNodesTooFewSamplesOrAnOldGenerationAreNotFlagged) {
  const NodeCollectives a = timings(3.0), b = timings(2.6);
  for (const auto& s : node_scores({&a, &b})) {
    ASSERT_TRUE(s);
    EXPECT_FALSE(s->straggler) << s->score;
  }
  const NodeCollectives young = timings(0.5, 10, 10);  // 10 collectives: not yet
  auto s = node_scores({&a, &young});
  EXPECT_FALSE(s[0] || s[1]);  // one scored node has no one to be compared with
  // A heal started b's timings over: a's are of the old connections.
  NodeCollectives old = timings(6.0), healed = timings(0.5);
  healed.generation = 1;
  s = node_scores({&old, &healed, nullptr});
  EXPECT_FALSE(s[0] || s[1] || s[2]);
  // One node that reports waiting far too long (a bug, or a liar) does not
  // make two honest nodes stragglers.
  const NodeCollectives liar = timings(9.9), honest1 = timings(3.0), honest2 = timings(2.9);
  s = node_scores({&liar, &honest1, &honest2});
  for (const auto& sc : s) {
    ASSERT_TRUE(sc);
    EXPECT_FALSE(sc->straggler) << sc->score;
  }
  // Nonsense (a period of 0) scores nothing rather than dividing by it.
  const NodeCollectives zero = timings(0.5, 0);
  s = node_scores({&a, &zero});
  EXPECT_FALSE(s[1]);
}

TEST(NodeScores, AStragglerIsNamedOnlyOnceItStaysOneForSeveralScorings) {
  StragglerStreaks streaks;
  const std::vector<std::string> ids{"a", "b"};
  const std::vector<std::optional<NodeScore>> slow_b{NodeScore{0, false}, NodeScore{0.35, true}};
  for (int i = 1; i < StragglerStreaks::kPersist; ++i) {
    const auto s = streaks.pass(ids, slow_b);
    EXPECT_FALSE(s.at("b").straggler) << "scoring " << i;
    EXPECT_DOUBLE_EQ(s.at("b").score, 0.35);  // the score shows at once
  }
  EXPECT_TRUE(streaks.pass(ids, slow_b).at("b").straggler);
  EXPECT_TRUE(streaks.pass(ids, slow_b).at("b").straggler);
  // A scoring that does not flag it (or does not score it) starts over.
  streaks.pass(ids, {NodeScore{0, false}, std::nullopt});
  EXPECT_FALSE(streaks.pass(ids, slow_b).at("b").straggler);
  EXPECT_FALSE(streaks.pass(ids, slow_b).at("a").straggler);
}

TEST(NodeScores, TheRegistryScoresTheMembersAndShowsTheirScores) {
  JobRegistry reg(no_nccl);
  const auto keys = join_all(reg, {node("a", 2), node("b", 2)});
  NodeCollectives a = timings(4.0), b = timings(0.5);  // a waits 3.5 ms of every 10 for b
  a.ranks.push_back(RankCollective{0, 1, 7, 0, 0, 1024, true, 1500ms});  // rank 0 inside all_reduce #7
  reg.report_progress("job", "a", keys[0], std::nullopt, a);
  reg.report_progress("job", "b", keys[1], std::nullopt, b);
  const JobStatus s = reg.status("job");
  EXPECT_FALSE(s.progress.has_value());  // neither reported progress
  ASSERT_EQ(s.nodes.size(), 2u);
  const NodeStatus& na = s.nodes[0].node_id == "a" ? s.nodes[0] : s.nodes[1];
  const NodeStatus& nb = s.nodes[0].node_id == "a" ? s.nodes[1] : s.nodes[0];
  ASSERT_TRUE(na.score && nb.score);
  EXPECT_NEAR(nb.score->score, 0.35, 1e-9);
  EXPECT_FALSE(nb.score->straggler);  // not yet: it must stay slow for seconds (StragglerStreaks)
  EXPECT_FALSE(na.score->straggler);
  ASSERT_TRUE(na.collectives);
  ASSERT_EQ(na.collectives->ranks.size(), 1u);
  EXPECT_EQ(na.collectives->ranks[0].seq, 7u);
  EXPECT_GE(na.collectives->ranks[0].age, 1500ms);  // its age then, and since
  // Nobody is told yet (the keep-alives of a straggler named by then carry
  // its score: NetNodes.ASlowNodeIsHandedToASpare... runs that end to end).
  EXPECT_EQ(reg.keep_alive("job", "b", keys[1], -1, {}).straggler_score, 0);
  EXPECT_EQ(reg.keep_alive("job", "a", keys[0], -1, {}).straggler_score, 0);
  // Only a member speaks for itself.
  EXPECT_THROW(reg.report_progress("job", "a", keys[1], std::nullopt, a), NotThisNode);
}

TEST(StatusCall, BadCollectivesAreRefusedAndGoodOnesShowPerNode) {
  Service svc;
  auto code_of = [&](NodeCollectives c) {
    return call_code([&] { svc.client.report_progress("job", "n0", std::nullopt, 5s, c); });
  };
  for (double bad : {-1.0, std::nan(""), std::numeric_limits<double>::infinity()}) {
    NodeCollectives c = timings(1);
    c.wait_ms = bad;
    EXPECT_EQ(code_of(c), grpc::StatusCode::INVALID_ARGUMENT) << bad;
    c = timings(1);
    c.period_ms = bad;
    EXPECT_EQ(code_of(c), grpc::StatusCode::INVALID_ARGUMENT) << bad;
  }
  NodeCollectives c = timings(1);
  c.samples = -3;
  EXPECT_EQ(code_of(c), grpc::StatusCode::INVALID_ARGUMENT);
  c = timings(1);
  c.slowest_rank = 1;
  c.slowest_score = 2;
  EXPECT_EQ(code_of(c), grpc::StatusCode::INVALID_ARGUMENT);
  c = timings(1);
  c.ranks.push_back(RankCollective{-1, 1, 1, 0, 0, 8, false, 0ms});
  EXPECT_EQ(code_of(c), grpc::StatusCode::INVALID_ARGUMENT);
  c = timings(1);
  c.ranks.push_back(RankCollective{0, 1, 1, 0, 0, 8, false, -5ms});
  EXPECT_EQ(code_of(c), grpc::StatusCode::INVALID_ARGUMENT);
  c = timings(1);
  c.ranks.assign(5000, RankCollective{});
  EXPECT_EQ(code_of(c), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_FALSE(svc.client.status("job", 5s).nodes.at(0).collectives.has_value());
  c = timings(1);
  c.slowest_rank = 1;
  c.slowest_score = 0.41;
  c.ranks.push_back(RankCollective{1, 1, 9, 0, 0, 8, false, 20ms});
  EXPECT_EQ(code_of(c), 0);
  const JobStatus s = svc.client.status("job", 5s);
  ASSERT_TRUE(s.nodes.at(0).collectives.has_value());
  EXPECT_EQ(s.nodes[0].collectives->slowest_rank, 1);
  EXPECT_EQ(s.nodes[0].collectives->ranks.at(0).seq, 9u);
  EXPECT_FALSE(s.nodes[0].score.has_value());  // one node: nobody to compare it with
  EXPECT_FALSE(s.progress.has_value());         // a report of collectives only
}

TEST(StatusText, ScoresShowPerNodeOnceAnyNodeIsScored) {
  JobStatus s;
  s.round_closed = true;
  s.world_size = 4;
  for (int i = 0; i < 2; ++i) {
    NodeStatus n;
    n.node_id = "n" + std::to_string(i);
    n.host = "h" + std::to_string(i);
    n.node_rank = i;
    n.local_world_size = 2;
    n.first_global_rank = 2 * i;
    s.nodes.push_back(n);
  }
  const std::string plain = format_status("job", "h:1", s, 0);
  EXPECT_EQ(plain.find("SCORE"), std::string::npos) << plain;  // nothing scored: no columns for it
  s.nodes[0].score = NodeScore{0.0, false};
  s.nodes[1].score = NodeScore{0.35, true};
  s.nodes[1].collectives = timings(0.5);
  s.nodes[1].collectives->slowest_rank = 3;
  s.nodes[1].collectives->slowest_score = 0.12;
  const std::string text = format_status("job", "h:1", s, 0);
  EXPECT_NE(text.find("SCORE            SLOWEST RANK"), std::string::npos) << text;
  EXPECT_NE(text.find("0.35 straggler   3 (0.12)"), std::string::npos) << text;
  EXPECT_NE(text.find("0.00             -"), std::string::npos) << text;
  const auto j = nlohmann::json::parse(format_status_json("job", "h:1", s, 0));
  EXPECT_DOUBLE_EQ(j["nodes"][1]["score"].get<double>(), 0.35);
  EXPECT_TRUE(j["nodes"][1]["straggler"].get<bool>());
  EXPECT_EQ(j["nodes"][1]["slowest_rank"], 3);
  EXPECT_FALSE(j["nodes"][0]["straggler"].get<bool>());
  EXPECT_TRUE(j["nodes"][0]["slowest_rank"].is_null());
}

}  // namespace
}  // namespace ddprun
