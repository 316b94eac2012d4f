// What one trace span costs the thread that takes it, off and on: the
// number bench/trace_overhead.py multiplies by the records a step writes to
// estimate --trace's share of a step without the run-to-run noise of whole
// launches. Prints "off_ns ON_ns" per span (median of 5 rounds of N spans).
//
//   trace_span_cost [N]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <unistd.h>
#include <vector>

#include "ddp/trace.h"

namespace {

// Median ns per span over 5 rounds of n spans, each in its own step window.
double per_span_ns(ddp::Tracer& tracer, long n) {
  std::vector<double> rounds;
  for (int r = 0; r < 5; ++r) {
    tracer.step(r);
    const int64_t t0 = ddp::Tracer::now_ns();
    for (long i = 0; i < n; ++i) {
      ddp::TraceSpan span(tracer, ddp::TracePhase::kForward);
    }
    rounds.push_back(static_cast<double>(ddp::Tracer::now_ns() - t0) / static_cast<double>(n));
  }
  std::sort(rounds.begin(), rounds.end());
  return rounds[2];
}

}  // namespace

int main(int argc, char** argv) {
  const long n = argc > 1 ? std::atol(argv[1]) : 200000;
  const std::string dir = std::filesystem::temp_directory_path() / ("trace-span-cost-" + std::to_string(getpid()));
  double off = 0, on = 0;
  {
    ddp::Tracer tracer;  // no file: off
    off = per_span_ns(tracer, n);
  }
  {
    ddp::TraceOptions o;
    o.file = dir + "/attempt_0/rank0.trace";
    o.capacity = static_cast<uint64_t>(n) * 5 + 16;  // every span fits: no drop path
    ddp::Tracer tracer(o);
    on = per_span_ns(tracer, n);
  }
  std::filesystem::remove_all(dir);
  std::printf("%.2f %.2f\n", off, on);
  return 0;
}
