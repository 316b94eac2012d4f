// This host's CLOCK_MONOTONIC in nanoseconds: the clock workers stamp their
// flight records and heartbeats with, and the agent's event log, lease
// keeper and reports read.
#pragma once

#include <time.h>

#include <cstdint>

namespace ddprun {

inline int64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

}  // namespace ddprun
