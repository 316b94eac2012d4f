// --metrics-port end to end: the default job serves /metrics, Prometheus's
// own promtool accepts the exposition, and a real Prometheus server
// (Debian's, started here on a free port, scraping every second) sees a
// rank killed and healed: ddprun_heals_total at 1, one recovery, and a
// goodput ratio between 0 and 1.
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include "support/job_helpers.h"
#include "support/process.h"

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using ddptest::Finished;
using ddptest::Process;
using ddptest::contains;

fs::path temp(const std::string& name) { return ddptest::temp_path("metrics", name); }

// The port of "metrics at http://HOST:PORT/metrics" in ddprun's log.
int metrics_port(Process& p) {
  std::regex said(R"(metrics at http://[^:]+:(\d+)/metrics)");
  std::smatch m;
  // ddprun logs on stderr, before any worker starts.
  const auto line = p.wait_for_err_line([&](const std::string& l) { return std::regex_search(l, said); }, 120s);
  if (!line || !std::regex_search(*line, m, said)) return -1;
  return std::stoi(m[1]);
}

// A PromQL query's first value as "value V", or "none".
std::vector<std::string> query(int port, const std::string& promql) {
  return {PYTHON_BIN, "-c",
          "import json,sys,urllib.parse,urllib.request\n"
          "u='http://127.0.0.1:%s/api/v1/query?query=%s'%(sys.argv[1],urllib.parse.quote(sys.argv[2]))\n"
          "r=json.load(urllib.request.urlopen(u,timeout=10))['data']['result']\n"
          "print('value',r[0]['value'][1] if r else 'none')",
          std::to_string(port), promql};
}

TEST(MetricsJob, PrometheusSeesAHealAndAGoodputRatioBelowOne) {
  for (const char* tool : {"/usr/bin/prometheus", "/usr/bin/promtool"}) {
    ASSERT_TRUE(fs::exists(tool)) << tool << " is missing: scripts/install-deps.sh tests installs Debian's prometheus";
  }
  Process job({DDPRUN_BIN, "--nproc", "2", "--metrics-port", "0", TRAIN_BIN, "--limit", "8000", "--print-steps",
               "--epochs", "50"},
              {"DDPRUN_CPU_COMM=shm"});
  const int port = metrics_port(job);
  ASSERT_GT(port, 0) << job.out() << job.err();
  ASSERT_TRUE(ddptest::reach_step(job, 5)) << job.out();

  // 1. The exposition as promtool reads it.
  const fs::path exposition = temp("exposition.txt");
  const Finished scrape = ddptest::run(
      {PYTHON_BIN, "-c",
       "import sys,urllib.request\nopen(sys.argv[2],'wb').write(urllib.request.urlopen(sys.argv[1],timeout=10).read())",
       "http://127.0.0.1:" + std::to_string(port) + "/metrics", exposition.string()});
  ASSERT_EQ(scrape.exit_code, 0) << scrape.err;
  const Finished check = ddptest::run({"/bin/sh", "-c", "/usr/bin/promtool check metrics < '" + exposition.string() + "'"});
  EXPECT_EQ(check.exit_code, 0) << check.out << check.err;
  std::ifstream in(exposition);
  const std::string text((std::istreambuf_iterator<char>(in)), {});
  EXPECT_TRUE(contains(text, "ddprun_heals_total")) << text;

  // 2. A Prometheus server scraping it every second.
  const fs::path dir = temp("prometheus");
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "prometheus.yml") << "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                                        << "scrape_configs:\n  - job_name: ddprun\n    static_configs:\n"
                                        << "      - targets: ['127.0.0.1:" << port << "']\n";
  const int web = ddptest::free_port();
  Process prometheus({"/usr/bin/prometheus", "--config.file=" + (dir / "prometheus.yml").string(),
                      "--storage.tsdb.path=" + (dir / "data").string(),
                      "--web.listen-address=127.0.0.1:" + std::to_string(web)});
  // The job is up and scraped before the kill.
  Finished up = ddptest::run_until(query(web, "up{job=\"ddprun\"} == 1"), "value 1\n", {}, 120s);
  ASSERT_TRUE(contains(up.out, "value 1\n")) << up.out << up.err << prometheus.err();

  // 3. A rank killed inside a step (mid-epoch: 2 ranks take 125 steps an
  //    epoch, and a rank killed in the epoch's evaluation fails the job):
  //    the heal, the recovery and the lost time show.
  //    The lines read now are seconds old (nobody read them while
  //    Prometheus started): the step to kill at is one ahead of where the
  //    job stands now, as /metrics says.
  const Finished now = ddptest::run(
      {PYTHON_BIN, "-c",
       "import re,sys,urllib.request\n"
       "t=urllib.request.urlopen(sys.argv[1],timeout=10).read().decode()\n"
       "print(int(float(re.search(r'^ddprun_steps_total\\{[^}]*\\} (\\S+)$',t,re.M).group(1))))",
       "http://127.0.0.1:" + std::to_string(port) + "/metrics"});
  ASSERT_EQ(now.exit_code, 0) << now.err;
  int at = std::stoi(now.out) + 20;
  while (at % 125 != 60) ++at;
  ASSERT_TRUE(job.wait_for_line(
      [at](const std::string& l) {
        std::smatch m;
        return std::regex_search(l, m, std::regex(R"(\]:step (\d+) done)")) && std::stoi(m[1]) >= at;
      },
      120s))
      << job.out();
  std::vector<pid_t> workers = ddptest::workers_of(job.pid());
  ASSERT_EQ(workers.size(), 2u);
  kill(workers[1], SIGKILL);
  ASSERT_TRUE(job.wait_for_line([](const std::string& l) { return contains(l, "joined at step"); }, 120s))
      << job.out() << job.err();
  Finished heals = ddptest::run_until(query(web, "ddprun_heals_total"), "value 1\n", {}, 120s);
  EXPECT_TRUE(contains(heals.out, "value 1\n")) << heals.out << heals.err;
  Finished recovered = ddptest::run_until(query(web, "ddprun_recovery_seconds_count"), "value 1\n", {}, 120s);
  EXPECT_TRUE(contains(recovered.out, "value 1\n")) << recovered.out << recovered.err;
  Finished ratio = ddptest::run_until(
      query(web, "ddprun_goodput_seconds_total / ddprun_wall_seconds_total > 0 < 1"), "value 0.", {}, 60s);
  EXPECT_TRUE(contains(ratio.out, "value 0.")) << ratio.out << ratio.err;

  prometheus.signal(SIGTERM);
  prometheus.finish(60s);
  job.signal(SIGINT);
  job.finish(2min);
  fs::remove_all(dir);
}

// A port that cannot be bound is a usage error naming the flag, before any
// worker starts.
TEST(MetricsJob, APortInUseIsAUsageErrorNamingTheFlag) {
  Process holder({DDPRUN_BIN, "--nproc", "1", "--metrics-port", "0", TRAIN_BIN, "--limit", "2000", "--epochs", "50"});
  const int port = metrics_port(holder);
  ASSERT_GT(port, 0) << holder.out() << holder.err();
  const Finished f = ddptest::run({DDPRUN_BIN, "--nproc", "1", "--metrics-port", std::to_string(port), "/bin/true"});
  EXPECT_EQ(f.exit_code, 2) << f.out << f.err;
  EXPECT_TRUE(contains(f.err, "--metrics-port")) << f.err;
  const Finished bad = ddptest::run({DDPRUN_BIN, "--nproc", "1", "/bin/true"}, {"DDPRUN_METRICS_PORT=http"});
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_TRUE(contains(bad.err, "DDPRUN_METRICS_PORT")) << bad.err;
  holder.signal(SIGINT);
  holder.finish(2min);
}

// `ddprun report` on a healed job's --log-dir: a picture whose numbers are
// the event log's (one heal, as many as the log's heal events).
TEST(MetricsJob, ReportDrawsAHealedJobFromItsEventLog) {
  const fs::path logs = temp("report-logs");
  fs::remove_all(logs);
  Process job({DDPRUN_BIN, "--nproc", "2", "--log-dir", logs.string(), TRAIN_BIN, "--limit", "8000", "--print-steps",
               "--epochs", "3"},
              {"DDPRUN_CPU_COMM=shm"});
  ASSERT_TRUE(ddptest::reach_step(job, 185)) << job.out();  // mid-epoch (125 steps an epoch)
  std::vector<pid_t> workers = ddptest::workers_of(job.pid());
  ASSERT_EQ(workers.size(), 2u);
  kill(workers[1], SIGKILL);
  const Finished end = job.finish(5min);
  ASSERT_EQ(end.exit_code, 0) << end.err;
  ASSERT_TRUE(contains(end.out, "joined at step")) << end.out;

  const fs::path pictures = temp("report");
  fs::create_directories(pictures);
  const fs::path svg = pictures / "job.svg";
  const Finished report = ddptest::run({DDPRUN_BIN, "report", logs.string(), "--out", svg.string()});
  ASSERT_EQ(report.exit_code, 0) << report.out << report.err;
  EXPECT_TRUE(contains(report.out, "1 heal(s), 0 restart(s)")) << report.out;
  std::ifstream in(svg);
  const std::string picture((std::istreambuf_iterator<char>(in)), {});
  EXPECT_TRUE(contains(picture, "<svg")) << svg;
  EXPECT_TRUE(contains(picture, ">heal<")) << "the heal is not marked";
  EXPECT_TRUE(contains(picture, "goodput")) << "no goodput in the title";
  // The log holds as many heals as the picture says.
  int heals = 0, progress = 0;
  for (const auto& run : fs::directory_iterator(logs)) {
    std::ifstream log(run.path() / "events.jsonl");
    for (std::string line; std::getline(log, line);) {
      heals += contains(line, "\"event\":\"heal\"");
      progress += contains(line, "\"event\":\"progress\"");
    }
  }
  EXPECT_EQ(heals, 1);
  EXPECT_GT(progress, 1);

  const Finished missing = ddptest::run({DDPRUN_BIN, "report", (logs / "nowhere").string()});
  EXPECT_EQ(missing.exit_code, 2) << missing.err;
  const fs::path bare = temp("bare");
  fs::create_directories(bare);
  const Finished empty = ddptest::run({DDPRUN_BIN, "report", bare.string()});
  EXPECT_EQ(empty.exit_code, 1) << empty.err;
  EXPECT_TRUE(contains(empty.err, "--log-dir")) << empty.err;
  fs::remove_all(logs);
  fs::remove_all(bare);
  fs::remove_all(pictures);
}

}  // namespace
