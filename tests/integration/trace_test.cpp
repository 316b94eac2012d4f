// ddprun --trace end to end, with real processes: workers (trace_writer,
// no LibTorch) write their trace files, one fails once so the job restarts,
// and the launcher merges the folder into trace.json and a summary table.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>

#include <nlohmann/json.hpp>

#include "support/job_helpers.h"

namespace {

namespace fs = std::filesystem;
using ddptest::free_port;
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

// Two agents on loopback, one trace folder: the non-hosting node's clock
// offset comes from its keep-alives (the same clock here, so within half a
// round trip of 0), it writes clock.json before it leaves, and the host
// merges both nodes' ranks.
TEST(Trace, TwoNodesMergeWithTheirClockOffsets) {
  fs::path dir = ddptest::temp_path("trace", "nodes");
  const std::string endpoint = "127.0.0.1:" + std::to_string(free_port());
  std::vector<std::unique_ptr<ddptest::Process>> nodes;
  for (int n = 0; n < 2; ++n) {
    nodes.push_back(std::make_unique<ddptest::Process>(
        ddprun({"--nnodes", "2", "--nproc", "1", "--rdzv-endpoint", endpoint, "--rdzv-id", "traced", "--trace",
                dir.string(), TRACE_WRITER_BIN, "3"})));
  }
  int summaries = 0;
  for (auto& p : nodes) {
    ddptest::Finished f = p->finish(std::chrono::minutes(1));
    EXPECT_EQ(f.exit_code, 0) << f.err;
    EXPECT_FALSE(contains(f.err, "warning: --trace")) << f.err;
    if (contains(f.err, "trace summary: 2 rank(s), 3 step(s)")) ++summaries;
  }
  EXPECT_EQ(summaries, 1);  // the host's

  int measured = 0;
  size_t folders = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (!e.is_directory()) continue;
    ++folders;
    json clock = load(e.path() / "clock.json");
    const int64_t offset = clock["offset_ns"], rtt = clock["rtt_ns"];
    if (rtt > 0) {
      ++measured;
      EXPECT_LE(std::llabs(offset), rtt / 2 + 1) << clock.dump();
    } else {
      EXPECT_EQ(offset, 0);  // the host: the reference itself
    }
  }
  EXPECT_EQ(folders, 2u);
  EXPECT_EQ(measured, 1);
  auto procs = processes(load(dir / "trace.json"));
  EXPECT_EQ(procs[1], "rank 0");
  EXPECT_EQ(procs[2], "rank 1");
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

// The real thing: train's DDP under --trace. For each rank, the time its
// all-reduces (X events named all_reduce) spend inside its own backward.
std::map<int, double> allreduce_inside_backward_us(const json& trace) {
  std::map<int, std::vector<std::pair<double, double>>> backward, allreduce;
  for (const auto& e : events_of(trace, "X")) {
    const double ts = e["ts"], end = ts + e["dur"].get<double>();
    if (e["name"] == "backward") backward[e["pid"]].push_back({ts, end});
    if (e["name"] == "all_reduce") allreduce[e["pid"]].push_back({ts, end});
  }
  std::map<int, double> out;
  for (const auto& [pid, ars] : allreduce) {
    out[pid] = 0;
    for (const auto& [a0, a1] : ars) {
      for (const auto& [b0, b1] : backward[pid]) out[pid] += std::max(0.0, std::min(a1, b1) - std::max(a0, b0));
    }
  }
  return out;
}

json traced_train(const std::string& sync, std::string* err, const std::string& overlap = "auto") {
  fs::path dir = ddptest::temp_path("trace", sync + "-" + overlap);
  ddptest::Finished f = ddptest::run(ddprun({"--nproc", "2", "--trace", dir.string(), TRAIN_BIN, "--epochs", "1",
                                             "--limit", "1024", "--sync", sync, "--overlap", overlap}));
  *err = f.err;
  EXPECT_EQ(f.exit_code, 0) << f.err;
  json trace = load(dir / "trace.json");
  fs::remove_all(dir);
  return trace;
}

TEST(Trace, BucketedAllReducesOverlapBackwardAndNaiveOnesDoNot) {
  std::string err;
  // Overlap asked for: on two cores shared memory would rather not (auto).
  const json bucketed = traced_train("bucketed", &err, "on");
  EXPECT_TRUE(contains(err, "all-reduce hidden behind backward")) << err;
  // Two ranks, each with a comm thread carrying the bucket all-reduces.
  std::set<int> rank_pids;
  for (const auto& [pid, name] : processes(bucketed)) {
    if (name.rfind("rank ", 0) == 0) rank_pids.insert(pid);
  }
  ASSERT_EQ(rank_pids.size(), 2u);
  for (int pid : rank_pids) EXPECT_TRUE(threads(bucketed).count({pid, "comm"})) << pid;
  std::set<std::string> phases;
  for (const auto& e : events_of(bucketed, "X")) {
    EXPECT_GE(e["dur"].get<double>(), 0) << e.dump();
    const std::string name = e["name"];
    phases.insert(name.rfind("step ", 0) == 0 ? "step" : name);  // steps are named "step N"
  }
  for (const char* p : {"step", "data", "forward", "backward", "all_reduce", "optimizer"}) {
    EXPECT_TRUE(phases.count(p)) << "no " << p << " phase in the trace";
  }
  const auto hidden = allreduce_inside_backward_us(bucketed);
  ASSERT_EQ(hidden.size(), 2u);
  for (const auto& [pid, us] : hidden) EXPECT_GT(us, 0) << "rank process " << pid << ": no all-reduce during backward";

  // Naive sync all-reduces after backward, on the training thread; so do
  // buckets without overlap.
  for (const auto& [sync, overlap] : {std::pair{"naive", "auto"}, std::pair{"bucketed", "off"}}) {
    SCOPED_TRACE(std::string(sync) + " overlap " + overlap);
    const json after = traced_train(sync, &err, overlap);
    for (const auto& [pid, us] : allreduce_inside_backward_us(after)) EXPECT_EQ(us, 0) << pid;
    EXPECT_TRUE(contains(err, "hidden behind backward: 0.0%")) << err;
  }
}

TEST(Trace, ASecondRunIntoTheSameFolderMergesOnlyItsOwnNodes) {
  fs::path dir = ddptest::temp_path("trace", "reused");
  ddptest::Finished first = ddptest::run(ddprun({"--nproc", "2", "--trace", dir.string(), TRACE_WRITER_BIN, "2"}));
  ASSERT_EQ(first.exit_code, 0) << first.err;
  // As if that run had ended an hour ago (two runs in a row here are a few
  // ms apart, within the file system clock's grain).
  const auto hour_ago = fs::file_time_type::clock::now() - std::chrono::hours(1);
  for (const auto& e : fs::recursive_directory_iterator(dir)) fs::last_write_time(e.path(), hour_ago);
  ddptest::Finished second = ddptest::run(ddprun({"--nproc", "1", "--trace", dir.string(), TRACE_WRITER_BIN, "2"}));
  ASSERT_EQ(second.exit_code, 0) << second.err;
  EXPECT_TRUE(contains(second.err, "left out 1 node folder(s) of earlier runs")) << second.err;
  int ranks = 0;
  for (const auto& [pid, name] : processes(load(dir / "trace.json"))) ranks += name.rfind("rank ", 0) == 0;
  EXPECT_EQ(ranks, 1) << "the first run's two ranks were merged into the second run's trace";
  fs::remove_all(dir);
}

}  // namespace
