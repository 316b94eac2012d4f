// The agent's event log (--log-dir's events.jsonl) and rank 0's progress
// as ddprun shows it, with real processes: probe reports its progress in
// its heartbeat slot (channel::write_progress) as a worker_lib program would.
#include <gtest/gtest.h>
#include <pty.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>

#include <nlohmann/json.hpp>

#include "channel/event_log.h"
#include "support/job_helpers.h"
#include "support/process.h"

namespace {

namespace fs = std::filesystem;
namespace ev = ddprun::channel::events;
using nlohmann::json;
using ddptest::contains;
using ddptest::Finished;

// The lines of the run's events.jsonl (the run dir ddprun named).
std::vector<json> events_of(const Finished& f) {
  std::smatch m;
  if (!std::regex_search(f.err, m, std::regex(R"(worker logs are in (\S+))"))) {
    ADD_FAILURE() << "no run dir in: " << f.err;
    return {};
  }
  std::ifstream in(fs::path(m[1].str()) / ev::kFileName);
  EXPECT_TRUE(in.good()) << "no " << ev::kFileName << " in " << m[1].str();
  std::vector<json> out;
  std::string line;
  while (std::getline(in, line)) out.push_back(json::parse(line));
  return out;
}

std::vector<json> named(const std::vector<json>& events, const char* name) {
  std::vector<json> out;
  for (const auto& e : events) {
    if (e[ev::kEvent] == name) out.push_back(e);
  }
  return out;
}

TEST(EventLog, AFailedAttemptAndItsRestartAreLoggedInOrder) {
  const fs::path dir = ddptest::temp_path("events", "restart");
  Finished f = ddptest::run({DDPRUN_BIN, "--nproc", "2", "--max-restarts", "1", "--no-standby",
                             "--log-dir", dir.string(), PROBE_BIN, "fail-on-first-attempt"});
  ASSERT_EQ(f.exit_code, 0) << f.err;
  const auto events = events_of(f);
  ASSERT_FALSE(events.empty());

  // Every line has the common fields, in time order.
  int64_t last_mono = 0;
  std::string last_time;
  for (const auto& e : events) {
    ASSERT_TRUE(e.contains(ev::kTime) && e.contains(ev::kMonoNs) && e.contains(ev::kNode)) << e;
    EXPECT_GE(e[ev::kMonoNs].get<int64_t>(), last_mono) << e;
    EXPECT_GE(e[ev::kTime].get<std::string>(), last_time) << e;
    EXPECT_TRUE(std::regex_match(e[ev::kTime].get<std::string>(),
                                 std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z)")))
        << e;
    last_mono = e[ev::kMonoNs];
    last_time = e[ev::kTime];
  }
  std::vector<std::string> order;
  for (const auto& e : events) {
    const std::string name = e[ev::kEvent];
    if (name != ev::kSpawn && name != ev::kExit) order.push_back(name);
  }
  EXPECT_EQ(order, (std::vector<std::string>{ev::kJobStart, ev::kRound, ev::kFailure, ev::kRestart,
                                             ev::kRound, ev::kJobEnd}));
  EXPECT_EQ(events.front()[ev::kEvent], ev::kJobStart);
  EXPECT_EQ(events.front()["nproc"], 2);

  // A spawn per rank per attempt, with its pid; an exit for each.
  const auto spawns = named(events, ev::kSpawn);
  ASSERT_EQ(spawns.size(), 4u) << f.err;
  std::set<std::pair<int, int>> spawned;
  std::set<int> pids;
  for (const auto& s : spawns) {
    spawned.insert({s["attempt"].get<int>(), s["rank"].get<int>()});
    EXPECT_GT(s["pid"].get<int>(), 0);
    EXPECT_EQ(s["standby"], false);
    pids.insert(s["pid"].get<int>());
  }
  EXPECT_EQ(spawned, (std::set<std::pair<int, int>>{{0, 0}, {0, 1}, {1, 0}, {1, 1}}));
  EXPECT_EQ(pids.size(), 4u);
  const auto exits = named(events, ev::kExit);
  ASSERT_EQ(exits.size(), 4u);
  const json failure = named(events, ev::kFailure).at(0);
  for (const auto& e : exits) {
    EXPECT_TRUE(pids.count(e["pid"].get<int>())) << e;
    if (e["attempt"] == 1) {
      EXPECT_EQ(e["exit_code"], 0) << e;
    } else if (e["rank"] == failure["rank"]) {
      EXPECT_EQ(e["exit_code"], 7) << e;
    } else {  // the other failed too, or was stopped first
      EXPECT_TRUE(e.value("exit_code", 0) == 7 || e.value("signal", "") == "SIGTERM") << e;
    }
  }

  EXPECT_EQ(failure["attempt"], 0);
  EXPECT_TRUE(failure["rank"] == 0 || failure["rank"] == 1) << failure;
  EXPECT_EQ(failure["exit_code"], 7);
  EXPECT_EQ(failure["root_cause"], true);
  EXPECT_EQ(failure["message"], "exit code 7");
  // The summary names the same root cause.
  EXPECT_TRUE(contains(f.err, "root cause (earliest failure): rank " + std::to_string(failure["rank"].get<int>())))
      << f.err;
  const json restart = named(events, ev::kRestart).at(0);
  EXPECT_EQ(restart["restart_count"], 1);
  EXPECT_EQ(restart["max_restarts"], 1);
  const auto rounds = named(events, ev::kRound);
  EXPECT_EQ(rounds.at(0)["restart_count"], 0);
  EXPECT_EQ(rounds.at(1)["restart_count"], 1);
  EXPECT_EQ(rounds.at(1)["world_size"], 2);
  EXPECT_EQ(events.back()[ev::kEvent], ev::kJobEnd);
  EXPECT_EQ(events.back()["exit_code"], 0);
  fs::remove_all(dir);
}

TEST(EventLog, CheckpointsSavedAndRestoredAreSeenFromTheProgressBlock) {
  const fs::path dir = ddptest::temp_path("events", "checkpoints");
  // 12 steps of 30 ms: saves at 4 and 9 (4 again on the restart, no event).
  Finished f = ddptest::run({DDPRUN_BIN, "--nproc", "1", "--max-restarts", "1", "--no-standby",
                             "--monitor-interval", "0.01", "--log-dir", dir.string(), PROBE_BIN,
                             "progress", "12", "30", "fail-first"});
  ASSERT_EQ(f.exit_code, 0) << f.err;
  const auto events = events_of(f);
  std::vector<std::pair<int, int>> saved, restored;  // attempt, step
  for (const auto& e : named(events, ev::kCheckpointSaved)) saved.push_back({e["attempt"].get<int>(), e["step"].get<int>()});
  for (const auto& e : named(events, ev::kCheckpointRestored)) {
    restored.push_back({e["attempt"].get<int>(), e["step"].get<int>()});
    EXPECT_EQ(e["rank"], 0);
  }
  EXPECT_EQ(saved, (std::vector<std::pair<int, int>>{{0, 4}, {1, 4}, {1, 9}}));
  EXPECT_EQ(restored, (std::vector<std::pair<int, int>>{{1, 4}}));
  fs::remove_all(dir);
}

TEST(Progress, WithoutATerminalRank0sProgressIsLoggedEveryInterval) {
  Finished f = ddptest::run({DDPRUN_BIN, "--nproc", "2", "--progress-interval", "0.1", "--monitor-interval",
                             "0.02", PROBE_BIN, "progress", "20", "25"});
  ASSERT_EQ(f.exit_code, 0) << f.err;
  std::regex line(R"(progress: step (\d+)/20 · epoch \d · loss [0-9.e-]+ · [0-9.k]+ samples/s · ETA \d+s)");
  int lines = 0, last = -1;
  for (auto it = std::sregex_iterator(f.err.begin(), f.err.end(), line); it != std::sregex_iterator(); ++it) {
    const int step = std::stoi((*it)[1]);
    EXPECT_GT(step, last) << f.err;  // only when the step moved
    last = step;
    ++lines;
  }
  EXPECT_GE(lines, 2) << f.err;
  EXPECT_LE(lines, 7) << f.err;  // 0.5 s of steps, a line at most every 0.1 s
}

TEST(Progress, IntervalZeroLogsNoProgress) {
  Finished f = ddptest::run({DDPRUN_BIN, "--nproc", "1", "--progress-interval", "0", "--monitor-interval",
                             "0.02", PROBE_BIN, "progress", "10", "25"});
  ASSERT_EQ(f.exit_code, 0) << f.err;
  EXPECT_FALSE(contains(f.err, "progress:")) << f.err;
}

// The heartbeat table is there for progress whatever --hang-timeout says:
// hang detection stays off without it.
TEST(Progress, SlowStepsAreNoHangWithoutHangTimeout) {
  // Three beats, 600 ms apart.
  Finished f = ddptest::run({DDPRUN_BIN, "--nproc", "1", "--monitor-interval", "0.02", PROBE_BIN,
                             "progress", "3", "600"});
  EXPECT_EQ(f.exit_code, 0) << f.err;
  EXPECT_FALSE(contains(f.err, "hung")) << f.err;
  // With it, the same worker is hung (the check above can fail).
  f = ddptest::run({DDPRUN_BIN, "--nproc", "1", "--monitor-interval", "0.02", "--hang-timeout", "0.3",
                    PROBE_BIN, "progress", "3", "600"});
  EXPECT_EQ(f.exit_code, 1) << f.err;
  EXPECT_TRUE(contains(f.err, "hung: no heartbeat for")) << f.err;
}

// ddprun under a pseudo-terminal: the status line is drawn, and worker
// lines come out whole, each starting on a wiped line.
// What ddprun (with argv after the program name) shows on a terminal, and
// its exit status.
std::string on_a_terminal(const std::vector<const char*>& args, int* status) {
  std::vector<char*> argv{const_cast<char*>(DDPRUN_BIN)};
  for (const char* a : args) argv.push_back(const_cast<char*>(a));
  argv.push_back(nullptr);
  int master = -1;
  const pid_t pid = forkpty(&master, nullptr, nullptr, nullptr);
  if (pid < 0) return "forkpty failed";
  if (pid == 0) {
    execv(DDPRUN_BIN, argv.data());
    _exit(127);
  }
  std::string screen;
  char buf[4096];
  while (true) {
    pollfd p{master, POLLIN, 0};
    if (poll(&p, 1, 20000) <= 0) break;
    const ssize_t n = read(master, buf, sizeof(buf));
    if (n <= 0) break;  // EIO once the child side is closed
    screen.append(buf, static_cast<size_t>(n));
  }
  waitpid(pid, status, 0);
  close(master);
  return screen;
}

TEST(Progress, OnATerminalAStatusLineStaysUnderTheOutput) {
  int status = 0;
  const std::string screen =
      on_a_terminal({"--nproc", "1", "--monitor-interval", "0.02", PROBE_BIN, "progress", "12", "60"}, &status);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << screen;
  EXPECT_TRUE(contains(screen, "\r\033[Kstep ")) << screen;  // a status line was drawn
  EXPECT_TRUE(std::regex_search(screen, std::regex(R"(\r\x1b\[Kstep \d+/12 · epoch \d · loss)"))) << screen;
  // Every worker line starts on a wiped line when a status line was up: it
  // never follows a status line's text directly.
  EXPECT_FALSE(std::regex_search(screen, std::regex(R"(samples/s[^\r\n]*\[rank0\])"))) << screen;
  EXPECT_FALSE(std::regex_search(screen, std::regex(R"(ETA \d+s\[rank0\])"))) << screen;
  EXPECT_TRUE(contains(screen, "[rank0]:step 11")) << screen;
}

TEST(Progress, OnATerminalDdprunsOwnLinesWipeTheStatusLineToo) {
  // The first attempt fails after step 7: ddprun's warnings come while the
  // status line is up (the worker's own lines go to files only, so nothing
  // else wipes it first).
  int status = 0;
  const std::string screen = on_a_terminal({"--nproc", "1", "--monitor-interval", "0.02", "--max-restarts", "1",
                                            "--no-standby", "--redirects", "3", PROBE_BIN, "progress", "12", "60", "fail-first"},
                                           &status);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << screen;
  EXPECT_TRUE(contains(screen, "restarting the workers")) << screen;
  EXPECT_FALSE(std::regex_search(screen, std::regex(R"(samples/s[^\r\n]*\[ddprun)"))) << screen;
  EXPECT_FALSE(std::regex_search(screen, std::regex(R"(ETA \d+s\[ddprun)"))) << screen;
}

}  // namespace
