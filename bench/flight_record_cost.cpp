// What the flight record costs a collective: the two lock-free writes
// (flight_begin, flight_end, with their clock reads) SwappableCommunicator
// makes around each one. Prints "ns_per_collective N" (median of 5 rounds
// of N records); bench/hang_diagnosis.py sets it against the cheapest
// all_reduce measured in the same run.
//
//   flight_record_cost [N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "channel/flight_record.h"

namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

int main(int argc, char** argv) {
  const long n = argc > 1 ? std::atol(argv[1]) : 2000000;
  static ddprun::channel::FlightRing ring{};
  std::vector<double> rounds;
  for (int r = 0; r < 5; ++r) {
    const int64_t t0 = now_ns();
    for (long i = 0; i < n; ++i) {
      const uint64_t id = ddprun::channel::flight_begin(&ring, ddprun::channel::FlightOp::kAllReduce,
                                                        static_cast<uint64_t>(i), 4096, 0, 0, now_ns());
      ddprun::channel::flight_end(&ring, id, false, now_ns());
    }
    rounds.push_back(static_cast<double>(now_ns() - t0) / static_cast<double>(n));
  }
  std::sort(rounds.begin(), rounds.end());
  std::printf("ns_per_collective %.1f\n", rounds[2]);
  return 0;
}
