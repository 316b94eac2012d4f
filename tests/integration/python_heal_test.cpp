// Checkpointless recovery for PyTorch scripts (python/ddprun, ddprun.Healer)
// end to end, with this lane's PyTorch: examples/python/ddp_heal.py (DDP on
// Gloo, Adam, batch norm) on one node, workers SIGKILLed mid-epoch. The
// survivors keep their processes, replacements take the state from them,
// and the run ends with exactly the parameters of one nothing interrupted.
// The same script without its Healer restarts as before.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <random>
#include <regex>
#include <set>

#include "support/healed_scripts.h"
#include "support/job_helpers.h"
#include "support/process.h"
#include "support/shared_result.h"

namespace {

using ddptest::Finished;
using ddptest::checksum_of;
using ddptest::Process;
using ddptest::contains;
using ddptest::occurrences;
using ddptest::reach_step;
using ddptest::workers_of;
using ddptest::heal_job;

const ddptest::EnvChanges& kEnv = ddptest::heal_script_env();

std::string reference(int nproc, const std::vector<std::string>& script_flags = {}) {
  return ddptest::heal_reference(nproc, script_flags);
}

struct Outcome {
  Finished f;
  bool survivors_kept = true;
};

// Kills the workers of local ranks `victims` at rank 0's step `at_step`;
// with `during_heal`, also that worker once ddprun has begun the heal.
// Checks that every other first worker is still the same process ten steps
// later.
Outcome kill_at(int nproc, std::vector<int> victims, int at_step, int during_heal = -1,
                const std::vector<std::string>& script_flags = {}) {
  Outcome o;
  Process p(heal_job(nproc, {}, script_flags), kEnv);
  EXPECT_TRUE(reach_step(p, at_step)) << p.out() << p.err();
  const std::vector<pid_t> workers = workers_of(p.pid());
  EXPECT_EQ(static_cast<int>(workers.size()), nproc);
  if (static_cast<int>(workers.size()) != nproc) return o;
  std::set<pid_t> dead;
  for (int v : victims) {
    dead.insert(workers[static_cast<size_t>(v)]);
    kill(workers[static_cast<size_t>(v)], SIGKILL);
  }
  if (during_heal >= 0) {
    EXPECT_TRUE(p.wait_for_err_line(
        [](const std::string& l) { return contains(l, "replacing it while the other workers go on"); },
        std::chrono::seconds(60)));
    dead.insert(workers[static_cast<size_t>(during_heal)]);
    kill(workers[static_cast<size_t>(during_heal)], SIGKILL);
  }
  EXPECT_TRUE(reach_step(p, at_step + 10)) << p.out() << p.err();
  const std::vector<pid_t> now = ddptest::children_of(p.pid());
  const std::set<pid_t> alive(now.begin(), now.end());
  for (pid_t w : workers) {
    if (!dead.count(w) && !alive.count(w)) o.survivors_kept = false;
  }
  o.f = p.finish();
  return o;
}

void expect_healed(const Outcome& o, int replaced, const std::string& want) {
  ASSERT_EQ(o.f.exit_code, 0) << o.f.err;
  EXPECT_TRUE(o.survivors_kept) << "a survivor was restarted";
  EXPECT_EQ(occurrences(o.f.err, "replacing it while the other workers go on"), replaced) << o.f.err;
  EXPECT_FALSE(contains(o.f.err, "restarting the workers")) << o.f.err;
  EXPECT_TRUE(contains(o.f.out, "with the state of its peers")) << o.f.out;
  EXPECT_TRUE(contains(o.f.err, "ddprun: healed in generation")) << o.f.err;
  EXPECT_EQ(checksum_of(o.f.out), want) << "the healed run's parameters or loss differ from an uninterrupted run's";
}

TEST(PythonHeal, ARandomRankOfFourKilledMidEpochIsReplacedAndTheRunEndsBitwiseEqual) {
  const std::string want = reference(4);
  ASSERT_FALSE(want.empty());
  std::mt19937 gen(std::random_device{}());
  const int victim = std::uniform_int_distribution<>(1, 3)(gen);
  const int step = std::uniform_int_distribution<>(20, 100)(gen);
  SCOPED_TRACE("local rank " + std::to_string(victim) + " killed at step " + std::to_string(step));
  expect_healed(kill_at(4, {victim}, step), 1, want);
}

TEST(PythonHeal, RankZeroOfTwoKilledIsReplacedAndTheRunEndsBitwiseEqual) {
  // Rank 0 prints the steps and would send the state: its peer sends it.
  const std::string want = reference(2);
  ASSERT_FALSE(want.empty());
  expect_healed(kill_at(2, {0}, 60), 1, want);
}

// A script that evaluates before it trains (a forward without gradients
// before its Healer is made) leaves DDP's "sync the buffers at the next
// forward" off until its first training forward; a replacement evaluates
// too at its start, and would skip the buffers' broadcast its peers make in
// the step they run again (the two deadlocked). The flag travels with the
// state.
TEST(PythonHeal, AScriptThatEvaluatesBeforeItTrainsHealsBitwiseEqual) {
  const std::string want = reference(2, {"--evaluate-first"});
  ASSERT_FALSE(want.empty());
  expect_healed(kill_at(2, {1}, 40, -1, {"--evaluate-first"}), 1, want);
}

// A Healer made after a forward with gradients (DDP has begun an
// iteration) could not heal bit for bit: it refuses, saying so.
TEST(PythonHeal, AHealerMadeAfterAForwardWithGradientsRefusesClearly) {
  Finished f = ddptest::run({DDPRUN_BIN, "--nproc", "2", LATE_HEALER_SCRIPT}, kEnv);
  EXPECT_NE(f.exit_code, 0) << f.err;
  EXPECT_TRUE(contains(f.err, "ValueError: ddprun.Healer: make the Healer before the model's first forward with "
                              "gradients"))
      << f.err;
}

// A healed run's process group goes while Python still runs, even when the
// script keeps its DDP until the interpreter's teardown (as the Trainer and
// Lightning do): a Gloo group destroyed in the teardown can abort the
// process after a good run. The script checks it in its last exit handler.
TEST(PythonHeal, TheProcessGroupIsReleasedBeforeTheInterpretersTeardown) {
  Finished f = ddptest::run({DDPRUN_BIN, "--nproc", "2", HEALER_EXIT_SCRIPT}, kEnv);
  EXPECT_EQ(f.exit_code, 0) << f.out << f.err;
  EXPECT_EQ(occurrences(f.out, "its process groups were released before the teardown"), 2) << f.out << f.err;
}

// A replacement whose script calls a collective of its own before its
// Healer (a dist.barrier()) would wait there for ever: its peers wait in
// the heal. It stops at once, naming the call, and the group restarts.
TEST(PythonHeal, AReplacementsCollectiveBeforeItsHealerStopsItNamingTheCall) {
  Process p(heal_job(2, {"--max-restarts", "1"}, {"--barrier-before-healer"}), kEnv);
  ASSERT_TRUE(reach_step(p, 30)) << p.out() << p.err();
  const std::vector<pid_t> workers = workers_of(p.pid());
  ASSERT_EQ(workers.size(), 2u);
  kill(workers[1], SIGKILL);
  Finished f = p.finish();
  EXPECT_EQ(f.exit_code, 0) << f.err;
  EXPECT_TRUE(contains(f.err, "ddprun: heal: this replacement called torch.distributed.barrier() on the default "
                              "group before its ddprun.Healer took the training state"))
      << f.err;
  EXPECT_TRUE(contains(f.err, "restarting the workers")) << f.err;
}

TEST(PythonHeal, TwoRanksKilledAtOnceAreBothReplacedBitwiseEqual) {
  const std::string want = reference(4);
  ASSERT_FALSE(want.empty());
  expect_healed(kill_at(4, {0, 2}, 40), 2, want);
}

TEST(PythonHeal, ASurvivorKilledDuringTheHealIsReplacedTooBitwiseEqual) {
  const std::string want = reference(4);
  ASSERT_FALSE(want.empty());
  expect_healed(kill_at(4, {1}, 40, /*during_heal=*/3), 2, want);
}

// Round 5's connect-vote window: a replacement that dies after its
// generation's vote said "connect", before Gloo connected
// (tests/interop/dies_after_vote.py). Its survivor waits in that
// generation's set-up for its address; the agent replaces it again in a
// newer generation. The survivor gives the address up 10 s later and heals
// in the newer one: bitwise equal, its process kept. (Seen failing without
// the give-up: the survivor waited in the store until the timeout, and the
// progress watch restarted the group after a minute, which --max-restarts 0
// makes a failure.)
TEST(PythonHeal, AReplacementThatDiesAfterItsVoteIsReplacedAgainAndTheRunEndsBitwiseEqual) {
  const std::string want = reference(2);
  ASSERT_FALSE(want.empty());
  const std::string marker = ddptest::temp_path("python_heal", "died-after-vote").string();
  std::filesystem::remove(marker);
  std::vector<std::string> argv = heal_job(2);
  argv.insert(argv.begin() + 3, DIES_AFTER_VOTE_SCRIPT);  // ddprun --nproc 2 WRAPPER SCRIPT ...
  ddptest::EnvChanges env = kEnv;
  env.push_back("DIE_AFTER_VOTE_MARKER=" + marker);
  Process p(argv, env);
  ASSERT_TRUE(reach_step(p, 20)) << p.out() << p.err();
  const std::vector<pid_t> workers = workers_of(p.pid());
  ASSERT_EQ(workers.size(), 2u);
  kill(workers[1], SIGKILL);
  Finished f = p.finish();
  ASSERT_EQ(f.exit_code, 0) << f.err;
  EXPECT_TRUE(contains(f.err, "dies_after_vote: replacement of generation 1 ends after its vote")) << f.err;
  EXPECT_TRUE(contains(f.err, "ddprun: healed in generation 2 (")) << f.err;
  EXPECT_FALSE(contains(f.err, "restarting the workers")) << f.err;
  EXPECT_TRUE(std::filesystem::exists(marker));
  EXPECT_EQ(checksum_of(f.out), want) << "the healed run's parameters or loss differ from an uninterrupted run's";
  std::filesystem::remove(marker);
}

// A heal's replacement comes from a warm standby, started for slot 0
// before anyone failed: asked for stacks, it must answer in its own slot's
// file (it wrote into rank 0's, and its own was "not open").
TEST(PythonHeal, AReplacementsStacksAreItsOwnWhenAsked) {
  Process p(heal_job(2), kEnv);
  ASSERT_TRUE(reach_step(p, 30)) << p.out() << p.err();
  const std::vector<pid_t> workers = workers_of(p.pid());
  ASSERT_EQ(workers.size(), 2u);
  kill(workers[1], SIGKILL);
  ASSERT_TRUE(p.wait_for_line([](const std::string& l) { return contains(l, "with the state of its peers"); },
                              std::chrono::seconds(120)))
      << p.finish(std::chrono::seconds(10)).err;
  p.signal(SIGRTMIN + 5);
  auto said = p.wait_for_err_line([](const std::string& l) { return contains(l, "every rank's stacks, all threads: "); },
                                  std::chrono::seconds(120));
  ASSERT_TRUE(said) << p.finish(std::chrono::seconds(10)).err;
  const std::string text = ddptest::stacks_file(*said);
  const size_t rank1 = text.find("=== rank 1 (pid ");
  ASSERT_NE(rank1, std::string::npos) << text;
  const std::string rank0_part = text.substr(0, rank1), rank1_part = text.substr(rank1);
  EXPECT_EQ(occurrences(rank0_part, "Current thread 0x"), 1) << "two processes wrote rank 0's stacks:\n" << text;
  EXPECT_EQ(occurrences(rank1_part, "Current thread 0x"), 1) << text;
  EXPECT_TRUE(contains(rank1_part, std::string("File \"") + HEAL_SCRIPT + "\"")) << text;
  Finished f = p.finish();
  EXPECT_EQ(f.exit_code, 0) << f.err;
}

TEST(PythonHeal, TheScriptWithoutItsHealerRestartsAsBefore) {
  Process p(heal_job(2, {"--max-restarts", "1"}, {"--no-heal"}), kEnv);
  ASSERT_TRUE(reach_step(p, 40)) << p.out() << p.err();
  const std::vector<pid_t> workers = workers_of(p.pid());
  ASSERT_EQ(workers.size(), 2u);
  kill(workers[1], SIGKILL);
  Finished f = p.finish();
  EXPECT_EQ(f.exit_code, 0) << f.err;
  EXPECT_TRUE(contains(f.err, "restarting the workers")) << f.err;
  EXPECT_FALSE(contains(f.err, "replacing it while the other workers go on")) << f.err;
  EXPECT_FALSE(contains(f.out, "with the state of its peers")) << f.out;
}

// A plain DataLoader loop (examples/python/plain_loop.py: DistributedSampler,
// dropout, AdamW, a warm-up schedule) heals with the lines
// plain_loop_healed.py changes, counted here: rank 0 and another rank
// killed at once, the survivors keep their processes, and the run ends with
// the parameters of an uninterrupted one.
TEST(PythonHeal, APlainDataLoaderLoopHealsWithFourChangedLinesBitwiseEqual) {
  // The claim (README, docs/fault-tolerance.md): 4 lines, and the guide's
  // diff is this one.
  const auto changed = ddptest::changed_lines(PLAIN_LOOP_SCRIPT, PLAIN_LOOP_HEALED_SCRIPT);
  EXPECT_EQ(ddptest::added_lines(changed), 4);
  EXPECT_EQ(ddptest::missing_from_guide(changed, PLAIN_LOOP_SCRIPT), std::vector<std::string>{})
      << "the guide's diff lacks these lines";
  auto job = [] { return std::vector<std::string>{DDPRUN_BIN, "--nproc", "4", PLAIN_LOOP_HEALED_SCRIPT, "--print-steps"}; };
  Finished ref = ddptest::run(job(), kEnv);
  ASSERT_EQ(ref.exit_code, 0) << ref.err;
  const std::string want = checksum_of(ref.out);
  ASSERT_FALSE(want.empty()) << ref.out;

  std::mt19937 gen(std::random_device{}());
  const int other = std::uniform_int_distribution<>(1, 3)(gen);
  Process p(job(), kEnv);
  // Inside the warm-up (the learning rate rises until step 20): the step
  // the kill abandons must run again with the rate it had, though the
  // loop's scheduler stepped after it (seen: the rate of the step after).
  ASSERT_TRUE(reach_step(p, 8)) << p.out() << p.err();
  const std::vector<pid_t> workers = workers_of(p.pid());
  ASSERT_EQ(workers.size(), 4u);
  kill(workers[0], SIGKILL);
  kill(workers[static_cast<size_t>(other)], SIGKILL);
  EXPECT_TRUE(reach_step(p, 30)) << p.out() << p.err();
  const std::vector<pid_t> now = ddptest::children_of(p.pid());
  for (size_t r = 1; r < workers.size(); ++r) {
    if (static_cast<int>(r) == other) continue;
    EXPECT_NE(std::find(now.begin(), now.end(), workers[r]), now.end()) << "survivor rank " << r << " was restarted";
  }
  Finished f = p.finish();
  ASSERT_EQ(f.exit_code, 0) << f.err;
  EXPECT_EQ(occurrences(f.err, "replacing it while the other workers go on"), 2) << f.err;
  EXPECT_FALSE(contains(f.err, "restarting the workers")) << f.err;
  EXPECT_TRUE(contains(f.err, "ddprun: healed in generation")) << f.err;
  EXPECT_EQ(checksum_of(f.out), want) << "killed ranks 0 and " << other << "; " << f.out;
}

// A plain loop bounded by steps with a counter of its own, and a DataLoader
// with persistent worker processes (examples/python/plain_steps.py), heals
// with the 5 lines plain_steps_healed.py changes: rank 2 of 4 killed at step 20,
// the survivors keep their processes (none blocked on the dropped group's
// connections, which the loader's forked workers hold copies of: none
// judged hung and replaced), and the run ends after exactly its 120 steps
// with an uninterrupted run's parameters.
TEST(PythonHeal, AStepBoundedLoopWithLoaderWorkersHealsWithFiveChangedLinesBitwiseEqual) {
  const auto changed = ddptest::changed_lines(PLAIN_STEPS_SCRIPT, PLAIN_STEPS_HEALED_SCRIPT);
  EXPECT_EQ(ddptest::added_lines(changed), 5);
  EXPECT_EQ(ddptest::missing_from_guide(changed, PLAIN_STEPS_SCRIPT), std::vector<std::string>{})
      << "the guide's diff lacks these lines";
  auto job = [] { return std::vector<std::string>{DDPRUN_BIN, "--nproc", "4", PLAIN_STEPS_HEALED_SCRIPT, "--print-steps"}; };
  Finished ref = ddptest::run(job(), kEnv);
  ASSERT_EQ(ref.exit_code, 0) << ref.err;
  const std::string want = checksum_of(ref.out);
  ASSERT_FALSE(want.empty()) << ref.out;

  Process p(job(), kEnv);
  ASSERT_TRUE(reach_step(p, 20)) << p.out() << p.err();
  const std::vector<pid_t> workers = workers_of(p.pid());
  ASSERT_EQ(workers.size(), 4u);
  kill(workers[2], SIGKILL);
  EXPECT_TRUE(reach_step(p, 40)) << p.out() << p.err();
  const std::vector<pid_t> now = ddptest::children_of(p.pid());
  for (size_t r : {0u, 1u, 3u}) {
    EXPECT_NE(std::find(now.begin(), now.end(), workers[r]), now.end()) << "survivor rank " << r << " was replaced";
  }
  Finished f = p.finish();
  ASSERT_EQ(f.exit_code, 0) << f.err;
  EXPECT_EQ(occurrences(f.err, "replacing it while the other workers go on"), 1) << f.err;
  EXPECT_FALSE(contains(f.err, "hung")) << f.err;
  EXPECT_TRUE(contains(f.out, "step 120 done")) << f.out;
  EXPECT_FALSE(contains(f.out, "step 121 done")) << f.out;
  EXPECT_EQ(checksum_of(f.out), want) << f.out;
}

// The plain loop's position in a checkpoint of the script's own
// (Healer.state_dict(), tests/interop/plain_loop_resume.py): stopped after a
// random step, mid-epoch or at an epoch's end, and resumed, it ends with an
// uninterrupted run's parameters.
TEST(PythonHeal, APlainLoopResumedFromItsOwnCheckpointEndsBitwiseEqual) {
  const std::string ckpt = ddptest::temp_path("python-heal", "plain-loop.pt").string();
  auto job = [&](const std::vector<std::string>& flags) {
    std::vector<std::string> argv{DDPRUN_BIN, "--nproc", "2", PLAIN_LOOP_RESUME_SCRIPT, "--checkpoint", ckpt};
    argv.insert(argv.end(), flags.begin(), flags.end());
    return argv;
  };
  Finished ref = ddptest::run(job({}), kEnv);
  ASSERT_EQ(ref.exit_code, 0) << ref.err;
  const std::string want = checksum_of(ref.out);
  ASSERT_FALSE(want.empty()) << ref.out;
  std::mt19937 gen(std::random_device{}());
  const int stop = std::uniform_int_distribution<>(1, 127)(gen);  // 64 steps an epoch, 2 epochs
  Finished saved = ddptest::run(job({"--stop-at", std::to_string(stop)}), kEnv);
  ASSERT_EQ(saved.exit_code, 0) << saved.err;
  ASSERT_TRUE(contains(saved.out, "saved at step " + std::to_string(stop))) << saved.out;
  Finished resumed = ddptest::run(job({"--resume"}), kEnv);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_EQ(checksum_of(resumed.out), want) << "stopped after step " << stop << "; " << resumed.out;
  std::filesystem::remove(ckpt);
}

}  // namespace
