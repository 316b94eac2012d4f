// The trace recorder (worker_lib's trace.h): the file it writes is what
// channel/trace_format.h says, steps outside the window and records past
// the capacity are left out, and two threads can record at once.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <latch>
#include <map>
#include <optional>
#include <thread>
#include <vector>

#include "ddp/launch_info.h"
#include "ddp/trace.h"

namespace {

namespace ch = ddprun::channel;
namespace fs = std::filesystem;

struct TraceFile {
  ch::TraceHeader header{};
  std::vector<ch::TraceRecord> records;  // the valid ones, in index order
};

TraceFile read_trace(const std::string& path) {
  TraceFile out;
  std::ifstream in(path, std::ios::binary);
  in.read(reinterpret_cast<char*>(&out.header), sizeof out.header);
  const uint64_t n = std::min(out.header.next, out.header.capacity);
  for (uint64_t i = 0; i < n; ++i) {
    ch::TraceRecord r{};
    in.read(reinterpret_cast<char*>(&r), sizeof r);
    if (r.valid) out.records.push_back(r);
  }
  return out;
}

class TraceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ddprun-trace-" + std::to_string(getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  ddp::TraceOptions options() {
    ddp::TraceOptions o;
    o.file = ch::trace_rank_file((dir_ / "node").string(), 3, 5);  // folders made by the tracer
    o.rank = 5;
    o.local_rank = 1;
    o.world_size = 8;
    o.capacity = 64;
    return o;
  }
  fs::path dir_;
};

TEST_F(TraceTest, FileHasTheHeaderAndRecordsOfTheContract) {
  const auto o = options();
  {
    ddp::Tracer t(o);
    ASSERT_TRUE(t.on());
    { ddp::TraceSpan s(t, ddp::TracePhase::kInit); }  // before any step: step -1
    t.step(0);
    { ddp::TraceSpan s(t, ddp::TracePhase::kAllReduce, ddp::TraceTrack::kComm, 2, 4096); }
    t.step(1);
  }  // the destructor closes step 1
  const TraceFile f = read_trace(o.file);
  EXPECT_EQ(f.header.magic, ch::kTraceMagic);
  EXPECT_EQ(f.header.version, ch::kTraceVersion);
  EXPECT_EQ(f.header.rank, 5);
  EXPECT_EQ(f.header.local_rank, 1);
  EXPECT_EQ(f.header.world_size, 8);
  EXPECT_EQ(f.header.attempt, 3);  // from the folder attempt_3
  EXPECT_EQ(f.header.pid, getpid());
  EXPECT_EQ(f.header.record_bytes, sizeof(ch::TraceRecord));
  EXPECT_EQ(f.header.capacity, 64u);
  EXPECT_EQ(fs::file_size(o.file), sizeof(ch::TraceHeader) + 64 * sizeof(ch::TraceRecord));
  ASSERT_EQ(f.records.size(), 4u);
  EXPECT_EQ(f.records[0].phase, uint16_t(ddp::TracePhase::kInit));
  EXPECT_EQ(f.records[0].step, -1);
  const auto& ar = f.records[1];
  EXPECT_EQ(ar.phase, uint16_t(ddp::TracePhase::kAllReduce));
  EXPECT_EQ(ar.track, uint8_t(ddp::TraceTrack::kComm));
  EXPECT_EQ(ar.step, 0);
  EXPECT_EQ(ar.arg, 2);
  EXPECT_EQ(ar.bytes, 4096);
  EXPECT_LE(ar.begin_ns, ar.end_ns);
  EXPECT_EQ(f.records[2].phase, uint16_t(ddp::TracePhase::kStep));
  EXPECT_EQ(f.records[2].step, 0);
  EXPECT_LE(f.records[2].begin_ns, ar.begin_ns);  // the step encloses its phases
  EXPECT_GE(f.records[2].end_ns, ar.end_ns);
  EXPECT_EQ(f.records[3].phase, uint16_t(ddp::TracePhase::kStep));
  EXPECT_EQ(f.records[3].step, 1);
}

TEST_F(TraceTest, RecordsOnlyTheStepWindow) {
  auto o = options();
  ddp::parse_trace_steps("2:4", &o.first_step, &o.end_step);
  {
    ddp::Tracer t(o);
    for (int s = 0; s < 6; ++s) {
      t.step(s);
      ddp::TraceSpan span(t, ddp::TracePhase::kForward);
    }
  }
  std::vector<int64_t> steps;
  for (const auto& r : read_trace(o.file).records) steps.push_back(r.step);
  EXPECT_EQ(steps, (std::vector<int64_t>{2, 2, 3, 3}));  // forward, then the step record
}

TEST_F(TraceTest, StepWindowParsesOpenEndsAndRejectsGarbage) {
  int64_t a = -1, b = -1;
  ddp::parse_trace_steps(":7", &a, &b);
  EXPECT_EQ(a, 0);
  EXPECT_EQ(b, 7);
  ddp::parse_trace_steps("5:", &a, &b);
  EXPECT_EQ(a, 5);
  EXPECT_EQ(b, INT64_MAX);
  for (const char* bad : {"5", "x:3", "4:2", "-1:3", "3:3"}) {
    try {
      ddp::parse_trace_steps(bad, &a, &b);
      ADD_FAILURE() << bad;
    } catch (const ddp::ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("DDPRUN_TRACE_STEPS"), std::string::npos) << e.what();
    }
  }
}

TEST_F(TraceTest, RecordsPastTheCapacityAreCountedAsDropped) {
  auto o = options();
  o.capacity = 4;
  ::testing::internal::CaptureStderr();
  {
    ddp::Tracer t(o);
    for (int i = 0; i < 10; ++i) ddp::TraceSpan s(t, ddp::TracePhase::kData);
    EXPECT_EQ(t.dropped(), 6u);
  }
  const std::string warned = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(warned.find("6 records dropped; raise DDPRUN_TRACE_CAPACITY"), std::string::npos) << warned;
  const TraceFile f = read_trace(o.file);
  EXPECT_EQ(f.records.size(), 4u);
  EXPECT_EQ(f.header.next - f.header.capacity, 6u);
  EXPECT_EQ(fs::file_size(o.file), sizeof(ch::TraceHeader) + 4 * sizeof(ch::TraceRecord));
}

TEST_F(TraceTest, TwoThreadsRecordEveryRecordOnce) {
  auto o = options();
  o.capacity = 200000;
  {
    ddp::Tracer t(o);
    t.step(0);
    std::latch start(2);  // both write at once
    auto writer = [&](ddp::TraceTrack track) {
      start.arrive_and_wait();
      for (int i = 0; i < 50000; ++i) ddp::TraceSpan s(t, ddp::TracePhase::kAllReduce, track, i);
    };
    std::thread a(writer, ddp::TraceTrack::kMain), b(writer, ddp::TraceTrack::kComm);
    a.join();
    b.join();
    EXPECT_EQ(t.dropped(), 0u);
  }
  const TraceFile f = read_trace(o.file);
  std::vector<int> seen[2] = {std::vector<int>(50000), std::vector<int>(50000)};
  for (const auto& r : f.records) {
    if (r.phase == uint16_t(ddp::TracePhase::kAllReduce)) ++seen[r.track][r.arg];
  }
  for (int track = 0; track < 2; ++track) {
    for (int i = 0; i < 50000; ++i) ASSERT_EQ(seen[track][i], 1) << "track " << track << " arg " << i;
  }
  EXPECT_EQ(f.records.size(), 100001u);  // and the step
}

TEST_F(TraceTest, OffTracerWritesNothing) {
  ddp::Tracer t;
  EXPECT_FALSE(t.on());
  EXPECT_FALSE(t.recording());
  t.step(0);
  { ddp::TraceSpan s(t, ddp::TracePhase::kForward); }
  t.record(ddp::TracePhase::kData, ddp::TraceTrack::kMain, 1, 2, 0);
  EXPECT_EQ(t.dropped(), 0u);
  EXPECT_FALSE(fs::exists(dir_));
}

TEST_F(TraceTest, LaunchInfoReadsTheTraceVariables) {
  std::map<std::string, std::string> env{{"DDPRUN_TRACE_FILE", "/x/attempt_0/rank0.trace"},
                                         {"DDPRUN_TRACE_STEPS", "10:20"},
                                         {"DDPRUN_TRACE_CAPACITY", "100"},
                                         {"DDPRUN_PROGRESS_BY_AGENT", "1"}};
  auto lookup = [&](const std::string& k) -> std::optional<std::string> {
    auto it = env.find(k);
    return it == env.end() ? std::nullopt : std::optional(it->second);
  };
  auto info = ddp::read_launch_info(lookup);
  EXPECT_EQ(info.trace_file, "/x/attempt_0/rank0.trace");
  EXPECT_EQ(info.trace_first_step, 10);
  EXPECT_EQ(info.trace_end_step, 20);
  EXPECT_EQ(info.trace_capacity, 100u);
  EXPECT_TRUE(info.progress_by_agent);
  env["DDPRUN_TRACE_STEPS"] = "ten";
  EXPECT_THROW(ddp::read_launch_info(lookup), ddp::ConfigError);
  env["DDPRUN_TRACE_STEPS"] = ":";
  env["DDPRUN_TRACE_CAPACITY"] = "0";
  EXPECT_THROW(ddp::read_launch_info(lookup), ddp::ConfigError);
}

}  // namespace
