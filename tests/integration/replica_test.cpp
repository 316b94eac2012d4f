// Replicas compared end to end (ddprun --verify-every): the default job
// (train) on one node, one rank's parameter corrupted by a flipped bit
// (train --flip-bit, a faulty chip's stand-in). The ranks find it, name it,
// repair it, replace a rank found apart twice, and stop and restart from a
// checkpoint they agreed on when no majority says which replica is right.
// Every run ends with the parameters of the run nothing corrupted.
#include <gtest/gtest.h>

#include <signal.h>

#include <array>
#include <filesystem>
#include <fstream>
#include <random>
#include <regex>

#include "support/job_helpers.h"
#include "support/process.h"
#include "support/shared_result.h"

namespace {

namespace fs = std::filesystem;
using ddptest::checksum_in;
using ddptest::contains;
using ddptest::Finished;
using ddptest::occurrences;
using ddptest::Process;

fs::path temp(const std::string& name) { return ddptest::temp_path("replicas", name); }

// train on 8000 images, 2 epochs, 4 ranks on shared memory (63 steps an
// epoch): heal_test.cpp's job, so that both share the reference run.
std::vector<std::string> train_job(const std::vector<std::string>& launcher_flags,
                                   const std::vector<std::string>& train_flags) {
  std::vector<std::string> argv{DDPRUN_BIN, "--nproc", "4"};
  argv.insert(argv.end(), launcher_flags.begin(), launcher_flags.end());
  for (const char* a : {TRAIN_BIN, "--limit", "8000", "--print-steps", "--epochs", "2"}) argv.push_back(a);
  argv.insert(argv.end(), train_flags.begin(), train_flags.end());
  return argv;
}

std::string outcome_in(const fs::path& summary) {
  return "checksum " + checksum_in(summary) + ", final loss " + ddptest::final_loss_in(summary);
}

// The uninterrupted run's outcome (heal_test.cpp computes the same, once a
// ctest run).
std::string reference() {
  return ddptest::shared_result("heal reference 4 shm", [&] {
    const fs::path summary = temp("reference.json");
    Process p(train_job({}, {"--summary-json", summary.string()}), {"DDPRUN_CPU_COMM=shm"});
    Finished f = p.finish();
    EXPECT_EQ(f.exit_code, 0) << f.err;
    return f.exit_code == 0 && !checksum_in(summary).empty() ? outcome_in(summary) : std::string();
  });
}

// The checksum alone: a restart counts the loss of its own epochs only.
std::string checksum_of(const std::string& outcome) { return outcome.substr(0, outcome.find(',')); }

std::string events_of(const std::string& err) {
  std::smatch m;
  if (!std::regex_search(err, m, std::regex(R"(worker logs are in (\S+))"))) return "";
  std::ifstream in(fs::path(m[1].str()) / "events.jsonl");
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

// Rank 2's lowest bit flips right after step 20, where the ranks compare:
// named, repaired from the majority, whose state is the one nothing
// corrupted. Bit 16 flips after step 40: apart a second time, the process
// is replaced. (Seen failing with the comparison off: the ranks end apart,
// train's own last check says so; with the replacement off: no heal.)
// Then a worker is killed at a random step: with --verify-every 1 a
// comparison ends every step, so the kill often lands in one; it is healed
// around as one killed in the step's own collectives is. One run for the
// three. Not after step 63: the epoch's evaluation follows it, no step (a
// failure there restarts the group, ddp/healer.h; seen once in CI).
TEST(Replicas, ARankApartIsRepairedThenReplacedAndOneKilledAsTheyCompareIsHealedBitwiseEqual) {
  const std::string want = reference();
  ASSERT_FALSE(want.empty());
  std::mt19937 gen(std::random_device{}());
  const int victim = std::array{0, 1, 3}[std::uniform_int_distribution<size_t>(0, 2)(gen)];  // not the replaced 2
  const int step = std::uniform_int_distribution<>(64, 100)(gen);  // past epoch 1's evaluation
  SCOPED_TRACE("local rank " + std::to_string(victim) + " killed at step " + std::to_string(step));
  const fs::path summary = temp("twice.json"), logs = temp("twice-logs");
  Process p(train_job({"--verify-every", "1", "--log-dir", logs.string()},
                      {"--summary-json", summary.string(), "--flip-bit", "2:20:0", "--flip-bit", "2:40"}),
            {"DDPRUN_CPU_COMM=shm"});
  // The first workers, in local-rank order (rank 2's replacement may come
  // from a standby, which workers_of leaves out).
  ASSERT_TRUE(ddptest::reach_step(p, 10)) << p.out();
  const std::vector<pid_t> workers = ddptest::workers_of(p.pid());
  ASSERT_EQ(workers.size(), 4u);
  // Rank 2's replacement joins before its peers' next step ends: by step 60.
  ASSERT_TRUE(ddptest::reach_step(p, step)) << p.out();
  ASSERT_TRUE(contains(p.out(), "rank 2 joined at step")) << p.out();
  kill(workers[static_cast<size_t>(victim)], SIGKILL);
  Finished f = p.finish();
  ASSERT_EQ(f.exit_code, 0) << f.err;
  EXPECT_EQ(occurrences(f.err, "replicas: rank 2's parameters differ from ranks 0, 1, 3 at step 20 (first differing "
                               "tensor: conv1.weight); repaired: rank 2 takes rank 0's state"),
            1)
      << f.err;
  EXPECT_TRUE(contains(f.err, "rank 2's parameters differ from ranks 0, 1, 3 at step 40")) << f.err;
  EXPECT_TRUE(std::regex_search(f.err, std::regex(R"(rank 2 \(pid \d+\) is apart from the other replicas a second time[^\n]*killing it and replacing it)")))
      << f.err;
  EXPECT_EQ(occurrences(f.err, "parameters differ"), 2) << "a heal left the replicas apart\n" << f.err;
  EXPECT_EQ(occurrences(f.err, "replacing it while the other workers go on"), 2) << f.err;
  EXPECT_EQ(outcome_in(summary), want) << "the run's parameters or loss differ from an uninterrupted run's";
  const std::string events = events_of(f.err);
  EXPECT_TRUE(contains(events, R"("event":"replicas")") && contains(events, R"("verdict":"repaired")") &&
              contains(events, R"("step":20)"))
      << events;
  EXPECT_TRUE(std::regex_search(events, std::regex(R"re(\{[^\n]*"event":"replicas"[^\n]*"rank":2,[^\n]*"verdict":"replace")re")))
      << events;
  fs::remove_all(logs);
}

TEST(Replicas, TwoOfFourApartStopTheJobAndItResumesFromACheckpointTheyAgreedOn) {
  const std::string want = reference();
  ASSERT_FALSE(want.empty());
  const fs::path summary = temp("split.json"), ckpt = temp("split-ckpt");
  // Ranks 1 and 2 flip alike after step 45; the ranks compare every 20
  // steps and find them at 60, with checkpoints at 50 and 60 written since
  // they last agreed (40).
  Process p(train_job({"--verify-every", "20", "--max-restarts", "1"},
                      {"--summary-json", summary.string(), "--checkpoint-dir", ckpt.string(), "--checkpoint-every",
                       "10", "--keep-checkpoints", "2", "--flip-bit", "1:45", "--flip-bit", "2:45"}),
            {"DDPRUN_CPU_COMM=shm"});
  Finished f = p.finish();
  ASSERT_EQ(f.exit_code, 0) << f.err;
  EXPECT_TRUE(contains(f.err, "the ranks' parameters differ with no majority at step 60: ranks 0, 3 | ranks 1, 2 "
                              "(first differing tensor: conv1.weight); no majority to repair from"))
      << f.err;
  EXPECT_TRUE(contains(f.err, "restarting the workers (restart 1 of 1")) << f.err;
  EXPECT_TRUE(contains(f.out, "resumed from " + ckpt.string() + "/ckpt-000000000040-")) << f.out;
  int unagreed = 0;
  for (const auto& e : fs::directory_iterator(ckpt)) unagreed += e.path().extension() == ".unagreed";
  EXPECT_EQ(unagreed, 2) << "steps 50 and 60";
  EXPECT_EQ(checksum_of(outcome_in(summary)), checksum_of(want))
      << "the resumed run's parameters differ from an uninterrupted run's";
  fs::remove_all(ckpt);
}

}  // namespace
