// Worker logs are never lost silently and never overwritten: a full disk is
// reported (which file, how much was lost) without changing the job's exit
// code, and every run writes into a folder of its own.
#include <gtest/gtest.h>
#include <errno.h>
#include <string.h>
#include <sys/mount.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>

#include "support/job_helpers.h"
#include "support/process.h"

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using ddptest::contains;
using ddptest::Finished;

std::string slurp(const fs::path& f) {
  std::ifstream in(f);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A 64 KiB tmpfs, unmounted at the end of the test.
struct SmallDisk {
  fs::path dir;
  std::string error;  // why it could not be mounted
  SmallDisk() : dir(ddptest::temp_path("logs", "small-disk")) {
    fs::create_directories(dir);
    if (mount("tmpfs", dir.c_str(), "tmpfs", 0, "size=64k,mode=0755") != 0) error = strerror(errno);
  }
  ~SmallDisk() {
    if (error.empty()) umount2(dir.c_str(), MNT_DETACH);
    fs::remove_all(dir);
  }
};

TEST(LogFiles, AFullDiskIsReportedWithWhatWasLostAndTheExitCodeStays) {
  SmallDisk disk;
  if (!disk.error.empty()) GTEST_SKIP() << "cannot mount a tmpfs here (needs root): " << disk.error;
  constexpr int kLines = 40000;  // 40 MB of output for 64 KiB of disk
  Finished f = ddptest::run({DDPRUN_BIN, "--nproc", "1", "--log-dir", disk.dir.string(), "--redirects", "3",
                             PROBE_BIN, "flood", std::to_string(kLines), "0"});
  EXPECT_EQ(f.exit_code, 0) << f.err;  // the job's own
  EXPECT_TRUE(contains(f.err, "/stdout.log (No space left on device); what it cannot take is counted as lost"))
      << f.err;
  EXPECT_TRUE(contains(f.err, "ddprun: the worker logs are incomplete: ")) << f.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(f.err, m, std::regex(R"(rank 0: (\S+/stdout\.log): (\d+) line\(s\), \d+ byte\(s\) lost \(No space left on device\))")))
      << f.err;
  // What the file kept and what was reported lost make up every line.
  const std::string kept = slurp(m[1].str());
  EXPECT_EQ(std::count(kept.begin(), kept.end(), '\n') + std::stol(m[2]), kLines);
}

TEST(LogFiles, ASecondRunWithTheSameLogDirKeepsTheFirstsLogs) {
  const fs::path dir = ddptest::temp_path("logs", "two-runs");
  std::vector<fs::path> run_dirs;
  for (const char* code : {"3", "4"}) {
    Finished f = ddptest::run({DDPRUN_BIN, "--nproc", "1", "--rdzv-id", "samejob", "--log-dir", dir.string(),
                               PROBE_BIN, "exit", code});
    EXPECT_EQ(f.exit_code, 1) << f.err;
    std::smatch m;
    ASSERT_TRUE(std::regex_search(f.err, m, std::regex(R"(worker logs are in (\S+))"))) << f.err;
    run_dirs.push_back(m[1].str());
    EXPECT_EQ(fs::path(m[1].str()).parent_path(), dir) << f.err;
    EXPECT_EQ(fs::path(m[1].str()).filename().string().rfind("samejob-", 0), 0u) << f.err;
  }
  ASSERT_NE(run_dirs[0], run_dirs[1]);
  EXPECT_EQ(slurp(run_dirs[0] / "attempt_0" / "rank0" / "stderr.log"), "rank 0 exits with 3\n");
  EXPECT_EQ(slurp(run_dirs[1] / "attempt_0" / "rank0" / "stderr.log"), "rank 0 exits with 4\n");
  fs::remove_all(dir);
}

}  // namespace
