// Ctrl-Z (SIGTSTP) stops the workers and then ddprun; fg (SIGCONT)
// continues them all, and the pause is not taken for a hang.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>

#include "support/job_helpers.h"
#include "support/process.h"

namespace {

using namespace std::chrono_literals;
using ddptest::contains;
using ddptest::Finished;
using ddptest::Process;
using ddptest::process_state;

// Polls until every pid is (or, with want_stopped false, is no longer) in
// the stopped state, up to timeout.
bool all_become(const std::vector<pid_t>& pids, bool want_stopped, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    bool all = true;
    for (pid_t pid : pids) all = all && ((process_state(pid) == 'T') == want_stopped);
    if (all) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    poll(nullptr, 0, 20);  // /proc has no change events: look again shortly
  }
}

TEST(CtrlZ, StopsWorkersThenDdprunAndFgContinuesThemWithoutAHang) {
  Process p({DDPRUN_BIN, "--nproc", "2", "--hang-timeout", "1", "--stop-timeout", "3", PROBE_BIN, "beat", "wait"});
  std::vector<pid_t> workers;
  for (int i = 0; i < 2; ++i) {
    auto l = p.wait_for_line([](const std::string& s) { return contains(s, "]:ready "); }, 30s);
    ASSERT_TRUE(l) << p.out();
    workers.push_back(std::stoi(l->substr(l->find("ready ") + 6)));
  }
  std::vector<pid_t> everyone = workers;
  everyone.push_back(p.pid());

  p.signal(SIGTSTP);
  ASSERT_TRUE(all_become(everyone, true, 10s)) << "ddprun and its workers did not all stop";
  // Paused for twice --hang-timeout: nobody moves (ddprun cannot, so it
  // cannot judge anyone hung either).
  EXPECT_FALSE(all_become(everyone, false, 2s));

  p.signal(SIGCONT);
  ASSERT_TRUE(all_become(everyone, false, 10s)) << "not all continued";
  // Alive and well: both answer a signal passed on by ddprun.
  p.signal(SIGUSR1);
  for (int answers = 0; answers < 2; ++answers) {
    EXPECT_TRUE(p.wait_for_line([&](const std::string& s) { return contains(s, "]:got SIGUSR1"); }, 30s))
        << p.out();
  }
  p.signal(SIGTERM);
  Finished f = p.finish(60s);
  EXPECT_EQ(f.exit_code, 128 + SIGTERM) << f.err;
  EXPECT_FALSE(contains(f.err, "hung")) << f.err;
  EXPECT_TRUE(contains(f.err, "no worker failed on its own")) << f.err;
}

}  // namespace
