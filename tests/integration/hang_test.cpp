// Hangs explained, with real processes: before ddprun kills a hung worker,
// every worker's stacks (all threads, native frames named, or Python
// frames) and a verdict naming the rank the others wait for; the same on a
// live job when ddprun gets the stack signal.
#include <gtest/gtest.h>

#include <signal.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>

#include "support/job_helpers.h"
#include "support/process.h"

namespace {

using namespace std::chrono_literals;
using ddptest::contains;
using ddptest::ddprun;

using ddptest::stacks_file;

TEST(Hang, TheRankTheOthersWaitForIsNamedWithItsStackBeforeTheKill) {
  ddptest::Finished f = ddptest::run(
      ddprun({"--nproc", "3", "--hang-timeout", "2", HANG_CHECK_BIN, "--stuck", "1", "--at", "5"}));
  EXPECT_NE(f.exit_code, 0) << f.err;
  // The verdict, from the flight records: who waits in which collective,
  // who never came, and where that one is (its own function, by name).
  EXPECT_TRUE(contains(f.err, "hang: ranks 0,2 wait in all_reduce #6 (4.0 KB) since")) << f.err;
  EXPECT_TRUE(contains(f.err, "rank 1 never entered it (its last: all_reduce #5, finished")) << f.err;
  EXPECT_TRUE(contains(f.err, "rank 1 is in: stuck_outside_any_collective()")) << f.err;
  // It is the failure's reason too: in the summary's root cause.
  const auto root = f.err.find("root cause");
  ASSERT_NE(root, std::string::npos) << f.err;
  EXPECT_TRUE(contains(f.err.substr(root), "rank 1 never entered it")) << f.err;
  // Every rank's stacks, every thread, in the file: the waiting ranks in
  // the all_reduce, the stuck one in its function.
  const std::string stacks = stacks_file(f.err);
  for (int r = 0; r < 3; ++r) {
    const auto at = stacks.find("=== rank " + std::to_string(r) + " (pid ");
    ASSERT_NE(at, std::string::npos) << stacks;
    const std::string own = stacks.substr(at, stacks.find("=== rank ", at + 1) - at);
    EXPECT_EQ(contains(own, "ddp::SwappableCommunicator::all_reduce("), r != 1) << own;
    EXPECT_EQ(contains(own, "stuck_outside_any_collective()"), r == 1) << own;
    EXPECT_GT(ddptest::occurrences(own, "native thread "), 1) << own;  // helper threads too
  }
}

// Slowness is not a hang: a rank that computes for 4 s of CPU without a
// beat, under --hang-timeout 1, is named slow and goes on; the job ends 0.
// (Its computation takes CPU time, not wall time: a loaded machine only
// makes it longer, and it stays busy or runnable throughout.)
TEST(Hang, ARankThatComputesWithoutBeatingIsSlowNotHung) {
  ddptest::Finished f = ddptest::run(ddprun({"--nproc", "2", "--hang-timeout", "1", HANG_CHECK_BIN, "--stuck", "1",
                                             "--at", "3", "--busy-ms", "4000", "--steps", "8"}));
  EXPECT_EQ(f.exit_code, 0) << f.err;
  EXPECT_TRUE(std::regex_search(f.err, std::regex(R"(rank 1 \(pid \d+\) is slow, not hung: silent for )")))
      << f.err;
  EXPECT_FALSE(contains(f.err, "hung: no heartbeat")) << f.err;
}

// A hang is no progress, whatever the process does: a rank that computes
// for ever at step 300 (its CPU time grows, it never beats) while the
// other waits for it is hung once it ran the spin bound without a step
// (twice auto's floor here, 4 s), not excused as slow; the one waiting is
// not blamed.
TEST(Hang, ARankThatSpinsWhileTheOthersWaitIsHungByItsCpuTime) {
  ddptest::Finished f = ddptest::run(ddprun({"--nproc", "2", "--hang-timeout", "auto:2", "--monitor-interval", "0.02",
                                             HANG_CHECK_BIN, "--work-ms", "5", "--stuck", "1", "--at", "300",
                                             "--busy-ms", "1e12"}));
  EXPECT_NE(f.exit_code, 0) << f.err;
  EXPECT_TRUE(std::regex_search(f.err, std::regex(R"(rank 1 \(pid \d+\) hung: it spins: no step for [\d.]+ s, and it ran on a CPU for )")))
      << f.err;
  EXPECT_TRUE(contains(f.err, "rank 1 never entered it")) << f.err;
  EXPECT_FALSE(std::regex_search(f.err, std::regex(R"(rank 0 \(pid \d+\) hung)"))) << f.err;
}

// The same for a Python script: a rank that spins in Python, or stays in
// one C call that holds the GIL (its interpreter's other threads stop too).
// One job each, so that each has ctest's whole timeout on a loaded machine.
void expect_python_spin_found(const std::string& how, const std::string& frame) {
  ddptest::Finished f = ddptest::run(ddprun({"--nproc", "2", "--hang-timeout", "auto:2", "--monitor-interval", "0.02",
                                             HANG_SCRIPT, "--train-steps", "150", how}),
                                     {"DDPRUN_PYTHON=" PYTHON_BIN});
  EXPECT_NE(f.exit_code, 0) << how << "\n" << f.err;
  EXPECT_TRUE(std::regex_search(f.err, std::regex(R"(rank 1 \(pid \d+\) hung: it spins: no step for )")))
      << how << "\n" << f.err;
  EXPECT_TRUE(contains(f.err, " in " + frame)) << f.err;
}

TEST(Hang, APythonRankThatSpinsIsHung) { expect_python_spin_found("--spin", "spin_in_python"); }

TEST(Hang, APythonRankThatHoldsTheGilIsHung) { expect_python_spin_found("--hold-gil", "hold_the_gil"); }

// A deadlock in which every rank beats (each waits inside torch.distributed,
// rank 0 in a barrier, rank 1 in another group's all_reduce): no rank
// advances and none computes, so the job is hung, with both stacks.
TEST(Hang, RanksThatAllWaitInsideTorchDistributedAreHung) {
  ddptest::Finished f = ddptest::run(ddprun({"--nproc", "2", "--hang-timeout", "auto:2", "--monitor-interval", "0.02",
                                             HANG_SCRIPT, "--train-steps", "150", "--deadlock"}),
                                     {"DDPRUN_PYTHON=" PYTHON_BIN});
  EXPECT_NE(f.exit_code, 0) << f.err;
  EXPECT_TRUE(contains(f.err, "hung: no rank of the job has advanced a step for ")) << f.err;
  EXPECT_TRUE(contains(f.err, "rank 0 is in: File ")) << f.err;
  EXPECT_TRUE(contains(f.err, " in barrier")) << f.err;
  stacks_file(f.err);
}

// A stopped rank waits for nobody: a busy peer (rank 1 spinning) does not
// excuse its silence.
TEST(Hang, AStoppedRankBesideABusyOneIsHung) {
  ddptest::Finished f = ddptest::run(ddprun({"--nproc", "3", "--hang-timeout", "3", HANG_CHECK_BIN, "--work-ms", "20",
                                             "--stuck", "1", "--at", "5", "--busy-ms", "1e12", "--also-stopped", "2"}));
  EXPECT_NE(f.exit_code, 0) << f.err;
  EXPECT_TRUE(std::regex_search(f.err, std::regex(R"(rank 2 \(pid \d+\) hung: no heartbeat for )"))) << f.err;
  EXPECT_TRUE(contains(f.err, "rank 2 stopped (SIGSTOP, or a debugger holds it)")) << f.err;
}

// Finished is finished: a script whose interpreter takes 6 s to exit after
// its last line (a thread it left running), under --hang-timeout 2, is not
// hung: its start-up said "finishing" when the script ended.
TEST(Hang, AScriptsSlowExitIsNotAHang) {
  ddptest::Finished f = ddptest::run(ddprun({"--nproc", "2", "--hang-timeout", "2", HANG_SCRIPT, "--train-steps", "20",
                                             "--no-stuck", "--slow-exit", "6"}),
                                     {"DDPRUN_PYTHON=" PYTHON_BIN});
  EXPECT_EQ(f.exit_code, 0) << f.err;
  EXPECT_EQ(ddptest::occurrences(f.out, " is done"), 2) << f.out;
  EXPECT_FALSE(contains(f.err, "hung")) << f.err;
}

// No --hang-timeout: the default learns the job's rhythm (5 ms steps) and
// fires at its floor (auto:2 here, 15 s by default), before any kill the
// verdict as with a fixed timeout.
TEST(Hang, TheDefaultLearnsTheRhythmAndCatchesAHangAtItsFloor) {
  ddptest::Finished f = ddptest::run(ddprun({"--nproc", "2", "--hang-timeout", "auto:2", "--monitor-interval", "0.02",
                                             HANG_CHECK_BIN, "--work-ms", "5", "--stuck", "1", "--at", "300"}));
  EXPECT_NE(f.exit_code, 0) << f.err;
  EXPECT_TRUE(contains(f.err, "(--hang-timeout auto: 2.0 s, 10x the longest gap between heartbeats")) << f.err;
  EXPECT_TRUE(contains(f.err, "rank 1 never entered it")) << f.err;
  EXPECT_TRUE(contains(f.err, "rank 1 is in: stuck_outside_any_collective()")) << f.err;
}

// An evaluation the program announces (ddp::World::announce) is no hang,
// however much longer than the learned limit; the job ends well.
TEST(Hang, AnAnnouncedEvaluationLongerThanTheLimitIsNoHang) {
  ddptest::Finished f =
      ddptest::run(ddprun({"--nproc", "2", "--hang-timeout", "auto:1", "--monitor-interval", "0.02", HANG_CHECK_BIN,
                           "--work-ms", "5", "--stuck", "-1", "--evaluate-at", "200", "--evaluate-ms", "3000",
                           "--steps", "300"}));
  EXPECT_EQ(f.exit_code, 0) << f.err;
  EXPECT_FALSE(contains(f.err, "hung")) << f.err;
}

// A rank stuck inside a phase it announced is excused only until the
// others have waited for it in their next collective as long as the
// learned limit.
TEST(Hang, ARankStuckInAnAnnouncedEvaluationIsFoundByTheOthersWait) {
  ddptest::Finished f = ddptest::run(ddprun({"--nproc", "2", "--hang-timeout", "auto:2", "--monitor-interval", "0.02",
                                             HANG_CHECK_BIN, "--work-ms", "5", "--stuck", "1", "--stuck-in-evaluation",
                                             "--evaluate-at", "300", "--evaluate-ms", "10"}));
  EXPECT_NE(f.exit_code, 0) << f.err;
  EXPECT_TRUE(contains(f.err, "in a phase it announced, while the others have waited ")) << f.err;
  EXPECT_TRUE(contains(f.err, "rank 1 is in: stuck_outside_any_collective()")) << f.err;
  stacks_file(f.err);
}

// The verdict reaches the event log (the hang and the failure); the
// stacks go beside the logs.
TEST(Hang, TheVerdictIsInTheEventLog) {
  const std::filesystem::path dir = ddptest::temp_path("hang", "logs");
  ddptest::Finished f = ddptest::run(ddprun({"--nproc", "2", "--hang-timeout", "2", "--log-dir", dir.string(),
                                             HANG_CHECK_BIN, "--stuck", "1", "--at", "3"}));
  EXPECT_NE(f.exit_code, 0) << f.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(f.err, m, std::regex(R"(worker logs are in (\S+))"))) << f.err;
  std::ifstream events(std::filesystem::path(m[1].str()) / "events.jsonl");
  std::string line, hang, failure;
  while (std::getline(events, line)) {
    if (contains(line, "\"event\":\"hang\"")) hang = line;
    if (contains(line, "\"event\":\"failure\"")) failure = line;
  }
  EXPECT_TRUE(contains(hang, "rank 0 waits in all_reduce #4")) << hang;
  EXPECT_TRUE(contains(hang, "rank 1 never entered it")) << hang;
  EXPECT_TRUE(contains(hang, "\"stacks_file\":\"" + m[1].str())) << hang;  // beside the logs
  EXPECT_TRUE(contains(failure, "rank 1 never entered it")) << failure;
  std::filesystem::remove_all(dir);
}

TEST(Hang, AStoppedRankIsNamedAsOneThatCannotAnswer) {
  ddptest::Finished f = ddptest::run(ddprun(
      {"--nproc", "2", "--hang-timeout", "2", HANG_CHECK_BIN, "--stuck", "1", "--at", "3", "--stop-self"}));
  EXPECT_NE(f.exit_code, 0) << f.err;
  EXPECT_TRUE(contains(f.err, "rank 0 waits in all_reduce #4")) << f.err;
  EXPECT_TRUE(contains(f.err, "rank 1 stopped (SIGSTOP, or a debugger holds it): it cannot answer")) << f.err;
  stacks_file(f.err);
}

// ddprun started the interpreters, so a script needs no change: the stack
// signal sent to ddprun shows every rank's Python frames, and the job goes on.
TEST(Hang, AStuckPythonScriptShowsItsPythonFrameOnDemand) {
  ddptest::Process p(ddprun({"--nproc", "2", HANG_SCRIPT}), {"DDPRUN_PYTHON=" PYTHON_BIN});
  int ready = 0;
  ASSERT_TRUE(p.wait_for_line([&](const std::string& l) {
    ready += contains(l, "rank 1 is stuck") || contains(l, "rank 0 enters all_reduce");
    return ready == 2;
  }, 120s)) << p.finish(10s).err;
  // Rank 0 said it enters all_reduce, and may not be inside yet: asked
  // again until its stack shows it there (each answer is an event).
  std::optional<std::string> verdict;
  for (int ask = 0; ask < 50 && !verdict; ++ask) {
    p.signal(SIGRTMIN + 5);
    auto said = p.wait_for_err_line([](const std::string& l) { return contains(l, "warning: stacks: "); }, 60s);
    ASSERT_TRUE(said) << p.finish(10s).err;
    if (contains(*said, "rank 0 waits in torch.distributed")) verdict = said;
  }
  ASSERT_TRUE(verdict) << p.finish(10s).err;
  EXPECT_TRUE(contains(*verdict, "stacks: rank 0 waits in torch.distributed (all_reduce); rank 1 is not in it")) << *verdict;
  // Rank 1's own Python frame, by file, line and function.
  EXPECT_TRUE(contains(*verdict, "rank 1 is in: File \"" HANG_SCRIPT "\", line ")) << *verdict;
  EXPECT_TRUE(contains(*verdict, " in stuck_in_python")) << *verdict;
  // Still running: asking changed nothing. Then it is stopped.
  EXPECT_EQ(kill(p.pid(), 0), 0);
  p.signal(SIGTERM);
  ddptest::Finished f = p.finish(60s);
  EXPECT_TRUE(contains(f.err, "received SIGTERM")) << f.err;
  const std::regex file(R"(all threads: (\S+))");
  for (auto it = std::sregex_iterator(f.err.begin(), f.err.end(), file); it != std::sregex_iterator(); ++it) {
    std::filesystem::remove((*it)[1].str());
  }
}

// An unmodified PyTorch script gets a heartbeat from ddprun's Python
// start-up (its optimizer steps; its waits in torch.distributed excused):
// the learned default finds the rank stuck in Python and names it, and
// the rank that waits for it is not taken for hung. (A floor of 4 s: with 2,
// beside lane 2's other tests at -j3, rank 0 once had not yet entered its
// all_reduce when rank 1's silence reached it.)
TEST(Hang, TheDefaultCatchesAStuckPythonScriptAndNamesItsFrame) {
  ddptest::Finished f = ddptest::run(ddprun({"--nproc", "2", "--hang-timeout", "auto:4", "--monitor-interval", "0.02",
                                             HANG_SCRIPT, "--train-steps", "150"}),
                                     {"DDPRUN_PYTHON=" PYTHON_BIN});
  EXPECT_NE(f.exit_code, 0) << f.err;
  EXPECT_TRUE(contains(f.err, "rank 1 (pid ")) << f.err;
  EXPECT_TRUE(contains(f.err, "hung: no heartbeat for ")) << f.err;
  EXPECT_TRUE(contains(f.err, "--hang-timeout auto: 4.0 s")) << f.err;
  EXPECT_TRUE(contains(f.err, "rank 0 waits in torch.distributed (all_reduce); rank 1 is not in it")) << f.err;
  EXPECT_TRUE(contains(f.err, " in stuck_in_python")) << f.err;
  EXPECT_TRUE(std::regex_search(f.err, std::regex(R"(rank 1 \(pid \d+\) hung)"))) << f.err;
  EXPECT_FALSE(std::regex_search(f.err, std::regex(R"(rank 0 \(pid \d+\) hung)"))) << "the waiting rank is not hung\n"
                                                                                   << f.err;
  stacks_file(f.err);
}

}  // namespace

namespace {

// `ddprun status --stacks`: the same from another terminal, printed there.
TEST(Hang, StatusStacksPrintsEveryRanksStacksOfALiveJob) {
  const std::string id = "stacks-" + std::to_string(getpid());
  ddptest::Process p(ddprun({"--nproc", "2", "--rdzv-id", id, HANG_CHECK_BIN, "--stuck", "1", "--at", "3"}));
  ASSERT_TRUE(p.wait_for_line([](const std::string& l) { return contains(l, "rank 1 gets stuck"); }, 120s))
      << p.finish(10s).err;
  // Rank 0 may not be inside all_reduce #4 yet: asked again until it is.
  ddptest::Finished s;
  for (int ask = 0; ask < 50; ++ask) {
    s = ddptest::run(ddprun({"status", "--stacks", "--rdzv-id", id}));
    ASSERT_EQ(s.exit_code, 0) << s.err;
    if (contains(s.out, "rank 0 waits in")) break;
  }
  EXPECT_TRUE(contains(s.out, "job " + id + " (ddprun pid " + std::to_string(p.pid()) + ")")) << s.out;
  EXPECT_TRUE(contains(s.out, "stacks: rank 0 waits in all_reduce #4")) << s.out;
  EXPECT_TRUE(contains(s.out, "rank 1 is in: stuck_outside_any_collective()")) << s.out;
  EXPECT_TRUE(contains(s.out, "=== rank 1 (pid ")) << s.out;
  // Careless use: one line each, exit code 2.
  for (const auto& bad : {std::vector<std::string>{"status", "--stacks", "--json"},
                          std::vector<std::string>{"status", "--stacks", "--rdzv-endpoint", "127.0.0.1:1", "--rdzv-id", id}}) {
    ddptest::Finished u = ddptest::run(ddprun(bad));
    EXPECT_EQ(u.exit_code, 2) << u.err;
    EXPECT_EQ(ddptest::lines(u.err).size(), 1u) << u.err;
    EXPECT_TRUE(contains(u.err, "--stacks: ")) << u.err;
  }
  // A copy ddprun cannot write (its temporary name taken by a folder): the
  // command says why at once, not "no stacks within 10 s".
  const char* xdg = getenv("XDG_RUNTIME_DIR");
  std::vector<std::filesystem::path> blocks;
  for (const std::string& dir : {std::string(xdg ? xdg : "/nonexistent") + "/ddprun", "/tmp/ddprun-" + std::to_string(geteuid())}) {
    const std::filesystem::path b = dir + "/stacks-" + std::to_string(p.pid()) + ".txt.tmp";
    std::error_code ec;
    if (std::filesystem::is_directory(dir) && std::filesystem::create_directory(b, ec)) blocks.push_back(b);
  }
  ASSERT_FALSE(blocks.empty());
  ddptest::Finished blocked = ddptest::run(ddprun({"status", "--stacks", "--rdzv-id", id}));
  for (const auto& b : blocks) std::filesystem::remove(b);
  EXPECT_NE(blocked.exit_code, 0) << blocked.err;
  EXPECT_TRUE(contains(blocked.err, "cannot write the copy of the stacks that `ddprun status --stacks` reads")) << blocked.err;
  EXPECT_TRUE(contains(blocked.err, "the stacks are on the job's console")) << blocked.err;
  EXPECT_FALSE(contains(blocked.err, "within")) << blocked.err;
  // The job went on all along.
  EXPECT_EQ(kill(p.pid(), 0), 0);
  p.signal(SIGTERM);
  ddptest::Finished f = p.finish(60s);
  EXPECT_TRUE(contains(f.err, "received SIGTERM")) << f.err;
  stacks_file(f.err);
}

}  // namespace

namespace {

// Stragglers: a rank that computes three times as long is named (the
// job runs until it is, then is stopped), or on a machine loaded past its
// cores named and excused by the load; two CPU hogs and no slow rank name
// nobody over 3000 steps.
TEST(Straggler, ASlowRankIsNamedAndNoOtherIs) {
  const std::filesystem::path dir = ddptest::temp_path("straggler", "logs");
  const std::string id = "straggler-" + std::to_string(getpid());
  ddptest::Process p(ddprun({"--nproc", "3", "--monitor-interval", "0.02", "--progress-interval", "0.1", "--log-dir",
                             dir.string(), "--rdzv-id", id, HANG_CHECK_BIN, "--at", "-1", "--work-ms", "2", "--slow", "1", "--slow-factor",
                             "3"}));
  // One verdict on rank 1: a straggler, or, on a machine loaded past its
  // cores (stress-ng --cpu 16 here), the slowest but excused: it waited for
  // a CPU as long as its peers waited for it, which a fresh process in its
  // place would too.
  auto said = p.wait_for_err_line(
      [](const std::string& l) { return contains(l, "is a straggler") || contains(l, "is the slowest here"); }, 120s);
  ASSERT_TRUE(said) << p.finish(10s).err;
  const bool excused = contains(*said, "is the slowest here");
  if (excused) {
    EXPECT_TRUE(std::regex_search(*said, std::regex(R"(rank 1 is the slowest here \(score 0\.\d\d\), but it waited for a CPU \d+% of the time.*this node's load, not the rank; it goes on)")))
        << *said;
  } else {
    // Nearly all the others' waiting is for it (100% on an idle machine; a
    // loaded one makes the others late now and then too: 98% was seen).
    std::smatch share;
    ASSERT_TRUE(std::regex_search(*said, share, std::regex(R"(rank 1 is a straggler: (\d+)% of the time the others wait is for it)")))
        << *said;
    EXPECT_GE(std::stoi(share[1]), 90) << *said;
  }
  // The progress line shows it too, from then on.
  auto progress = p.wait_for_err_line([](const std::string& l) { return contains(l, "info: progress: "); }, 120s);
  ASSERT_TRUE(progress) << p.finish(10s).err;
  EXPECT_TRUE(std::regex_search(*progress, std::regex(excused ? R"( · slowest: rank 1 \(0\.\d\d\), this node's load$)"
                                                               : R"( · slowest: rank 1 \(0\.\d\d\) straggler$)")))
      << *progress;
  // And `ddprun status`, from another terminal (rank 0's agent reports it).
  // Excused by the load, it is the slowest and no straggler there too.
  ddptest::Finished s = ddptest::run_until(ddprun({"status", "--rdzv-id", id}),
                                           excused ? "(rank 0's node)" : ", a straggler (rank 0's node)", {}, 20s);
  EXPECT_TRUE(std::regex_search(s.out, std::regex(excused ? R"(slowest     rank 1, score 0\.\d\d \(rank 0's node\))"
                                                          : R"(slowest     rank 1, score 0\.\d\d, a straggler \(rank 0's node\))")))
      << s.out << s.err;
  ddptest::Finished j = ddptest::run(ddprun({"status", "--json", "--rdzv-id", id}));
  EXPECT_TRUE(contains(j.out, R"("slowest_rank": 1)")) << j.out;
  EXPECT_TRUE(contains(j.out, excused ? R"("slowest_is_straggler": false)" : R"("slowest_is_straggler": true)")) << j.out;
  p.signal(SIGTERM);
  ddptest::Finished f = p.finish(60s);
  // Once, and only rank 1.
  EXPECT_EQ(ddptest::occurrences(f.err, "is a straggler") + ddptest::occurrences(f.err, "is the slowest here"), 1)
      << f.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(f.err, m, std::regex(R"(worker logs are in (\S+))"))) << f.err;
  std::ifstream events(std::filesystem::path(m[1].str()) / "events.jsonl");
  std::string line, event;
  while (std::getline(events, line)) {
    if (contains(line, "\"event\":\"straggler\"")) event = line;
  }
  EXPECT_TRUE(contains(event, "\"rank\":1")) << event;
  EXPECT_EQ(contains(event, "\"action\":\"load\""), excused) << event;
  std::filesystem::remove_all(dir);
}

TEST(Straggler, TwoCpuHogsAndNoSlowRankNameNobody) {
  std::vector<std::unique_ptr<ddptest::Process>> hogs;
  for (int i = 0; i < 2; ++i) {
    hogs.push_back(std::make_unique<ddptest::Process>(std::vector<std::string>{"/bin/sh", "-c", "while :; do :; done"}));
  }
  ddptest::Finished f = ddptest::run(ddprun({"--nproc", "2", "--monitor-interval", "0.02", HANG_CHECK_BIN, "--at",
                                             "-1", "--work-ms", "1", "--steps", "3000"}));
  for (auto& h : hogs) h->signal(SIGKILL);
  EXPECT_EQ(f.exit_code, 0) << f.err;
  EXPECT_FALSE(contains(f.err, "straggler")) << f.err;
}

}  // namespace
