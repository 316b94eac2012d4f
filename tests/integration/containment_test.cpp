// Nothing a job starts outlives it: a worker's child that leaves the
// worker's session (setsid) and ignores SIGTERM is gone when the job ends,
// whichever way it ends (a failed rank, a worker that succeeds, SIGTERM or
// SIGKILL to ddprun). Needs a cgroup v2 ddprun may write to (root here);
// skipped, saying so, where ddprun warns that it has none.
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>

#include "support/job_helpers.h"
#include "support/process.h"

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using ddptest::contains;
using ddptest::Finished;
using ddptest::Process;

constexpr const char* kNoCgroup = "cannot keep the job's processes in a cgroup";

// The probe's grandchild: its pid (from the file it wrote), killed at the
// end of the test whatever happened, so that a failing test leaves nothing.
struct Leftover {
  pid_t pid = -1;
  explicit Leftover(const fs::path& file) {
    std::ifstream in(file);
    in >> pid;
  }
  ~Leftover() {
    if (pid > 0) kill(pid, SIGKILL);
  }
};

std::vector<std::string> job(const fs::path& pid_file, std::vector<std::string> mode) {
  std::vector<std::string> argv{DDPRUN_BIN, "--nproc", "1", "--stop-timeout", "3", PROBE_BIN,
                                "leave-child", pid_file.string()};
  argv.insert(argv.end(), mode.begin(), mode.end());
  return argv;
}

void expect_gone(const Leftover& left, const Finished& f) {
  if (contains(f.err, kNoCgroup)) GTEST_SKIP() << "ddprun cannot use a cgroup here: " << f.err;
  ASSERT_GT(left.pid, 0) << "the worker's child wrote no pid\n" << f.out << f.err;
  EXPECT_TRUE(ddptest::exits_within(left.pid, 10s)) << "left behind: " << left.pid << "\n" << f.err;
}

// The worker exits on its own with code; the job's exit code is expected.
void worker_exits(const std::string& name, const std::string& code, int job_exit_code) {
  const fs::path file = ddptest::temp_path("contain", name + ".pid");
  Finished f = ddptest::run(job(file, {"exit", code}));
  Leftover left(file);
  EXPECT_EQ(f.exit_code, job_exit_code) << f.err;
  expect_gone(left, f);
  fs::remove(file);
}

TEST(Containment, AFailedWorkersLeftoverChildDiesWithIt) { worker_exits("failed", "3", 1); }

TEST(Containment, ASucceededWorkersLeftoverChildDiesWithIt) { worker_exits("succeeded", "0", 0); }

// ddprun is signalled once its worker (and so the grandchild) is running.
Finished signal_running_job(const fs::path& file, int sig) {
  Process p(job(file, {"wait"}));
  EXPECT_TRUE(p.wait_for_line([](const std::string& l) { return contains(l, "]:ready "); }, 30s)) << p.out();
  p.signal(sig);
  return p.finish(60s);
}

TEST(Containment, SigtermToDdprunLeavesNothing) {
  const fs::path file = ddptest::temp_path("contain", "term.pid");
  Finished f = signal_running_job(file, SIGTERM);
  Leftover left(file);
  EXPECT_EQ(f.exit_code, 128 + SIGTERM) << f.err;
  expect_gone(left, f);
  fs::remove(file);
}

TEST(Containment, SigkillToDdprunLeavesNothing) {
  const fs::path file = ddptest::temp_path("contain", "kill.pid");
  Finished f = signal_running_job(file, SIGKILL);
  Leftover left(file);
  EXPECT_EQ(f.signal, SIGKILL);
  expect_gone(left, f);
  fs::remove(file);
}

}  // namespace

namespace {

// Where no cgroup can be made (here: cgroup2 mounted read-only in a mount
// namespace of the test's own), the job still runs, after one warning.
TEST(Containment, WithoutACgroupTheJobRunsAfterOneWarning) {
  const std::string script =
      "m=$(grep -m1 ' - cgroup2 ' /proc/self/mountinfo | cut -d' ' -f5) && [ -n \"$m\" ] && "
      "mount -o remount,bind,ro \"$m\" || exit 99; exec \"$@\"";
  if (!fs::exists("/usr/bin/unshare")) GTEST_SKIP() << "no /usr/bin/unshare";
  Finished f = ddptest::run({"/usr/bin/unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh",
                             DDPRUN_BIN, "--nproc", "2", PROBE_BIN, "exit", "0"});
  if (f.exit_code == 99 || contains(f.err, "unshare: ")) {
    GTEST_SKIP() << "cannot make a read-only cgroup2 mount here (needs root): " << f.err;
  }
  EXPECT_EQ(f.exit_code, 0) << f.err;
  size_t warnings = 0;
  for (size_t at = f.err.find(kNoCgroup); at != std::string::npos; at = f.err.find(kNoCgroup, at + 1)) ++warnings;
  EXPECT_EQ(warnings, 1u) << f.err;
  EXPECT_TRUE(contains(f.err, "Read-only file system")) << f.err;
  EXPECT_TRUE(contains(f.out, "[rank1]:about to exit")) << f.out;
}

}  // namespace
