// The lease keeper's news travels at once: what the agent learns of its own
// workers (they heal in place) reaches the rendezvous without waiting for
// the next keep-alive interval, so that a node arriving meanwhile joins the
// running round instead of restarting it.
#include <gtest/gtest.h>

#include <poll.h>

#include <chrono>
#include <stdexcept>
#include <thread>

#include "agent/lease_keeper.h"
#include "rendezvous/client.h"
#include "rendezvous/server.h"

namespace ddprun {
namespace {

using namespace std::chrono_literals;

std::string no_nccl() { throw std::runtime_error("no NCCL in this test"); }

bool heals_at_rendezvous(RendezvousClient& client) {
  const JobStatus s = client.status("job", 5s);
  return !s.nodes.empty() && s.nodes.front().heals;
}

TEST(LeaseKeeper, WorkersThatHealAreToldAtOnceNotAtTheNextInterval) {
  RendezvousServer server(ServerOptions{"127.0.0.1", 0, {}, {}}, no_nccl);
  RendezvousClient client(server.address());
  JoinArgs a;
  a.job_id = "job";
  a.node.node_id = "n0";
  a.node.local_world_size = 1;
  a.settings = RoundSettings{1, 2, 0ms, 0};
  a.lease = 10min;
  a.timeout = 5s;
  const int64_t round = client.join(a).assignment.round;

  // Keep-alives every 10 minutes: only news can make one go sooner.
  LeaseKeeper keeper(client, LeaseOptions{"job", "n0", 10min, 10min});
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

}  // namespace
}  // namespace ddprun
