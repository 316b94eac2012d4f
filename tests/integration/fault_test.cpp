// Fault tolerance end to end: the default job killed, stopped and preempted
// under ddprun, checkpointing and restarting, ends exactly where an
// uninterrupted run ends.
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <regex>
#include <set>

#include "support/job_helpers.h"
#include "support/process.h"

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using ddptest::Finished;
using ddptest::Process;
using ddptest::checksum_in;
using ddptest::contains;
using ddptest::occurrences;
using ddptest::reach_step;

fs::path temp(const std::string& name) { return ddptest::temp_path("fault", name); }

// The job every test runs: 2 ranks, 8000 images, 2 epochs of 125 steps.
std::vector<std::string> train_job(const std::vector<std::string>& launcher_flags,
                                   const std::vector<std::string>& train_flags) {
  std::vector<std::string> argv{DDPRUN_BIN, "--nproc", "2"};
  argv.insert(argv.end(), launcher_flags.begin(), launcher_flags.end());
  for (const char* a : {TRAIN_BIN, "--limit", "8000", "--epochs", "2", "--print-steps"}) argv.push_back(a);
  argv.insert(argv.end(), train_flags.begin(), train_flags.end());
  return argv;
}

// The parameters of an uninterrupted run (computed once).
const std::string& reference_checksum() {
  static const std::string sum = [] {
    const fs::path summary = temp("reference.json");
    Finished f = ddptest::run(train_job({}, {"--summary-json", summary.string()}));
    EXPECT_EQ(f.exit_code, 0) << f.err;
    return checksum_in(summary);
  }();
  return sum;
}

TEST(FaultTolerance, WorkersKilledAtRandomStepsStillEndBitwiseLikeAnUninterruptedRun) {
  const std::string want = reference_checksum();
  ASSERT_FALSE(want.empty());
  const fs::path dir = temp("kill-ckpt"), summary = temp("kill.json");
  std::mt19937 gen(std::random_device{}());
  // Three kills at random steps, each in its own stretch of the 250 steps.
  const int targets[3] = {std::uniform_int_distribution<>(10, 60)(gen), std::uniform_int_distribution<>(80, 130)(gen),
                          std::uniform_int_distribution<>(150, 200)(gen)};
  SCOPED_TRACE("kills at steps " + std::to_string(targets[0]) + ", " + std::to_string(targets[1]) + ", " +
               std::to_string(targets[2]));
  // Workers only (standbys have a test of their own): every kill is a
  // failure that restarts the group (heals have tests of their own).
  Process p(train_job({"--max-restarts", "5", "--no-standby", "--max-heals", "0"}, {"--checkpoint-dir", dir.string(), "--checkpoint-every", "7",
                                               "--summary-json", summary.string()}));
  for (int target : targets) {
    ASSERT_TRUE(reach_step(p, target)) << p.out();
    // The first kill must find a checkpoint to resume from: they are
    // written in the background and, on a loaded machine, step 7's can land
    // after step 10 (then a restart from step 0 is right, not a resume).
    if (target == targets[0]) {
      ASSERT_TRUE(ddptest::wait_for_any_checkpoint(dir)) << p.out();
    }
    auto workers = ddptest::children_of(p.pid());
    ASSERT_FALSE(workers.empty());
    kill(workers[std::uniform_int_distribution<size_t>(0, workers.size() - 1)(gen)], SIGKILL);
  }
  Finished f = p.finish();
  ASSERT_EQ(f.exit_code, 0) << f.err;
  EXPECT_EQ(occurrences(f.err, "restarting the workers"), 3) << f.err;
  EXPECT_EQ(occurrences(f.out, "resumed from"), 3) << f.out;
  EXPECT_EQ(checksum_in(summary), want);
  fs::remove_all(dir);
  fs::remove(summary);
}

TEST(FaultTolerance, StandbyWorkersTakeOverAfterAKillAndNoneIsLeft) {
  const std::string want = reference_checksum();
  const fs::path dir = temp("standby-ckpt"), summary = temp("standby.json"), logs = temp("standby-logs");
  Process p(train_job({"--max-restarts", "2", "--standby", "--max-heals", "0", "--log-dir", logs.string()},
                      {"--checkpoint-dir", dir.string(), "--checkpoint-every", "10", "--summary-json",
                       summary.string()}));
  std::set<pid_t> seen;
  ASSERT_TRUE(reach_step(p, 30)) << p.out();
  // Two workers and, once they run, two standbys waiting for a restart.
  for (int tries = 0; tries < 200 && ddptest::children_of(p.pid()).size() < 4; ++tries) {
    ASSERT_TRUE(reach_step(p, 31 + tries)) << p.out();
  }
  auto before = ddptest::children_of(p.pid());
  ASSERT_EQ(before.size(), 4u);
  seen.insert(before.begin(), before.end());
  std::vector<pid_t> working, waiting;
  for (pid_t pid : before) (ddptest::started_as_standby(pid) ? waiting : working).push_back(pid);
  ASSERT_EQ(working.size(), 2u);
  ASSERT_EQ(waiting.size(), 2u);
  kill(working.front(), SIGKILL);
  ASSERT_TRUE(p.wait_for_line([](const std::string& l) { return contains(l, "resumed from"); }, 60s)) << p.out();
  for (pid_t pid : ddptest::children_of(p.pid())) seen.insert(pid);
  Finished f = p.finish();
  ASSERT_EQ(f.exit_code, 0) << f.err;
  EXPECT_TRUE(contains(f.err, "restarting the workers (restart 1 of 2, from standby)")) << f.err;
  EXPECT_EQ(checksum_in(summary), want);
  for (pid_t pid : seen) EXPECT_TRUE(ddptest::exits_within(pid, 5s)) << "left behind: " << pid;
  // The standbys warmed for a third attempt that never ran made no folders.
  std::smatch m;
  ASSERT_TRUE(std::regex_search(f.err, m, std::regex(R"(worker logs are in (\S+))"))) << f.err;
  EXPECT_TRUE(fs::exists(fs::path(m[1].str()) / "attempt_1" / "rank0"));
  EXPECT_FALSE(fs::exists(fs::path(m[1].str()) / "attempt_2")) << "a folder for an attempt that never ran";
  fs::remove_all(dir);
  fs::remove_all(logs);
  fs::remove(summary);
}

// A restart of a PyTorch script runs it in interpreters that imported torch
// before the failure (standbys are on by default with --max-restarts), as
// __main__ with its own argv, in the attempt's environment.
TEST(FaultTolerance, APythonScriptRestartsInInterpretersThatAlreadyImportedTorch) {
  const fs::path script = temp("standby").string() + ".py";
  std::ofstream(script) << R"PY(
import os, signal, sys, time
loaded = set(sys.modules)
import torch
# What a DDP script's start imports: the standby has it already (PyTorch
# 2.x's DDP constructor imports torch._dynamo, 1.6 s of a restart).
wanted = ["torch", "torch.distributed", "torch.nn.parallel"] + (["torch._dynamo"] if torch.__version__[0] != "1" else [])
preloaded = all(m in loaded for m in wanted)
import torch.distributed as dist
attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
rank = int(os.environ["RANK"])
print("attempt %d rank %d preloaded %s name %s argv %s" % (attempt, rank, preloaded, __name__, sys.argv[1:]), flush=True)

def standbys():
    """ddprun's children that started as standbys (their first environment says so)."""
    n = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open("/proc/%s/stat" % pid) as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open("/proc/%s/environ" % pid, "rb") as f:
                n += ppid == os.getppid() and b"DDPRUN_STANDBY_FD=" in f.read()
        except (OSError, ValueError):
            pass
    return n

if attempt == 0:
    if rank == 1:
        signal.pause()  # until ddprun stops it
    deadline = time.time() + 60
    while standbys() < 2 and time.time() < deadline:
        time.sleep(0.05)  # polling what ddprun does, with a deadline
    print("standbys seen: %d" % standbys(), flush=True)
    sys.exit(3)
dist.init_process_group("gloo")
t = torch.tensor([rank + 1.0])
dist.all_reduce(t)
print("rank %d all_reduce %d" % (rank, int(t.item())), flush=True)
os._exit(0)  # past PyTorch 2.15's abort in interpreter shutdown (see tests/interop/torch_ddp.py)
)PY";
  Finished f = ddptest::run({DDPRUN_BIN, "--nproc", "2", "--max-restarts", "1", script.string(), "--flag", "x"},
                            {"DDPRUN_PYTHON=" PYTHON_BIN});
  fs::remove(script);
  ASSERT_EQ(f.exit_code, 0) << f.out << f.err;
  EXPECT_TRUE(contains(f.out, "[rank0]:standbys seen: 2")) << f.out;
  EXPECT_TRUE(contains(f.err, "restarting the workers (restart 1 of 1, from standby)")) << f.err;
  for (int rank : {0, 1}) {
    const std::string r = std::to_string(rank);
    EXPECT_TRUE(contains(f.out, "[rank" + r + "]:attempt 0 rank " + r + " preloaded False name __main__ argv ['--flag', 'x']")) << f.out;
    EXPECT_TRUE(contains(f.out, "[rank" + r + "]:attempt 1 rank " + r + " preloaded True name __main__ argv ['--flag', 'x']")) << f.out;
    EXPECT_TRUE(contains(f.out, "[rank" + r + "]:rank " + r + " all_reduce 3")) << f.out;
  }
}

// Rank 1 raises in step 5, lets its group go and lingers in its teardown
// until the stop (tests/interop/own_error_first.py): its peers lose it,
// fail first and are reaped first. The root cause is still rank 1, with
// its error (its start-up wrote the exception to its error file before
// the teardown), not a peer's "Connection closed by peer", and rank 1 is
// no worker the stop ended.
TEST(FaultTolerance, APythonRanksOwnErrorIsTheRootCauseThoughItsPeersWereReapedFirst) {
  Finished f = ddptest::run({DDPRUN_BIN, "--nproc", "3", OWN_ERROR_SCRIPT}, {"PYTHON_EXEC=" PYTHON_BIN});
  EXPECT_EQ(f.exit_code, 1) << f.err;
  EXPECT_TRUE(contains(f.err, "root cause (the earliest failure of its own; the ranks before it lost a peer): rank 1 "
                              "(local rank 1"))
      << f.err;
  EXPECT_TRUE(contains(f.err, "    error: RuntimeError: an error of rank 1's own at step 5\n")) << f.err;
  EXPECT_TRUE(contains(f.err, "  also failed: rank 0") || contains(f.err, "  also failed: rank 2")) << f.err;
}

TEST(FaultTolerance, AStoppedWorkerIsFoundHungAndTheJobRecovers) {
  const std::string want = reference_checksum();
  const fs::path dir = temp("stop-ckpt"), summary = temp("stop.json");
  // Generous limits: a loaded CI machine must not make a healthy worker look hung.
  Process p(train_job({"--max-restarts", "2", "--hang-timeout", "5", "--no-standby", "--max-heals", "0"},
                      {"--checkpoint-dir", dir.string(), "--checkpoint-every", "10", "--summary-json",
                       summary.string()}));
  ASSERT_TRUE(reach_step(p, 40)) << p.out();
  auto workers = ddptest::children_of(p.pid());
  ASSERT_EQ(workers.size(), 2u);
  kill(workers[1], SIGSTOP);
  Finished f = p.finish();
  ASSERT_EQ(f.exit_code, 0) << f.err;
  EXPECT_TRUE(contains(f.err, "hung: no heartbeat for")) << f.err;
  EXPECT_TRUE(contains(f.err, "restarting the workers (restart 1 of 2)")) << f.err;
  EXPECT_TRUE(contains(f.out, "resumed from")) << f.out;
  EXPECT_EQ(checksum_in(summary), want);
  fs::remove_all(dir);
  fs::remove(summary);
}

// A job that grew (a node alone while another was cut off, then both): the
// checkpoint counted the steps of one rank, twice as many per epoch as two
// ranks take. The learning-rate schedule must go by the new world's steps:
// it ran below zero and training ended in NaN ("parameters differ").
TEST(FaultTolerance, AJobThatResumesOnMoreRanksKeepsItsSchedule) {
  const fs::path dir = temp("grow-ckpt");
  Finished alone = ddptest::run({DDPRUN_BIN, "--nproc", "1", TRAIN_BIN, "--limit", "4096", "--epochs", "1",
                                 "--checkpoint-dir", dir.string(), "--checkpoint-every", "20"});
  ASSERT_EQ(alone.exit_code, 0) << alone.err;
  Finished grown = ddptest::run({DDPRUN_BIN, "--nproc", "2", TRAIN_BIN, "--limit", "4096", "--epochs", "2",
                                 "--checkpoint-dir", dir.string()},
                                {"DDPRUN_CPU_COMM=gloo"});
  EXPECT_EQ(grown.exit_code, 0) << grown.err;
  EXPECT_TRUE(contains(grown.out, "]:resumed from ")) << grown.out;
  EXPECT_TRUE(contains(grown.out, "]:parameters identical on all 2 ranks")) << grown.out;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(grown.out, m, std::regex(R"(epoch 2/2: loss (\S+),)"))) << grown.out;
  EXPECT_LT(std::stod(m[1]), 1.0) << grown.out;  // still learning, not blown up
  fs::remove_all(dir);
}

// Without ddprun (hand-set variables, nobody to send SIGTERM): a peer that
// dies mid-training makes train exit 1 with the error on one line and in
// the error file, not abort (SIGABRT, a core dump) with its output lost.
TEST(FaultTolerance, TrainExitsWithTheErrorWhenAPeerDies) {
  const std::string port = std::to_string(ddptest::free_port());
  const fs::path error_file = temp("peer-died.json");
  auto rank = [&](int r) {
    ddptest::EnvChanges env{"MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + port, "RANK=" + std::to_string(r),
                            "WORLD_SIZE=2", "LOCAL_RANK=0", "LOCAL_WORLD_SIZE=1"};
    if (r == 0) env.push_back("TORCHELASTIC_ERROR_FILE=" + error_file.string());
    return std::make_unique<Process>(
        std::vector<std::string>{TRAIN_BIN, "--limit", "8000", "--epochs", "2", "--print-steps"}, env);
  };
  auto r0 = rank(0);
  auto r1 = rank(1);
  ASSERT_TRUE(r0->wait_for_line([](const std::string& l) { return contains(l, "step 5 done"); }, 90s))
      << r0->out();
  r1->signal(SIGKILL);
  Finished f = r0->finish(60s);
  r1->finish(10s);
  EXPECT_EQ(f.signal, 0) << f.err;
  EXPECT_EQ(f.exit_code, 1) << f.err;
  EXPECT_TRUE(contains(f.err, "error: ddp::CollectiveError: ")) << f.err;
  EXPECT_FALSE(contains(f.err, "terminate called")) << f.err;
  EXPECT_TRUE(contains(f.out, "cnn on 8000 images")) << f.out;  // its first line is still there
  std::ifstream in(error_file);
  const std::string written((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_TRUE(contains(written, "ddp::CollectiveError")) << written;
  fs::remove(error_file);
}

TEST(FaultTolerance, SigtermTakesAFinalCheckpointAndTheSameCommandResumes) {
  const std::string want = reference_checksum();
  const fs::path dir = temp("term-ckpt"), summary = temp("term.json");
  const auto job = train_job({}, {"--checkpoint-dir", dir.string(), "--checkpoint-every", "50",
                                  "--summary-json", summary.string()});
  Process p(job);
  ASSERT_TRUE(reach_step(p, 60)) << p.out();
  p.signal(SIGTERM);
  Finished stopped = p.finish();
  EXPECT_EQ(stopped.exit_code, 128 + SIGTERM) << stopped.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(stopped.out, m, std::regex(R"(stopped by signal after step (\d+); checkpoint (\S+))")))
      << stopped.out;
  const int stop_step = std::stoi(m[1]);
  EXPECT_GE(stop_step, 60);
  EXPECT_TRUE(fs::exists(m[2].str()));
  EXPECT_TRUE(contains(stopped.err, "stopped by SIGTERM")) << stopped.err;
  EXPECT_TRUE(contains(stopped.err, "no worker failed on its own")) << stopped.err;

  // The checkpoint is an ordinary torch.save file that loads with torch.load's
  // safe default of PyTorch 2.6+, weights_only=True (checked before resuming
  // prunes it).
  const std::string script =
      "import sys, torch\n"
      "ck = torch.load(sys.argv[1], weights_only=True)\n"
      "assert ck['format'] == 'ddprun-checkpoint/1'\n"
      "assert ck['optimizer']['kind'] == 'sgd'\n"
      "assert ck['optimizer']['lr'].dtype == torch.float64 and ck['optimizer']['lr'].numel() == 1\n"
      "assert len(ck['optimizer']['state']) == 8 and 'momentum_buffer' in ck['optimizer']['state'][0]\n"
      "print('loaded step', ck['step'], 'with', len(ck['model']), 'tensors, fc1.weight', tuple(ck['model']['fc1.weight'].shape))\n";
  Finished py = ddptest::run({PYTHON_BIN, "-c", script, m[2].str()});
  EXPECT_EQ(py.exit_code, 0) << py.err;
  EXPECT_TRUE(contains(py.out, "loaded step " + std::to_string(stop_step) + " with 8 tensors, fc1.weight (128, 1568)"))
      << py.out;

  Finished resumed = ddptest::run(job);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_TRUE(contains(resumed.out, "resumed from " + m[2].str() + " at step " + std::to_string(stop_step)))
      << resumed.out;
  EXPECT_EQ(checksum_in(summary), want);

  fs::remove_all(dir);
  fs::remove(summary);
}

TEST(FaultTolerance, ADamagedNewestCheckpointFallsBackToTheOneBefore) {
  const std::string want = reference_checksum();
  const fs::path dir = temp("damage-ckpt"), summary = temp("damage.json");
  // Stop part-way with checkpoints at 20, 40, 60 and the final one.
  const auto job = train_job({}, {"--checkpoint-dir", dir.string(), "--checkpoint-every", "20", "--keep-checkpoints",
                                  "5", "--summary-json", summary.string()});
  Process p(job);
  ASSERT_TRUE(reach_step(p, 65)) << p.out();
  p.signal(SIGTERM);
  Finished stopped = p.finish();
  ASSERT_EQ(stopped.exit_code, 128 + SIGTERM) << stopped.err;
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir)) files.push_back(e.path());
  std::sort(files.rbegin(), files.rend());  // newest first (the step is zero-padded)
  ASSERT_GE(files.size(), 2u);
  fs::resize_file(files[0], fs::file_size(files[0]) - 10);  // a partial write

  Finished resumed = ddptest::run(job);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_TRUE(contains(resumed.err, "skipping checkpoint " + files[0].string())) << resumed.err;
  EXPECT_TRUE(contains(resumed.out, "resumed from " + files[1].string())) << resumed.out;
  EXPECT_EQ(checksum_in(summary), want);
  fs::remove_all(dir);
  fs::remove(summary);
}

TEST(FaultTolerance, ExhaustedRestartsLeaveASummaryAndNoOrphans) {
  Process p({DDPRUN_BIN, "--nproc", "3", "--max-restarts", "2", PROBE_BIN, "fail-rank", "1", "9"});
  Finished f = p.finish();
  EXPECT_EQ(f.exit_code, 1);
  EXPECT_EQ(occurrences(f.err, "root cause (earliest failure): rank 1"), 3) << f.err;
  EXPECT_TRUE(contains(f.err, "failed on attempt 3 of 3")) << f.err;
  // Every worker of every attempt said "ready PID"; none may be left.
  std::regex ready(R"(\]:ready (\d+))");
  int seen = 0;
  for (std::sregex_iterator it(f.out.begin(), f.out.end(), ready), end; it != end; ++it) {
    ++seen;
    EXPECT_TRUE(ddptest::exits_within(std::stoi((*it)[1]), 5s)) << "orphan " << (*it)[1];
  }
  EXPECT_EQ(seen, 6);  // ranks 0 and 2, three attempts
}

}  // namespace
