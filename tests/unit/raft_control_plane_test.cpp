// The embedded control plane's Raft members (RaftNode over libraft, with
// RaftControlPlane on top) in one process, joined by an in-memory network
// whose links a test can cut: election, a save committed by a majority, a
// successor that reads its predecessor's state, a leader cut off from the
// majority that can no longer save, a big state, and a member added after
// many saves that catches up from a snapshot.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "rendezvous/control_plane/raft/raft_control_plane.h"
#include "rendezvous/control_plane/raft/raft_node.h"

namespace ddprun {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using Role = RaftStatus::Role;

// Messages between members, by Raft address; cut links drop them.
class Network {
 public:
  void attach(const std::string& address, RaftNode* node) {
    std::lock_guard lock(mu_);
    nodes_[address] = node;
  }
  void detach(const std::string& address) {
    std::lock_guard lock(mu_);
    nodes_.erase(address);
  }
  // Cuts (or mends) both directions between a and b.
  void cut(const std::string& a, const std::string& b, bool cut = true) {
    std::lock_guard lock(mu_);
    for (const auto& link : {std::make_pair(a, b), std::make_pair(b, a)}) {
      if (cut) cuts_.insert(link);
      else cuts_.erase(link);
    }
  }
  void send(const std::string& from, const std::string& to, const std::string& bytes) {
    std::lock_guard lock(mu_);  // held while delivering: a detached node is never called
    if (cuts_.count({from, to})) return;
    auto it = nodes_.find(to);
    if (it != nodes_.end()) it->second->deliver(bytes);
  }

 private:
  std::mutex mu_;
  std::map<std::string, RaftNode*> nodes_;
  std::set<std::pair<std::string, std::string>> cuts_;
};

class Link final : public RaftTransport {
 public:
  Link(Network& net, std::string from) : net_(net), from_(std::move(from)) {}
  void send(const std::string& address, std::string bytes) override { net_.send(from_, address, bytes); }

 private:
  Network& net_;
  std::string from_;
};

constexpr auto kElection = 300ms;
const auto kPatience = 30s;  // a bound on waits for events that come in milliseconds

struct Member {
  Member(Network& net, uint64_t id, const std::string& name, const std::string& job = "job")
      : address(raft_address("svc-" + name, name)), link(net, address), net_(net) {
    RaftNodeOptions o;
    o.id = id;
    o.address = address;
    o.job_id = job;
    o.heartbeat = 30ms;
    o.election = kElection;
    node = std::make_unique<RaftNode>(o, link);
    plane = std::make_unique<RaftControlPlane>(*node, kElection);
    net.attach(address, node.get());
  }
  ~Member() { kill(); }
  void kill() {
    if (!node) return;
    net_.detach(address);
    plane.reset();
    node.reset();
  }
  int64_t lead() {
    auto term = plane->campaign(address, "", [] { return false; });
    return term.value_or(-1);
  }

  std::string address;
  Link link;
  Network& net_;
  std::unique_ptr<RaftNode> node;
  std::unique_ptr<RaftControlPlane> plane;
};

// Waits for some member of `members` to lead; returns it.
Member* wait_leader(const std::vector<Member*>& members) {
  const auto deadline = Clock::now() + kPatience;
  while (Clock::now() < deadline) {
    for (Member* m : members) {
      if (m->node && m->node->wait_for([](const RaftStatus& s) { return s.role == Role::kLeader; },
                                       Clock::now() + 20ms)) {
        return m;
      }
    }
  }
  return nullptr;
}

// a bootstrapped alone, b and c added as voters.
struct Trio {
  Network net;
  Member a{net, 1, "a"}, b{net, 2, "b"}, c{net, 3, "c"};
  int64_t term_a = -1;
  Trio() {
    a.node->start(true);
    b.node->start(false);
    c.node->start(false);
    term_a = a.lead();
    EXPECT_GT(term_a, 0);
    EXPECT_TRUE(a.node->add_voter(2, b.address, Clock::now() + kPatience));
    EXPECT_TRUE(a.node->add_voter(3, c.address, Clock::now() + kPatience));
  }
};

TEST(RaftControlPlane, AFirstMemberLeadsAloneAndSaves) {
  Network net;
  Member a(net, 1, "a");
  a.node->start(true);
  const int64_t term = a.lead();
  ASSERT_GT(term, 0);
  EXPECT_TRUE(a.plane->renew(term));
  EXPECT_FALSE(a.plane->load().has_value());
  ASSERT_TRUE(a.plane->save(term, "round 1"));
  EXPECT_EQ(a.plane->load(), "round 1");
  EXPECT_FALSE(a.plane->save(term + 1, "not my term"));
  auto l = a.plane->leader();
  ASSERT_TRUE(l.has_value());
  EXPECT_EQ(l->address, "svc-a");
  EXPECT_EQ(l->node_id, "a");
}

TEST(RaftControlPlane, TheSuccessorOfALostLeaderReadsItsStateAndLeadsInALaterTerm) {
  Trio t;
  ASSERT_TRUE(t.a.plane->save(t.term_a, "state at round 3"));
  t.a.kill();  // kill -9 of the serving agent: nothing more from it
  Member* next = wait_leader({&t.b, &t.c});
  ASSERT_NE(next, nullptr) << "no successor among the two survivors";
  const int64_t term = next->lead();
  EXPECT_GT(term, t.term_a);
  EXPECT_EQ(next->plane->load(), "state at round 3") << "the successor lost its predecessor's state";
  EXPECT_TRUE(next->plane->save(term, "state at round 4"));
  Member* other = next == &t.b ? &t.c : &t.b;
  EXPECT_TRUE(other->node->wait_for(
      [&](const RaftStatus&) { return other->plane->load() == std::optional<std::string>("state at round 4"); },
      Clock::now() + kPatience));
}

TEST(RaftControlPlane, ALeaderCutOffFromTheMajoritySavesNothingAndStepsDown) {
  Trio t;
  ASSERT_TRUE(t.a.plane->save(t.term_a, "before the cut"));
  t.net.cut(t.a.address, t.b.address);
  t.net.cut(t.a.address, t.c.address);
  // The minority's save never commits: the fence.
  EXPECT_FALSE(t.a.plane->save(t.term_a, "written alone"));
  // It steps down by itself (no majority heard for an election timeout)...
  EXPECT_TRUE(t.a.node->wait_for([](const RaftStatus& s) { return s.role != Role::kLeader; },
                                 Clock::now() + kPatience));
  EXPECT_FALSE(t.a.plane->renew(t.term_a));
  // ... and the majority elects a successor that never saw the minority's write.
  Member* next = wait_leader({&t.b, &t.c});
  ASSERT_NE(next, nullptr);
  const int64_t term = next->lead();
  EXPECT_GT(term, t.term_a);
  EXPECT_EQ(next->plane->load(), "before the cut");
  ASSERT_TRUE(next->plane->save(term, "after the cut"));
  // Mended, the old leader follows and takes the majority's state.
  t.net.cut(t.a.address, t.b.address, false);
  t.net.cut(t.a.address, t.c.address, false);
  EXPECT_TRUE(t.a.node->wait_for(
      [&](const RaftStatus&) { return t.a.plane->load() == std::optional<std::string>("after the cut"); },
      Clock::now() + kPatience));
  EXPECT_NE(t.a.plane->leader()->node_id, "a");
}

TEST(RaftControlPlane, ResigningHandsTheLeadershipToAnotherVoterAtOnce) {
  Trio t;
  t.a.plane->resign(t.term_a);
  EXPECT_FALSE(t.a.plane->renew(t.term_a)) << "a resigned leader still serves";
  Member* next = wait_leader({&t.b, &t.c});
  ASSERT_NE(next, nullptr);
  EXPECT_TRUE(t.a.plane->wait_leader_gone(t.term_a, kPatience));
  EXPECT_GT(next->lead(), t.term_a);
}

TEST(RaftControlPlane, ABigStateAndAMemberAddedLaterThatCatchesUpFromASnapshot) {
  Trio t;
  // A 10,000-node job's state is megabytes; saves come many times a round.
  std::string big(3 << 20, 'x');
  for (int i = 0; i < 20; ++i) {
    big[0] = static_cast<char>('a' + i);
    ASSERT_TRUE(t.a.plane->save(t.term_a, big)) << "save " << i;
  }
  Member d(t.net, 4, "d");
  d.node->start(false);
  ASSERT_TRUE(t.a.node->add_voter(4, d.address, Clock::now() + kPatience));
  EXPECT_TRUE(d.node->wait_for([&](const RaftStatus&) { return d.plane->load() == std::optional<std::string>(big); },
                               Clock::now() + kPatience))
      << "the member added late did not get the newest state";
  EXPECT_TRUE(d.node->wait_for([](const RaftStatus& s) { return s.voters.size() == 4; }, Clock::now() + kPatience));
}

TEST(RaftControlPlane, AnotherJobsLeaderCannotMakeAMemberFollowIt) {
  Network net;
  Member a(net, 1, "a");
  a.node->start(false);
  a.node->deliver("not a message");  // dropped, nothing breaks
  // Another job's leader that has a's address sends it real Raft messages:
  // a drops them (job mismatch), so it never follows and never catches up.
  Member x(net, 9, "x", "another job");
  x.node->start(true);
  ASSERT_GT(x.lead(), 0);
  EXPECT_FALSE(x.node->add_voter(1, a.address, Clock::now() + 3 * kElection));
  EXPECT_EQ(a.node->status().term, 0u) << "a member took a stranger's term";
  EXPECT_EQ(a.node->status().leader_id, 0u);
}

TEST(RaftAddress, SplitsIntoServiceAndNode) {
  EXPECT_EQ(split_raft_address(raft_address("10.0.0.1:5000", "h:12")),
            std::make_optional(std::make_pair(std::string("10.0.0.1:5000"), std::string("h:12"))));
  EXPECT_FALSE(split_raft_address("no-node").has_value());
  EXPECT_FALSE(split_raft_address("#node").has_value());
}

}  // namespace
}  // namespace ddprun
