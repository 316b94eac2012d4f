// A job's rendezvous state saved by one leader and restored by its
// successor (rendezvous/server/job_state.h): the restored rounds behave as the
// original would from there on - same ranks, lease keys, heal generations,
// restarts, store and NCCL id - and only the leases start afresh.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <future>
#include <mutex>

#include "rendezvous/server/control_plane_host.h"
#include "rendezvous/server/job_state.h"
#include "rendezvous/server/liveness_probe.h"
#include "rendezvous/server/registry.h"
#include "rendezvous/server/state_saver.h"
#include "support/job_helpers.h"
#include "unit/registry_calls.h"

namespace ddprun {
namespace {

using namespace std::chrono_literals;
using namespace registry_calls;
using TP = RoundState::TimePoint;

const TP t0{};
const JoinIntent kFirst{-1, false};


const std::string kJob = "job";

std::string encode(const RoundState& r, TP at) {
  JobStateParts parts;
  parts.job_id = &kJob;
  parts.rounds = &r;
  return encode_job_state(parts, at);
}

RoundState restored(const RoundState& r, TP saved_at, TP restored_at) {
  std::string bytes = encode(r, saved_at);
  RestoredJob j = decode_job_state(bytes, restored_at);
  EXPECT_EQ(j.job_id, "job");
  EXPECT_TRUE(j.rounds.has_value());
  return std::move(*j.rounds);
}

// Everything a node or `ddprun status` can see of the rounds, in words.
std::string seen(RoundState& r) {
  std::string out = "round " + std::to_string(r.current_round()) + (r.closed() ? " closed" : " open") +
                    " restarts " + std::to_string(r.restart_count()) + " heal " +
                    std::to_string(r.heal_generation()) + " waiting " + std::to_string(r.num_waiting()) +
                    " phase " + std::to_string(static_cast<int>(r.phase())) + "\n";
  for (const char* id : {"a", "b", "c", "d"}) {
    out += std::string(id) + ": key '" + r.lease_key(id) + "'";
    if (auto a = r.assignment(id)) {
      out += " rank " + std::to_string(a->node_rank) + "/" + std::to_string(a->num_nodes) + " world " +
             std::to_string(a->world_size) + " first " + std::to_string(a->first_global_rank) +
             " master " + a->master_addr + ":" + std::to_string(a->master_port) + " gen " +
             std::to_string(a->heal_generation) + " lost [";
      for (const auto& l : a->lost_since_last_round) out += l + ";";
      out += "]";
    }
    if (r.knows(id)) {
      const NodeView v = r.view(id);
      out += " view round " + std::to_string(v.round) + " gen " + std::to_string(v.heal_generation) +
             " placement " + std::to_string(v.placement.node_rank) + "/" + std::to_string(v.placement.world_size) +
             " takeover_ready " + std::to_string(v.takeover_ready) + " heal_request " +
             std::to_string(v.heal_request_id) + "->" + std::to_string(v.heal_request_generation) + " detail '" +
             v.detail + "'";
    }
    out += "\n";
  }
  return out;
}

// a, b, c heal and run round 0; a's worker was healed (generation 1); d waits.
RoundState busy_job() {
  const RoundSettings s{3, 3, 0ms, 5};
  RoundState r(s);
  for (const char* id : {"a", "b", "c"}) r.join(healing(id), s, kFirst, 3s, t0);
  r.advance(t0);
  for (const char* id : {"a", "b", "c"}) r.keep_alive(id, t0, 0);
  r.keep_alive("a", t0 + 100ms, 0, HealRequest{1, "rank 1 was killed"});
  r.join(healing("d"), s, kFirst, 3s, t0 + 200ms);
  r.keep_alive("d", t0 + 200ms);
  EXPECT_EQ(r.heal_generation(), 1u);
  EXPECT_EQ(r.num_waiting(), 1u);
  return r;
}

TEST(JobState, RestoredRoundsBehaveAsTheOriginalFromThenOn) {
  RoundState original = busy_job();
  // Saved at 0.5 s on the old leader's clock, restored at 100 s on another.
  const TP at = t0 + 500ms, there = t0 + 100s;
  RoundState copy = restored(original, at, there);
  EXPECT_EQ(seen(copy), seen(original));
  // The same events from then on: b is lost, d takes its ranks, a's
  // repeated heal request gets the same answer, then c leaves.
  for (RoundState* r : {&original, &copy}) {
    const TP now = r == &original ? at : there;
    r->keep_alive("a", now + 10ms, 0, HealRequest{1, "rank 1 was killed"});
    r->lose("b", "its agent's connection closed", now + 20ms);
    r->keep_alive("d", now + 30ms, 0);
    r->leave("c", LeaveKind::kStopped, "SIGTERM", now + 40ms);
  }
  EXPECT_EQ(seen(copy), seen(original));
  EXPECT_EQ(copy.current_round(), 1);  // c's leave ended round 0 on both
  EXPECT_EQ(copy.restart_count(), original.restart_count());
  ASSERT_EQ(copy.lost().size(), 1u);
  EXPECT_EQ(copy.lost()[0].node_id, "b");
}

// A job whose first node finished: its workers succeeded and it left, but
// stays a member of the round that ran (what a successor restores when the
// leader resigns at the end of the job).
TEST(JobState, AFinishedJobWhoseMembersLeftIsRestoredAsFinished) {
  RoundState original = busy_job();
  original.leave("a", LeaveKind::kSucceeded, "", t0 + 300ms, 0);
  ASSERT_EQ(original.phase(), JobPhase::kSucceeded);
  RoundState copy = restored(original, t0 + 400ms, t0 + 10s);
  EXPECT_EQ(seen(copy), seen(original));
  EXPECT_EQ(copy.phase(), JobPhase::kSucceeded);
}

TEST(JobState, RestoredRoundsKeepTheTakeoverAndTheLeaseKeys) {
  RoundState original = busy_job();
  RoundState copy = restored(original, t0 + 1s, t0 + 1s);
  copy.lose("b", "its agent's connection closed", t0 + 2s);
  auto d = copy.assignment("d");
  ASSERT_TRUE(d);
  EXPECT_EQ(d->first_global_rank, original.assignment("b")->first_global_rank);
  EXPECT_EQ(d->heal_generation, 2u);
  // Only the key each node brought speaks for it on the new leader.
  EXPECT_NO_THROW(copy.check_lease("a", original.lease_key("a")));
  EXPECT_THROW(copy.check_lease("a", original.lease_key("c")), NotThisNode);
}

// The spare's join was parked on the old leader and is sent again to the
// successor, which has meanwhile put the spare in the lost node's place:
// the repeat hears that place, it does not start a new round.
TEST(JobState, ASparesJoinSentAgainAfterItTookOverHearsItsPlace) {
  RoundState copy = restored(busy_job(), t0 + 1s, t0 + 1s);
  copy.lose("b", "its agent led the control plane", t0 + 2s);
  const auto placed = copy.assignment("d");
  ASSERT_TRUE(placed);
  const uint64_t before = copy.generation();
  copy.join(healing("d"), RoundSettings{3, 3, 0ms, 5}, kFirst, 3s, t0 + 3s);
  EXPECT_GT(copy.generation(), before);  // so that the registry answers its parked join now
  EXPECT_EQ(copy.current_round(), 0);
  EXPECT_EQ(copy.restart_count(), 0);
  ASSERT_TRUE(copy.assignment("d"));
  EXPECT_EQ(copy.assignment("d")->first_global_rank, placed->first_global_rank);
  // A member that ran in the round and joins again still starts a new one.
  copy.join(healing("a"), RoundSettings{3, 3, 0ms, 5}, JoinIntent{0, true}, 3s, t0 + 4s);
  EXPECT_EQ(copy.current_round(), 1);
}

TEST(JobState, EveryLeaseStartsAfreshOnTheSuccessor) {
  RoundState original = busy_job();
  // c was last heard at 0 s; its 3 s lease had 0.1 s left when saved.
  const TP at = t0 + 2900ms;
  for (const char* id : {"a", "b", "d"}) original.keep_alive(id, at, 0);
  RoundState copy = restored(original, at, t0 + 50s);
  copy.advance(t0 + 50s + 2900ms);
  EXPECT_TRUE(copy.knows("c"));  // a fresh lease from the takeover on
  copy.advance(t0 + 50s + 3001ms);
  EXPECT_FALSE(copy.knows("c"));
  EXPECT_FALSE(copy.knows("a"));  // nobody renewed on the successor
}

TEST(JobState, BadBytesAreRefusedWithWhatIsWrong) {
  EXPECT_THROW(decode_job_state("\xff\xff\xff", t0), JobStateError);
  RoundState r = busy_job();
  std::string good = encode(r, t0);
  EXPECT_NO_THROW(decode_job_state(good, t0));
  // Format 2 (a newer ddprun): field 1 is the format, a varint.
  std::string newer = good;
  ASSERT_EQ(newer[0], '\x08');
  newer[1] = 2;
  try {
    decode_job_state(newer, t0);
    ADD_FAILURE() << "format 2 was read";
  } catch (const JobStateError& e) {
    EXPECT_NE(std::string(e.what()).find("format 2"), std::string::npos) << e.what();
  }
  EXPECT_THROW(decode_job_state(encode_job_state(JobStateParts{}, t0), t0), JobStateError);  // no job id
}



// A closed Hold is no proof of death (a link blip, a reconnect, a new
// leader): the node stays in the job until its lease runs out.
TEST(Registry, ANodeWhoseHoldEndsWithoutALeaveStaysUntilItsLeaseRunsOut) {
  JobRegistry registry([] { return std::string(); });
  std::promise<JoinOutcome> b_done;
  JoinCall a = join_call("a"), b = join_call("b");
  a.lease = b.lease = 60s;
  registry.join_async(b, [&b_done](JoinOutcome o) { b_done.set_value(std::move(o)); });
  const JoinOutcome oa = join_now(registry, a), ob = b_done.get_future().get();
  ASSERT_TRUE(oa.result && ob.result);
  const JoinResult& ja = *oa.result;
  const JoinResult& jb = *ob.result;
  ASSERT_TRUE(registry.holds("job", "b", jb.lease_key));
  registry.connection_lost("job", "b", registry.hold_opened("job", "b"));
  const NodeView va = registry.keep_alive("job", "a", ja.lease_key);
  EXPECT_EQ(va.round, 0);
  EXPECT_TRUE(va.closed);
  EXPECT_TRUE(registry.keep_alive("job", "b", jb.lease_key).known) << "b was dropped for a closed connection";
  EXPECT_EQ(registry.status("job").nodes.size(), 2u);
}

// The host's word: a node whose connection closed is gone at once if its
// host refuses a connect where its agent listened; while something listens
// there (the agent lives), only its lease decides.
TEST(Registry, ANodeWhoseHostRefusesItsProbeIsLostAtOnceOneThatListensStays) {
  ddptest::LoopbackListener agent;
  const std::string listening = agent.address();
  ASSERT_FALSE(listening.empty());
  EXPECT_EQ(probe_address(listening, 1s), Liveness::kAccepted);

  JobRegistry registry([] { return std::string(); });
  std::promise<JoinOutcome> b_done;
  JoinCall ja = join_call("a"), jb = join_call("b");
  ja.lease = jb.lease = 60s;
  ja.node.local_addr = jb.node.local_addr = "127.0.0.1";
  jb.node.probe_address = listening;
  registry.join_async(jb, [&b_done](JoinOutcome o) { b_done.set_value(std::move(o)); });
  ASSERT_TRUE(join_now(registry, ja).result);
  ASSERT_TRUE(b_done.get_future().get().result);
  // b's agent lives (its socket listens): its closed connection changes nothing.
  registry.connection_lost("job", "b", registry.hold_opened("job", "b"));
  registry.probe_node("job", "b");  // asks again: the answer is in once this one is
  EXPECT_TRUE(registry.keep_alive("job", "b", "key-b").known);
  // Its agent dies: the port is refused now, and b is lost well before its 60 s lease.
  agent.close();
  EXPECT_EQ(probe_address(listening, 1s), Liveness::kRefused);
  auto news = std::make_shared<std::promise<void>>();
  auto told = std::make_shared<std::atomic<bool>>(false);
  const uint64_t ticket = registry.watch_news("job", [news, told] {
    if (!told->exchange(true)) news->set_value();
  });
  registry.connection_lost("job", "b", registry.hold_opened("job", "b"));
  ASSERT_EQ(news->get_future().wait_for(30s), std::future_status::ready) << "b's loss made no news";
  registry.unwatch_news(ticket);
  EXPECT_FALSE(registry.keep_alive("job", "b", "key-b").known);
  const NodeView v = registry.keep_alive("job", "a", "key-a");
  EXPECT_NE(v.detail.find("its host refused connections at " + listening), std::string::npos) << v.detail;
}

// A dying agent closes its connection and its listening socket in no fixed
// order: a probe that still finds the socket asks again while the node
// stays silent, and finds it refused once the socket is gone.
TEST(LivenessProbe, AnAcceptedProbeIsAskedAgainWhileTheNodeStaysSilent) {
  ddptest::LoopbackListener agent;
  const std::string address = agent.address();
  ASSERT_FALSE(address.empty());
  std::promise<std::string> refused;
  std::atomic<int> asked_again{0};
  LivenessProbe probe([&](const std::string&, const std::string& node, const std::string&) { refused.set_value(node); },
                      [&](const std::string&, const std::string&) {
                        // Asked after the first, accepted probe: the agent finishes dying now.
                        if (asked_again++ == 0) agent.close();
                        return true;
                      });
  probe.ask("job", "b", address);
  auto got = refused.get_future();
  ASSERT_EQ(got.wait_for(30s), std::future_status::ready) << "never asked again";
  EXPECT_EQ(got.get(), "b");
  EXPECT_EQ(asked_again.load(), 1);
}

// On a loaded machine a dying agent may hold its socket for seconds: the
// probe goes on asking (every second) while the node stays silent, past
// its first quick retries.
TEST(LivenessProbe, ASocketThatLingersPastTheQuickRetriesIsStillFoundRefused) {
  ddptest::LoopbackListener agent;
  const std::string address = agent.address();
  ASSERT_FALSE(address.empty());
  constexpr int kLingers = static_cast<int>(std::size(LivenessProbe::kRetries)) + 1;
  std::promise<std::string> refused;
  std::atomic<int> asked_again{0};
  LivenessProbe probe([&](const std::string&, const std::string& node, const std::string&) { refused.set_value(node); },
                      [&](const std::string&, const std::string&) {
                        if (++asked_again == kLingers) agent.close();
                        return true;
                      });
  probe.ask("job", "b", address);
  auto got = refused.get_future();
  ASSERT_EQ(got.wait_for(30s), std::future_status::ready) << "gave up after " << asked_again.load() << " asks";
  EXPECT_EQ(got.get(), "b");
  EXPECT_EQ(asked_again.load(), kLingers);
}

TEST(JobState, ASuccessorRegistryServesTheJobsStoreNcclIdAndTakeover) {
  int ids = 0;
  JobRegistry old_leader([&ids] { return "nccl-id-" + std::to_string(++ids); });
  std::promise<JoinOutcome> a_done;
  old_leader.join_async(join_call("a"), [&a_done](JoinOutcome o) { a_done.set_value(std::move(o)); });
  JoinOutcome b = join_now(old_leader, join_call("b"));
  JoinOutcome a = a_done.get_future().get();
  ASSERT_TRUE(a.result && b.result);
  EXPECT_EQ(a.result->nccl_id, "nccl-id-1");
  old_leader.store("job")->set("round/0/gloo/rank0", "10.0.0.1:4000");
  for (const char* id : {"a", "b"}) old_leader.keep_alive("job", id, "key-" + std::string(id), 0);
  const std::optional<std::string> saved = old_leader.save_job("job");
  ASSERT_TRUE(saved);
  EXPECT_FALSE(old_leader.save_job("no-such-job"));

  JobRegistry successor([] { return std::string("a different id"); });
  EXPECT_EQ(successor.restore_job(*saved), "job");
  EXPECT_THROW(successor.restore_job(*saved), JobStateError);  // served already
  EXPECT_EQ(successor.store("job")->get("round/0/gloo/rank0", 1s), "10.0.0.1:4000");
  const JobStatus s = successor.status("job");
  EXPECT_TRUE(s.round_closed);
  EXPECT_EQ(s.world_size, 4);
  EXPECT_THROW(successor.keep_alive("job", "a", "key-b", 0), NotThisNode);
  // b is lost on the successor; spare c takes its place with the round's NCCL id.
  NodeView va = successor.keep_alive("job", "a", "key-a", 0);
  EXPECT_EQ(va.round, 0);
  EXPECT_TRUE(va.closed);
  std::promise<JoinOutcome> c_done;
  successor.join_async(join_call("c"), [&c_done](JoinOutcome o) { c_done.set_value(std::move(o)); });
  successor.keep_alive("job", "c", "key-c", 0);
  ASSERT_TRUE(successor.drop_node("job", "b", "its host is gone"));
  JoinOutcome c = c_done.get_future().get();
  ASSERT_TRUE(c.result) << "the spare did not take over";
  EXPECT_EQ(c.result->assignment.round, 0);
  EXPECT_EQ(c.result->assignment.first_global_rank, b.result->assignment.first_global_rank);
  EXPECT_EQ(c.result->assignment.heal_generation, 1u);
  EXPECT_EQ(c.result->nccl_id, "nccl-id-1");
}

}  // namespace
}  // namespace ddprun
