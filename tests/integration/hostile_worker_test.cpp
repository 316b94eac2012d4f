// A worker cannot stall or deface ddprun through what it leaves behind:
// an error file that is a FIFO or a link to /dev/zero, escape sequences in
// its messages.
#include <gtest/gtest.h>

#include "support/job_helpers.h"
#include "support/process.h"

namespace {

using namespace std::chrono_literals;
using ddptest::contains;
using ddptest::Finished;

// Generous: ddprun ends at once; only a hang (the old open() of a FIFO,
// reading /dev/zero) comes near it.
constexpr auto kEnds = 30s;

Finished failing_job(const std::string& kind) {
  return ddptest::run({DDPRUN_BIN, "--nproc", "1", PROBE_BIN, "error-file", kind}, {}, kEnds);
}

TEST(HostileWorker, AFifoAsErrorFileDoesNotHangTheSummary) {
  Finished f = failing_job("fifo");
  EXPECT_EQ(f.exit_code, 1) << f.err;
  EXPECT_TRUE(contains(f.err, "root cause (earliest failure): rank 0")) << f.err;
  EXPECT_TRUE(contains(f.err, "/error.json is not a regular file: not read)")) << f.err;
}

TEST(HostileWorker, ALinkToDevZeroAsErrorFileIsNotRead) {
  Finished f = failing_job("zero");
  EXPECT_EQ(f.exit_code, 1) << f.err;
  EXPECT_TRUE(contains(f.err, "/error.json is a symbolic link: not read)")) << f.err;
}

TEST(HostileWorker, EscapeSequencesDoNotReachTheTerminal) {
  Finished f = failing_job("escapes");
  EXPECT_EQ(f.exit_code, 1) << f.err;
  EXPECT_TRUE(contains(f.err, "error: red ALERT title end\n")) << f.err;
  EXPECT_TRUE(contains(f.err, "      tail cleared\n")) << f.err;
  // The summary is all of ddprun's stderr but the worker's own line.
  const std::string summary = f.err.substr(f.err.find("ddprun: job"));
  EXPECT_EQ(summary.find('\x1b'), std::string::npos) << summary;
  EXPECT_EQ(summary.find('\a'), std::string::npos) << summary;
}

}  // namespace
