// How a reduction combines the ranks' values. No LibTorch here: the
// shared-memory collectives (src/comm/shm_group.h) use it without ATen.
//
//   world->all_reduce(loss, ddp::ReduceOp::kAvg);  // kSum, kAvg, kMax, kMin
#pragma once

#include <string>

namespace ddp {

enum class ReduceOp { kSum, kAvg, kMax, kMin };

std::string to_string(ReduceOp op);

}  // namespace ddp
