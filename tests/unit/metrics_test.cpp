// The agent's metrics: the exposition text, goodput's accounting and the
// /metrics server (a real socket, real HTTP).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <thread>

#include "agent/health/goodput.h"
#include "agent/output/metrics.h"
#include "agent/output/metrics_server.h"
#include "launcher/report_command.h"

namespace ddprun {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

TEST(Metrics, RendersTypesLabelsAndCumulativeBuckets) {
  Metrics m({{"job", "j\"1"}, {"node", "a"}});
  m.describe("ddprun_heals_total", Metrics::kCounter, "Workers replaced.");
  m.describe("ddprun_world_size", Metrics::kGauge, "Ranks.");
  m.describe("ddprun_heal_seconds", Metrics::kHistogram, "Time to heal.", {0.5, 2});
  m.describe("ddprun_unsampled", Metrics::kGauge, "Never set.");
  m.add("ddprun_heals_total");
  m.add("ddprun_heals_total");
  m.set("ddprun_world_size", 4);
  m.observe("ddprun_heal_seconds", {}, 0.25);
  m.observe("ddprun_heal_seconds", {}, 1.5);
  m.observe("ddprun_heal_seconds", {}, 7);
  const std::string text = m.render();
  EXPECT_NE(text.find("# TYPE ddprun_heals_total counter\n"), std::string::npos) << text;
  EXPECT_NE(text.find("ddprun_heals_total{job=\"j\\\"1\",node=\"a\"} 2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("ddprun_world_size{job=\"j\\\"1\",node=\"a\"} 4\n"), std::string::npos) << text;
  EXPECT_NE(text.find("ddprun_heal_seconds_bucket{job=\"j\\\"1\",node=\"a\",le=\"0.5\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("ddprun_heal_seconds_bucket{job=\"j\\\"1\",node=\"a\",le=\"2\"} 2\n"), std::string::npos);
  EXPECT_NE(text.find("ddprun_heal_seconds_bucket{job=\"j\\\"1\",node=\"a\",le=\"+Inf\"} 3\n"), std::string::npos);
  EXPECT_NE(text.find("ddprun_heal_seconds_sum{job=\"j\\\"1\",node=\"a\"} 8.75\n"), std::string::npos) << text;
  EXPECT_NE(text.find("ddprun_heal_seconds_count{job=\"j\\\"1\",node=\"a\"} 3\n"), std::string::npos);
  EXPECT_NE(text.find("# TYPE ddprun_unsampled gauge\n"), std::string::npos);
  // In the order described.
  EXPECT_LT(text.find("ddprun_heals_total"), text.find("ddprun_world_size"));
  EXPECT_THROW(m.add("ddprun_not_described"), std::logic_error);
}

TEST(Metrics, AGaugesSampleCanGo) {
  Metrics m;
  m.describe("ddprun_step_seconds", Metrics::kGauge, "Per rank.");
  m.set("ddprun_step_seconds", {{"rank", "0"}}, 0.5);
  m.set("ddprun_step_seconds", {{"rank", "1"}}, 0.75);
  m.erase("ddprun_step_seconds", {{"rank", "1"}});
  const std::string text = m.render();
  EXPECT_NE(text.find("ddprun_step_seconds{rank=\"0\"} 0.5\n"), std::string::npos) << text;
  EXPECT_EQ(text.find("rank=\"1\""), std::string::npos) << text;
  EXPECT_EQ(m.value("ddprun_step_seconds", {{"rank", "0"}}), 0.5);
}

Clock::time_point at(double s) { return Clock::time_point{} + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s)); }

// Steps every second from t=10 (start-up before: lost), a failure at 15.5,
// the restart's workers back at step 3 from t=20 and past the old highest
// step (5) at t=23.
TEST(Goodput, CountsTrainingKeptAndNotStartUpRecoveryOrRedoneSteps) {
  Goodput g(at(0));
  for (int s = 0; s <= 5; ++s) g.step(s, at(10 + s));  // 5 good seconds (10..15)
  EXPECT_DOUBLE_EQ(g.good_seconds(), 5);
  g.lost(at(15.5));
  g.step(5, at(16));  // a reading in the recovery: the interval starts afresh
  g.step(3, at(20));  // the restart resumed from step 3's checkpoint
  g.step(4, at(21));
  g.step(5, at(22));  // steps 4 and 5 redone: lost
  EXPECT_DOUBLE_EQ(g.good_seconds(), 5);
  EXPECT_EQ(g.redone_steps(), 2);
  g.step(7, at(24));  // past the highest: good again
  EXPECT_DOUBLE_EQ(g.good_seconds(), 7);
  EXPECT_DOUBLE_EQ(g.wall_seconds(at(24)), 24);
  g.step(7, at(25));  // no step: nothing yet
  g.step(9, at(27));
  EXPECT_DOUBLE_EQ(g.good_seconds(), 10);
}

TEST(Goodput, AnIntervalPartlyRedoneCountsItsNewStepsShare) {
  Goodput g(at(0));
  g.step(10, at(1));
  g.step(20, at(2));  // 1 s good, highest 20
  g.lost(at(2.5));
  g.step(15, at(3));
  g.step(25, at(5));  // 10 steps in 2 s, 5 of them new: 1 s
  EXPECT_DOUBLE_EQ(g.good_seconds(), 2);
  EXPECT_EQ(g.redone_steps(), 5);
}

// One request over a real socket: the status line and body.
std::string get(int port, const std::string& request) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return "connect failed";
  }
  (void)!write(fd, request.data(), request.size());
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  close(fd);
  return out;
}

TEST(MetricsServer, AnswersGetMetricsAndOnlyThat) {
  auto m = std::make_shared<Metrics>();
  m->describe("ddprun_steps_total", Metrics::kCounter, "Steps.");
  m->add("ddprun_steps_total", {}, 42);
  MetricsServerOptions o;
  o.host = "127.0.0.1";
  MetricsServer server(m, o);
  ASSERT_GT(server.port(), 0);
  const std::string ok = get(server.port(), "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(ok.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << ok;
  EXPECT_NE(ok.find("text/plain; version=0.0.4"), std::string::npos) << ok;
  EXPECT_NE(ok.find("\r\n\r\n# HELP ddprun_steps_total Steps.\n"), std::string::npos) << ok;
  EXPECT_NE(ok.find("ddprun_steps_total 42\n"), std::string::npos) << ok;
  EXPECT_EQ(get(server.port(), "GET / HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 404", 0), 0u);
  EXPECT_EQ(get(server.port(), "GET /metrics HTTP/1.0\n\n").rfind("HTTP/1.1 200", 0), 0u);  // bare newlines
  EXPECT_EQ(get(server.port(), "POST /metrics HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 405", 0), 0u);
  EXPECT_EQ(server.served(), 2u);
}

TEST(MetricsServer, WithATokenAScrapeWithoutItIsRefused) {
  auto m = std::make_shared<Metrics>();
  MetricsServerOptions o;
  o.host = "127.0.0.1";
  o.token = "s3cret";
  MetricsServer server(m, o);
  EXPECT_EQ(get(server.port(), "GET /metrics HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 401", 0), 0u);
  EXPECT_EQ(get(server.port(), "GET /metrics HTTP/1.1\r\nAuthorization: Bearer wrong!\r\n\r\n").rfind("HTTP/1.1 401", 0),
            0u);
  EXPECT_EQ(get(server.port(), "GET /metrics HTTP/1.1\r\nauthorization: Bearer s3cret\r\n\r\n").rfind("HTTP/1.1 200", 0),
            0u);
}

// A client that connects and says nothing holds the server for the read
// timeout at most; one that sends endless headers is cut at 8 KiB.
TEST(MetricsServer, ASilentOrEndlessClientDoesNotHoldItUp) {
  auto m = std::make_shared<Metrics>();
  MetricsServerOptions o;
  o.host = "127.0.0.1";
  o.read_timeout = milliseconds(300);
  MetricsServer server(m, o);
  const int silent = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(server.port()));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(connect(silent, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  const std::string endless = "GET /metrics HTTP/1.1\r\n" + std::string(20000, 'x');
  EXPECT_EQ(get(server.port(), endless).find("200 OK"), std::string::npos);
  EXPECT_EQ(get(server.port(), "GET /metrics HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 200", 0), 0u);
  close(silent);
}

TEST(MetricsServer, APortInUseSaysSo) {
  auto m = std::make_shared<Metrics>();
  MetricsServerOptions o;
  o.host = "127.0.0.1";
  MetricsServer first(m, o);
  o.port = first.port();
  try {
    MetricsServer second(m, o);
    FAIL() << "bound a port in use";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(std::to_string(first.port())), std::string::npos) << e.what();
  }
}

// `ddprun report`'s numbers come from the same fold as /metrics, fed the
// event log's lines at their own times: a step a second, a rank killed and
// healed (the interval with the exit lost), steps again.
TEST(JobReport, FoldsTheEventLogAsTheLiveMetricsDo) {
  std::vector<nlohmann::json> log;
  auto event = [&](double t, const char* name, nlohmann::json fields = nlohmann::json::object()) {
    fields["event"] = name;
    fields["mono_ns"] = static_cast<int64_t>(1e12 + t * 1e9);
    fields["node"] = "a";
    log.push_back(fields);
  };
  event(0, "job_start", {{"run_id", "r1"}});
  event(0.1, "round", {{"round", 0}, {"world_size", 2}});
  for (int s = 0; s <= 10; ++s) event(1 + s, "progress", {{"rank", 0}, {"step", s}, {"samples", 64 * s}});
  event(11.5, "exit", {{"rank", 1}, {"signal", "SIGKILL"}});
  event(11.6, "heal", {{"rank", 1}, {"generation", 1}});
  event(12, "progress", {{"rank", 0}, {"step", 10}});
  event(13, "progress", {{"rank", 0}, {"step", 11}});
  event(14, "progress", {{"rank", 0}, {"step", 12}});
  event(14.5, "job_end", {{"exit_code", 0}});
  const JobReport r = report_of(log);
  EXPECT_EQ(r.run_id, "r1");
  EXPECT_EQ(r.heals, 1);
  EXPECT_EQ(r.restarts, 0);
  ASSERT_EQ(r.marks.size(), 1u);
  EXPECT_EQ(r.marks[0].what, "heal");
  EXPECT_NEAR(r.marks[0].t, 11.6, 1e-6);
  EXPECT_NEAR(r.wall_s, 14.5, 1e-6);
  EXPECT_NEAR(r.good_s, 12, 1e-6);  // 1..11 s and 12..14 s; 11..12 held the failure
  EXPECT_EQ(r.rates.size(), 12u);    // every reading that moved on
  EXPECT_NEAR(r.rates.back().steps_per_s, 1, 1e-9);
  const std::string script = gnuplot_script(r, "d.dat", "out.svg");
  EXPECT_NE(script.find("set terminal svg"), std::string::npos);
  EXPECT_NE(script.find("goodput 82.8%"), std::string::npos) << script;
  EXPECT_NE(script.find("'heal'"), std::string::npos) << script;
}

}  // namespace
}  // namespace ddprun
