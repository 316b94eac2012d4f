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
  Finished f = ddptest::run({DDPRUN_BIN, "--nproc", "2", TRAIN_BIN, "--limit", "1000", "--epochs", "1",
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

TEST(Storage, ADatasetCacheFolderThatIsTooSmallFallsBackToTheSource) {
  // The label files fit, the 47 MB of training images do not.
  ddptest::Tmpfs disk(temp("cache-small"), 512);
  if (!disk.ok()) GTEST_SKIP() << disk.why_not();
  for (int run = 1; run <= 2; ++run) {
    SCOPED_TRACE("run " + std::to_string(run));
    Finished f = ddptest::run(small_train(), {"DDPRUN_CACHE_DIR=" + disk.path().string()});
    ASSERT_EQ(f.exit_code, 0) << f.err;
    EXPECT_TRUE(contains(f.err, "warning: dataset cache not written")) << f.err;
    EXPECT_TRUE(contains(f.err, "No space left on device")) << f.err;
  }
  for (const auto& e : fs::directory_iterator(disk.path())) {
    EXPECT_FALSE(contains(e.path().filename().string(), "train-images")) << "a partial cache: " << e.path();
  }
}

TEST(Storage, ATruncatedDatasetCacheIsReplaced) {
  const fs::path cache = temp("cache-cut");
  const ddptest::EnvChanges env{"DDPRUN_CACHE_DIR=" + cache.string()};
  Finished first = ddptest::run(small_train(), env);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  fs::path images;
  for (const auto& e : fs::directory_iterator(cache)) {
    if (contains(e.path().filename().string(), "train-images")) images = e.path();
  }
  ASSERT_FALSE(images.empty());
  const auto whole = fs::file_size(images);
  fs::resize_file(images, whole / 3);
  Finished second = ddptest::run(small_train(), env);
  ASSERT_EQ(second.exit_code, 0) << second.err;
  EXPECT_TRUE(contains(second.err, "warning: dataset cache " + images.string() + " is damaged")) << second.err;
  EXPECT_EQ(fs::file_size(images), whole);  // written again, whole
  fs::remove_all(cache);
}

}  // namespace
