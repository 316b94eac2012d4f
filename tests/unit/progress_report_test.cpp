// Progress reports (worker_lib's progress.h) reach the agent's heartbeat
// table through the worker's slot, with the checkpoint fields kept across
// reports; and rank 0's own progress line.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "agent/health/heartbeat_table.h"
#include "ddp/progress.h"
#include "base/heartbeat.h"

namespace {

namespace ch = ddprun::channel;

TEST(Progress, ReportsReachTheAgentThroughTheHeartbeatSlot) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("ddprun-progress-" + std::to_string(getpid()))).string();
  ddprun::HeartbeatTable table(path, 2);
  ddp::Heartbeat hb(path, 1);
  ASSERT_NE(hb.progress_block(), nullptr);
  ddp::ProgressReporter reporter(hb.progress_block());
  ch::Progress p{};
  ASSERT_TRUE(table.progress(1, &p));
  EXPECT_EQ(p.flags, 0u);  // nothing reported yet

  reporter.restored(40);
  reporter.report({.step = 41, .total_steps = 100, .epoch = 2, .loss = 0.5, .samples = 1312});
  reporter.saved(40);
  ASSERT_TRUE(table.progress(1, &p));
  EXPECT_EQ(p.step, 41);
  EXPECT_EQ(p.total_steps, 100);
  EXPECT_EQ(p.epoch, 2);
  EXPECT_EQ(p.loss, 0.5);
  EXPECT_EQ(p.samples, 1312);
  EXPECT_EQ(p.saved_step, 40);
  EXPECT_EQ(p.restored_step, 40);
  EXPECT_EQ(p.flags, ch::Progress::kHasStep | ch::Progress::kHasTotalSteps | ch::Progress::kHasEpoch |
                         ch::Progress::kHasLoss | ch::Progress::kHasSaved | ch::Progress::kHasRestored);
  EXPECT_GT(p.updated_ns, 0);

  // A report without loss or epoch: those are unknown now, the checkpoints stay.
  reporter.report({.step = 42});
  ASSERT_TRUE(table.progress(1, &p));
  EXPECT_EQ(p.step, 42);
  EXPECT_EQ(p.flags, ch::Progress::kHasStep | ch::Progress::kHasSaved | ch::Progress::kHasRestored);
  // The other slot saw nothing.
  ASSERT_TRUE(table.progress(0, &p));
  EXPECT_EQ(p.flags, 0u);
}

TEST(Progress, ReporterWithoutABlockOnlyRemembers) {
  ddp::ProgressReporter reporter(nullptr);
  reporter.report({.step = 3});
  reporter.saved(2);
  EXPECT_EQ(reporter.last().step, 3);
  EXPECT_EQ(reporter.last().saved_step, 2);
}

TEST(Progress, Rank0PrintsPlainLinesWhenNotOnATerminal) {
  char* buf = nullptr;
  size_t len = 0;
  std::FILE* out = open_memstream(&buf, &len);
  {
    ddp::ProgressReporter reporter(nullptr, {.enabled = true, .interval_seconds = 0, .out = out, .is_tty = 0});
    reporter.report({.step = 0, .total_steps = 10, .epoch = 0, .loss = 2.0, .samples = 0});
    reporter.report({.step = 5, .total_steps = 10, .epoch = 1, .loss = 1.25, .samples = 320});
  }
  std::fclose(out);
  const std::string text(buf, len);
  std::free(buf);
  // The first report starts the clock; the second prints one line.
  EXPECT_EQ(text.find("ddp: step 5/10 epoch 2 loss 1.25"), 0u) << text;
  EXPECT_NE(text.find("samples/s"), std::string::npos) << text;
  EXPECT_NE(text.find("ETA "), std::string::npos) << text;
  EXPECT_EQ(text.find('\r'), std::string::npos);
  EXPECT_EQ(text.back(), '\n');
}

TEST(Progress, QuietWhenTheAgentShowsProgress) {
  char* buf = nullptr;
  size_t len = 0;
  std::FILE* out = open_memstream(&buf, &len);
  {
    ddp::ProgressReporter reporter(nullptr, {.enabled = false, .interval_seconds = 0, .out = out, .is_tty = 0});
    for (int s = 0; s < 5; ++s) reporter.report({.step = s});
  }
  std::fclose(out);
  EXPECT_EQ(len, 0u);
  std::free(buf);
}

}  // namespace
