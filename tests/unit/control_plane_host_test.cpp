// The control plane's host (control_plane_host.h) and its saver
// (state_saver.h): who serves after a leader change (the successor serves
// its predecessor's saved state and keeps its node), what a commit waits
// for, and a leader that cannot renew. How long a term lasts is
// term_lease_test.cpp's.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <future>
#include <mutex>

#include "rendezvous/server/control_plane_host.h"
#include "rendezvous/server/job_state.h"
#include "rendezvous/server/registry.h"
#include "rendezvous/server/state_saver.h"
#include "support/job_helpers.h"
#include "unit/registry_calls.h"

namespace ddprun {
namespace {

using namespace std::chrono_literals;
using namespace registry_calls;

// A control plane in memory: one leader, saves counted, a gate that holds
// saves back, and a switch that fences the leader.
class FakePlane final : public ControlPlane {
 public:
  std::optional<int64_t> campaign(const std::string&, const std::string&, const std::function<bool()>&) override {
    return 1;
  }
  std::optional<ControlLeader> leader() override { return ControlLeader{"a:1", "a", 1}; }
  bool wait_leader_gone(int64_t, std::chrono::milliseconds) override { return false; }
  bool renew(int64_t) override { return !fenced; }
  void resign(int64_t) override {}
  bool save(int64_t, const std::string& state) override {
    std::unique_lock lock(mu);
    ++entered;
    cv.notify_all();
    cv.wait(lock, [&] { return open; });
    if (fenced) return false;
    saved = state;
    ++saves;
    return true;
  }
  std::optional<std::string> load() override {
    std::lock_guard lock(mu);
    return saved.empty() ? std::nullopt : std::optional<std::string>(saved);
  }
  std::chrono::milliseconds ttl() const override { return 1000ms; }

  std::mutex mu;
  std::condition_variable cv;
  bool open = true;
  std::atomic<bool> fenced{false};
  int entered = 0;
  int saves = 0;
  std::string saved;
};

// Node a alone runs the job (--nnodes 1:2).
JoinCall lone_node_call() {
  JoinCall a = join_call("a");
  a.settings = RoundSettings{1, 2, 0ms, 3};
  return a;
}

TEST(StateSaver, ASavedChangeIsInTheControlPlaneAndChangesDuringASaveMakeOneMore) {
  JobRegistry reg([] { return std::string(); });
  ASSERT_TRUE(join_now(reg, lone_node_call()).result);
  FakePlane plane;
  StateSaver saver(reg, plane, "job", 1);
  ASSERT_TRUE(saver.wait_saved(saver.changed(), 10s));
  RestoredJob r = decode_job_state(*plane.load(), RoundState::TimePoint{});
  EXPECT_EQ(r.rounds->num_members(), 1u);

  // Hold the next save while 5 changes arrive: they make one save more, and
  // the last change's state is what is saved.
  {
    std::lock_guard lock(plane.mu);
    plane.open = false;
  }
  const uint64_t first = saver.changed();
  {
    std::unique_lock lock(plane.mu);
    plane.cv.wait(lock, [&] { return plane.entered == 2; });
  }
  uint64_t last = 0;
  for (int i = 0; i < 5; ++i) {
    reg.store("job")->set("k" + std::to_string(i), "v");
    last = saver.changed();
  }
  EXPECT_FALSE(saver.wait_saved(first, 50ms));  // held back
  {
    std::lock_guard lock(plane.mu);
    plane.open = true;
  }
  plane.cv.notify_all();
  ASSERT_TRUE(saver.wait_saved(last, 10s));
  EXPECT_EQ(saver.saves(), 3u);
  RestoredJob newest = decode_job_state(*plane.load(), RoundState::TimePoint{});
  EXPECT_EQ(newest.store.size(), 5u);
}

TEST(StateSaver, AFencedLeaderSavesNothingMoreAndItsWaitersHearIt) {
  JobRegistry reg([] { return std::string(); });
  ASSERT_TRUE(join_now(reg, lone_node_call()).result);
  FakePlane plane;
  StateSaver saver(reg, plane, "job", 7);
  ASSERT_TRUE(saver.wait_saved(saver.changed(), 10s));
  plane.fenced = true;
  EXPECT_FALSE(saver.wait_saved(saver.changed(), 10s));
  EXPECT_TRUE(saver.fenced());
  EXPECT_NE(saver.last_error().find("term 7 is over"), std::string::npos) << saver.last_error();
  const int entered = plane.entered;
  EXPECT_FALSE(saver.wait_saved(saver.changed(), 10s));
  EXPECT_EQ(plane.entered, entered);  // no save tried once fenced
}

// What a ControlPlaneHost says happened, waited for as events.
struct HostEvents {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<ControlPlaneEvent> seen;
  ControlPlaneHost::OnEvent sink() {
    return [this](const ControlPlaneEvent& e) {
      std::lock_guard lock(mu);
      seen.push_back(e);
      cv.notify_all();
    };
  }
  std::optional<ControlPlaneEvent> wait_for(ControlPlaneEvent::Kind kind) {
    std::unique_lock lock(mu);
    std::optional<ControlPlaneEvent> found;
    cv.wait_for(lock, 10s, [&] {
      for (const auto& e : seen) {
        if (e.kind == kind && !found) found = e;  // the first of its kind
      }
      return found.has_value();
    });
    return found;
  }
};

// The state node b saved while it led a 2-node round of a and b.
std::string saved_by_b() {
  JobRegistry old([] { return std::string("nccl"); });
  std::promise<JoinOutcome> a_done;
  old.join_async(join_call("a"), [&a_done](JoinOutcome o) { a_done.set_value(std::move(o)); });
  EXPECT_TRUE(join_now(old, join_call("b")).result);
  EXPECT_TRUE(a_done.get_future().get().result);
  return *old.save_job("job", "b", 7);
}

TEST(ControlPlaneHost, TheLeaderServesThePredecessorsStateAndKeepsItsNode) {
  FakePlane plane;
  plane.saved = saved_by_b();
  JobRegistry reg([] { return std::string(); });
  HostEvents events;
  ControlPlaneHost host(plane, "job", "a", events.sink());
  EXPECT_EQ(host.leader_elsewhere("job"), "a:1");  // not started: the plane's leader
  host.start(reg, "a-host:1");
  const auto leads = events.wait_for(ControlPlaneEvent::Kind::kLeads);
  ASSERT_TRUE(leads);
  EXPECT_EQ(leads->predecessor, "b");
  EXPECT_EQ(host.term(), 1);
  EXPECT_EQ(host.leader_elsewhere("job"), std::nullopt);   // it serves the job
  EXPECT_EQ(host.leader_elsewhere("other"), std::string());  // and no other
  // b stays: a term also ends when its leader was only slow, and b goes on
  // as a member (if it is gone, its fresh lease runs out like any node's).
  EXPECT_TRUE(reg.keep_alive("job", "b", "key-b").known);
  EXPECT_TRUE(reg.keep_alive("job", "a", "key-a").known);
}

// Node a leads the control plane of a job it runs alone.
struct LoneLeader {
  FakePlane plane;
  JobRegistry reg{[] { return std::string(); }};
  HostEvents events;
  ControlPlaneHost host{plane, "job", "a", events.sink()};
  bool leads() {
    host.start(reg, "a-host:1");
    return events.wait_for(ControlPlaneEvent::Kind::kLeads) && join_now(reg, lone_node_call()).result;
  }
};

TEST(ControlPlaneHost, ACommitWaitsForASaveOnlyWhenTheJobChanged) {
  LoneLeader l;
  ASSERT_TRUE(l.leads());
  auto& [plane, reg, events, host] = l;
  ASSERT_TRUE(host.commit("job", false));  // the round closed: saved
  const int saves = plane.saves;
  EXPECT_GE(saves, 1);
  reg.keep_alive("job", "a", "key-a");
  EXPECT_TRUE(host.commit("job", false));  // a keep-alive changed nothing: no save
  EXPECT_EQ(plane.saves, saves);
  reg.store("job")->set("k", "v");
  EXPECT_TRUE(host.commit("job", true));  // a store write is always saved
  EXPECT_EQ(plane.saves, saves + 1);
  EXPECT_EQ(decode_job_state(*plane.load(), RoundState::TimePoint{}).store.size(), 1u);
}

TEST(ControlPlaneHost, ALeaderThatCannotRenewStopsServingAndStaysAMember) {
  LoneLeader l;
  ASSERT_TRUE(l.leads());
  auto& [plane, reg, events, host] = l;
  EXPECT_EQ(host.last_term_end(), "");
  plane.fenced = true;  // another leads now: renewals and saves are refused
  const auto stopped = events.wait_for(ControlPlaneEvent::Kind::kStopped);
  ASSERT_TRUE(stopped);
  EXPECT_EQ(stopped->detail, "the control plane says term 1 is over");
  EXPECT_EQ(host.term(), 0);
  EXPECT_FALSE(host.commit("job", true));
  EXPECT_EQ(host.leader_elsewhere("job"), "a:1");  // the plane's leader, not itself
  EXPECT_EQ(host.last_term_end(), "term 1 ended: the control plane says term 1 is over");
  EXPECT_THROW(reg.status("job"), UnknownJob);  // no longer served here
}

}  // namespace
}  // namespace ddprun
