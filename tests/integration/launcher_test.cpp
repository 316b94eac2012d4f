// ddprun end to end: real launcher, real worker processes, real signals.
// Paths of the programs come from CMake (DDPRUN_BIN, PROBE_BIN, ...).
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>

#include "support/job_helpers.h"
#include "support/process.h"

namespace {

using namespace std::chrono_literals;
using ddptest::Finished;
using ddptest::lines;
using ddptest::Process;
using ddptest::contains;
using ddptest::run;

using ddptest::ddprun;

// KEY=VALUE lines printed by `probe env`, per rank.
std::map<int, std::map<std::string, std::string>> env_by_rank(const std::string& out) {
  std::map<int, std::map<std::string, std::string>> by_rank;
  std::regex re(R"(^\[rank(\d+)\]:([A-Z_]+)=(.*)$)");
  for (const auto& l : lines(out)) {
    std::smatch m;
    if (std::regex_match(l, m, re)) by_rank[std::stoi(m[1])][m[2]] = m[3];
  }
  return by_rank;
}

// Reads the launcher's stdout until n workers said "ready PID"; their pids.
std::vector<pid_t> wait_ready(Process& p, int n) {
  std::vector<pid_t> pids;
  for (int i = 0; i < n; ++i) {
    auto l = p.wait_for_line([](const std::string& s) { return contains(s, "]:ready "); }, 30s);
    if (!l) {
      ADD_FAILURE() << "only " << i << " of " << n << " workers got ready:\n" << p.out();
      break;
    }
    pids.push_back(std::stoi(l->substr(l->find("ready ") + 6)));
  }
  return pids;
}

TEST(Launcher, FourWorkersRunTheCollectivesAndAgree) {
  Finished f = run(ddprun({"--nproc", "4", COLLECTIVE_CHECK_BIN}));
  ASSERT_EQ(f.exit_code, 0) << f.out << f.err;
  for (int r = 0; r < 4; ++r) {
    EXPECT_TRUE(contains(f.out, "[rank" + std::to_string(r) + "]:collectives ok on rank " +
                                    std::to_string(r) + " of 4"))
        << f.out;
  }
}

TEST(Launcher, SharedMemoryIsTheDefaultOnOneNodeAndMatchesGlooAcrossProcesses) {
  Finished f = run(ddprun({"--nproc", "3", COLLECTIVE_CHECK_BIN, "--compare-gloo"}));
  ASSERT_EQ(f.exit_code, 0) << f.out << f.err;
  for (int r = 0; r < 3; ++r) {
    const std::string rank = std::to_string(r);
    EXPECT_TRUE(contains(f.out, "[rank" + rank + "]:collectives ok on rank " + rank + " of 3 (shm)")) << f.out;
    EXPECT_TRUE(contains(f.out, "[rank" + rank + "]:shm matches gloo on rank " + rank)) << f.out;
  }
  // And Gloo when told.
  Finished g = run(ddprun({"--nproc", "2", COLLECTIVE_CHECK_BIN}), {"DDPRUN_CPU_COMM=gloo"});
  ASSERT_EQ(g.exit_code, 0) << g.out << g.err;
  EXPECT_TRUE(contains(g.out, "collectives ok on rank 1 of 2 (gloo)")) << g.out;
}

TEST(Launcher, WorkersGetTorchrunsEnvironment) {
  Finished f = run(ddprun({"--nproc", "3", "--role", "trainer", "--rdzv-id", "envtest",
                           "--max-restarts", "2", PROBE_BIN, "env"}),
                   {"PROBE_EXTRA=inherited"});
  ASSERT_EQ(f.exit_code, 0) << f.err;
  auto env = env_by_rank(f.out);
  ASSERT_EQ(env.size(), 3u) << f.out;
  std::set<std::string> ports;
  for (int r = 0; r < 3; ++r) {
    auto& e = env[r];
    EXPECT_EQ(e["RANK"], std::to_string(r));
    EXPECT_EQ(e["LOCAL_RANK"], std::to_string(r));
    EXPECT_EQ(e["ROLE_RANK"], std::to_string(r));
    EXPECT_EQ(e["WORLD_SIZE"], "3");
    EXPECT_EQ(e["LOCAL_WORLD_SIZE"], "3");
    EXPECT_EQ(e["ROLE_WORLD_SIZE"], "3");
    EXPECT_EQ(e["GROUP_RANK"], "0");
    EXPECT_EQ(e["GROUP_WORLD_SIZE"], "1");
    EXPECT_EQ(e["ROLE_NAME"], "trainer");
    EXPECT_EQ(e["MASTER_ADDR"], "127.0.0.1");
    EXPECT_EQ(e["TORCHELASTIC_RESTART_COUNT"], "0");
    EXPECT_EQ(e["TORCHELASTIC_MAX_RESTARTS"], "2");
    EXPECT_EQ(e["TORCHELASTIC_RUN_ID"], "envtest");
    EXPECT_EQ(e["DDPRUN_JOB_ID"], "envtest");
    EXPECT_EQ(e["DDPRUN_ROUND"], "0");
    EXPECT_EQ(e["OMP_NUM_THREADS"], "1");
    EXPECT_EQ(e["PROBE_EXTRA"], "inherited");
    EXPECT_TRUE(contains(e["TORCHELASTIC_ERROR_FILE"], "/attempt_0/rank" + std::to_string(r) + "/error.json"));
    EXPECT_TRUE(std::regex_match(e["DDPRUN_RDZV_ADDR"], std::regex(R"(127\.0\.0\.1:\d+)")));
    EXPECT_GT(std::stoi(e["MASTER_PORT"]), 0);
    ports.insert(e["MASTER_PORT"]);
  }
  EXPECT_EQ(ports.size(), 1u);  // one MASTER_PORT for the job
}

TEST(Launcher, OutputIsPrefixedAndNeverInterleavedMidLine) {
  Finished f = run(ddprun({"--nproc", "4", PROBE_BIN, "spam", "300"}));
  ASSERT_EQ(f.exit_code, 0) << f.err;
  std::regex line_re(R"(^\[rank(\d)\]:line (\d) (\d+) ([a-z]{200})$)");
  std::regex last_re(R"(^\[rank(\d)\]:unterminated last line of rank (\d)$)");
  std::map<int, int> next;  // per rank, the next line number expected
  int last_lines = 0;
  for (const auto& l : lines(f.out)) {
    std::smatch m;
    if (std::regex_match(l, m, last_re)) {
      EXPECT_EQ(m[1], m[2]);
      ++last_lines;
      continue;
    }
    ASSERT_TRUE(std::regex_match(l, m, line_re)) << "mangled line: " << l;
    const int rank = std::stoi(m[1]);
    EXPECT_EQ(std::stoi(m[2]), rank);
    EXPECT_EQ(std::stoi(m[3]), next[rank]++) << "lines of rank " << rank << " out of order";
    EXPECT_EQ(m[4].str(), std::string(200, 'a' + rank));
  }
  for (int r = 0; r < 4; ++r) EXPECT_EQ(next[r], 300);
  EXPECT_EQ(last_lines, 4);
}

TEST(Launcher, AFailingWorkerStopsTheJobWithASummaryNamingIt) {
  Finished f = run(ddprun({"--nproc", "3", "--stop-timeout", "5", PROBE_BIN, "fail-rank", "1", "9"}));
  EXPECT_EQ(f.exit_code, 1);
  EXPECT_TRUE(contains(f.err, "root cause (earliest failure): rank 1 (local rank 1, pid ")) << f.err;
  EXPECT_TRUE(contains(f.err, "exit code 9 at ")) << f.err;
  EXPECT_TRUE(contains(f.err, "rank 1 is failing on purpose")) << f.err;  // stderr tail
  EXPECT_TRUE(contains(f.err, "2 other worker(s) stopped by ddprun")) << f.err;
  // The others were asked to stop with SIGTERM and said so.
  EXPECT_TRUE(contains(f.out, "[rank0]:got SIGTERM")) << f.out;
  EXPECT_TRUE(contains(f.out, "[rank2]:got SIGTERM")) << f.out;
}

// ddp::init() line-buffers stdout: a worker killed right after printing
// (by SIGKILL here, a peer's failure in real life) loses no line.
TEST(Launcher, AWorkerKilledRightAfterPrintingLosesNoLine) {
  Finished f = run(ddprun({"--nproc", "1", COLLECTIVE_CHECK_BIN, "--then-sigkill"}));
  EXPECT_EQ(f.exit_code, 1);
  EXPECT_TRUE(contains(f.err, "killed by SIGKILL")) << f.err;
  EXPECT_TRUE(contains(f.out, "[rank0]:collectives ok on rank 0 of 1")) << f.out;
}

TEST(Launcher, AnUncaughtExceptionReachesTheSummaryThroughTheErrorFile) {
  Finished f = run(ddprun({"--nproc", "2", PROBE_BIN, "throw", "the disk is full"}));
  EXPECT_EQ(f.exit_code, 1);
  EXPECT_TRUE(contains(f.err, "killed by SIGABRT")) << f.err;
  EXPECT_TRUE(contains(f.err, "error: std::runtime_error: the disk is full")) << f.err;
}

TEST(Launcher, WorkersThatIgnoreSigtermAreKilledAfterTheStopTimeout) {
  Process p(ddprun({"--nproc", "2", "--stop-timeout", "0.5", PROBE_BIN, "wait", "--ignore-term"}));
  std::vector<pid_t> pids = wait_ready(p, 2);
  ASSERT_EQ(pids.size(), 2u);
  p.signal(SIGTERM);
  Finished f = p.finish();
  EXPECT_EQ(f.exit_code, 128 + SIGTERM) << f.err;
  EXPECT_TRUE(contains(f.err, "sending SIGKILL")) << f.err;
  EXPECT_TRUE(contains(f.out, "got SIGTERM")) << f.out;  // it was asked first
  for (pid_t pid : pids) EXPECT_TRUE(ddptest::exits_within(pid, 5s)) << pid;
}

TEST(Launcher, SigtermStopsTheJobCleanly) {
  Process p(ddprun({"--nproc", "4", PROBE_BIN, "wait"}));
  std::vector<pid_t> pids = wait_ready(p, 4);
  ASSERT_EQ(pids.size(), 4u);
  p.signal(SIGTERM);
  Finished f = p.finish();
  EXPECT_EQ(f.exit_code, 128 + SIGTERM);
  for (int r = 0; r < 4; ++r) {
    EXPECT_TRUE(contains(f.out, "[rank" + std::to_string(r) + "]:got SIGTERM")) << f.out;
  }
  EXPECT_TRUE(contains(f.err, "stopped by SIGTERM")) << f.err;
  EXPECT_TRUE(contains(f.err, "no worker failed on its own")) << f.err;
  for (pid_t pid : pids) EXPECT_TRUE(ddptest::exits_within(pid, 5s)) << pid;
}

TEST(Launcher, UserSignalsAreForwardedWithoutStopping) {
  Process p(ddprun({"--nproc", "2", PROBE_BIN, "wait"}));
  ASSERT_EQ(wait_ready(p, 2).size(), 2u);
  p.signal(SIGUSR1);
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(p.wait_for_line([](const std::string& s) { return contains(s, "]:got SIGUSR1"); }, 30s))
        << p.out();
  }
  p.signal(SIGINT);
  Finished f = p.finish();
  EXPECT_EQ(f.exit_code, 128 + SIGINT);
  EXPECT_TRUE(contains(f.out, "]:got SIGINT")) << f.out;
}

TEST(Launcher, NoWorkerSurvivesASigkilledLauncher) {
  Process p(ddprun({"--nproc", "4", PROBE_BIN, "wait", "--ignore-term"}));
  std::vector<pid_t> pids = wait_ready(p, 4);
  ASSERT_EQ(pids.size(), 4u);
  p.signal(SIGKILL);
  Finished f = p.finish();
  EXPECT_EQ(f.signal, SIGKILL);
  for (pid_t pid : pids) {
    EXPECT_TRUE(ddptest::exits_within(pid, 5s)) << "worker " << pid << " survived the launcher";
  }
}

TEST(Launcher, RestartsAfterAFailureWhenAllowed) {
  Finished f = run(ddprun({"--nproc", "2", "--max-restarts", "1", PROBE_BIN, "fail-on-first-attempt"}));
  EXPECT_EQ(f.exit_code, 0) << f.err;
  // The first attempt fails (a rank may be stopped before it prints); the
  // second runs every rank to the end.
  EXPECT_TRUE(contains(f.out, "]:attempt 0")) << f.out;
  EXPECT_TRUE(contains(f.out, "[rank0]:attempt 1")) << f.out;
  EXPECT_TRUE(contains(f.out, "[rank1]:attempt 1")) << f.out;
  EXPECT_TRUE(contains(f.err, "restarting the workers (restart 1 of 1")) << f.err;

  Finished exhausted = run(ddprun({"--nproc", "2", "--max-restarts", "2", PROBE_BIN, "exit", "5"}));
  EXPECT_EQ(exhausted.exit_code, 1);
  EXPECT_TRUE(contains(exhausted.err, "failed on attempt 3 of 3")) << exhausted.err;
}

TEST(Launcher, LogDirKeepsPerRankFilesAndTeesToTheConsole) {
  auto dir = std::filesystem::temp_directory_path() / ("ddprun-logs-" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  Finished f = run(ddprun({"--nproc", "2", "--log-dir", dir.string(), PROBE_BIN, "exit", "0"}));
  ASSERT_EQ(f.exit_code, 0) << f.err;
  EXPECT_TRUE(contains(f.out, "[rank1]:about to exit"));  // console too
  // In a folder of this run's own, named on the console.
  std::smatch m;
  ASSERT_TRUE(std::regex_search(f.err, m, std::regex(R"(worker logs are in (\S+))"))) << f.err;
  const std::filesystem::path run_dir = m[1].str();
  EXPECT_EQ(run_dir.parent_path(), dir);
  for (int r = 0; r < 2; ++r) {
    auto rd = run_dir / "attempt_0" / ("rank" + std::to_string(r));
    std::ifstream out(rd / "stdout.log"), err(rd / "stderr.log");
    std::string o((std::istreambuf_iterator<char>(out)), {}), e((std::istreambuf_iterator<char>(err)), {});
    EXPECT_EQ(o, "about to exit\n");
    EXPECT_EQ(e, "rank " + std::to_string(r) + " exits with 0\n");
  }
  // --redirects 3: the files only, nothing of the workers on the console.
  Finished quiet = run(ddprun({"--nproc", "2", "--log-dir", dir.string(), "--redirects", "3",
                               PROBE_BIN, "exit", "0"}));
  EXPECT_EQ(quiet.exit_code, 0);
  EXPECT_FALSE(contains(quiet.out, "[rank"));
  EXPECT_FALSE(contains(quiet.err, "[rank"));
  std::filesystem::remove_all(dir);
}

TEST(Launcher, BadCommandLinesGetOneLineAndExitCode2) {
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"--nproc", "many", "true"}, {"--bogus", "true"}, {"--nproc", "2"}, {"no-such-program-zz"},
           // Each of these used to get further and fail worse (a segfault in
           // every worker, a gRPC dump, exit 1).
           {"--local-addr", "nonexistent.invalid", "true"},
           {"--local-addr", "192.0.2.1", "true"},
           {"--log-dir", "/proc/ddprun-cannot-write-here", "true"},
           {"--rdzv-endpoint", "192.0.2.1:29400", "--rdzv-host", "on", "true"},
           {"rendezvous", "--host", "192.0.2.1", "--port", "0"},
           {"rendezvous", "--rdzv-conf", "max_jobs=-3"}}) {
    Finished f = run(ddprun(args));
    EXPECT_EQ(f.exit_code, 2) << args[0] << " " << args[1] << ": " << f.err;
    EXPECT_EQ(lines(f.err).size(), 1u) << f.err;
    EXPECT_EQ(f.err.rfind("ddprun: error: ", 0), 0u) << f.err;
    EXPECT_TRUE(f.out.empty());
  }
}

TEST(Launcher, PythonScriptsRunUnderDdprunPython) {
  auto script = std::filesystem::temp_directory_path() / ("ddprun-hello-" + std::to_string(getpid()) + ".py");
  std::ofstream(script) << "import os, sys\nprint('py rank', os.environ['RANK'], sys.argv[1:])\n";
  Finished f = run(ddprun({"--nproc", "2", script.string(), "--flag"}), {"DDPRUN_PYTHON=" PYTHON_BIN});
  std::filesystem::remove(script);
  ASSERT_EQ(f.exit_code, 0) << f.err;
  EXPECT_TRUE(contains(f.out, "[rank1]:py rank 1 ['--flag']")) << f.out;
}

TEST(Interop, AnUnmodifiedPytorchDdpScriptRuns) {
  Finished f = run(ddprun({"--nproc", "2", INTEROP_SCRIPT}), {"DDPRUN_PYTHON=" PYTHON_BIN});
  ASSERT_EQ(f.exit_code, 0) << f.out << f.err;
  EXPECT_TRUE(contains(f.out, "[rank0]:interop ok: rank 0 of 2, all_reduce=3, DDP parameters agree")) << f.out;
  EXPECT_TRUE(contains(f.out, "[rank1]:interop ok: rank 1 of 2, all_reduce=3, DDP parameters agree")) << f.out;
}

TEST(Ddp, MatchesSingleProcessTrainingOnTwoAndFourProcesses) {
  for (int n : {2, 4}) {
    Finished f = run(ddprun({"--nproc", std::to_string(n), DDP_CHECK_BIN}));
    ASSERT_EQ(f.exit_code, 0) << f.out << f.err;
    for (int r = 0; r < n; ++r) {
      EXPECT_TRUE(contains(f.out, "[rank" + std::to_string(r) + "]:ddp ok on rank " + std::to_string(r) +
                                      " of " + std::to_string(n) + ": 26 cases"))
          << f.out;
    }
  }
}

TEST(DefaultJob, TrainsOnFourRanksAndTheRanksAgree) {
  auto summary = std::filesystem::temp_directory_path() / ("ddprun-summary-" + std::to_string(getpid()) + ".json");
  Finished f = run(ddprun({"--nproc", "4", TRAIN_BIN, "--limit", "8000", "--epochs", "2",
                           "--summary-json", summary.string()}));
  ASSERT_EQ(f.exit_code, 0) << f.out << f.err;
  EXPECT_TRUE(contains(f.out, "[rank0]:parameters identical on all 4 ranks")) << f.out;
  std::ifstream in(summary);
  std::string json((std::istreambuf_iterator<char>(in)), {});
  std::filesystem::remove(summary);
  std::smatch m;
  // 8000 images, 2 epochs: far above chance (10%); a broken sync or data
  // pipeline does not get here.
  ASSERT_TRUE(std::regex_search(json, m, std::regex(R"("test_accuracy": ([0-9.]+))"))) << json;
  EXPECT_GT(std::stod(m[1]), 0.70) << json;
  // 2000 images per rank in batches of 32: 63 steps per epoch.
  EXPECT_TRUE(contains(json, "\"steps\": 126")) << json;
  EXPECT_TRUE(std::regex_search(json, std::regex(R"("param_checksum": "[0-9a-f]{16}")"))) << json;
  std::smatch l1, l2;
  ASSERT_TRUE(std::regex_search(f.out, l1, std::regex(R"(epoch 1/2: loss ([0-9.]+))"))) << f.out;
  ASSERT_TRUE(std::regex_search(f.out, l2, std::regex(R"(epoch 2/2: loss ([0-9.]+))"))) << f.out;
  EXPECT_LT(std::stod(l2[1]), std::stod(l1[1]));  // it learns
}

TEST(DefaultJob, EverySyncStrategyTrainsTheSameModel) {
  // On 2 ranks averaging divides by 2 exactly, so naive, flat, overlap and
  // bucketed sync (with accumulation) must end bit for bit alike.
  std::set<std::string> checksums;
  for (const char* sync : {"naive", "flat", "overlap", "bucketed"}) {
    auto summary = std::filesystem::temp_directory_path() /
                   ("ddprun-sync-" + std::string(sync) + std::to_string(getpid()) + ".json");
    Finished f = run(ddprun({"--nproc", "2", TRAIN_BIN, "--limit", "2000", "--epochs", "1", "--grad-accum",
                             "2", "--sync", sync, "--bucket-mb", "0.1", "--summary-json", summary.string()}));
    ASSERT_EQ(f.exit_code, 0) << sync << f.out << f.err;
    std::ifstream in(summary);
    std::string json((std::istreambuf_iterator<char>(in)), {});
    std::filesystem::remove(summary);
    std::smatch m;
    ASSERT_TRUE(std::regex_search(json, m, std::regex(R"re("param_checksum": "([0-9a-f]{16})")re"))) << json;
    checksums.insert(m[1]);
  }
  EXPECT_EQ(checksums.size(), 1u);
}

}  // namespace
