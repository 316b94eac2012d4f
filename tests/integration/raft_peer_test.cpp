// The embedded control plane's Raft messages over real rendezvous services
// (ControlPeer.Deliver beside the Rendezvous service, GrpcRaftTransport):
// members replicate a state bigger than the service's message limit, and a
// sender without the job's token reaches nobody.
#include <gtest/gtest.h>

#include <future>
#include <memory>
#include <string>
#include <vector>

#include "rendezvous/server/nccl_unique_id.h"
#include "rendezvous/control_plane/raft/raft_control_plane.h"
#include "rendezvous/control_plane/raft/raft_membership.h"
#include "rendezvous/control_plane/raft/raft_node.h"
#include "rendezvous/control_plane/raft/raft_peer.h"
#include "rendezvous/server/server.h"

namespace ddprun {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// An agent's part: its rendezvous service with the peer service, and its
// Raft member sending with `sender_token`.
struct Agent {
  Agent(uint64_t id, const std::string& name, const std::string& token, const std::string& sender_token)
      : peer(token) {
    ServerOptions o;
    o.auth.token = token;
    o.peer_service = &peer;
    server = std::make_unique<RendezvousServer>(o, make_nccl_unique_id);
    GrpcRaftTransport::Options t;
    t.auth.token = sender_token;
    transport = std::make_unique<GrpcRaftTransport>(t);
    RaftNodeOptions n;
    n.id = id;
    n.address = raft_address(server->address(), name);
    n.job_id = "job";
    n.heartbeat = 50ms;
    n.election = 500ms;
    node = std::make_unique<RaftNode>(n, *transport);
    plane = std::make_unique<RaftControlPlane>(*node, n.election);
    peer.attach(node.get());
  }
  ~Agent() {
    peer.attach(nullptr);
    plane.reset();
    node.reset();
    transport.reset();
    server.reset();
  }

  ControlPeerService peer;
  std::unique_ptr<RendezvousServer> server;
  std::unique_ptr<GrpcRaftTransport> transport;
  std::unique_ptr<RaftNode> node;
  std::unique_ptr<RaftControlPlane> plane;
};

TEST(RaftPeer, MembersReplicateAStateBiggerThanAMessageOverTheirServices) {
  Agent a(1, "a", "s3cret", "s3cret"), b(2, "b", "s3cret", "s3cret");
  a.node->start(true);
  b.node->start(false);
  const int64_t term = a.plane->campaign("", "", [] { return false; }).value_or(-1);
  ASSERT_GT(term, 0);
  ASSERT_TRUE(a.node->add_voter(2, raft_address(b.server->address(), "b"), Clock::now() + 30s));
  std::string state(3 << 20, 's');  // three times the service's message limit
  state[12345] = 'x';
  ASSERT_TRUE(a.plane->save(term, state)) << "a majority (both) did not commit over gRPC";
  EXPECT_TRUE(b.node->wait_for([&](const RaftStatus&) { return b.plane->load() == std::optional<std::string>(state); },
                               Clock::now() + 30s));
  auto l = b.plane->leader();
  ASSERT_TRUE(l.has_value());
  EXPECT_EQ(l->address, a.server->address());
  EXPECT_EQ(l->node_id, "a");
}

TEST(RaftPeer, ASenderWithoutTheTokenReachesNobody) {
  Agent b(2, "b", "s3cret", "s3cret");
  Agent stranger(9, "x", "other", "wrong token");
  b.node->start(false);
  stranger.node->start(true);
  ASSERT_GT(stranger.plane->campaign("", "", [] { return false; }).value_or(-1), 0);
  // Its messages are refused at b's service: b never follows it.
  EXPECT_FALSE(stranger.node->add_voter(2, raft_address(b.server->address(), "b"), Clock::now() + 2s));
  EXPECT_EQ(b.node->status().term, 0u);
  EXPECT_GT(stranger.transport->dropped(), 0u) << "the refused calls were not counted";
}

// The leader's registry has the job's nodes (with their control
// addresses); RaftMembership makes the first three voters - both others
// standbys first, so the group never waits with two voters for a catch-up
// - and when one is lost, shrinks to the leader alone (two voters would
// need both).
TEST(RaftMembership, ThreeNodesVoteAndALostOnesVoteGoesAndTwoShrinkToOne) {
  Agent a(raft_id_of("a"), "a", "", ""), b(raft_id_of("b"), "b", "", ""), c(raft_id_of("c"), "c", "", "");
  a.node->start(true);
  b.node->start(false);
  c.node->start(false);
  const int64_t term = a.plane->campaign("", "", [] { return false; }).value_or(-1);
  ASSERT_GT(term, 0);
  JobRegistry& registry = a.server->registry();
  std::vector<std::future<JoinOutcome>> joins;
  const std::vector<std::pair<std::string, Agent*>> nodes{{"a", &a}, {"b", &b}, {"c", &c}};
  for (const auto& [id, m] : nodes) {
    JoinCall call;
    call.job_id = "job";
    call.node = NodeSpec{id, id + "-host", 1, "10.0.0.1", -1, false, 0, false, "train",
                         raft_address(m->server->address(), id), ""};
    call.settings = RoundSettings{3, 3, 0ms, 3};
    call.lease = 60s;
    call.lease_key = "key-" + id;
    auto p = std::make_shared<std::promise<JoinOutcome>>();
    joins.push_back(p->get_future());
    registry.join_async(call, [p](JoinOutcome o) { p->set_value(std::move(o)); });
  }
  for (auto& j : joins) ASSERT_TRUE(j.get().result);
  RaftMembership membership(*a.node, registry, "job", {}, std::chrono::hours(1));  // passes by hand
  const std::string b_to = raft_address(b.server->address(), "b"), c_to = raft_address(c.server->address(), "c");
  EXPECT_EQ(membership.reconcile(), "the node at " + b_to + " gets the control plane's log, to vote once caught up");
  EXPECT_EQ(membership.reconcile(), "the node at " + c_to + " gets the control plane's log, to vote once caught up");
  EXPECT_EQ(a.node->status().voters.size(), 1u) << "no voter before both others are standbys";
  EXPECT_EQ(membership.reconcile(),
            "the node at " + b_to + " votes (2 voter(s): losing the serving node ends the job until it has 3 nodes)");
  EXPECT_EQ(membership.reconcile(), "the node at " + c_to +
                                        " votes (3 voters: the job survives the loss of any 1 node(s), the serving "
                                        "one included)");
  EXPECT_EQ(membership.reconcile(), "") << "another change with three voters";
  EXPECT_EQ(a.node->status().voters.size(), 3u);
  // Node c is lost: its vote goes; two nodes left keep one voter.
  ASSERT_TRUE(registry.drop_node("job", "c", "lost"));
  EXPECT_NE(membership.reconcile(), "");
  EXPECT_NE(membership.reconcile(), "");
  const RaftStatus s = a.node->status();
  EXPECT_EQ(s.voters, std::vector<uint64_t>{raft_id_of("a")});
  EXPECT_TRUE(a.plane->save(term, "still commits alone"));
}

}  // namespace
}  // namespace ddprun
