// What ddprun and its workers write (TMPDIR, --log-dir, --trace) on a full
// file system and in a folder someone else prepared: a one-line error that
// names the folder and the setting to change, never SIGBUS; never a write
// through a symbolic link planted at an output file's name.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "support/job_helpers.h"
#include "support/process.h"
#include "support/tmpfs.h"

namespace {

namespace fs = std::filesystem;
using ddptest::contains;
using ddptest::Finished;

fs::path temp(const std::string& name) { return ddptest::temp_path("out", name); }

// Fills the file system at dir but for about `leave_kb` KiB.
void fill(const fs::path& dir, int leave_kb) {
  std::ofstream f(dir / "filler", std::ios::binary);
  const std::string block(1024, 'x');
  while (f.write(block.data(), block.size())) f.flush();
  f.close();
  fs::resize_file(dir / "filler", fs::file_size(dir / "filler") - static_cast<uintmax_t>(leave_kb) * 1024);
}

std::string slurp(const fs::path& f) {
  std::ifstream in(f);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(OutputFiles, AFullTmpdirIsAOneLineErrorNamingIt) {
  ddptest::Tmpfs disk(temp("full-tmp"), 64);
  if (!disk.ok()) GTEST_SKIP() << disk.why_not();
  fill(disk.path(), 0);
  Finished f = ddptest::run({DDPRUN_BIN, "--nproc", "2", PROBE_BIN, "exit", "0"},
                            {"TMPDIR=" + disk.path().string()});
  EXPECT_EQ(f.signal, 0) << f.err;  // it was SIGBUS (exit 135) with no message
  EXPECT_EQ(f.exit_code, 1) << f.err;
  EXPECT_TRUE(contains(f.err, "error: cannot allocate heartbeat file " + disk.path().string() + "/ddprun-")) << f.err;
  EXPECT_TRUE(contains(f.err, "No space left on device; make room there or point TMPDIR at another folder")) << f.err;
  // It left nothing behind there.
  for (const auto& e : fs::directory_iterator(disk.path())) EXPECT_EQ(e.path().filename(), "filler");
}

TEST(OutputFiles, AFullLogDirIsAOneLineErrorNamingTheFlag) {
  ddptest::Tmpfs disk(temp("full-logs"), 64);
  if (!disk.ok()) GTEST_SKIP() << disk.why_not();
  fill(disk.path(), 0);
  Finished f = ddptest::run({DDPRUN_BIN, "--nproc", "2", "--log-dir", disk.path().string(), PROBE_BIN, "exit", "0"});
  EXPECT_EQ(f.signal, 0) << f.err;
  EXPECT_EQ(f.exit_code, 1) << f.err;
  EXPECT_TRUE(contains(f.err, "No space left on device; make room there or pick another --log-dir")) << f.err;
}

// 12 MiB of trace per worker on a disk with a few KiB left: the worker says
// so and fails; it was killed by SIGBUS once its records passed the space.
TEST(OutputFiles, ATraceOnANearlyFullDiskFailsTheWorkerWithAMessage) {
  ddptest::Tmpfs disk(temp("full-trace"), 256);
  if (!disk.ok()) GTEST_SKIP() << disk.why_not();
  fill(disk.path(), 32);
  Finished f = ddptest::run({DDPRUN_BIN, "--nproc", "1", "--trace", disk.path().string() + "/t", TRAIN_BIN,
                             "--limit", "2048", "--epochs", "1"});
  EXPECT_EQ(f.exit_code, 1) << f.err;
  EXPECT_FALSE(contains(f.err, "SIGBUS")) << f.err;
  EXPECT_TRUE(contains(f.err, "ddp: cannot allocate trace file " + disk.path().string() + "/t/")) << f.err;
  EXPECT_TRUE(contains(f.err, "No space left on device")) << f.err;
}

// A link planted at trace.json (and summary.txt) in the --trace folder:
// the merge refuses to write through it, and the target is untouched.
TEST(OutputFiles, LinksPlantedAtOutputNamesAreNotWrittenThrough) {
  const fs::path dir = temp("planted");
  const fs::path victim = temp("victim");
  fs::create_directories(dir);
  { std::ofstream(victim) << "precious\n"; }
  fs::create_symlink(victim, dir / "trace.json");
  fs::create_symlink(victim, dir / "summary.txt");
  Finished f = ddptest::run({DDPRUN_BIN, "--nproc", "1", "--trace", dir.string(), PROBE_BIN, "exit", "0"});
  EXPECT_EQ(f.exit_code, 0) << f.err;
  EXPECT_EQ(slurp(victim), "precious\n");
  EXPECT_TRUE(contains(f.err, "trace.json: it is a symbolic link (output files are never written through one)"))
      << f.err;
  fs::remove_all(dir);
  fs::remove(victim);
}

// A folder another user prepared (or may write to) is refused up front.
TEST(OutputFiles, AnOutputFolderOthersCanWriteToIsAUsageError) {
  const fs::path dir = temp("shared");
  fs::create_directories(dir);
  fs::permissions(dir, fs::perms::all | fs::perms::sticky_bit);
  for (const char* flag : {"--trace", "--log-dir"}) {
    Finished f = ddptest::run({DDPRUN_BIN, "--nproc", "1", flag, dir.string(), PROBE_BIN, "exit", "0"});
    EXPECT_EQ(f.exit_code, 2) << f.err;
    EXPECT_TRUE(contains(f.err, std::string(flag) + ": refusing '" + dir.string() + "': other users may write to it")) << f.err;
    EXPECT_FALSE(contains(f.out, "about to exit")) << f.out;
  }
  fs::remove_all(dir);
}

}  // namespace
