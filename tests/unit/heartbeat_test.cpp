#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "agent/health/heartbeat_table.h"
#include "base/heartbeat.h"

namespace {

TEST(Heartbeat, WorkerBeatsReachTheAgentsTable) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("ddprun-hb-" + std::to_string(getpid()))).string();
  {
    ddprun::HeartbeatTable table(path, 3);
    ddp::Heartbeat worker(path, 2);  // a worker maps its own slot
    EXPECT_EQ(table.read(2), 0u);
    worker.beat();
    worker.beat();
    EXPECT_EQ(table.read(2), 2u);
    EXPECT_EQ(table.read(1), 0u);  // other slots untouched
    EXPECT_FALSE(table.in_step(2));
    worker.set_in_step(true);  // inside a ddp::Healer step: a straggler may be replaced now
    EXPECT_TRUE(table.in_step(2));
    EXPECT_FALSE(table.in_step(1));
    table.reset();
    EXPECT_EQ(worker.count(), 0u);
    try {
      ddp::Heartbeat bad(path, 3);
      FAIL();
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("has no slot 3"), std::string::npos);
    }
  }
  EXPECT_FALSE(std::filesystem::exists(path));  // the agent removes it
  ddp::Heartbeat off("", 0);
  off.beat();  // without a file: nothing, and no crash
  EXPECT_EQ(off.count(), 0u);
}

// A worker that waits inside a collective (its flight record's newest
// entry under way) is alive: its pulse beats while it waits, and stops
// when the collective returns (then only its own beats count).
TEST(Heartbeat, ThePulseBeatsWhileTheWorkerWaitsInACollective) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("ddprun-hb-pulse-" + std::to_string(getpid()))).string();
  ddprun::HeartbeatTable table(path, 1);
  ddp::Heartbeat worker(path, 0);
  const uint64_t id = ddprun::channel::flight_begin(worker.flight_ring(), ddprun::channel::FlightOp::kAllReduce, 1, 4,
                                                    0, 0, 1);
  // Waits for beats it did not make (event: the counter moves), 60 s at most.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (table.read(0) < 3 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // polling a counter, not a synchronisation
  }
  EXPECT_GE(table.read(0), 3u) << "the pulse beats inside a collective";
  ddprun::channel::flight_end(worker.flight_ring(), id, false, 2);
  const uint64_t after = table.read(0);
  std::this_thread::sleep_for(3 * ddp::Heartbeat::kWaitPulse);
  EXPECT_LE(table.read(0), after + 1) << "no pulse outside a collective (one may have been under way)";
}

// A shrink moves a worker's ranks: the agent writes the placement into its
// slot, the worker reads it, and a replacement's fresh slot keeps it (it
// runs where the worker it replaces ran); a new attempt clears it.
TEST(Heartbeat, APlacementReachesTheWorkerAndOutlivesAReplacementsSlotReset) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("ddprun-hb-place-" + std::to_string(getpid()))).string();
  ddprun::HeartbeatTable table(path, 2);
  ddp::Heartbeat worker(path, 1);
  EXPECT_FALSE(worker.placement());  // the launch environment holds
  table.set_placement(1, 3, 5, 6, 2, 3);
  auto p = worker.placement();
  ASSERT_TRUE(p);
  EXPECT_EQ(p->generation, 3u);
  EXPECT_EQ(p->rank, 5);
  EXPECT_EQ(p->world_size, 6);
  EXPECT_EQ(p->node_rank, 2);
  EXPECT_EQ(p->num_nodes, 3);
  EXPECT_FALSE(ddp::Heartbeat(path, 0).placement());  // its own slot only
  worker.beat();
  table.reset_slot(1, 4);
  EXPECT_EQ(worker.count(), 0u);
  EXPECT_EQ(worker.heal_generation(), 4u);
  ASSERT_TRUE(worker.placement());
  EXPECT_EQ(worker.placement()->rank, 5);
  table.reset();
  EXPECT_FALSE(worker.placement());
}

}  // namespace
