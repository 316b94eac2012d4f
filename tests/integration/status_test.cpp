// `ddprun status` end to end: real ddprun jobs (probe workers that report
// progress into their heartbeat slot), asked through the job file of a
// one-node job and through an explicit endpoint of a two-node job with a
// token; a restart, a wrong token, an unknown job, nothing listening.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <regex>
#include <thread>

#include "support/job_helpers.h"
#include "support/process.h"

namespace {

namespace fs = std::filesystem;
using ddptest::free_port;
using namespace std::chrono_literals;
using ddptest::contains;
using ddptest::ddprun;
using ddptest::Finished;
using ddptest::Process;

constexpr const char* kToken = "status-token-0123456789";

// A runtime folder of this test's own (XDG_RUNTIME_DIR), so that the jobs
// of other tests running at the same time are not seen.
struct RuntimeDir {
  explicit RuntimeDir(const std::string& name) : path(ddptest::temp_path("status", name)) {
    fs::create_directories(path);
    chmod(path.c_str(), 0700);
  }
  ~RuntimeDir() { fs::remove_all(path); }
  std::string env() const { return "XDG_RUNTIME_DIR=" + path.string(); }
  fs::path path;
};

// probe workers that report step STEP (checkpoint SAVED) and then wait.
std::vector<std::string> reporting_probe(const std::string& step, const std::string& saved,
                                         const std::vector<std::string>& before = {}) {
  std::vector<std::string> argv{PROBE_BIN};
  argv.insert(argv.end(), before.begin(), before.end());
  argv.push_back("report");
  argv.push_back(step);
  argv.push_back(saved);
  argv.push_back("wait");
  return argv;
}

std::vector<std::string> cat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Runs `ddprun status ARGS` until its output holds `want` (rank 0's report
// reaches the rendezvous within a second or so); returns the last run.
Finished status_until(const std::vector<std::string>& args, const std::string& want,
                      const ddptest::EnvChanges& env) {
  return ddptest::run_until(ddprun(cat({"status"}, args)), want, env, 20s);
}

bool wait_ready(Process& p, int workers) {
  for (int i = 0; i < workers; ++i) {
    if (!p.wait_for_line([](const std::string& l) { return contains(l, "ready "); }, 30s)) return false;
  }
  return true;
}

TEST(Status, ALocalJobIsFoundAndShowsItsNodeRanksStepAndCheckpoint) {
  RuntimeDir rt("local");
  Process job(ddprun(cat({"--nproc", "2", "--hang-timeout", "600", "--max-restarts", "1", "--rdzv-id",
                          "local-job"},
                         reporting_probe("57", "50"))),
              {rt.env()});
  ASSERT_TRUE(wait_ready(job, 2)) << job.out();

  Finished f = status_until({}, "last step   57", {rt.env()});
  ASSERT_EQ(f.exit_code, 0) << f.out << f.err;
  EXPECT_TRUE(contains(f.out, "job local-job (ddprun pid " + std::to_string(job.pid()))) << f.out;
  EXPECT_TRUE(contains(f.out, "phase       running")) << f.out;
  EXPECT_TRUE(contains(f.out, "round       0 (running")) << f.out;
  EXPECT_TRUE(contains(f.out, "restarts    0 of 1")) << f.out;
  EXPECT_TRUE(contains(f.out, "world size  2 (1 node")) << f.out;
  EXPECT_TRUE(std::regex_search(f.out, std::regex(R"(\n    0 +0\.\.1 .*- \(no lease\)\n)"))) << f.out;
  EXPECT_TRUE(contains(f.out, "last step   57 of 1000 (epoch 2, loss 0.25)")) << f.out;
  EXPECT_TRUE(contains(f.out, "checkpoint  saved at step 50\n")) << f.out;

  Finished j = ddptest::run(ddprun({"status", "--json", "--rdzv-id", "local-job"}), {rt.env()});
  ASSERT_EQ(j.exit_code, 0) << j.err;
  EXPECT_TRUE(contains(j.out, R"("job_id": "local-job")")) << j.out;
  EXPECT_TRUE(contains(j.out, R"("world_size": 2)")) << j.out;
  EXPECT_TRUE(contains(j.out, R"("step": 57)")) << j.out;
  EXPECT_TRUE(contains(j.out, R"("saved_step": 50)")) << j.out;
  EXPECT_TRUE(contains(j.out, R"("first_global_rank": 0)")) << j.out;

  Finished other = ddptest::run(ddprun({"status", "--rdzv-id", "no-such-job"}), {rt.env()});
  EXPECT_EQ(other.exit_code, 1);
  EXPECT_TRUE(contains(other.err, "no job 'no-such-job' of this user runs on this machine")) << other.err;

  // The job file is private and goes when ddprun ends.
  const fs::path dir = rt.path / "ddprun";
  ASSERT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator{}), 1);
  const fs::path file = fs::directory_iterator(dir)->path();
  EXPECT_EQ(fs::status(dir).permissions() & fs::perms::all, fs::perms::owner_all);
  EXPECT_EQ(fs::status(file).permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write);
  job.signal(SIGTERM);
  job.finish(30s);
  EXPECT_FALSE(fs::exists(file));
  Finished none = ddptest::run(ddprun({"status"}), {rt.env()});
  EXPECT_EQ(none.exit_code, 1);
  EXPECT_TRUE(contains(none.err, "no ddprun job of this user runs on this machine")) << none.err;
}

TEST(Status, ARestartShowsInTheRoundTheCountAndTheResumedCheckpoint) {
  RuntimeDir rt("restart");
  Process job(ddprun(cat({"--nproc", "2", "--hang-timeout", "600", "--max-restarts", "1", "--rdzv-id",
                          "restarting-job"},
                         reporting_probe("60", "40", {"fail-first"}))),
              {rt.env()});
  ASSERT_TRUE(wait_ready(job, 2)) << job.out();
  Finished f = status_until({}, "resumed from step 40", {rt.env()});
  ASSERT_EQ(f.exit_code, 0) << f.out << f.err;
  EXPECT_TRUE(contains(f.out, "restarts    1 of 1")) << f.out;
  EXPECT_TRUE(contains(f.out, "round       1 (running, opened for: workers failed)")) << f.out;
  // Why, as the failure summary's root cause says it.
  EXPECT_TRUE(std::regex_search(f.out, std::regex(R"(phase       running: node '[^']+''s workers failed: rank \d )")))
      << f.out;
  EXPECT_TRUE(contains(f.out, "checkpoint  saved at step 40; resumed from step 40")) << f.out;
  job.signal(SIGTERM);
  job.finish(30s);
}

TEST(Status, AJobOfTwoNodesIsAskedAtItsEndpointWithItsToken) {
  RuntimeDir rt("endpoint");
  const std::string endpoint = "127.0.0.1:" + std::to_string(free_port());
  auto node = [&] {
    return ddprun(cat({"--nnodes", "2", "--nproc", "1", "--hang-timeout", "600", "--rdzv-endpoint",
                       endpoint, "--rdzv-id", "two-nodes"},
                      reporting_probe("7", "5")));
  };
  const ddptest::EnvChanges env{rt.env(), std::string("DDPRUN_RDZV_TOKEN=") + kToken};
  Process a(node(), env);
  Process b(node(), env);
  ASSERT_TRUE(wait_ready(a, 1)) << a.out();
  ASSERT_TRUE(wait_ready(b, 1)) << b.out();

  const std::vector<std::string> ask{"--rdzv-endpoint", endpoint, "--rdzv-id", "two-nodes",
                                     "--rdzv-token", kToken};
  Finished f = status_until(ask, "last step   7", {});
  ASSERT_EQ(f.exit_code, 0) << f.out << f.err;
  EXPECT_TRUE(contains(f.out, "job two-nodes (rendezvous " + endpoint + ")")) << f.out;
  EXPECT_TRUE(contains(f.out, "world size  2 (2 nodes")) << f.out;
  EXPECT_TRUE(std::regex_search(f.out, std::regex(R"(\n    0 +0\.\.0 )"))) << f.out;
  EXPECT_TRUE(std::regex_search(f.out, std::regex(R"(\n    1 +1\.\.1 .* s ago\n)"))) << f.out;
  EXPECT_TRUE(contains(f.out, "rank 0, round 0")) << f.out;

  Finished j = ddptest::run(ddprun(cat({"status", "--json"}, ask)));
  ASSERT_EQ(j.exit_code, 0) << j.err;
  EXPECT_TRUE(contains(j.out, R"("node_rank": 1)")) << j.out;
  EXPECT_TRUE(contains(j.out, R"("step": 7)")) << j.out;

  // Both agents wrote job files: local discovery shows the job once.
  Finished local = ddptest::run(ddprun({"status"}), {rt.env()});
  EXPECT_EQ(local.exit_code, 0) << local.err;
  EXPECT_EQ(std::distance(fs::directory_iterator(rt.path / "ddprun"), fs::directory_iterator{}), 2);
  size_t shown = 0;
  for (size_t at = 0; (at = local.out.find("job two-nodes (ddprun pid", at)) != std::string::npos; ++at) ++shown;
  EXPECT_EQ(shown, 1u) << local.out;

  Finished wrong = ddptest::run(ddprun({"status", "--rdzv-endpoint", endpoint, "--rdzv-id",
                                        "two-nodes", "--rdzv-token", "wrong-token-0123456789"}));
  EXPECT_EQ(wrong.exit_code, 1);
  EXPECT_TRUE(contains(wrong.err, "wrong or missing token")) << wrong.err;
  EXPECT_EQ(ddptest::lines(wrong.err).size(), 1u) << wrong.err;
  Finished none = ddptest::run(ddprun({"status", "--rdzv-endpoint", endpoint, "--rdzv-id", "two-nodes"}));
  EXPECT_EQ(none.exit_code, 1);
  EXPECT_TRUE(contains(none.err, "wrong or missing token")) << none.err;
  Finished unknown = ddptest::run(ddprun({"status", "--rdzv-endpoint", endpoint, "--rdzv-id",
                                          "other-job"}),
                                  {std::string("DDPRUN_RDZV_TOKEN=") + kToken});
  EXPECT_EQ(unknown.exit_code, 1);
  EXPECT_TRUE(contains(unknown.err, "no such job")) << unknown.err;
  a.signal(SIGTERM);
  b.signal(SIGTERM);
  a.finish(30s);
  b.finish(30s);
}

TEST(Status, NothingListeningAndBadFlagsAreOneLineErrors) {
  const std::string endpoint = "127.0.0.1:" + std::to_string(free_port());
  Finished down = ddptest::run(ddprun({"status", "--rdzv-endpoint", endpoint, "--rdzv-id", "j",
                                       "--timeout", "1"}));
  EXPECT_EQ(down.exit_code, 1);
  EXPECT_TRUE(contains(down.err, "does not answer")) << down.err;
  EXPECT_EQ(ddptest::lines(down.err).size(), 1u) << down.err;

  Finished no_id = ddptest::run(ddprun({"status", "--rdzv-endpoint", endpoint}));
  EXPECT_EQ(no_id.exit_code, 2);
  EXPECT_TRUE(contains(no_id.err, "--rdzv-id: needed with --rdzv-endpoint")) << no_id.err;
  Finished bad_port = ddptest::run(ddprun({"status", "--rdzv-endpoint", "h:99999", "--rdzv-id", "j"}));
  EXPECT_EQ(bad_port.exit_code, 2);
  EXPECT_TRUE(contains(bad_port.err, "--rdzv-endpoint: port '99999'")) << bad_port.err;
  Finished bad_flag = ddptest::run(ddprun({"status", "--bogus"}));
  EXPECT_EQ(bad_flag.exit_code, 2);
}

}  // namespace
