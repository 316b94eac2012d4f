// A console nobody reads (`ddprun ... | less` left paused, a stalled pipe)
// does not stop supervision: a worker that floods its output and fails is
// reported at once, and SIGTERM still ends the job.
#include <gtest/gtest.h>
#include <signal.h>

#include "support/job_helpers.h"
#include "support/process.h"

namespace {

using namespace std::chrono_literals;
using ddptest::contains;
using ddptest::Finished;
using ddptest::Process;

TEST(StalledConsole, AFloodingWorkerThatFailsIsReportedAtOnce) {
  // 100 MB of lines, far beyond a pipe's buffer and ddprun's backlog.
  Process p({DDPRUN_BIN, "--nproc", "2", PROBE_BIN, "flood", "100000", "5"}, {}, Process::kStallStdout);
  // Generous bound: only a ddprun blocked on its stdout comes near it.
  Finished f = p.finish(60s);
  EXPECT_EQ(f.exit_code, 1) << f.err;
  EXPECT_TRUE(contains(f.err, "root cause (earliest failure): rank ")) << f.err;
  EXPECT_TRUE(contains(f.err, "exit code 5")) << f.err;
  EXPECT_TRUE(contains(f.err, "line(s) of output dropped: the console was not reading")) << f.err;
}

TEST(StalledConsole, SigtermStillEndsTheJob) {
  Process p({DDPRUN_BIN, "--nproc", "1", "--stop-timeout", "2", PROBE_BIN, "flood", "-1", "0"}, {},
            Process::kStallStdout);
  // Its stderr stays readable: the worker's first line there says the
  // flood (to ddprun's stdout, soon full) has begun.
  ASSERT_TRUE(p.wait_for_err_line([](const std::string& l) { return contains(l, "]:flooding"); }, 30s));
  p.signal(SIGTERM);
  Finished f = p.finish(60s);
  EXPECT_EQ(f.exit_code, 128 + SIGTERM) << f.err;
  EXPECT_TRUE(contains(f.err, "stopped by SIGTERM")) << f.err;
}

// `ddprun ... 2>&1 | less`, paused: the workers' lines and ddprun's own
// (its warnings, the summary) share the stalled pipe. The workers' lines
// must leave room for ddprun's, which are written the ordinary, blocking way.
TEST(StalledConsole, ASharedStdoutAndStderrLeaveRoomForDdprunsOwnLines) {
  Process p({DDPRUN_BIN, "--nproc", "2", PROBE_BIN, "flood", "100000", "5"}, {}, Process::kStallBoth);
  Finished f = p.finish(60s);
  EXPECT_EQ(f.exit_code, 1) << "ddprun did not end (blocked writing its own lines?)";
}

// A console that reads, only late and slowly, loses nothing: the lines
// still waiting when the workers are done go out as it takes them.
TEST(StalledConsole, ASlowReaderGetsEveryLineAfterTheWorkersAreDone) {
  // 2 x 3000 lines of 200+ bytes: far more than a pipe holds, all written
  // before the reader, which waits a little, takes any.
  const std::string cmd = std::string(DDPRUN_BIN) + " --nproc 2 " + PROBE_BIN +
                          " spam 3000 | { sleep 0.3; while IFS= read -r l; do echo \"$l\"; done; }";
  Finished f = ddptest::run({"/bin/bash", "-c", cmd});
  EXPECT_EQ(f.exit_code, 0) << f.err;
  size_t lines = 0;
  for (size_t at = f.out.find("]:line "); at != std::string::npos; at = f.out.find("]:line ", at + 1)) ++lines;
  EXPECT_EQ(lines, 6000u) << f.err;
  EXPECT_FALSE(contains(f.err, "dropped")) << f.err;
}

}  // namespace
