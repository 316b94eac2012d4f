// torchrun drop-in compatibility end to end: the real ddprun, real worker
// processes (shell scripts, and Python scripts like PyTorch's launcher tests
// under PYTHON_BIN, Debian's python3 with torch 1.13).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>

#include "support/job_helpers.h"
#include "support/process.h"

namespace {

namespace fs = std::filesystem;
using ddptest::contains;
using ddptest::Finished;
using ddptest::lines;
using ddptest::run;

using ddptest::ddprun;

fs::path fresh_dir(const std::string& name) {
  fs::path d = ddptest::temp_path("torchrun-compat", name);
  fs::create_directories(d);
  return d;
}

fs::path write_file(const fs::path& path, const std::string& text, bool executable = false) {
  std::ofstream(path) << text;
  if (executable) chmod(path.c_str(), 0755);
  return path;
}

// PyTorch's test/distributed/launcher/bin/test_script.py, in short: prints
// the variables torchrun sets, then touches DIR/RANK (or fails).
const char* kTestScript = R"(import argparse, os
from pathlib import Path
p = argparse.ArgumentParser()
p.add_argument("--fail", default=False, action="store_true")
p.add_argument("--touch_file_dir", type=str)
args = p.parse_args()
for v in ["LOCAL_RANK", "RANK", "GROUP_RANK", "ROLE_RANK", "ROLE_NAME", "LOCAL_WORLD_SIZE",
          "WORLD_SIZE", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
          "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID",
          "OMP_NUM_THREADS", "TORCHELASTIC_ERROR_FILE"]:
    print(f"{v} = {os.environ[v]}")
if args.fail:
    raise RuntimeError("raising exception since --fail flag was set")
Path(os.path.join(args.touch_file_dir, os.environ["RANK"])).touch()
)";

std::set<std::string> touched(const fs::path& dir) {
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.insert(e.path().filename());
  return names;
}

const std::set<std::string> kFour{"0", "1", "2", "3"};

// run_test.py: test_launch_standalone (4 workers, torchrun's own flags).
TEST(TorchrunCompat, RunTestStandalone) {
  fs::path dir = fresh_dir("standalone");
  fs::path script = write_file(dir / "test_script.py", kTestScript);
  fs::path out = dir / "touched";
  fs::create_directories(out);
  Finished f = run(ddprun({"--nnodes=1", "--nproc-per-node=4", "--standalone", "--monitor-interval=1",
                           "--start-method=spawn", script, "--touch_file_dir=" + out.string()}),
                   {std::string("PYTHON_EXEC=") + PYTHON_BIN});
  ASSERT_EQ(f.exit_code, 0) << f.out << f.err;
  EXPECT_EQ(touched(out), kFour);
  fs::remove_all(dir);
}

// run_test.py: test_launch_run_path (the script by path under Python).
TEST(TorchrunCompat, RunTestRunPath) {
  fs::path dir = fresh_dir("run-path");
  fs::path script = write_file(dir / "test_script.py", kTestScript);
  fs::path out = dir / "touched";
  fs::create_directories(out);
  Finished f = run(ddprun({"--run-path", "--nnodes=1", "--nproc-per-node=4", "--monitor-interval=1",
                           "--start-method=spawn", script, "--touch_file_dir=" + out.string()}),
                   {std::string("PYTHON_EXEC=") + PYTHON_BIN});
  ASSERT_EQ(f.exit_code, 0) << f.out << f.err;
  EXPECT_EQ(touched(out), kFour);
  // --run-path takes precedence over --no-python (torchrun), and needs no
  // .py name: still Python.
  fs::remove_all(out);
  fs::create_directories(out);
  fs::path plain = write_file(dir / "test_script", kTestScript);
  Finished g = run(ddprun({"--run-path", "--no-python", "--nproc-per-node=2", plain,
                           "--touch_file_dir=" + out.string()}),
                   {std::string("PYTHON_EXEC=") + PYTHON_BIN});
  ASSERT_EQ(g.exit_code, 0) << g.out << g.err;
  EXPECT_EQ(touched(out), (std::set<std::string>{"0", "1"}));
  fs::remove_all(dir);
}

// run_test.py: test_launch_with_env_vars, with its test_script.sh
// (--no-python from PET_NO_PYTHON), and the command line winning.
TEST(TorchrunCompat, RunTestWithPetVariables) {
  fs::path dir = fresh_dir("pet");
  fs::path script = write_file(dir / "test_script.sh",
                               "#!/bin/sh\ntouch \"$2/$RANK\"\necho \"ws=$WORLD_SIZE\"\n", true);
  fs::path out = dir / "touched";
  fs::create_directories(out);
  const ddptest::EnvChanges env{"PET_NNODES=1", "PET_NPROC_PER_NODE=4", "PET_MONITOR_INTERVAL=1",
                                "PET_START_METHOD=spawn", "PET_NO_PYTHON=1", "PET_MAX_RESTARTS=0",
                                "PET_RDZV_BACKEND=c10d"};
  Finished f = run(ddprun({script, "--touch-file-dir", out}), env);
  ASSERT_EQ(f.exit_code, 0) << f.out << f.err;
  EXPECT_EQ(touched(out), kFour);
  EXPECT_TRUE(contains(f.out, "[rank3]:ws=4")) << f.out;

  fs::remove_all(out);
  fs::create_directories(out);
  Finished two = run(ddprun({"--nproc_per", "2", script, "--touch-file-dir", out}), env);
  ASSERT_EQ(two.exit_code, 0) << two.out << two.err;
  EXPECT_EQ(touched(out), (std::set<std::string>{"0", "1"}));
  fs::remove_all(dir);
}

// run_test.py: a failing script with @record: every rank's error in the
// summary, its traceback once (error file and stderr hold the same lines).
TEST(TorchrunCompat, RecordedPythonFailureIsReportedOnce) {
  fs::path dir = fresh_dir("fail");
  fs::path script = write_file(dir / "fail.py", R"(from torch.distributed.elastic.multiprocessing.errors import record
@record
def main():
    raise RuntimeError("raising exception since --fail flag was set")
main()
)");
  Finished f = run(ddprun({"--nproc-per-node=1", script}), {std::string("PYTHON_EXEC=") + PYTHON_BIN});
  ASSERT_EQ(f.exit_code, 1) << f.out << f.err;
  const auto at = f.err.find("ddprun: job");
  ASSERT_NE(at, std::string::npos) << f.err;
  const std::string summary = f.err.substr(at);
  EXPECT_TRUE(contains(summary, "root cause (earliest failure): rank 0")) << summary;
  // The traceback's last line, once (the error file and stderr both hold it).
  const std::string last = "RuntimeError: raising exception since --fail flag was set";
  size_t count = 0;
  for (size_t p = summary.find(last); p != std::string::npos; p = summary.find(last, p + 1)) ++count;
  EXPECT_EQ(count, 1u) << summary;
  fs::remove_all(dir);
}

// The same with a process group: PyTorch 2.x then prefixes each line of
// the uncaught exception with "[rankN]: ". The console shows one prefix
// (torchrun shows PyTorch's alone), and the summary the traceback once.
TEST(TorchrunCompat, RecordedFailureOfAProcessGroupShowsOnePrefixAndItsTracebackOnce) {
  fs::path dir = fresh_dir("fail-pg");
  fs::path script = write_file(dir / "fail.py", R"(import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record
@record
def main():
    dist.init_process_group("gloo")
    raise RuntimeError(f"deliberate failure on rank {dist.get_rank()}")
main()
)");
  Finished f = run(ddprun({"--nproc-per-node=2", script}), {std::string("PYTHON_EXEC=") + PYTHON_BIN});
  ASSERT_EQ(f.exit_code, 1) << f.out << f.err;
  EXPECT_FALSE(contains(f.err, "[rank0]:[rank0]:")) << f.err;
  EXPECT_FALSE(contains(f.err, "[rank1]:[rank1]:")) << f.err;
  EXPECT_TRUE(std::regex_search(f.err, std::regex(R"(\[rank1\]: ?Traceback \(most recent call last\))"))) << f.err;
  const auto at = f.err.find("ddprun: job");
  ASSERT_NE(at, std::string::npos) << f.err;
  const std::string summary = f.err.substr(at);
  for (const char* last : {"RuntimeError: deliberate failure on rank 0", "RuntimeError: deliberate failure on rank 1"}) {
    size_t count = 0;
    for (size_t p = summary.find(last); p != std::string::npos; p = summary.find(last, p + 1)) ++count;
    EXPECT_LE(count, 1u) << last << "\n" << summary;
  }
  EXPECT_LE(ddptest::occurrences(summary, "Traceback (most recent call last)"), 2) << summary;  // one per rank
  fs::remove_all(dir);
}

// Two ranks that fail by themselves at nearly the same moment are both
// failures with their own exit code, not "stopped by ddprun". They meet
// first (files, no sleeps) and ignore SIGTERM, so both exit 3 whenever
// ddprun sees the first.
TEST(TorchrunCompat, RanksFailingTogetherAreAllListed) {
  fs::path dir = fresh_dir("together");
  const std::string script = "trap '' TERM; touch " + dir.string() + "/$RANK; while [ $(ls " +
                             dir.string() + " | wc -l) -lt 2 ]; do :; done; exit 3";
  Finished f = run(ddprun({"--nproc", "2", "/bin/sh", "-c", script}));
  ASSERT_EQ(f.exit_code, 1) << f.out << f.err;
  std::regex failed(R"(rank (\d) \(local rank \d, pid \d+, host [^)]*\): exit code 3)");
  std::set<std::string> ranks;
  for (const auto& l : lines(f.err)) {
    std::smatch m;
    if (std::regex_search(l, m, failed)) ranks.insert(m[1]);
  }
  EXPECT_EQ(ranks, (std::set<std::string>{"0", "1"})) << f.err;
  EXPECT_FALSE(contains(f.err, "stopped by ddprun")) << f.err;
  fs::remove_all(dir);
}

// -r 3 -t 3: tee wins over redirect (torchrun): the console and the files.
TEST(TorchrunCompat, TeeWinsOverRedirects) {
  fs::path logs = fresh_dir("tee");
  Finished f = run(ddprun({"-r", "3", "-t", "3", "--log-dir", logs, "--nproc", "2", "/bin/sh", "-c",
                           "echo out-$RANK; echo err-$RANK >&2"}));
  ASSERT_EQ(f.exit_code, 0) << f.err;
  EXPECT_TRUE(contains(f.out, "[rank1]:out-1")) << f.out;
  EXPECT_TRUE(contains(f.err, "[rank0]:err-0")) << f.err;
  bool in_file = false;
  for (const auto& e : fs::recursive_directory_iterator(logs)) {
    if (e.path().filename() == "stdout.log") {
      std::ifstream in(e.path());
      std::string text((std::istreambuf_iterator<char>(in)), {});
      in_file = in_file || contains(text, "out-");
    }
  }
  EXPECT_TRUE(in_file);
  // Only redirected: files, not the console.
  Finished r = run(ddprun({"-r", "1", "--log-dir", logs, "/bin/sh", "-c", "echo hidden"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(contains(r.out, "hidden")) << r.out;
  fs::remove_all(logs);
}

// --local-ranks-filter: only those local ranks reach the console; the log
// files get every rank. Lines matching --duplicate-stdout-filters are
// copied to filtered_stdout.log.
TEST(TorchrunCompat, LocalRanksFilterAndDuplicateFilters) {
  fs::path logs = fresh_dir("filter");
  Finished f = run(ddprun({"--local_ranks_filter=1", "--duplicate-stdout-filters", "loss", "--log-dir",
                           logs, "--nproc", "3", "/bin/sh", "-c",
                           "echo shown-$RANK; echo loss=$RANK; echo err-$RANK >&2"}));
  ASSERT_EQ(f.exit_code, 0) << f.err;
  EXPECT_TRUE(contains(f.out, "[rank1]:shown-1")) << f.out;
  EXPECT_FALSE(contains(f.out, "shown-0")) << f.out;
  EXPECT_FALSE(contains(f.out, "shown-2")) << f.out;
  EXPECT_FALSE(contains(f.err, "err-0")) << f.err;
  EXPECT_TRUE(contains(f.err, "[rank1]:err-1")) << f.err;
  std::string filtered;
  int rank_logs = 0;
  for (const auto& e : fs::recursive_directory_iterator(logs)) {
    if (!e.is_regular_file()) continue;
    std::ifstream in(e.path());
    std::string text((std::istreambuf_iterator<char>(in)), {});
    if (e.path().filename() == "filtered_stdout.log") filtered = text;
    if (e.path().filename() == "stdout.log" && contains(text, "shown-")) ++rank_logs;
  }
  EXPECT_EQ(rank_logs, 3);
  for (int r = 0; r < 3; ++r) EXPECT_TRUE(contains(filtered, "loss=" + std::to_string(r))) << filtered;
  EXPECT_FALSE(contains(filtered, "shown-")) << filtered;
  fs::remove_all(logs);
}

TEST(TorchrunCompat, LinePrefixTemplate) {
  Finished f = run(ddprun({"--role", "trainer", "--nproc", "2", "/bin/sh", "-c", "echo hi"}),
                   {"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE=<${role_name}|${rank}|${local_rank}> "});
  ASSERT_EQ(f.exit_code, 0) << f.err;
  EXPECT_TRUE(contains(f.out, "<trainer|1|1> hi")) << f.out;
  EXPECT_FALSE(contains(f.out, "[rank1]:")) << f.out;
  // torchrun 2.x's flag wins over the variable; ${hostname} is the node's name.
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  for (const std::string flag : {"--log-line-prefix-template", "--log_line_prefix_template"}) {
    Finished g = run(ddprun({flag, "${hostname}/${rank}: ", "--nproc", "2", "/bin/sh", "-c", "echo hi"}),
                     {"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE=<${rank}> "});
    ASSERT_EQ(g.exit_code, 0) << g.err;
    EXPECT_TRUE(contains(g.out, std::string(host) + "/1: hi")) << g.out;
    EXPECT_FALSE(contains(g.out, "<1>")) << g.out;
  }
  Finished pet = run(ddprun({"--nproc", "1", "/bin/sh", "-c", "echo hi"}), {"PET_LOG_LINE_PREFIX_TEMPLATE=pet${rank} "});
  EXPECT_TRUE(contains(pet.out, "pet0 hi")) << pet.out;
}

// torchrun 2.x's --print-completion: a script for the shell, made from the
// flags ddprun parses; an unknown shell is a one-line usage error.
TEST(TorchrunCompat, PrintCompletionForEachShell) {
  for (const std::string shell : {"bash", "zsh", "tcsh"}) {
    Finished f = run(ddprun({"--print-completion", shell}));
    ASSERT_EQ(f.exit_code, 0) << shell << f.err;
    EXPECT_TRUE(contains(f.out, "nproc-per-node")) << shell << f.out;
    EXPECT_TRUE(contains(f.out, "log-line-prefix-template")) << shell << f.out;
  }
  // bash runs it: "--max-r" and "--max_r" complete to their own spelling of --max-restarts.
  Finished b = run({"/bin/bash", "-c",
                    "eval \"$(" DDPRUN_BIN " --print-completion bash)\"; "
                    "for w in --max-r --max_r; do COMP_WORDS=(ddprun $w); COMP_CWORD=1; _ddprun; "
                    "printf '%s\\n' \"${COMPREPLY[@]}\"; done"});
  ASSERT_EQ(b.exit_code, 0) << b.err;
  EXPECT_EQ(lines(b.out), (std::vector<std::string>{"--max-restarts", "--max_restarts"})) << b.out;
  Finished bad = run(ddprun({"--print-completion", "fish"}));
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_EQ(bad.err, "ddprun: error: --print-completion: 'fish' is not a shell it knows (bash, zsh, tcsh)\n");
}

TEST(TorchrunCompat, WorkerEnvironmentExtras) {
  Finished f = run(ddprun({"--virtual-local-rank", "--nproc", "2", "/bin/sh", "-c",
                           "echo lr=$LOCAL_RANK cvd=$CUDA_VISIBLE_DEVICES "
                           "nccl=$NCCL_ASYNC_ERROR_HANDLING/$TORCH_NCCL_ASYNC_ERROR_HANDLING"}),
                   {"TORCH_NCCL_ASYNC_ERROR_HANDLING=3"});
  ASSERT_EQ(f.exit_code, 0) << f.err;
  EXPECT_TRUE(contains(f.out, "[rank1]:lr=0 cvd=1 nccl=/3")) << f.out;
  EXPECT_TRUE(contains(f.out, "[rank0]:lr=0 cvd=0 nccl=/3")) << f.out;
}

// A .py runs under PYTHON_EXEC, then DDPRUN_PYTHON, then $VIRTUAL_ENV's
// python, then python3 from PATH.
TEST(TorchrunCompat, PythonInterpreterChoice) {
  fs::path dir = fresh_dir("python");
  fs::path script = write_file(dir / "which.py", "import sys\nprint('exe=' + sys.executable)\n");
  fs::create_directories(dir / "venv/bin");
  fs::create_symlink(PYTHON_BIN, dir / "venv/bin/python");
  auto exe_of = [&](const ddptest::EnvChanges& env) {
    Finished f = run(ddprun({script.string()}), env);
    EXPECT_EQ(f.exit_code, 0) << f.err;
    std::smatch m;
    std::regex re(R"(\[rank0\]:exe=(.*))");
    return std::regex_search(f.out, m, re) ? m[1].str() : "?";
  };
  const std::string venv = "VIRTUAL_ENV=" + (dir / "venv").string();
  EXPECT_EQ(exe_of({venv}), (dir / "venv/bin/python").string());
  EXPECT_EQ(exe_of({venv, std::string("DDPRUN_PYTHON=") + PYTHON_BIN}), PYTHON_BIN);
  EXPECT_EQ(exe_of({venv, "DDPRUN_PYTHON=/nonexistent", std::string("PYTHON_EXEC=") + PYTHON_BIN}),
            PYTHON_BIN);
  fs::remove_all(dir);
}

// A worker whose interpreter lacks torch: the summary says which ran and how
// to choose another.
TEST(TorchrunCompat, MissingTorchNamesTheInterpreter) {
  fs::path dir = fresh_dir("notorch");
  fs::path fake = write_file(dir / "python", "#!/bin/sh\necho \"ModuleNotFoundError: No module named 'torch'\" >&2\nexit 1\n", true);
  fs::path script = write_file(dir / "train.py", "import torch\n");
  Finished f = run(ddprun({script.string()}), {"PYTHON_EXEC=" + fake.string()});
  ASSERT_EQ(f.exit_code, 1) << f.err;
  EXPECT_TRUE(contains(f.err, "hint: the workers ran under " + fake.string() + " (PYTHON_EXEC)")) << f.err;
  EXPECT_TRUE(contains(f.err, "DDPRUN_PYTHON")) << f.err;
  fs::remove_all(dir);
}

// --numa-binding: each worker's CPUs (and memory policy) as the node says.
TEST(TorchrunCompat, NumaBindingSetsTheWorkersAffinity) {
  const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  if (cpus < 2) GTEST_SKIP() << "needs 2 CPUs";
  Finished f = run(ddprun({"--numa-binding", "exclusive", "--nproc", "2", "/bin/sh", "-c",
                           "grep Cpus_allowed_list /proc/self/status; head -1 /proc/self/numa_maps"}));
  ASSERT_EQ(f.exit_code, 0) << f.err;
  std::map<int, std::string> lists;
  std::regex re(R"(\[rank(\d)\]:Cpus_allowed_list:\s*(\S+))");
  for (const auto& l : lines(f.out)) {
    std::smatch m;
    if (std::regex_search(l, m, re)) lists[std::stoi(m[1])] = m[2];
  }
  ASSERT_EQ(lists.size(), 2u) << f.out;
  // Each has a part of the node to itself: different, smaller than all.
  EXPECT_NE(lists[0], lists[1]) << f.out;
  EXPECT_TRUE(contains(f.out, "bind:")) << f.out;  // numa_maps shows the MPOL_BIND policy
  Finished plain = run(ddprun({"--nproc", "2", "/bin/sh", "-c", "grep Cpus_allowed_list /proc/self/status"}));
  EXPECT_FALSE(contains(plain.out, "[rank0]:Cpus_allowed_list:\t" + lists[0]) &&
               contains(plain.out, "[rank1]:Cpus_allowed_list:\t" + lists[1]))
      << plain.out;
}

// Usage errors: one line, exit code 2.
TEST(TorchrunCompat, UsageErrorsAreOneLine) {
  struct Case {
    std::vector<std::string> args;
    ddptest::EnvChanges env;
    std::string line;
  };
  const std::vector<Case> cases{
      {{"--nprocs", "2", "true"}, {}, "ddprun: error: unknown option '--nprocs' (did you mean --nproc-per-node?)\n"},
      {{"--master", "h", "true"}, {}, "ddprun: error: ambiguous option '--master' could match --master-addr, --master-port\n"},
      {{"true"}, {"PET_NNODES=x"}, "ddprun: error: PET_NNODES: expected an integer, got 'x'\n"},
      {{"--nproc-per-node", "xpu", "true"}, {}, ""},
      {{"--start-method", "thread", "true"}, {}, "ddprun: error: --start-method: expected spawn, fork or forkserver, got 'thread'\n"},
  };
  for (const auto& c : cases) {
    Finished f = run(ddprun(c.args), c.env);
    EXPECT_EQ(f.exit_code, 2) << c.args[0];
    if (!c.line.empty()) {
      EXPECT_EQ(f.err, c.line);
    }
    EXPECT_EQ(std::count(f.err.begin(), f.err.end(), '\n'), 1) << f.err;
  }
}

}  // namespace
