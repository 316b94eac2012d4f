// The control plane's election and saved state in a real etcd cluster
// (rendezvous/control_plane/etcd/etcd_control_plane.h): one leader at a time, later terms
// higher, a leader that stops renewing fenced once another leads, the
// job's state carried from one leader's registry to the next's, and the
// death of etcd's own leader survived.
#include <gtest/gtest.h>

#include <future>
#include <thread>

#include "rendezvous/control_plane/etcd/etcd_control_plane.h"
#include "rendezvous/server/job_state.h"
#include "rendezvous/server/registry.h"
#include "support/etcd_cluster.h"

namespace {

using namespace std::chrono_literals;
using ddprun::EtcdClient;
using ddprun::EtcdControlPlane;
using ddptest::EtcdCluster;

// The set-up installs etcd: a machine without it fails loudly.
#define REQUIRE_ETCD()                                                             \
  do {                                                                             \
    if (!ddptest::etcd_missing().empty()) GTEST_FAIL() << ddptest::etcd_missing(); \
  } while (0)

std::shared_ptr<EtcdClient> client_of(const EtcdCluster& c) {
  return std::make_shared<EtcdClient>(c.endpoints(), 2s);
}

const auto never = [] { return false; };

TEST(EtcdControlPlane, OneLeaderAtATimeAndTheNextOneHasAHigherTerm) {
  REQUIRE_ETCD();
  EtcdCluster etcd(1, "one-leader");
  EtcdControlPlane a(client_of(etcd), "job", 1s), b(client_of(etcd), "job", 1s);
  const auto term_a = a.campaign("10.0.0.1:5000", "node-a", never);
  ASSERT_TRUE(term_a);
  auto leader = b.leader();
  ASSERT_TRUE(leader);
  EXPECT_EQ(leader->address, "10.0.0.1:5000");
  EXPECT_EQ(leader->node_id, "node-a");
  EXPECT_EQ(leader->term, *term_a);
  EXPECT_TRUE(a.save(*term_a, "state of a"));

  // b waits while a leads (and renews, for longer than its ttl); a steps
  // down and b leads at once.
  auto b_term = std::async(std::launch::async, [&] { return b.campaign("10.0.0.2:5000", "node-b", never); });
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE(a.renew(*term_a));
    ASSERT_EQ(b_term.wait_for(200ms), std::future_status::timeout) << "b led while a renewed";
  }
  a.resign(*term_a);
  const auto term_b = b_term.get();
  ASSERT_TRUE(term_b);
  EXPECT_GT(*term_b, *term_a);
  // a is fenced: its writes go nowhere; b's do.
  EXPECT_FALSE(a.save(*term_a, "late write of a"));
  EXPECT_FALSE(a.renew(*term_a));
  EXPECT_EQ(b.load(), "state of a");
  EXPECT_TRUE(b.save(*term_b, "state of b"));
  EXPECT_EQ(a.load(), "state of b");
}

TEST(EtcdControlPlane, ALeaderThatStopsRenewingLosesItAfterItsTtlAndIsFenced) {
  REQUIRE_ETCD();
  EtcdCluster etcd(1, "fenced");
  EtcdControlPlane a(client_of(etcd), "job", 1s), b(client_of(etcd), "job", 1s);
  const auto term_a = a.campaign("a:1", "a", never);
  ASSERT_TRUE(term_a);
  // a is paused (it renews no more): b leads once a's lease runs out.
  const auto term_b = b.campaign("b:1", "b", never);
  ASSERT_TRUE(term_b);
  EXPECT_GT(*term_b, *term_a);
  EXPECT_TRUE(b.wait_leader_gone(*term_a, 10ms));
  // a comes back: nothing it writes counts, and it learns it no longer leads.
  EXPECT_FALSE(a.save(*term_a, "stale"));
  EXPECT_FALSE(a.renew(*term_a));
  EXPECT_EQ(b.leader()->node_id, "b");
  EXPECT_FALSE(b.load());  // nobody saved
}

// The leader key deleted or rewritten behind the leader's back (etcdctl,
// another tool): its lease lives on, but its renewal checks the key and
// ends the term, so that it never serves beside the next leader.
TEST(EtcdControlPlane, ALeaderKeyDeletedOrRewrittenEndsTheTerm) {
  REQUIRE_ETCD();
  EtcdCluster etcd(1, "rewritten");
  auto raw = client_of(etcd);
  for (const bool rewrite : {false, true}) {
    const std::string job = rewrite ? "rewritten" : "deleted";
    EtcdControlPlane a(client_of(etcd), job, 1s), b(client_of(etcd), job, 1s);
    const auto term_a = a.campaign("a:1", "a", never);
    ASSERT_TRUE(term_a);
    ASSERT_TRUE(a.renew(*term_a));
    const std::string key = EtcdControlPlane::prefix(job) + "leader";
    if (rewrite) {
      raw->put(key, "evil:1\nevil");  // same create revision, no lease, another value
    } else {
      raw->erase(key);
    }
    EXPECT_FALSE(a.renew(*term_a)) << (rewrite ? "rewritten" : "deleted") << ": a would serve on";
    if (!rewrite) {
      const auto term_b = b.campaign("b:1", "b", never);  // the key is free: b leads
      ASSERT_TRUE(term_b);
      EXPECT_FALSE(a.renew(*term_a));
      EXPECT_TRUE(b.renew(*term_b));
    }
  }
}

// 10,000 nodes make a state of about 3 MB, over etcd's 1.5 MiB request
// limit: it goes in chunks, comes back whole, and a smaller state after it
// leaves no chunk behind; a fenced leader's chunks never become the state.
TEST(EtcdControlPlane, AStateLargerThanARequestIsSavedInChunksAndLoadedWhole) {
  REQUIRE_ETCD();
  EtcdCluster etcd(1, "chunks");
  auto client = client_of(etcd);
  EtcdControlPlane a(client, "job", 1s);
  const auto term = a.campaign("a:1", "a", never);
  ASSERT_TRUE(term);
  std::string big(3 * 1024 * 1024 + 7, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>((i * 2654435761u) >> 13);
  ASSERT_TRUE(a.save(*term, big));
  EXPECT_EQ(a.load(), big);
  std::string bigger = big + "more";
  ASSERT_TRUE(a.save(*term, bigger));  // the first set of chunks goes
  EXPECT_EQ(a.load(), bigger);
  ASSERT_TRUE(a.save(*term, "small"));
  EXPECT_EQ(a.load(), "small");
  EXPECT_FALSE(client->get(EtcdControlPlane::prefix("job") + "chunks/" + std::to_string(*term) + "-2/000000"));
  a.resign(*term);
  EXPECT_FALSE(a.save(*term, big));  // fenced: the state stays
  EXPECT_EQ(a.load(), "small");
}

TEST(EtcdControlPlane, ACandidateGivesUpWhenToldTo) {
  REQUIRE_ETCD();
  EtcdCluster etcd(1, "give-up");
  EtcdControlPlane a(client_of(etcd), "job", 5s), b(client_of(etcd), "job", 5s);
  ASSERT_TRUE(a.campaign("a:1", "a", never));
  std::atomic<bool> stop{false};
  auto b_term = std::async(std::launch::async, [&] { return b.campaign("b:1", "b", [&] { return stop.load(); }); });
  EXPECT_EQ(b_term.wait_for(500ms), std::future_status::timeout);
  stop = true;
  EXPECT_FALSE(b_term.get());
  EXPECT_EQ(a.leader()->node_id, "a");
}

// What one leader's registry saved, the next one serves: same round, same
// store, the nodes' lease keys, and a takeover from there.
TEST(EtcdControlPlane, TheNextLeadersRegistryServesTheJobTheLastOneSaved) {
  REQUIRE_ETCD();
  EtcdCluster etcd(1, "registry");
  EtcdControlPlane a(client_of(etcd), "job", 1s), b(client_of(etcd), "job", 1s);
  const auto term_a = a.campaign("a:1", "a", never);
  ASSERT_TRUE(term_a);

  ddprun::JobRegistry first([] { return std::string("nccl id"); });
  std::vector<std::future<ddprun::JoinOutcome>> joins;
  std::vector<std::shared_ptr<std::promise<ddprun::JoinOutcome>>> done;
  for (const char* id : {"a", "b"}) {
    ddprun::JoinCall c;
    c.job_id = "job";
    c.node = ddprun::NodeSpec{id, std::string(id) + "-host", 2, "10.0.0.1", -1, false, 0, true, "train", "", ""};
    c.settings = ddprun::RoundSettings{2, 2, 0ms, 3};
    c.lease = 5s;
    c.lease_key = std::string("key-") + id;
    auto p = std::make_shared<std::promise<ddprun::JoinOutcome>>();
    joins.push_back(p->get_future());
    first.join_async(c, [p](ddprun::JoinOutcome o) { p->set_value(std::move(o)); });
    done.push_back(p);
  }
  for (auto& j : joins) ASSERT_TRUE(j.get().result);
  first.store("job")->set("round/0/x", "y");
  ASSERT_TRUE(a.save(*term_a, *first.save_job("job")));
  a.resign(*term_a);

  const auto term_b = b.campaign("b:1", "b", never);
  ASSERT_TRUE(term_b);
  auto saved = b.load();
  ASSERT_TRUE(saved);
  ddprun::JobRegistry next([] { return std::string("another id"); });
  EXPECT_EQ(next.restore_job(*saved), "job");
  EXPECT_EQ(next.store("job")->get("round/0/x", 1s), "y");
  EXPECT_EQ(next.status("job").world_size, 4);
  EXPECT_NO_THROW(next.keep_alive("job", "b", "key-b", 0));
  EXPECT_THROW(next.keep_alive("job", "b", "key-a", 0), ddprun::NotThisNode);
}

// etcd's own raft leader dies: the control plane's leader keeps its place
// (its renewals and writes go to the members left) and a candidate still
// sees who leads.
TEST(EtcdControlPlane, TheDeathOfEtcdsLeaderMemberIsSurvived) {
  REQUIRE_ETCD();
  EtcdCluster etcd(3, "member-death");
  EtcdControlPlane a(client_of(etcd), "job", 3s), b(client_of(etcd), "job", 3s);
  const auto term_a = a.campaign("a:1", "a", never);
  ASSERT_TRUE(term_a);
  ASSERT_TRUE(a.save(*term_a, "before"));
  const int leader = etcd.leader();
  ASSERT_GE(leader, 0);
  etcd.kill(leader);
  // The members left elect another leader within an election timeout or
  // two; calls meanwhile fail over or time out, and a retry goes through.
  bool renewed = false, saved = false;
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while ((!renewed || !saved) && std::chrono::steady_clock::now() < deadline) {
    try {
      renewed = renewed || a.renew(*term_a);
      saved = saved || a.save(*term_a, "after");
    } catch (const ddprun::EtcdError&) {
    }
  }
  EXPECT_TRUE(renewed) << etcd.logs();
  EXPECT_TRUE(saved) << etcd.logs();
  EXPECT_EQ(b.leader()->term, *term_a);
  EXPECT_EQ(b.load(), "after");
}

TEST(EtcdClient, BadEndpointsAreRefusedNamingThem) {
  EXPECT_EQ(EtcdClient::parse_endpoints("http://a:2379,b:2380/"), (std::vector<std::string>{"a:2379", "b:2380"}));
  for (const char* bad : {"", "a", "a:", ":1", "a:0", "a:65536", "a:12x", "https://a:2379"}) {
    try {
      EtcdClient::parse_endpoints(bad);
      ADD_FAILURE() << "'" << bad << "' was taken";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(std::string(bad).empty() ? "no etcd endpoint" : bad), std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
