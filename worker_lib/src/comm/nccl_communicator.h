// Collectives on CUDA tensors over NCCL, with the unique id the rendezvous
// handed out for this round. Built only where NCCL and the CUDA runtime are
// found (DDPRUN_HAVE_NCCL); ddp::nccl_available() says which.
//
// Work runs on a stream of the communicator's own, ordered by CUDA events
// after the caller's current stream and before its later work; every
// blocking call waits for its work to finish (without spinning), aborting
// the communicator when the timeout passes. all_reduce_async does not wait:
// its Work orders the caller's stream after it on the device, and a
// watchdog thread aborts the communicator on an NCCL error or a timeout
// (the next call then throws). The logic lives in NcclRunner (nccl_runner.h).
#pragma once

#include <memory>
#include <string>

#include "ddp/communicator.h"
#include "base/heartbeat.h"

namespace ddp {

// Whether this build of worker_lib has the NCCL communicator.
bool nccl_available();

struct NcclOptions {
  std::string unique_id;  // the ncclUniqueId bytes (DDPRUN_NCCL_ID)
  int rank = 0;
  int size = 1;
  int device = 0;  // CUDA device index, normally LOCAL_RANK
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
  std::shared_ptr<Heartbeat> heartbeat;  // beaten around every collective (may be null)
};

// A fresh ncclUniqueId's bytes, made in this process (which must then live
// until the group's ranks have connected). Throws CollectiveError without NCCL.
std::string nccl_unique_id();

// Throws CollectiveError when NCCL is not built in or initialisation fails.
std::unique_ptr<Communicator> make_nccl_communicator(const NcclOptions& options);

}  // namespace ddp
