// A worker for `ddprun --trace` tests that needs no LibTorch: it writes a
// trace file in the format of channel/trace_format.h to DDPRUN_TRACE_FILE,
// as worker_lib's recorder would, for a made-up training loop.
//   trace_writer STEPS [FAIL_RANK]
// Each step (~4 ms of real time) has data, forward and backward on the main
// track, two bucket all-reduces on the comm track (bucket 1 inside
// backward, bucket 0 starting in it and ending after), a finalize wait and
// the optimizer. In the first attempt (TORCHELASTIC_RESTART_COUNT 0), rank
// FAIL_RANK writes two steps and exits with 3. It prints the trace
// variables it got.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "support/trace_files.h"

namespace {

using ddprun::channel::TracePhase;
using ddprun::channel::TraceTrack;
using ddptest::trace_record;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: trace_writer STEPS [FAIL_RANK]\n");
    return 2;
  }
  const int steps = std::atoi(argv[1]);
  const int fail_rank = argc > 2 ? std::atoi(argv[2]) : -1;
  const int rank = std::atoi(env("RANK").c_str());
  const int attempt = std::atoi(env("TORCHELASTIC_RESTART_COUNT").c_str());
  const std::string file = env("DDPRUN_TRACE_FILE");
  std::printf("trace file: %s\ntrace steps: %s\n", file.c_str(), env("DDPRUN_TRACE_STEPS").c_str());
  std::fflush(stdout);
  if (file.empty()) return 0;

  const bool fails = attempt == 0 && rank == fail_rank;
  std::vector<ddprun::channel::TraceRecord> records;
  constexpr int64_t us = 1000;
  const int64_t init = now_ns();
  records.push_back(trace_record(TracePhase::kInit, TraceTrack::kMain, -1, init, init + 200 * us));
  std::this_thread::sleep_until(std::chrono::steady_clock::time_point(std::chrono::nanoseconds(init + 300 * us)));
  for (int s = 0; s < steps; ++s) {
    if (fails && s == 2) break;
    // Offsets in the step: data 0-200, forward 200-1200, backward 1200-2800,
    // all-reduce bucket 1 1600-2400, bucket 0 2400-3200, finalize wait
    // 2800-3200, optimizer 3200-3800; the step ends at 4000.
    const int64_t b = now_ns();
    records.push_back(trace_record(TracePhase::kStep, TraceTrack::kMain, s, b, b + 4000 * us));
    records.push_back(trace_record(TracePhase::kData, TraceTrack::kMain, s, b, b + 200 * us));
    records.push_back(trace_record(TracePhase::kForward, TraceTrack::kMain, s, b + 200 * us, b + 1200 * us));
    records.push_back(trace_record(TracePhase::kBackward, TraceTrack::kMain, s, b + 1200 * us, b + 2800 * us));
    records.push_back(trace_record(TracePhase::kAllReduce, TraceTrack::kComm, s, b + 1600 * us, b + 2400 * us, 1));
    records.push_back(trace_record(TracePhase::kAllReduce, TraceTrack::kComm, s, b + 2400 * us, b + 3200 * us, 0));
    records.push_back(trace_record(TracePhase::kFinalizeWait, TraceTrack::kMain, s, b + 2800 * us, b + 3200 * us));
    records.push_back(trace_record(TracePhase::kOptimizer, TraceTrack::kMain, s, b + 3200 * us, b + 3800 * us));
    // The made-up work takes its time, so attempts never overlap.
    std::this_thread::sleep_until(std::chrono::steady_clock::time_point(std::chrono::nanoseconds(b + 4000 * us)));
  }
  ddptest::write_trace_file(file, rank, attempt, records, 1024);
  if (fails) {
    std::fprintf(stderr, "rank %d fails on purpose\n", rank);
    return 3;
  }
  return 0;
}
