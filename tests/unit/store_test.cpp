// The Store contract, checked against every implementation: in memory, and
// over gRPC against a real rendezvous server.
#include <gtest/gtest.h>

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <functional>
#include <future>
#include <thread>

#include "ddprun/v1/rendezvous.grpc.pb.h"
#include "rendezvous/client/client.h"
#include "rendezvous/store/memory_store.h"
#include "rendezvous/server/registry.h"
#include "rendezvous/server/server.h"
#include "support/no_nccl.h"

namespace ddprun {
namespace {

using namespace std::chrono_literals;

using ddptest::no_nccl;

JoinCall call(const std::string& job, const NodeSpec& n, RoundSettings s,
              std::chrono::milliseconds timeout, JoinIntent intent = {-1, false},
              std::chrono::milliseconds lease = 0ms) {
  JoinCall c;
  c.lease_key = "key-" + n.node_id;  // the same node brings the same key each time
  c.job_id = job;
  c.node = n;
  c.settings = s;
  c.intent = intent;
  c.lease = lease;
  c.timeout = timeout;
  return c;
}

NodeSpec named(const std::string& id, int nproc = 1) {
  NodeSpec n;
  n.node_id = id;
  n.host = id;
  n.local_world_size = nproc;
  return n;
}

TEST(Registry, NodesJoiningFromThreadsGetOneConsistentRound) {
  int ids_made = 0;
  JobRegistry reg([&] { return "id-" + std::to_string(++ids_made); });
  RoundSettings s{3, 3, 0ms};
  std::vector<JoinResult> results(3);
  std::vector<std::thread> nodes;
  for (int i = 0; i < 3; ++i) {
    nodes.emplace_back([&, i] {
      NodeSpec n = named("n" + std::to_string(i), i + 1);
      n.wants_nccl_id = i == 2;
      results[i] = reg.join(call("job", n, s, 10s));
    });
  }
  for (auto& t : nodes) t.join();
  std::vector<bool> seen(3, false);
  for (const auto& r : results) {
    EXPECT_EQ(r.assignment.world_size, 6);
    EXPECT_EQ(r.assignment.num_nodes, 3);
    EXPECT_EQ(r.nccl_id, "id-1");  // made once for the round, shared by all
    seen[r.assignment.node_rank] = true;
  }
  EXPECT_EQ(seen, std::vector<bool>(3, true));
  EXPECT_EQ(ids_made, 1);
}

TEST(Registry, NoNcclIdIsMadeWhenNobodyAsks) {
  int ids_made = 0;
  JobRegistry reg([&] { return "id-" + std::to_string(++ids_made); });
  JoinResult r = reg.join(call("job", named("a"), RoundSettings{1, 1, 0ms}, 1s));
  EXPECT_TRUE(r.nccl_id.empty());
  EXPECT_TRUE(r.nccl_id_error.empty());
  EXPECT_EQ(ids_made, 0);
}

TEST(Registry, NcclIdIsMadeOutsideTheRegistryLock) {
  // The id source blocks until the test lets it go; meanwhile the registry
  // must answer other calls (ncclGetUniqueId opens sockets and a thread).
  std::promise<void> entered, release;
  std::shared_future<void> released = release.get_future().share();
  JobRegistry reg([&] {
    entered.set_value();
    released.wait();
    return std::string("id");
  });
  NodeSpec n = named("a");
  n.wants_nccl_id = true;
  auto joined = std::async(std::launch::async,
                           [&] { return reg.join(call("job", n, RoundSettings{1, 1, 0ms}, 10s)); });
  entered.get_future().wait();
  auto other = std::async(std::launch::async, [&] {
    reg.join(call("other-job", named("b"), RoundSettings{1, 1, 0ms}, 10s));
    return reg.num_jobs();
  });
  const bool answered = other.wait_for(10s) == std::future_status::ready;
  release.set_value();
  EXPECT_TRUE(answered) << "the registry was locked while an NCCL id was made";
  EXPECT_EQ(joined.get().nccl_id, "id");
  other.get();
}

TEST(Registry, JoinTimesOutSayingHowFarTheRoundGotAndWhichFlagToRaise) {
  JobRegistry reg(no_nccl);
  try {
    reg.join(call("job", named("lonely"), RoundSettings{2, 2, 0ms}, 100ms));
    FAIL();
  } catch (const JoinTimeout& e) {
    EXPECT_NE(std::string(e.what()).find("1 of the 2 node(s) needed joined"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("--rdzv-conf join_timeout="), std::string::npos);
  }
}

TEST(Registry, ATimeoutNamesTheLostNodesAndWhenTheyWereLastSeen) {
  JobRegistry reg(no_nccl);
  RoundSettings s{2, 2, 0ms, 3};
  std::thread b([&] { reg.join(call("job", named("b"), s, 10s, {-1, false}, 200ms)); });
  reg.join(call("job", named("a"), s, 10s, {-1, false}, 60s));
  b.join();
  // b never keeps its lease; a rejoins after its workers failed, alone.
  try {
    reg.join(call("job", named("a"), s, 1s, {0, true}, 60s));
    FAIL();
  } catch (const JoinTimeout& e) {
    EXPECT_NE(std::string(e.what()).find("lost: 'b' (b, last seen "), std::string::npos)
        << e.what();
  }
}

TEST(Registry, NcclIdErrorsAreReportedNotThrown) {
  JobRegistry reg(no_nccl);
  NodeSpec n = named("gpu-node");
  n.wants_nccl_id = true;
  JoinResult r = reg.join(call("job", n, RoundSettings{}, 1s));
  EXPECT_TRUE(r.nccl_id.empty());
  EXPECT_EQ(r.nccl_id_error, "no NCCL in this test");
}

TEST(Registry, RestartGetsTheNextRoundAndAFreshNcclId) {
  int ids_made = 0;
  JobRegistry reg([&] { return "id-" + std::to_string(++ids_made); });
  NodeSpec n = named("a");
  n.wants_nccl_id = true;
  RoundSettings s{1, 1, 0ms, 2};
  JoinResult r0 = reg.join(call("job", n, s, 1s));
  JoinResult r1 = reg.join(call("job", n, s, 1s, {0, true}));
  EXPECT_EQ(r0.assignment.round, 0);
  EXPECT_EQ(r1.assignment.round, 1);
  EXPECT_EQ(r1.assignment.restart_count, 1);
  EXPECT_NE(r0.nccl_id, r1.nccl_id);
  EXPECT_EQ(reg.join(call("other-job", n, s, 1s)).assignment.round, 0);
}

TEST(Registry, EachRoundHasItsOwnKeysAndOldRoundsAreRefused) {
  JobRegistry reg(no_nccl);
  RoundSettings s{1, 1, 0ms, 2};
  reg.join(call("job", named("a"), s, 1s));
  reg.store("job", 0)->set(round_key_prefix(0) + "/gloo/addr", "old");
  reg.join(call("job", named("a"), s, 1s, {0, true}));
  try {
    reg.store("job", 0);
    FAIL();
  } catch (const RendezvousError& e) {
    EXPECT_NE(std::string(e.what()).find("the job is in round 1"), std::string::npos) << e.what();
  }
  // Round 0's keys are gone; round 1 starts clean.
  Store& now = *reg.store("job", 1);
  EXPECT_THROW(now.get(round_key_prefix(0) + "/gloo/addr", 10ms), StoreTimeout);
}

// A long round's heals leave no keys behind but the newest four
// generations' (each generation's vote and Gloo addresses): the serving
// node's memory stays flat over heals.
TEST(Registry, KeysOfHealGenerationsLongPastAreFreed) {
  JobRegistry reg(no_nccl);
  RoundSettings s{2, 2, 0ms};
  std::thread b([&] { reg.join(call("job", named("b"), s, 5s)); });
  reg.join(call("job", named("a"), s, 5s));
  b.join();
  Store& store = *reg.store("job", 0);
  auto key = [](int g) { return round_key_prefix(0) + "/heal" + std::to_string(g) + "/0"; };
  store.set(round_key_prefix(0) + "/heal10/0", "kept");  // "heal1/" is no prefix of it
  reg.keep_alive("job", "a", "key-a", 0);
  for (uint64_t heal = 1; heal <= 6; ++heal) {
    // From either node in turn (each node's heals are rate-bounded).
    const std::string node = heal % 2 ? "b" : "a", other = heal % 2 ? "a" : "b";
    reg.keep_alive("job", node, "key-" + node, 0, HealRequest{heal, "a rank failed"});
    ASSERT_EQ(reg.keep_alive("job", other, "key-" + other, 0).heal_generation, heal);
    store.set(key(static_cast<int>(heal)), "an address");
  }
  reg.keep_alive("job", "a", "key-a", 0);
  for (int g = 1; g <= 2; ++g) EXPECT_THROW(store.get(key(g), 10ms), StoreTimeout) << "generation " << g;
  for (int g = 3; g <= 6; ++g) EXPECT_EQ(store.get(key(g), 10ms), "an address") << "generation " << g;
  EXPECT_EQ(store.get(round_key_prefix(0) + "/heal10/0", 10ms), "kept");
}

TEST(Registry, AJobThatFinishedTurnsLateJoinersAway) {
  JobRegistry reg(no_nccl);
  RoundSettings s{1, 2, 0ms};
  const JoinResult a = reg.join(call("job", named("a"), s, 1s));
  reg.leave("job", "a", a.lease_key, LeaveKind::kSucceeded, "");
  EXPECT_EQ(reg.nodes_in_all_jobs(), 0u);
  EXPECT_THROW(reg.join(call("job", named("late"), s, 1s)), JobEnded);
}

TEST(Registry, ACancelledJoinIsForgotten) {
  JobRegistry reg(no_nccl);
  bool called = false;
  uint64_t ticket = reg.join_async(call("job", named("a"), RoundSettings{2, 2, 0ms}, 10s),
                                   [&](JoinOutcome) { called = true; });
  EXPECT_TRUE(reg.cancel(ticket));
  EXPECT_FALSE(reg.cancel(ticket));
  reg.close();
  EXPECT_FALSE(called);
}

TEST(Registry, ThousandsOfParkedJoinsHoldNoThreadEach) {
  JobRegistry reg(no_nccl);
  const int n = 2000;
  RoundSettings s{n, n, 0ms};
  std::atomic<int> done{0};
  for (int i = 0; i < n; ++i) {
    reg.join_async(call("job", named("n" + std::to_string(i)), s, 60s), [&](JoinOutcome o) {
      EXPECT_TRUE(o.result);
      ++done;
    });
  }
  // The last join closed the round and completed every parked one.
  EXPECT_EQ(done.load(), n);
}


class StoreContract : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "memory") {
      store_ = std::make_shared<MemoryStore>();
    } else {
      server_ = std::make_unique<RendezvousServer>("127.0.0.1", 0, no_nccl);
      // Jobs begin with an agent's join; stores of unknown jobs are refused.
      server_->registry().join(call("job", named("a"), RoundSettings{1, 1, 0ms}, 5s));
      store_ = std::make_shared<GrpcStore>(server_->address(), "job");
    }
  }
  std::unique_ptr<RendezvousServer> server_;
  std::shared_ptr<Store> store_;
};

TEST_P(StoreContract, SetThenGet) {
  store_->set("k", std::string("v\0w", 3));
  EXPECT_EQ(store_->get("k", 1s), std::string("v\0w", 3));
  store_->set("k", "new");
  EXPECT_EQ(store_->get("k", 1s), "new");
}

TEST_P(StoreContract, GetWaitsForASetFromAnotherThread) {
  std::thread writer([&] {
    // The reader is already blocked or about to be; either way it must see it.
    store_->set("late", "here");
  });
  EXPECT_EQ(store_->get("late", 10s), "here");
  writer.join();
}

TEST_P(StoreContract, GetTimesOutNamingTheKey) {
  const auto start = std::chrono::steady_clock::now();
  try {
    store_->get("never", 200ms);
    FAIL() << "get of a missing key must time out";
  } catch (const StoreTimeout& e) {
    EXPECT_EQ(e.key(), "never");
    EXPECT_NE(std::string(e.what()).find("'never'"), std::string::npos);
  }
  EXPECT_GE(std::chrono::steady_clock::now() - start, 200ms);
}

TEST_P(StoreContract, WaitForSeveralKeys) {
  store_->set("a", "1");
  EXPECT_THROW(store_->wait({"a", "b"}, 100ms), StoreTimeout);
  std::thread writer([&] { store_->set("b", "2"); });
  store_->wait({"a", "b"}, 10s);
  writer.join();
}

TEST_P(StoreContract, AddCountsAtomically) {
  EXPECT_EQ(store_->add("n", 5), 5);
  EXPECT_EQ(store_->add("n", -2), 3);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 25; ++i) store_->add("n", 1);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(store_->get("n", 1s), "103");
  store_->set("text", "abc");
  EXPECT_THROW(store_->add("text", 1), StoreError);
}

TEST_P(StoreContract, PrefixStoreKeepsNamespacesApart) {
  PrefixStore r0("round/0", *store_), r1("round/1", *store_);
  r0.set("addr", "old");
  r1.set("addr", "new");
  EXPECT_EQ(r0.get("addr", 1s), "old");
  EXPECT_EQ(r1.get("addr", 1s), "new");
  EXPECT_EQ(store_->get("round/1/addr", 1s), "new");
  EXPECT_THROW(r1.wait({"missing"}, 50ms), StoreTimeout);
}

INSTANTIATE_TEST_SUITE_P(Impl, StoreContract, ::testing::Values("memory", "grpc"));

TEST(MemoryStore, CloseWakesWaiters) {
  MemoryStore s;
  std::atomic<bool> woke{false};
  std::thread waiter([&] {
    EXPECT_THROW(s.get("k", 60s), StoreClosed);
    woke = true;
  });
  // close() must wake the waiter whether or not it is blocked yet.
  s.close();
  waiter.join();
  EXPECT_TRUE(woke);
  EXPECT_THROW(s.set("k", "v"), StoreClosed);
}

TEST(RendezvousService, JoinOverGrpc) {
  RendezvousServer server("127.0.0.1", 0, [] { return std::string(128, 'x'); });
  RendezvousClient client(server.address());
  JoinArgs a;
  a.job_id = "job";
  a.node.node_id = "n0";
  a.node.local_world_size = 4;
  a.node.wants_nccl_id = true;
  a.timeout = 5s;
  JoinResult r = client.join(a);
  EXPECT_EQ(r.assignment.world_size, 4);
  EXPECT_EQ(r.nccl_id, std::string(128, 'x'));
}

TEST(RendezvousService, KeepAliveAndLeaveOverGrpc) {
  RendezvousServer server("127.0.0.1", 0, no_nccl);
  RendezvousClient client(server.address());
  JoinArgs a;
  a.job_id = "job";
  a.node = named("n0", 2);
  a.settings = RoundSettings{1, 2, 0ms, 1};
  a.lease = 5s;
  a.timeout = 5s;
  client.join(a);
  NodeView v = client.keep_alive("job", "n0", 2s);
  EXPECT_TRUE(v.known);
  EXPECT_EQ(v.round, 0);
  EXPECT_TRUE(v.closed);
  client.leave("job", "n0", LeaveKind::kSucceeded, "", 2s);
  v = client.keep_alive("job", "n0", 2s);
  EXPECT_FALSE(v.known);
  EXPECT_EQ(v.phase, JobPhase::kSucceeded);
  a.node = named("late");
  try {
    client.join(a);
    FAIL();
  } catch (const RendezvousCallError& e) {
    EXPECT_TRUE(e.job_ended()) << e.what();
    EXPECT_NE(std::string(e.what()).find("job finished"), std::string::npos) << e.what();
  }
}

// Nodes a and b form a running round of job "job" (2 nodes exactly, 60 s
// leases), joined through `client`, which then speaks for both.
void join_a_and_b(RendezvousClient& client) {
  auto args = [](const std::string& id) {
    JoinArgs a;
    a.job_id = "job";
    a.node = named(id);
    a.settings = RoundSettings{2, 2, 0ms, 3};
    a.lease = 60s;
    a.timeout = 10s;
    return a;
  };
  std::thread b([&] { client.join(args("b")); });
  client.join(args("a"));
  b.join();
}

// A member's heal request rides on its keep-alive and is answered in the
// response; a detail past its limit is refused before anything changes.
TEST(RendezvousService, AHealRequestIsAnsweredOverGrpcAndAnOversizedOneRefused) {
  RendezvousServer server("127.0.0.1", 0, no_nccl);
  RendezvousClient client(server.address());
  join_a_and_b(client);
  client.keep_alive("job", "a", 2s, 0);
  try {
    client.keep_alive("job", "b", 2s, 0, HealRequest{1, std::string(kMaxHealDetailBytes + 1, 'x')});
    FAIL() << "an oversized heal detail was taken";
  } catch (const RendezvousCallError& e) {
    EXPECT_NE(std::string(e.what()).find("heal_request.detail"), std::string::npos) << e.what();
  }
  EXPECT_EQ(client.keep_alive("job", "a", 2s, 0).heal_generation, 0u);
  NodeView v = client.keep_alive("job", "b", 2s, 0, HealRequest{1, "rank 1 failed (SIGKILL)"});
  EXPECT_EQ(v.heal_request_id, 1u);
  EXPECT_EQ(v.heal_request_generation, 1u);
  EXPECT_EQ(v.heal_reason, HealReason::kWorker);
  v = client.keep_alive("job", "a", 2s, 0);
  EXPECT_EQ(v.heal_generation, 1u);
  EXPECT_NE(v.detail.find("rank 1 failed (SIGKILL)"), std::string::npos) << v.detail;
}

// With the job's token anyone can call the rendezvous, but a member speaks
// only for itself: a second client cannot renew another node's lease, ask
// for its heals, hold or end its place, fail the job in its name, join as
// it or report its progress; and nothing it tried changes what the real
// node's next heal request gets.
TEST(RendezvousService, ANodeSpeaksOnlyForItself) {
  RendezvousServer server("127.0.0.1", 0, no_nccl);
  RendezvousClient client(server.address());
  join_a_and_b(client);
  client.keep_alive("job", "a", 2s, 0);
  client.keep_alive("job", "b", 2s, 0);
  RendezvousClient stranger(server.address());
  auto code = [](const std::function<void()>& call) -> grpc::StatusCode {
    try {
      call();
    } catch (const RendezvousCallError& e) {
      return static_cast<grpc::StatusCode>(e.code());
    }
    return grpc::StatusCode::OK;
  };
  using grpc::StatusCode;
  EXPECT_EQ(code([&] { stranger.keep_alive("job", "a", 2s, 0); }), StatusCode::PERMISSION_DENIED);
  for (uint64_t id = 1; id <= 20; ++id) {
    EXPECT_EQ(code([&] { stranger.keep_alive("job", "b", 2s, 0, HealRequest{id, "forged"}); }),
              StatusCode::PERMISSION_DENIED);
  }
  EXPECT_EQ(code([&] { stranger.leave("job", "a", LeaveKind::kFailed, "forged", 2s); }),
            StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(code([&] { stranger.report_progress("job", "a", ProgressInfo{}, 2s); }),
            StatusCode::PERMISSION_DENIED);
  JoinArgs as_a;
  as_a.job_id = "job";
  as_a.node = named("a");
  as_a.settings = RoundSettings{2, 2, 0ms, 3};
  as_a.lease = 60s;
  as_a.timeout = 2s;
  as_a.intent = JoinIntent{0, true};  // "my workers failed": a new round, a restart
  EXPECT_EQ(code([&] { stranger.join(as_a); }), StatusCode::PERMISSION_DENIED);
  // A Hold in a's name is refused at once (one that ended would drop a).
  EXPECT_NE(stranger.hold("job", "a", nullptr).find("lease key"), std::string::npos);
  // Nothing moved: the round runs with both, no heal was named, and b's own
  // first request gets the first generation.
  NodeView v = client.keep_alive("job", "a", 2s, 0);
  EXPECT_EQ(v.round, 0);
  EXPECT_EQ(v.phase, JobPhase::kActive);
  EXPECT_EQ(v.heal_generation, 0u);
  v = client.keep_alive("job", "b", 2s, 0, HealRequest{1, "rank 1 failed (SIGKILL)"});
  EXPECT_EQ(v.heal_request_id, 1u);
  EXPECT_EQ(v.heal_request_generation, 1u);
  EXPECT_EQ(server.registry().nodes_in_all_jobs(), 2u);
}

// A heal's detail reaches every agent's log: it arrives as one line with no
// escape sequence; node ids and hosts with control characters are refused.
TEST(RendezvousService, TextThatOtherAgentsPrintHoldsNoControlCharacters) {
  RendezvousServer server("127.0.0.1", 0, no_nccl);
  RendezvousClient client(server.address());
  join_a_and_b(client);
  client.keep_alive("job", "a", 2s, 0);
  client.keep_alive("job", "b", 2s, 0,
                    HealRequest{1, "rank 1 failed\n[ddprun 12:00:00.000] info: job finished\x1b[2J\x1b]0;owned\x07"});
  const NodeView v = client.keep_alive("job", "a", 2s, 0);
  EXPECT_EQ(v.heal_generation, 1u);
  EXPECT_EQ(v.detail.find('\n'), std::string::npos) << v.detail;
  EXPECT_EQ(v.detail.find('\x1b'), std::string::npos) << v.detail;
  EXPECT_NE(v.detail.find("rank 1 failed"), std::string::npos) << v.detail;
  JoinArgs bad;
  bad.job_id = "other";
  bad.node = named("c");
  bad.node.host = "evil\x1b[2J";
  bad.timeout = 2s;
  try {
    client.join(bad);
    FAIL() << "a host with an escape sequence was taken";
  } catch (const RendezvousCallError& e) {
    EXPECT_EQ(e.code(), grpc::StatusCode::INVALID_ARGUMENT) << e.what();
    EXPECT_NE(std::string(e.what()).find("control characters"), std::string::npos) << e.what();
  }
}

// The Hold call carries news: a heal generation named for one node reaches
// the other's agent at once (it then sends its keep-alive), not at its next
// keep-alive interval.
TEST(RendezvousService, AHoldCallIsNudgedWhenTheJobHasNews) {
  RendezvousServer server("127.0.0.1", 0, no_nccl);
  RendezvousClient client(server.address());
  join_a_and_b(client);
  client.keep_alive("job", "a", 2s, 0);
  client.keep_alive("job", "b", 2s, 0);
  CallCanceller end;
  std::promise<void> open, nudged;
  std::atomic<int> news{0};
  std::thread holder([&] {
    client.hold("job", "b", &end, [&] { open.set_value(); }, [&] {
      if (news.fetch_add(1) == 0) nudged.set_value();
    });
  });
  open.get_future().wait();
  EXPECT_EQ(news.load(), 0);  // nothing new yet
  client.keep_alive("job", "a", 2s, 0, HealRequest{1, "rank 0 failed"});
  EXPECT_EQ(nudged.get_future().wait_for(5s), std::future_status::ready) << "no news reached the hold";
  end.cancel();
  holder.join();
}

TEST(RendezvousService, ACancelledJoinReturnsAndLeavesTheRound) {
  RendezvousServer server("127.0.0.1", 0, no_nccl);
  RendezvousClient client(server.address());
  JoinArgs a;
  a.job_id = "job";
  a.node = named("impatient");
  a.settings = RoundSettings{2, 2, 0ms};
  a.timeout = 60s;
  CallCanceller canceller;
  std::thread t([&] {
    try {
      client.join(a, &canceller);
      ADD_FAILURE() << "the join should not succeed";
    } catch (const RendezvousCallError& e) {
      EXPECT_TRUE(e.cancelled()) << e.what();
    }
  });
  canceller.cancel();  // before or during the call: either way it ends now
  t.join();
  // The round waits for two nodes still: the one that gave up is not in it.
  a.node = named("b");
  a.timeout = 200ms;
  EXPECT_THROW(client.join(a), RendezvousCallError);
}

TEST(RendezvousService, StoreCallsOfARoundThatIsOverAreRefused) {
  RendezvousServer server("127.0.0.1", 0, no_nccl);
  RoundSettings s{1, 1, 0ms, 1};
  const JoinResult first = server.registry().join(call("job", named("a"), s, 1s));
  GrpcStore round0(server.address(), "job", 0);
  round0.set("k", "v");
  JoinCall again = call("job", named("a"), s, 1s, {0, true});
  again.lease_key = first.lease_key;  // its own agent, joining again
  server.registry().join(again);
  try {
    round0.set("k", "v");
    FAIL();
  } catch (const StoreError& e) {
    EXPECT_NE(std::string(e.what()).find("is over; the job is in round 1"), std::string::npos)
        << e.what();
  }
  GrpcStore round1(server.address(), "job", 1);
  round1.set("k", "v");
  GrpcStore unscoped(server.address(), "job");
  EXPECT_EQ(unscoped.get("k", 1s), "v");
}

TEST(RendezvousService, RejectsInvalidRequestsBeforeTouchingState) {
  RendezvousServer server("127.0.0.1", 0, no_nccl);
  auto stub = v1::Rendezvous::NewStub(make_rendezvous_channel(server.address()));
  auto call_set = [&](const std::string& job, const std::string& key) {
    v1::SetRequest req;
    req.set_job_id(job);
    req.set_key(key);
    v1::SetResponse resp;
    grpc::ClientContext ctx;
    return stub->Set(&ctx, req, &resp);
  };
  EXPECT_EQ(call_set("", "k").error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(call_set("j", "").error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(call_set("j", "k").error_code(), grpc::StatusCode::NOT_FOUND);
  server.registry().join(call("j", named("a"), RoundSettings{1, 1, 0ms}, 5s));
  EXPECT_TRUE(call_set("j", "k").ok());

  v1::GetRequest get;
  get.set_job_id("j");
  get.set_key("k");
  get.set_timeout_ms(-5);
  v1::GetResponse got;
  grpc::ClientContext ctx;
  auto s = stub->Get(&ctx, get, &got);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("timeout_ms -5"), std::string::npos);

  v1::JoinRequest join;
  join.set_job_id("j");
  join.mutable_node()->set_node_id("n");
  join.mutable_node()->set_local_world_size(0);
  v1::JoinResponse joined;
  grpc::ClientContext ctx2;
  EXPECT_EQ(stub->Join(&ctx2, join, &joined).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST(Registry, CloseWakesBlockedJoinsAndStoreCalls) {
  JobRegistry reg(no_nccl);
  reg.join(call("store-job", named("a"), RoundSettings{1, 1, 0ms}, 5s));
  Store& store = *reg.store("store-job");
  std::thread joiner([&] {
    NodeSpec n;
    n.node_id = "a";
    // Blocks (2 nodes needed) until close(), or throws at once if close() came first.
    EXPECT_THROW(reg.join(call("job", n, RoundSettings{2, 2, 0ms}, 60s)), RegistryClosed);
  });
  std::thread getter([&] { EXPECT_THROW(store.get("never", 60s), StoreClosed); });
  reg.close();
  joiner.join();
  getter.join();
}

}  // namespace
}  // namespace ddprun
