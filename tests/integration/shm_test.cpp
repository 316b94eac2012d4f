// The shared-memory CPU communicator with real processes under ddprun: a
// segment a dead worker left is removed by the agent, a peer process that
// dies is named at once rather than waited for, and a /dev/shm without room
// falls back to Gloo on every rank (or fails, when shm was asked for).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <regex>

#include "support/job_helpers.h"
#include "support/process.h"

namespace {

namespace fs = std::filesystem;
using ddptest::contains;
using ddptest::Finished;

TEST(SharedMemory, ASegmentADeadWorkerLeftIsRemovedByTheAgent) {
  Finished f = ddptest::run({DDPRUN_BIN, "--nproc", "1", PROBE_BIN, "shm-leak"});
  ASSERT_EQ(f.exit_code, 0) << f.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(f.out, m, std::regex(R"(segment (ddprun-\S+))"))) << f.out;
  const fs::path left = fs::path("/dev/shm") / m[1].str();
  EXPECT_FALSE(fs::exists(left)) << left << " is still there";
  fs::remove(left);  // whatever happened, leave nothing
}

TEST(SharedMemory, APeerProcessThatDiesIsNamedAtOnce) {
  // Rank 1 exits with 3 after joining; rank 0, in an all_reduce with a 60 s
  // timeout and ignoring the agent's SIGTERM, must say so within a second.
  Finished f = ddptest::run({DDPRUN_BIN, "--nproc", "2", "--stop-timeout", "30", PROBE_BIN, "shm-peer-exits"});
  EXPECT_NE(f.exit_code, 0);  // rank 1 failed
  std::smatch m;
  ASSERT_TRUE(std::regex_search(f.out, m, std::regex(R"(\[rank0\]:shm error after ([0-9.]+) s: (.*))"))) << f.out << f.err;
  EXPECT_LT(std::stod(m[1]), 10.0) << m[0];
  EXPECT_TRUE(std::regex_search(m[2].str(), std::regex(R"(^ddp: all_reduce on rank 0 of 2: peer rank 1 \(pid \d+\) exited during the collective)")))
      << m[2];
}

// ddprun in a mount namespace whose /dev/shm is a 128 KiB tmpfs: too small
// for a 2-rank segment (4 MiB).
Finished with_tiny_dev_shm(const std::vector<std::string>& job, const ddptest::EnvChanges& env) {
  std::vector<std::string> argv{"/usr/bin/unshare", "--mount", "--propagation", "private", "sh", "-c",
                                "mount -t tmpfs -o size=128k,mode=1777 tmpfs /dev/shm || exit 99; exec \"$@\"",
                                "sh"};
  argv.insert(argv.end(), job.begin(), job.end());
  return ddptest::run(argv, env);
}

TEST(SharedMemory, NoRoomInDevShmFallsBackToGlooOnEveryRank) {
  if (!fs::exists("/usr/bin/unshare")) GTEST_SKIP() << "no /usr/bin/unshare";
  Finished f = with_tiny_dev_shm({DDPRUN_BIN, "--nproc", "2", COLLECTIVE_CHECK_BIN}, {});
  if (f.exit_code == 99 || contains(f.err, "unshare: ")) GTEST_SKIP() << "cannot mount a tmpfs here (needs root): " << f.err;
  ASSERT_EQ(f.exit_code, 0) << f.out << f.err;
  EXPECT_TRUE(contains(f.out, "[rank0]:collectives ok on rank 0 of 2 (gloo)")) << f.out;
  EXPECT_TRUE(contains(f.out, "[rank1]:collectives ok on rank 1 of 2 (gloo)")) << f.out;
  EXPECT_TRUE(contains(f.err, "shared memory for the world failed, CPU tensors go through Gloo")) << f.err;
  EXPECT_TRUE(contains(f.err, "no room for 5 MiB in /dev/shm")) << f.err;

  // Asked for shared memory: an error, naming the setting, on every rank.
  Finished g = with_tiny_dev_shm({DDPRUN_BIN, "--nproc", "2", COLLECTIVE_CHECK_BIN}, {"DDPRUN_CPU_COMM=shm"});
  EXPECT_NE(g.exit_code, 0);
  EXPECT_TRUE(contains(g.err, "no room for 5 MiB in /dev/shm")) << g.err;
  EXPECT_TRUE(contains(g.err, "DDPRUN_CPU_COMM=shm; auto would fall back to Gloo")) << g.err;
}

}  // namespace
