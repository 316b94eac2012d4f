// The lease keeper: its news travels at once (what the agent learns of its
// own workers reaches the rendezvous without waiting for the next
// keep-alive interval, so that a node arriving meanwhile joins the running
// round instead of restarting it), and ddprun --trace's clock alignment
// (the service stamps each keep-alive answer with its CLOCK_MONOTONIC, and
// the keeper keeps the offset of the sample with the smallest round trip).
#include <gtest/gtest.h>

#include <poll.h>

#include <chrono>
#include <thread>

#include "agent/lease_keeper.h"
#include "rendezvous/client/client.h"
#include "rendezvous/server/server.h"
#include "support/no_nccl.h"

namespace ddprun {
namespace {

using namespace std::chrono_literals;

using ddptest::no_nccl;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Node n0 of job "job" joins `client`'s service (alone in its round, up to
// 2 nodes, a lease); the round it joined.
int64_t join_n0(RendezvousClient& client) {
  JoinArgs a;
  a.job_id = "job";
  a.node.node_id = "n0";
  a.node.local_world_size = 1;
  a.settings = RoundSettings{1, 2, 0ms, 0};
  a.lease = 10min;
  a.timeout = 5s;
  return client.join(a).assignment.round;
}

bool heals_at_rendezvous(RendezvousClient& client) {
  const JobStatus s = client.status("job", 5s);
  return !s.nodes.empty() && s.nodes.front().heals;
}

TEST(LeaseKeeper, WorkersThatHealAreToldAtOnceNotAtTheNextInterval) {
  RendezvousServer server(ServerOptions{"127.0.0.1", 0, {}, {}}, no_nccl);
  RendezvousClient client(server.address());
  const int64_t round = join_n0(client);
  // Keep-alives every 10 minutes: only news can make one go sooner.
  LeaseKeeper keeper(client, LeaseOptions{"job", "n0", 10min, 10min, {}});
  pollfd fd{keeper.fd(), POLLIN, 0};
  ASSERT_EQ(poll(&fd, 1, 5000), 1);  // the first keep-alive went and was answered
  keeper.take();
  EXPECT_FALSE(heals_at_rendezvous(client));
  keeper.set_workers_heal_round(round);
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (!heals_at_rendezvous(client) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(20ms);  // polling the service's state, not a synchronisation
  }
  EXPECT_TRUE(heals_at_rendezvous(client)) << "the rendezvous did not learn that n0's workers heal";
  keeper.set_workers_heal_round(-1);
  while (heals_at_rendezvous(client) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_FALSE(heals_at_rendezvous(client)) << "nor that they stopped healing";
}

// A whole job suspended 30 s and resumed: the keep-alive in flight when the
// agent stopped comes back 30 s after it was sent, past its 1 s deadline.
// That is the agent's own stall, not the rendezvous' silence (the lease is
// not lost); a call that failed at its deadline, or soon after, is silence.
TEST(LeaseKeeper, ACallThatReturnsLongPastItsDeadlineIsTheProcesssOwnStall) {
  using std::chrono::milliseconds;
  EXPECT_EQ(call_stall(30s, 1s), 30s - 1s - milliseconds(50));
  EXPECT_EQ(call_stall(1s, 1s), milliseconds(0));
  EXPECT_EQ(call_stall(milliseconds(1030), 1s), milliseconds(0));  // a wake-up's slack
  EXPECT_EQ(call_stall(milliseconds(200), 1s), milliseconds(0));
}

TEST(ClockOffset, MidpointOfTheRoundTripAndTheShortestWins) {
  // Sent at 1000, answered at 1400, the service said 10200: offset 9000.
  ClockEstimate e = better_clock_estimate(std::nullopt, 1000, 1400, 10200);
  EXPECT_EQ(e.offset_ns, 9000);
  EXPECT_EQ(e.rtt_ns, 400);
  // A slower sample (rtt 1000) does not replace it; a faster one (100) does.
  e = better_clock_estimate(e, 2000, 3000, 99999);
  EXPECT_EQ(e.offset_ns, 9000);
  e = better_clock_estimate(e, 5000, 5100, 14000);
  EXPECT_EQ(e.offset_ns, 8950);
  EXPECT_EQ(e.rtt_ns, 100);
  // A service clock behind ours: a negative offset.
  EXPECT_EQ(better_clock_estimate(std::nullopt, 5000, 5002, 1001).offset_ns, -4000);
}

TEST(ClockOffset, KeepAlivesCarryTheServiceClockAndTheLeaseKeeperEstimatesIt) {
  RendezvousServer server(ServerOptions{"127.0.0.1", 0, {}, {}}, no_nccl);
  RendezvousClient client(server.address());
  join_n0(client);

  // Same host, same clock: the stamp falls between send and answer.
  const int64_t before = now_ns();
  NodeView v = client.keep_alive("job", "n0", 5s);
  const int64_t after = now_ns();
  EXPECT_GE(v.server_mono_ns, before);
  EXPECT_LE(v.server_mono_ns, after);

  LeaseKeeper keeper(client, LeaseOptions{"job", "n0", 20ms, 5s, {}});
  EXPECT_FALSE(keeper.clock() && keeper.clock()->rtt_ns < 0);
  pollfd fd{keeper.fd(), POLLIN, 0};
  ASSERT_EQ(poll(&fd, 1, 5000), 1);  // the first answer is news
  auto clock = keeper.clock();
  ASSERT_TRUE(clock);
  EXPECT_GT(clock->rtt_ns, 0);
  EXPECT_LE(std::abs(clock->offset_ns), clock->rtt_ns / 2 + 1);
}

}  // namespace
}  // namespace ddprun
