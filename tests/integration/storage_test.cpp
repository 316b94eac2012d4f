// The default job on storage that fails it: a checkpoint folder that fills
// up, a dataset cache folder that is too small, a cache file cut short.
// Each run must finish and say what it could not write.
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>

#include "support/job_helpers.h"
#include "support/process.h"
#include "support/tmpfs.h"

namespace {

namespace fs = std::filesystem;
using ddptest::contains;
using ddptest::Finished;

fs::path temp(const std::string& name) { return ddptest::temp_path("storage", name); }

// train as a plain single process (no ddprun): a few steps, then the test set.
std::vector<std::string> small_train(const std::vector<std::string>& flags = {}) {
  std::vector<std::string> argv{TRAIN_BIN, "--limit", "256", "--epochs", "1"};
  argv.insert(argv.end(), flags.begin(), flags.end());
  return argv;
}

TEST(Storage, AFullCheckpointFolderIsWarnedAboutCountedAndTrainingFinishes) {
  // The CNN's checkpoint is about 1.7 MB: room for one, not for a second.
  ddptest::Tmpfs disk(temp("ckpt-full"), 2600);
  if (!disk.ok()) GTEST_SKIP() << disk.why_not();
  const fs::path summary = temp("ckpt-full.json");
  Finished f = ddptest::run({DDPRUN_BIN, "--nproc", "2", TRAIN_BIN, "--limit", "2000", "--epochs", "1",
                             "--checkpoint-dir", disk.path().string(), "--checkpoint-every", "10",
                             "--keep-checkpoints", "1", "--summary-json", summary.string()});
  ASSERT_EQ(f.exit_code, 0) << f.err;
  EXPECT_TRUE(contains(f.err, "not saved: cannot write " + disk.path().string())) << f.err;
  EXPECT_TRUE(contains(f.err, "No space left on device")) << f.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(f.out, m, std::regex(R"(checkpoints: (\d+) written, (\d+) failed)"))) << f.out;
  EXPECT_GE(std::stoi(m[1]), 1);
  EXPECT_GE(std::stoi(m[2]), 1);
  EXPECT_FALSE(ddptest::checksum_in(summary).empty());
  fs::remove(summary);
}

}  // namespace
