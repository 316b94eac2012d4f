// The error every communicator throws when a collective cannot complete (a
// timeout, a lost peer, a failed NCCL call). No LibTorch here, so code that
// only waits on collectives (nccl_wait) can throw it without ATen.
//
//   try { world->all_reduce(t, ddp::ReduceOp::kSum); }
//   catch (const ddp::CollectiveError& e) { /* a peer died or the timeout passed */ }
#pragma once

#include <stdexcept>

namespace ddp {

class CollectiveError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace ddp
