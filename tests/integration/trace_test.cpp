// ddprun --trace end to end, with real processes: workers (trace_writer,
// no LibTorch) write their trace files, one fails once so the job restarts,
// and the launcher merges the folder into trace.json and a summary table.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "support/job_helpers.h"

namespace {

namespace fs = std::filesystem;
using ddptest::contains;
using ddptest::ddprun;
using nlohmann::json;

json load(const fs::path& p) {
  std::ifstream in(p);
  return json::parse(in);
}

std::vector<json> events_of(const json& trace, const std::string& ph) {
  std::vector<json> out;
  for (const auto& e : trace.at("traceEvents")) {
    if (e.at("ph") == ph) out.push_back(e);
  }
  return out;
}

// pid -> process name, and (pid, thread name) pairs, from the metadata.
std::map<int, std::string> processes(const json& trace) {
  std::map<int, std::string> out;
  for (const auto& e : events_of(trace, "M")) {
    if (e["name"] == "process_name") out[e["pid"]] = e["args"]["name"];
  }
  return out;
}
std::set<std::pair<int, std::string>> threads(const json& trace) {
  std::set<std::pair<int, std::string>> out;
  for (const auto& e : events_of(trace, "M")) {
    if (e["name"] == "thread_name") out.insert({e["pid"].get<int>(), e["args"]["name"].get<std::string>()});
  }
  return out;
}

TEST(Trace, RestartedJobMergesIntoOneChromeTraceWithASummary) {
  fs::path dir = ddptest::temp_path("trace", "restart");
  ddptest::Finished f = ddptest::run(ddprun({"--nproc", "2", "--trace", dir.string(), "--max-restarts", "1",
                                             "--no-standby", TRACE_WRITER_BIN, "4", "1"}));
  ASSERT_EQ(f.exit_code, 0) << f.err;

  // The workers got their own files, in the node's folder.
  EXPECT_TRUE(contains(f.out, "/attempt_0/rank1.trace")) << f.out;
  EXPECT_TRUE(contains(f.out, "/attempt_1/rank0.trace")) << f.out;
  // The table: per phase, and 75% of the all-reduce hidden (per step 800 of
  // bucket 1 and 400 of bucket 0's 800 µs fall inside backward).
  EXPECT_TRUE(contains(f.err, "trace summary: 2 rank(s), 4 step(s)")) << f.err;
  EXPECT_TRUE(contains(f.err, "backward")) << f.err;
  EXPECT_TRUE(contains(f.err, "all-reduce hidden behind backward: 75.0%")) << f.err;
  std::ifstream summary(dir / "summary.txt");
  std::string table((std::istreambuf_iterator<char>(summary)), {});
  EXPECT_TRUE(contains(table, "all-reduce hidden behind backward: 75.0%")) << table;

  const json trace = load(dir / "trace.json");
  // One process per rank, with main and comm threads.
  auto procs = processes(trace);
  EXPECT_EQ(procs[1], "rank 0");
  EXPECT_EQ(procs[2], "rank 1");
  auto ths = threads(trace);
  for (int pid : {1, 2}) {
    EXPECT_TRUE(ths.count({pid, "main"})) << pid;
    EXPECT_TRUE(ths.count({pid, "comm"})) << pid;
  }

  // No negative durations; every phase nested in its step (same rank,
  // attempt and step); all-reduces on the comm thread.
  std::map<std::tuple<int, int, int64_t>, std::pair<double, double>> steps;
  const auto xs = events_of(trace, "X");
  for (const auto& e : xs) {
    ASSERT_GE(e["dur"].get<double>(), 0.0) << e.dump();
    ASSERT_GE(e["ts"].get<double>(), 0.0) << e.dump();
    if (e["cat"] == "step") {
      steps[{e["pid"], e["args"]["attempt"], e["args"]["step"]}] = {e["ts"], e["ts"].get<double>() + e["dur"].get<double>()};
    }
  }
  size_t nested = 0;
  for (const auto& e : xs) {
    if (e["cat"] == "step" || e["args"]["step"].get<int64_t>() < 0) continue;
    if (e["cat"] == "all_reduce") {
      EXPECT_EQ(e["tid"], 2) << e.dump();
    }
    auto it = steps.find({e["pid"], e["args"]["attempt"], e["args"]["step"]});
    ASSERT_NE(it, steps.end()) << e.dump();
    EXPECT_GE(e["ts"].get<double>(), it->second.first - 0.001) << e.dump();
    EXPECT_LE(e["ts"].get<double>() + e["dur"].get<double>(), it->second.second + 0.001) << e.dump();
    ++nested;
  }
  EXPECT_GT(nested, 0u);

  // Both attempts of rank 1 on its one track, the second after the first:
  // attempt 0 had 2 steps (it failed), attempt 1 all 4.
  std::map<int, std::set<int64_t>> rank1_steps;
  std::map<int, std::pair<double, double>> span;  // attempt -> first begin, last end
  for (const auto& [key, ts] : steps) {
    auto [pid, attempt, step] = key;
    if (pid != 2) continue;
    rank1_steps[attempt].insert(step);
    auto& s = span.try_emplace(attempt, ts.first, ts.second).first->second;
    s.first = std::min(s.first, ts.first);
    s.second = std::max(s.second, ts.second);
  }
  EXPECT_EQ(rank1_steps[0], (std::set<int64_t>{0, 1}));
  EXPECT_EQ(rank1_steps[1], (std::set<int64_t>{0, 1, 2, 3}));
  EXPECT_LE(span[0].second, span[1].first);
  std::set<std::string> marks;
  for (const auto& e : events_of(trace, "i")) {
    if (e["pid"] == 2) marks.insert(e["name"]);
  }
  EXPECT_TRUE(marks.count("attempt 0") && marks.count("attempt 1"));

  // One node folder, the reference clock itself.
  size_t nodes = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (!e.is_directory()) continue;
    ++nodes;
    EXPECT_EQ(load(e.path() / "clock.json")["offset_ns"], 0);
  }
  EXPECT_EQ(nodes, 1u);

  // `ddprun trace-merge DIR` merges it again, here limited to step 3.
  ddptest::Finished m = ddptest::run(ddprun({"trace-merge", dir.string(), "--trace-steps", "3:"}));
  ASSERT_EQ(m.exit_code, 0) << m.err;
  EXPECT_TRUE(contains(m.out, "trace summary: 2 rank(s), 1 step(s)")) << m.out;
  for (const auto& e : events_of(load(dir / "trace.json"), "X")) EXPECT_EQ(e["args"]["step"], 3);
  fs::remove_all(dir);
}

TEST(Trace, StepWindowLimitsTheMergedTrace) {
  fs::path dir = ddptest::temp_path("trace", "window");
  ddptest::Finished f = ddptest::run(ddprun({"--nproc", "2", "--trace", dir.string(), "--trace-steps", "1:3",
                                             TRACE_WRITER_BIN, "5"}));
  ASSERT_EQ(f.exit_code, 0) << f.err;
  EXPECT_TRUE(contains(f.out, "trace steps: 1:3")) << f.out;  // handed to the workers
  EXPECT_TRUE(contains(f.err, "trace summary: 2 rank(s), 2 step(s)")) << f.err;
  std::set<int64_t> seen;
  for (const auto& e : events_of(load(dir / "trace.json"), "X")) seen.insert(e["args"]["step"].get<int64_t>());
  EXPECT_EQ(seen, (std::set<int64_t>{1, 2}));
  fs::remove_all(dir);
}

TEST(Trace, BadTraceFlagsAreOneLineAndExitCode2) {
  auto one_line = [](const ddptest::Finished& f) {
    EXPECT_EQ(f.exit_code, 2) << f.err;
    EXPECT_EQ(ddptest::lines(f.err).size(), 1u) << f.err;
  };
  ddptest::Finished unwritable = ddptest::run(ddprun({"--trace", "/proc/ddprun-no-trace-here", "true"}));
  one_line(unwritable);
  EXPECT_TRUE(contains(unwritable.err, "--trace: cannot write to '/proc/ddprun-no-trace-here'")) << unwritable.err;
  ddptest::Finished window = ddptest::run(ddprun({"--trace", "/tmp", "--trace-steps", "5:2", "true"}));
  one_line(window);
  EXPECT_TRUE(contains(window.err, "--trace-steps:")) << window.err;
  one_line(ddptest::run(ddprun({"trace-merge"})));
  one_line(ddptest::run(ddprun({"trace-merge", "/proc/ddprun-not-a-folder"})));
  one_line(ddptest::run(ddprun({"trace-merge", "/tmp", "--trace-steps", "x"})));
}

}  // namespace
