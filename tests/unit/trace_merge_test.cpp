// The trace merger (trace/): rank files, clock offsets, restarts, the step
// window, damaged files, and the all-reduce overlap of the summary.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "support/trace_files.h"
#include "trace/merge.h"
#include "trace/step_window.h"

namespace {

namespace fs = std::filesystem;
using ddprun::channel::TracePhase;
using ddprun::channel::TraceTrack;
using ddptest::trace_record;
using ddptest::write_trace_file;
using nlohmann::json;
namespace tr = ddprun::trace;

constexpr int64_t kMs = 1000000;

class TraceMerge : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("ddprun-trace-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string node(const std::string& name, std::optional<int64_t> offset_ns) {
    fs::create_directories(dir_ / name);
    if (offset_ns) std::ofstream(dir_ / name / "clock.json") << json{{"offset_ns", *offset_ns}, {"rtt_ns", 1000}}.dump();
    return (dir_ / name).string();
  }
  std::string rank_file(const std::string& node_dir, int attempt, int rank) {
    std::string p = ddprun::channel::trace_rank_file(node_dir, attempt, rank);
    fs::create_directories(fs::path(p).parent_path());
    return p;
  }
  // One step: [b, b+10ms) with forward [b+1, b+4), backward [b+4, b+8),
  // an all-reduce [b+6, b+9) on comm, optimizer [b+9, b+10).
  static std::vector<ddprun::channel::TraceRecord> step(int64_t s, int64_t b) {
    return {trace_record(TracePhase::kStep, TraceTrack::kMain, s, b, b + 10 * kMs),
            trace_record(TracePhase::kForward, TraceTrack::kMain, s, b + 1 * kMs, b + 4 * kMs),
            trace_record(TracePhase::kBackward, TraceTrack::kMain, s, b + 4 * kMs, b + 8 * kMs),
            trace_record(TracePhase::kAllReduce, TraceTrack::kComm, s, b + 6 * kMs, b + 9 * kMs, 0),
            trace_record(TracePhase::kOptimizer, TraceTrack::kMain, s, b + 9 * kMs, b + 10 * kMs)};
  }
  static std::vector<ddprun::channel::TraceRecord> steps(int64_t first, int n, int64_t b) {
    std::vector<ddprun::channel::TraceRecord> all;
    for (int i = 0; i < n; ++i) {
      auto s = step(first + i, b + i * 10 * kMs);
      all.insert(all.end(), s.begin(), s.end());
    }
    return all;
  }

  static std::vector<json> of(const json& trace, const std::string& ph) {
    std::vector<json> out;
    for (const auto& e : trace["traceEvents"]) {
      if (e["ph"] == ph) out.push_back(e);
    }
    return out;
  }
  static std::string process_name(const json& trace, int pid) {
    for (const auto& e : of(trace, "M")) {
      if (e["name"] == "process_name" && e["pid"] == pid) return e["args"]["name"];
    }
    return "";
  }
  // ts of the X event named `name` on `pid` (the first).
  static double ts(const json& trace, int pid, const std::string& name) {
    for (const auto& e : of(trace, "X")) {
      if (e["pid"] == pid && e["name"] == name) return e["ts"];
    }
    ADD_FAILURE() << "no " << name << " on pid " << pid;
    return -1;
  }

  fs::path dir_;
};

TEST(TraceStepWindow, ParsesBothSidesEitherEmpty) {
  auto w = tr::parse_step_window("5:20");
  ASSERT_TRUE(w);
  EXPECT_TRUE(w->contains(5));
  EXPECT_TRUE(w->contains(19));
  EXPECT_FALSE(w->contains(20));
  EXPECT_FALSE(w->contains(4));
  ASSERT_TRUE(tr::parse_step_window("5:"));
  EXPECT_TRUE(tr::parse_step_window("5:")->contains(1000000));
  ASSERT_TRUE(tr::parse_step_window(":3"));
  EXPECT_FALSE(tr::parse_step_window(":")->limited());
  for (const char* bad : {"", "5", "3:3", "4:2", "a:b", "-1:4", "1:2:3", "1 :2"}) {
    EXPECT_FALSE(tr::parse_step_window(bad)) << bad;
  }
}

TEST_F(TraceMerge, ClockOffsetsPutTwoNodesInTheRightOrder) {
  // Node b's clock reads 5 s less than the reference: its step, at local
  // 1.002 s, happened at 6.002 s, after node a's step at 6.0 s.
  std::string a = node("a", 0), b = node("b", 5000 * kMs);
  write_trace_file(rank_file(a, 0, 0), 0, 0, step(0, 6000 * kMs));
  write_trace_file(rank_file(b, 0, 1), 1, 0, step(0, 1002 * kMs));
  auto result = tr::merge_trace_dir(dir_.string(), {});
  const json& t = result.trace;
  EXPECT_EQ(process_name(t, 1), "rank 0");
  EXPECT_EQ(process_name(t, 2), "rank 1");
  // Re-based: rank 0's step starts the trace, rank 1's is 2 ms later.
  EXPECT_DOUBLE_EQ(ts(t, 1, "step 0"), 0.0);
  EXPECT_DOUBLE_EQ(ts(t, 2, "step 0"), 2000.0);
  EXPECT_DOUBLE_EQ(ts(t, 2, "forward"), 3000.0);
  EXPECT_TRUE(fs::exists(dir_ / "trace.json"));
  EXPECT_TRUE(fs::exists(dir_ / "summary.txt"));
  // The file written is the same JSON.
  std::ifstream in(dir_ / "trace.json");
  EXPECT_EQ(json::parse(in), t);
}

TEST_F(TraceMerge, SeveralRanksGetAProcessWithMainAndCommThreads) {
  std::string a = node("a", 0);
  for (int r = 0; r < 3; ++r) write_trace_file(rank_file(a, 0, r), r, 0, steps(0, 2, 100 * kMs));
  auto result = tr::merge_trace_dir(dir_.string(), {});
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(process_name(result.trace, r + 1), "rank " + std::to_string(r));
    std::set<std::string> threads;
    for (const auto& e : of(result.trace, "M")) {
      if (e["name"] == "thread_name" && e["pid"] == r + 1) threads.insert(e["args"]["name"]);
    }
    EXPECT_EQ(threads, (std::set<std::string>{"main", "comm"}));
  }
  EXPECT_EQ(of(result.trace, "X").size(), 3u * 10u);
  for (const auto& e : of(result.trace, "X")) {
    EXPECT_GE(e["dur"].get<double>(), 0.0);
    if (e["name"] == "all_reduce") {
      EXPECT_EQ(e["tid"], tr::kCommTid);
    }
  }
  EXPECT_EQ(result.summary.ranks, 3u);
  EXPECT_EQ(result.summary.steps, 2u);
  EXPECT_TRUE(result.warnings.empty()) << result.warnings.front();
}

TEST_F(TraceMerge, TwoAttemptsOfARankShareItsTracksOneAfterTheOther) {
  std::string a = node("a", 0);
  write_trace_file(rank_file(a, 0, 1), 1, 0, steps(0, 2, 100 * kMs));
  write_trace_file(rank_file(a, 1, 1), 1, 1, steps(1, 2, 500 * kMs));
  auto result = tr::merge_trace_dir(dir_.string(), {});
  std::vector<json> attempts;
  for (const auto& e : of(result.trace, "i")) {
    if (e["pid"] == 2 && e["name"].get<std::string>().rfind("attempt ", 0) == 0) attempts.push_back(e);
  }
  ASSERT_EQ(attempts.size(), 2u);
  double attempt1_at = attempts[0]["args"]["attempt"] == 1 ? attempts[0]["ts"] : attempts[1]["ts"];
  for (const auto& e : of(result.trace, "X")) {
    EXPECT_EQ(e["pid"], 2);  // both on rank 1's process
    if (e["args"]["attempt"] == 0) {
      EXPECT_LE(e["ts"].get<double>() + e["dur"].get<double>(), attempt1_at);
    } else {
      EXPECT_GE(e["ts"].get<double>(), attempt1_at);
    }
  }
  EXPECT_EQ(process_name(result.trace, 2), "rank 1");
  // Step 1 ran twice (once per attempt): two samples.
  for (const auto& p : result.summary.phases) EXPECT_EQ(p.samples, 4u) << p.phase;
}

TEST_F(TraceMerge, StepWindowKeepsOnlyItsSteps) {
  std::string a = node("a", 0);
  auto records = steps(0, 5, 100 * kMs);
  records.push_back(trace_record(TracePhase::kInit, TraceTrack::kMain, -1, 10 * kMs, 90 * kMs));
  write_trace_file(rank_file(a, 0, 0), 0, 0, records);
  std::ofstream(fs::path(a) / "events.jsonl") << json{{"mono_ns", 5 * kMs}, {"event", "round"}, {"round", 1}}.dump()
                                               << "\n";
  auto result = tr::merge_trace_dir(dir_.string(), *tr::parse_step_window("1:3"));
  std::set<int64_t> kept;
  for (const auto& e : of(result.trace, "X")) kept.insert(e["args"]["step"].get<int64_t>());
  EXPECT_EQ(kept, (std::set<int64_t>{1, 2}));
  EXPECT_DOUBLE_EQ(ts(result.trace, 1, "step 1"), 0.0);  // re-based on the window
  EXPECT_EQ(result.summary.steps, 2u);
  // The round, before the window, is left out too.
  for (const auto& e : of(result.trace, "i")) EXPECT_NE(e["name"], "round 1");

  auto all = tr::merge_trace_dir(dir_.string(), {});
  kept.clear();
  for (const auto& e : of(all.trace, "X")) kept.insert(e["args"]["step"].get<int64_t>());
  EXPECT_EQ(kept, (std::set<int64_t>{-1, 0, 1, 2, 3, 4}));
}

// A heal's phases are read back from a rank's file and named in the
// timeline: how long the survivor waited, connected, and sent what.
TEST_F(TraceMerge, AHealsPhasesAreNamedWithTheirGenerationAndBytes) {
  std::string a = node("a", 0);
  auto records = steps(0, 2, 100 * kMs);
  records.push_back(trace_record(TracePhase::kHealWait, TraceTrack::kMain, 1, 110 * kMs, 130 * kMs, 0));
  records.push_back(trace_record(TracePhase::kHealConnect, TraceTrack::kMain, 1, 130 * kMs, 135 * kMs, 1));
  records.push_back(trace_record(TracePhase::kHealTransfer, TraceTrack::kMain, 1, 135 * kMs, 150 * kMs, 1, 4096));
  write_trace_file(rank_file(a, 0, 0), 0, 0, records);
  auto result = tr::merge_trace_dir(dir_.string(), {});
  std::map<std::string, json> by_name;
  for (const auto& e : of(result.trace, "X")) by_name[e["name"]] = e;
  ASSERT_TRUE(by_name.count("heal_wait") && by_name.count("heal_connect") && by_name.count("heal_transfer"))
      << result.trace.dump();
  EXPECT_EQ(by_name["heal_wait"]["args"]["failed_in_generation"], 0);
  EXPECT_EQ(by_name["heal_connect"]["args"]["generation"], 1);
  EXPECT_EQ(by_name["heal_transfer"]["args"]["bytes"], 4096);
  EXPECT_DOUBLE_EQ(by_name["heal_transfer"]["dur"].get<double>(), 15000.0);
}

TEST_F(TraceMerge, AgentEventsBecomeInstantsOnTheNodesAgentTrack) {
  std::string a = node("a", 0), b = node("b", 1000 * kMs);
  write_trace_file(rank_file(a, 0, 0), 0, 0, step(0, 2000 * kMs));
  {
    std::ofstream ev(fs::path(b) / "events.jsonl");
    ev << json{{"time", "x"}, {"mono_ns", 900 * kMs}, {"node", "b"}, {"event", "round"}, {"round", 2}}.dump() << "\n";
    ev << json{{"mono_ns", 950 * kMs}, {"event", "restart"}, {"restart_count", 1}, {"max_restarts", 3}}.dump() << "\n";
    ev << json{{"mono_ns", 960 * kMs}, {"event", "straggler"}, {"rank", 1}, {"score", 0.412}}.dump() << "\n";
    ev << json{{"mono_ns", 970 * kMs}, {"event", "straggler_node"}, {"node_rank", 1}, {"score", 0.29}}.dump() << "\n";
    ev << "{\"mono_ns\": 99, \"event\": \"cut sho";  // a crash mid-line
  }
  auto result = tr::merge_trace_dir(dir_.string(), {});
  int agent_b = tr::kAgentPidBase + 1;  // folders in name order: a, b
  EXPECT_EQ(process_name(result.trace, agent_b), "agent b");
  EXPECT_EQ(process_name(result.trace, tr::kAgentPidBase), "");  // a has no event log
  std::map<std::string, double> at;
  for (const auto& e : of(result.trace, "i")) {
    if (e["pid"] == agent_b) at[e["name"]] = e["ts"];
  }
  ASSERT_EQ(at.size(), 4u);
  EXPECT_DOUBLE_EQ(at["straggler rank 1 (0.41)"], 60000.0);  // with its score
  EXPECT_DOUBLE_EQ(at["straggler node 1 (0.29)"], 70000.0);
  // Round at reference 1.9 s starts the trace; restart 50 ms later; rank
  // 0's step at 2.0 s, 100 ms after the round.
  EXPECT_DOUBLE_EQ(at["round 2"], 0.0);
  EXPECT_DOUBLE_EQ(at["restart 1/3"], 50000.0);
  EXPECT_DOUBLE_EQ(ts(result.trace, 1, "step 0"), 100000.0);
  bool warned = false;
  for (const auto& w : result.warnings) warned |= w.find("unreadable line") != std::string::npos;
  EXPECT_TRUE(warned);
}

TEST_F(TraceMerge, DamagedFilesAreReportedAndWhatIsValidIsKept) {
  std::string a = node("a", 0);
  // Bad magic: left out.
  write_trace_file(rank_file(a, 0, 0), 0, 0, step(0, 100 * kMs));
  {
    std::fstream f(rank_file(a, 0, 0), std::ios::in | std::ios::out | std::ios::binary);
    f.write("XXXX", 4);
  }
  // Room for 8 records, 12 taken: 4 dropped; of the 8, three not valid (one
  // backwards in time, one not marked valid, one slot taken but never filled).
  auto records = step(0, 100 * kMs);
  records.push_back(trace_record(TracePhase::kData, TraceTrack::kMain, 1, 300 * kMs, 200 * kMs));
  records.push_back(trace_record(TracePhase::kData, TraceTrack::kMain, 1, 300 * kMs, 301 * kMs));
  records.back().valid = 0;
  write_trace_file(rank_file(a, 0, 1), 1, 0, records, 8, 12);
  // Truncated: the header says 5 records, the file holds 2 and a half.
  write_trace_file(rank_file(a, 0, 2), 2, 0, step(0, 100 * kMs));
  fs::resize_file(rank_file(a, 0, 2), sizeof(ddprun::channel::TraceHeader) + 2 * 48 + 20);
  // Shorter than a header.
  std::ofstream(rank_file(a, 0, 3)) << "DDPT";

  std::string error;
  auto one = tr::read_rank_file(rank_file(a, 0, 1), &error);
  ASSERT_TRUE(one);
  EXPECT_EQ(one->records.size(), 5u);
  EXPECT_EQ(one->invalid, 3u);
  EXPECT_EQ(one->dropped, 4u);
  auto two = tr::read_rank_file(rank_file(a, 0, 2), &error);
  ASSERT_TRUE(two);
  EXPECT_TRUE(two->truncated);
  EXPECT_EQ(two->records.size(), 2u);
  EXPECT_FALSE(tr::read_rank_file(rank_file(a, 0, 0), &error));
  EXPECT_NE(error.find("bad magic"), std::string::npos);

  auto result = tr::merge_trace_dir(dir_.string(), {});
  EXPECT_EQ(process_name(result.trace, 1), "");
  EXPECT_EQ(process_name(result.trace, 2), "rank 1");
  EXPECT_EQ(process_name(result.trace, 3), "rank 2");
  std::string all;
  for (const auto& w : result.warnings) all += w + "\n";
  EXPECT_NE(all.find("bad magic"), std::string::npos) << all;
  EXPECT_NE(all.find("4 record(s) dropped"), std::string::npos) << all;
  EXPECT_NE(all.find("3 invalid record(s)"), std::string::npos) << all;
  EXPECT_NE(all.find("truncated"), std::string::npos) << all;
  EXPECT_NE(all.find("shorter than a trace header"), std::string::npos) << all;
}

TEST_F(TraceMerge, NodeFolderWithoutFilesIsNamedInAWarning) {
  node("a", 0);
  write_trace_file(rank_file(node("b", std::nullopt), 0, 0), 0, 0, step(0, 0));
  auto result = tr::merge_trace_dir(dir_.string(), {});
  std::string all;
  for (const auto& w : result.warnings) all += w + "\n";
  EXPECT_NE(all.find("a: no worker trace files"), std::string::npos) << all;
  EXPECT_NE(all.find("b: clock.json missing"), std::string::npos) << all;
  EXPECT_THROW(tr::merge_trace_dir((dir_ / "a").string(), {}), std::runtime_error);
}

// The summary's overlap on hand-made records: all-reduces fully inside
// backward, wholly after it, and half inside.
TEST(TraceSummary, AllReduceHiddenBehindBackward) {
  auto trace = [](int64_t ar_begin, int64_t ar_end) {
    tr::RankTrace t;
    t.records = {trace_record(TracePhase::kBackward, TraceTrack::kMain, 0, 10 * kMs, 20 * kMs),
                 trace_record(TracePhase::kAllReduce, TraceTrack::kComm, 0, ar_begin * kMs, ar_end * kMs)};
    return t;
  };
  auto full = trace(12, 18), none = trace(20, 26), partial = trace(16, 24);
  EXPECT_DOUBLE_EQ(tr::summarize({&full}, {}).hidden_fraction(), 1.0);
  EXPECT_DOUBLE_EQ(tr::summarize({&none}, {}).hidden_fraction(), 0.0);
  EXPECT_DOUBLE_EQ(tr::summarize({&partial}, {}).hidden_fraction(), 0.5);
  // Over ranks: 6 + 6 + 8 ms of all-reduce, 6 + 0 + 4 hidden.
  auto s = tr::summarize({&full, &none, &partial}, {});
  EXPECT_DOUBLE_EQ(s.allreduce_ms, 20.0);
  EXPECT_DOUBLE_EQ(s.hidden_ms, 10.0);
  // Backward of another rank does not hide this rank's all-reduce.
  tr::RankTrace only_ar;
  only_ar.header.rank = 1;
  only_ar.records = {trace_record(TracePhase::kAllReduce, TraceTrack::kComm, 0, 12 * kMs, 18 * kMs)};
  EXPECT_DOUBLE_EQ(tr::summarize({&full, &only_ar}, {}).hidden_fraction(), 0.5);
  std::string table = tr::format_summary(s);
  EXPECT_NE(table.find("all-reduce hidden behind backward: 50.0%"), std::string::npos) << table;
  EXPECT_NE(table.find("backward"), std::string::npos) << table;
  EXPECT_EQ(tr::summarize({}, {}).hidden_fraction(), -1);
}

TEST(TraceSummary, MeanAndP95PerStepOverRanksAndSteps) {
  tr::RankTrace t;
  // Forward of 1..20 ms in steps 0..19: mean 10.5, p95 19 (nearest rank).
  for (int s = 0; s < 20; ++s) {
    t.records.push_back(trace_record(TracePhase::kForward, TraceTrack::kMain, s, 0, (s + 1) * kMs));
  }
  // Two all-reduces in step 0 add up: one sample of 3 ms.
  t.records.push_back(trace_record(TracePhase::kAllReduce, TraceTrack::kComm, 0, 0, 1 * kMs));
  t.records.push_back(trace_record(TracePhase::kAllReduce, TraceTrack::kComm, 0, 5 * kMs, 7 * kMs));
  auto s = tr::summarize({&t}, {});
  ASSERT_EQ(s.phases.size(), 2u);
  EXPECT_EQ(s.phases[0].phase, "forward");
  EXPECT_DOUBLE_EQ(s.phases[0].mean_ms, 10.5);
  EXPECT_DOUBLE_EQ(s.phases[0].p95_ms, 19.0);
  EXPECT_EQ(s.phases[1].phase, "all_reduce");
  EXPECT_EQ(s.phases[1].samples, 1u);
  EXPECT_DOUBLE_EQ(s.phases[1].mean_ms, 3.0);
}

}  // namespace
