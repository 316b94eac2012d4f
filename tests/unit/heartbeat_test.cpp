#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "agent/heartbeat_table.h"
#include "ddp/heartbeat.h"

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

}  // namespace
