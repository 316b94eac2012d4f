#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent/base/signals.h"
#include "agent/processes/spawn.h"
#include "agent/processes/standby.h"
#include "channel/standby_message.h"

namespace ddprun {
namespace {

using ddprun::Standby;

std::string read_to_eof(int fd) {
  std::string out;
  char buf[4096];
  while (true) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 10000) <= 0) break;
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

int wait_status(pid_t pid) {
  int status = 0;
  EXPECT_EQ(waitpid(pid, &status, 0), pid);
  return status;
}

SpawnRequest sh(const std::string& script) {
  return SpawnRequest{"/bin/sh", {"sh", "-c", script}, {"GREETING=hi"}};
}

TEST(Spawn, RunsWithGivenEnvironmentAndCapturesBothStreams) {
  SpawnedProcess p = spawn_process(sh("echo $GREETING; echo oops >&2; exit 4"));
  EXPECT_EQ(read_to_eof(p.stdout_fd), "hi\n");
  EXPECT_EQ(read_to_eof(p.stderr_fd), "oops\n");
  int status = wait_status(p.pid);
  EXPECT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 4);
  close(p.stdout_fd);
  close(p.stderr_fd);
}

TEST(Spawn, WorkerLeadsItsOwnProcessGroup) {
  SpawnedProcess p = spawn_process(sh("ps -o pgid= -p $$"));
  std::string pgid = read_to_eof(p.stdout_fd);
  wait_status(p.pid);
  EXPECT_EQ(std::stoi(pgid), p.pid);
  close(p.stdout_fd);
  close(p.stderr_fd);
}

TEST(Spawn, BlockedSignalsAreNotInherited) {
  // The launcher blocks SIGTERM (it reads it from a signalfd); a worker must
  // still die of it.
  sigset_t set, old;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, &old);
  SpawnedProcess p = spawn_process(sh("echo up; exec sleep 30"));
  pollfd pf{p.stdout_fd, POLLIN, 0};
  ASSERT_EQ(poll(&pf, 1, 10000), 1);  // it runs
  kill(p.pid, SIGTERM);
  int status = wait_status(p.pid);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGTERM);
  close(p.stdout_fd);
  close(p.stderr_fd);
}

TEST(Spawn, MissingProgramIsASpawnErrorNamingIt) {
  try {
    spawn_process(SpawnRequest{"/nonexistent/prog", {"prog"}, {}});
    FAIL();
  } catch (const SpawnError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot run /nonexistent/prog: No such file"),
              std::string::npos);
  }
}

TEST(Spawn, ResolveProgram) {
  EXPECT_EQ(resolve_program("sh", "/nonexistent:/bin", {}), "/bin/sh");
  EXPECT_EQ(resolve_program("sh", "/nonexistent", {"/bin"}), "/bin/sh");
  EXPECT_EQ(resolve_program("sh", "/nonexistent", {}), "");
  EXPECT_EQ(resolve_program("/bin/sh", "", {}), "/bin/sh");
  EXPECT_EQ(resolve_program("/etc/passwd", "", {}), "");  // not executable
  EXPECT_FALSE(executable_dir().empty());
}

TEST(Standby, WaitsForItsVariablesThenRunsWithThem) {
  Standby s = spawn_standby(SpawnRequest{PROBE_BIN, {"probe", "standby-env"}, {"RANK=stale"}});
  // Nothing happens until the release: the probe blocks in wait_if_standby().
  pollfd pf{s.process.stdout_fd, POLLIN, 0};
  EXPECT_EQ(poll(&pf, 1, 200), 0);
  release_standby(s, {{"RANK", "5"}, {"PROBE_EXTRA", "hello world"}});
  EXPECT_EQ(read_to_eof(s.process.stdout_fd), "released RANK=5 PROBE_EXTRA=hello world\n");
  int status = wait_status(s.process.pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  close(s.process.stdout_fd);
  close(s.process.stderr_fd);
}

// A standby started for one assignment (a replacement's heal generation)
// and released for another (a restart's fresh round) keeps none of the
// first one's variables that the second does not set: the restarted
// worker once connected a heal generation the round never had.
TEST(Standby, AVariableOfTheAssignmentItWasStartedForIsRemoved) {
  Standby s = spawn_standby(SpawnRequest{PROBE_BIN, {"probe", "standby-env"}, {"RANK=stale", "PROBE_EXTRA=gen 2"}});
  s.vars = {{"RANK", "stale"}, {"PROBE_EXTRA", "gen 2"}};
  release_standby(s, {{"RANK", "5"}});
  EXPECT_EQ(read_to_eof(s.process.stdout_fd), "released RANK=5 PROBE_EXTRA=<unset>\n");
  int status = wait_status(s.process.pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  close(s.process.stdout_fd);
  close(s.process.stderr_fd);
}

TEST(Standby, DismissedStandbysAreGone) {
  Standby s = spawn_standby(SpawnRequest{PROBE_BIN, {"probe", "standby-env"}, {}});
  const pid_t pid = s.process.pid;
  dismiss_standby(s);
  EXPECT_EQ(s.process.pid, -1);
  EXPECT_EQ(kill(pid, 0), -1);  // reaped: no such process
  EXPECT_EQ(channel::encode_standby_message({{"A", "1"}, {"B", "x=y"}}), std::string("A=1\0B=x=y\0\0", 11));
}

TEST(Signals, Names) {
  EXPECT_EQ(signal_name(SIGTERM), "SIGTERM");
  EXPECT_EQ(signal_name(SIGKILL), "SIGKILL");
  EXPECT_TRUE(is_stop_signal(SIGINT));
  EXPECT_FALSE(is_stop_signal(SIGUSR1));
}

}  // namespace
}  // namespace ddprun
