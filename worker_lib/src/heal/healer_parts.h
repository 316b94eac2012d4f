// What the Healer's files share (healer.cpp: the step and the heal;
// state_transfer.cpp: the state sent to the ranks behind; replica_verify.cpp:
// the replicas compared). Internal to worker_lib.
#pragma once

#include <ATen/ATen.h>

#include <chrono>

#include "ddp/healer.h"

namespace ddp::healer_parts {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// The sampler's epoch and global position and the counters, as one int64
// tensor: [epoch, position, counters...] (-1 for a sampler that is not
// there). The global position holds in any sharding: a rank that takes it
// reads on where the sender's world stands, at any world size.
at::Tensor pack_counters(const Healable& s);
void unpack_counters(const at::Tensor& t, Healable& s);

}  // namespace ddp::healer_parts
