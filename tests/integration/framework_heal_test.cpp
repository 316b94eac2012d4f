// Heals for the frameworks people train with, end to end in the 2.x lane
// with the versions scripts/frameworks-requirements.txt pins: Lightning
// (python/ddprun/lightning.py, examples/python/lightning_train*.py) and the
// Hugging Face Trainer (python/ddprun/transformers.py,
// examples/python/hf_train*.py). Ranks
// SIGKILLed mid-epoch, rank 0 among them: the survivors keep their
// processes, replacements take the state from them, the callbacks go on
// (checkpoints in the one folder, the LR logged), and the run ends with
// exactly the parameters of one nothing interrupted.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <random>
#include <set>
#include <sstream>

#include "support/healed_scripts.h"
#include "support/job_helpers.h"
#include "support/process.h"
#include "support/shared_result.h"

namespace {

namespace fs = std::filesystem;
using ddptest::Finished;
using ddptest::Process;
using ddptest::checksum_of;
using ddptest::contains;
using ddptest::occurrences;
using ddptest::reach_step;
using ddptest::workers_of;

const ddptest::EnvChanges kEnv{std::string("PYTHON_EXEC=") + PYTHON_BIN};

// This lane's Python must have the framework: scripts/setup-torch2.sh
// installs it. A missing one fails the test, naming the fix.
void expect_importable(const char* module) {
  Finished f = ddptest::run({PYTHON_BIN, "-c", std::string("import ") + module});
  ASSERT_EQ(f.exit_code, 0) << PYTHON_BIN << " cannot import " << module
                            << " (scripts/setup-torch2.sh installs scripts/frameworks-requirements.txt): " << f.err;
}

std::vector<std::string> job(const char* script, const fs::path& out) {
  return {DDPRUN_BIN, "--nproc", "4", script, "--print-steps", "--out", out.string()};
}
// Validation every 40 steps (8 batches), as scripts have it: the kills below
// fall in steps around it, and one as it begins.
std::vector<std::string> lightning_job(const fs::path& out) {
  std::vector<std::string> argv = job(LIGHTNING_HEALED_SCRIPT, out);
  argv.insert(argv.end(), {"--val-every", "40"});
  return argv;
}

// A reference run: nothing fails in it, so no standby waits for a heal (one
// interpreter less to start).
std::vector<std::string> uninterrupted(std::vector<std::string> argv) {
  argv.insert(argv.begin() + 3, "--no-standby");
  return argv;
}

// The files a Lightning run left under --out: "lightning_logs/version_0/checkpoints/epoch=0-step=25.ckpt", ...
std::set<std::string> files_under(const fs::path& out) {
  std::set<std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(out)) {
    if (e.is_regular_file()) files.insert(fs::relative(e.path(), out).string());
  }
  return files;
}

// Kills `ranks` (local ranks of the one node) at once after `step`; checks
// the heal (survivors kept, one replacement each, no restart) and returns
// how the run ended.
Finished killed_at(std::vector<std::string> argv, int step, const std::vector<int>& ranks) {
  // A job id of its own: its stacks, not a neighbour test's, if it stops.
  static int jobs = 0;
  const std::string id = "framework-heal-" + std::to_string(getpid()) + "-" + std::to_string(++jobs);
  argv.insert(argv.begin() + 1, {"--rdzv-id", id});
  Process p(argv, kEnv);
  EXPECT_TRUE(reach_step(p, step)) << p.out() << p.err();
  const std::vector<pid_t> workers = workers_of(p.pid());
  EXPECT_EQ(workers.size(), 4u);
  if (workers.size() != 4u) return p.finish();
  for (int r : ranks) kill(workers[static_cast<size_t>(r)], SIGKILL);
  if (!reach_step(p, step + 10)) {
    // Where every rank stands, first (CI shows the head of a failure): the
    // job goes on meanwhile.
    Finished stacks = ddptest::run({DDPRUN_BIN, "status", "--stacks", "--rdzv-id", id});
    const std::string err = p.err();
    ADD_FAILURE() << "no step " << step + 10 << " after killing ranks " << ranks[0]
                  << (ranks.size() > 1 ? " and " + std::to_string(ranks.back()) : std::string()) << "; ddprun status --stacks:\n"
                  << stacks.out << stacks.err << "\nthe job's stderr, last part:\n"
                  << err.substr(err.size() > 8000 ? err.size() - 8000 : 0);
  }
  const std::vector<pid_t> now = ddptest::children_of(p.pid());
  for (int r = 0; r < 4; ++r) {
    if (std::find(ranks.begin(), ranks.end(), r) != ranks.end()) continue;
    EXPECT_NE(std::find(now.begin(), now.end(), workers[static_cast<size_t>(r)]), now.end())
        << "survivor rank " << r << " was restarted";
  }
  Finished f = p.finish();
  EXPECT_EQ(f.exit_code, 0) << f.err;
  EXPECT_EQ(occurrences(f.err, "replacing it while the other workers go on"), static_cast<int>(ranks.size())) << f.err;
  EXPECT_FALSE(contains(f.err, "restarting the workers")) << f.err;
  EXPECT_TRUE(contains(f.err, "ddprun: healed in generation")) << f.err;
  return f;
}

struct Reference {
  std::string checksum;
  std::set<std::string> files;
};

// The uninterrupted run's checksum and files, once in a ctest run
// (shared_result.h): its checksum line, then a line per file.
Reference lightning_reference() {
  const std::string shared = ddptest::shared_result("lightning reference", [] {
    const fs::path out = ddptest::temp_path("framework-heal", "lightning-ref");
    Finished ref = ddptest::run(uninterrupted(lightning_job(out)), kEnv);
    EXPECT_EQ(ref.exit_code, 0) << ref.err;
    std::string lines = checksum_of(ref.out);
    EXPECT_FALSE(lines.empty()) << ref.out;
    for (const std::string& file : files_under(out)) lines += "\n" + file;
    fs::remove_all(out);
    return lines;
  });
  std::istringstream in(shared);
  Reference r;
  std::getline(in, r.checksum);
  for (std::string file; std::getline(in, file);) r.files.insert(file);
  EXPECT_FALSE(r.checksum.empty());
  EXPECT_TRUE(r.files.count("lightning_logs/version_0/checkpoints/epoch=0-step=25.ckpt")) << "no checkpoint";
  return r;
}

// Lightning: one changed line (the DDPStrategy's import) heals rank 0 and
// another rank killed at once; the guide shows that line.
TEST(LightningHeal, OneChangedLineHealsRankZeroAndAnotherKilledAtOnceBitwiseEqual) {
  expect_importable("lightning");
  const auto changed = ddptest::changed_lines(LIGHTNING_SCRIPT, LIGHTNING_HEALED_SCRIPT);
  EXPECT_EQ(ddptest::added_lines(changed), 1);
  EXPECT_EQ(ddptest::missing_from_guide(changed, LIGHTNING_SCRIPT), std::vector<std::string>{})
      << "the guide's diff lacks these lines";
  const Reference want = lightning_reference();
  std::mt19937 gen(std::random_device{}());
  const int other = std::uniform_int_distribution<>(1, 3)(gen);
  const fs::path out = ddptest::temp_path("framework-heal", "lightning-two");
  Finished f = killed_at(lightning_job(out), 15, {0, other});
  EXPECT_EQ(checksum_of(f.out), want.checksum) << "killed ranks 0 and " << other << "; " << f.out;
  // The replacement of rank 0 writes on into its peers' folders: the same
  // checkpoints and one metrics file, no second version.
  EXPECT_EQ(files_under(out), want.files);
  fs::remove_all(out);
}

// Any one rank killed in the second epoch (its sampler's second shuffle,
// the warm-up done): the replacement skips the batches its peers did, in
// that epoch's order. The script resumes from its newest checkpoint when
// one exists (--resume, as a script restarted by --max-restarts must): the
// replacement finds the one of step 75 and still takes its peers' loop
// position, optimizer and schedulers, not the checkpoint's (issue 60: the
// checkpoint's fit loop overwrote the peers', and at the next checkpoint's
// save the survivors waited in its barrier, the replacement in the next
// batch's broadcast, for ever).
TEST(LightningHeal, AnyRankKilledInTheSecondEpochHealsBitwiseEqual) {
  expect_importable("lightning");
  const Reference want = lightning_reference();
  std::mt19937 gen(std::random_device{}());
  const int rank = std::uniform_int_distribution<>(0, 3)(gen);
  // 64 steps an epoch; a checkpoint's save every 25 (its barrier is outside
  // the step, which does not heal): the kill falls in a step between them.
  const int step = std::uniform_int_distribution<>(76, 96)(gen);
  const fs::path out = ddptest::temp_path("framework-heal", "lightning-one");
  std::vector<std::string> resuming = lightning_job(out);
  resuming.push_back("--resume");
  Finished f = killed_at(resuming, step, {rank});
  EXPECT_EQ(checksum_of(f.out), want.checksum) << "killed rank " << rank << " after step " << step << "; " << f.out;
  EXPECT_EQ(files_under(out), want.files);
  fs::remove_all(out);
}

// A rank killed as validation begins (every 40 steps): its peers finish
// their validation and heal at their next step, and the replacement, which
// built its loaders meanwhile (drawing from the global generator), starts
// that step with the generators its peers had there. (Issue 59: such a
// heal ended 683071280de3399e where the uninterrupted run ends
// fad9bf552fa4254b.)
TEST(LightningHeal, ARankKilledAsValidationBeginsHealsBitwiseEqual) {
  expect_importable("lightning");
  const Reference want = lightning_reference();
  const fs::path out = ddptest::temp_path("framework-heal", "lightning-val");
  Process p(lightning_job(out), kEnv);
  // Rank 0 says so from its on_validation_start: it is inside it.
  ASSERT_TRUE(p.wait_for_line([](const std::string& l) { return contains(l, "validation after step 40 began"); },
                              std::chrono::seconds(240)))
      << p.err();
  const std::vector<pid_t> workers = workers_of(p.pid());
  ASSERT_EQ(workers.size(), 4u);
  kill(workers[0], SIGKILL);
  Finished f = p.finish();
  ASSERT_EQ(f.exit_code, 0) << f.err;
  EXPECT_EQ(occurrences(f.err, "replacing it while the other workers go on"), 1) << f.err;
  EXPECT_FALSE(contains(f.err, "restarting the workers")) << f.err;
  EXPECT_EQ(checksum_of(f.out), want.checksum) << f.out;
  EXPECT_EQ(files_under(out), want.files);
  fs::remove_all(out);
}

// Gradient accumulation cannot heal (the batches accumulated before a
// failure live in each rank's gradients alone): refused at the start,
// naming the setting, rather than healed into other parameters.
TEST(LightningHeal, GradientAccumulationIsRefusedNamingTheSetting) {
  expect_importable("lightning");
  const fs::path out = ddptest::temp_path("framework-heal", "lightning-accumulate");
  // One rank is enough to be refused (the strategy's set-up refuses).
  std::vector<std::string> argv = lightning_job(out);
  argv[2] = "1";
  argv.insert(argv.end(), {"--devices", "1", "--accumulate", "2"});
  Finished f = ddptest::run(argv, kEnv);
  EXPECT_EQ(f.exit_code, 1) << f.err;
  EXPECT_TRUE(contains(f.err, "ValueError: ddprun.lightning: HealingDDPStrategy heals steps of one batch; set "
                              "Trainer(accumulate_grad_batches=1) (it is 2)"))
      << f.err;
  fs::remove_all(out);
}

// The Hugging Face Trainer: one changed line (the import the Trainer comes
// from) heals rank 0 and another rank killed at once. The kill falls inside
// a training step: the Trainer's logging (every 10 steps) and saving
// (every 25) gather outside it, which does not heal (the guide says so).
TEST(TrainerHeal, OneChangedLineHealsRankZeroAndAnotherKilledAtOnceBitwiseEqual) {
  expect_importable("transformers");
  const auto changed = ddptest::changed_lines(HF_SCRIPT, HF_HEALED_SCRIPT);
  EXPECT_EQ(ddptest::added_lines(changed), 1);
  EXPECT_EQ(ddptest::missing_from_guide(changed, HF_SCRIPT), std::vector<std::string>{})
      << "the guide's diff lacks these lines";
  const fs::path ref_out = ddptest::temp_path("framework-heal", "hf-ref");
  Finished ref = ddptest::run(uninterrupted(job(HF_HEALED_SCRIPT, ref_out)), kEnv);
  ASSERT_EQ(ref.exit_code, 0) << ref.err;
  const std::string want = checksum_of(ref.out);
  ASSERT_FALSE(want.empty()) << ref.out;
  const std::set<std::string> want_files = files_under(ref_out);
  fs::remove_all(ref_out);
  std::mt19937 gen(std::random_device{}());
  const int other = std::uniform_int_distribution<>(1, 3)(gen);
  const int step = std::uniform_int_distribution<>(0, 1)(gen) ? std::uniform_int_distribution<>(12, 16)(gen)
                                                               : std::uniform_int_distribution<>(82, 86)(gen);
  const fs::path out = ddptest::temp_path("framework-heal", "hf-two");
  Finished f = killed_at(job(HF_HEALED_SCRIPT, out), step, {0, other});
  EXPECT_EQ(checksum_of(f.out), want) << "killed ranks 0 and " << other << " after step " << step << "; " << f.out;
  EXPECT_EQ(files_under(out), want_files);  // the checkpoints: the same folders, the same files
  fs::remove_all(out);
}

}  // namespace
