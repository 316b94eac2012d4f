// Which communicator a group's CPU tensors get, and connecting it: shared
// memory when every member is on one node, Gloo when every member is on a
// node of its own, and both (TwoLevelCommunicator) in between, as
// DDPRUN_CPU_COMM (LaunchInfo::cpu_comm) allows.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "ddp/communicator.h"
#include "ddp/launch_info.h"
#include "base/heartbeat.h"
#include "rendezvous/store/store.h"

namespace ddp {

struct CpuCommSetup {
  const LaunchInfo* info = nullptr;  // cpu_comm, shm_slot_bytes, local_addr, group_rank
  std::chrono::milliseconds timeout{0};
  std::shared_ptr<Heartbeat> heartbeat;
};

// Collective over `store` (prefixed per group and round): member `me` of
// `size`; `what` names the group in messages ("the world", "group 'dp'").
// Throws ConfigError (DDPRUN_CPU_COMM=shm across nodes), CollectiveError.
std::unique_ptr<Communicator> connect_cpu_communicator(ddprun::Store& store, int me, int size,
                                                       const std::string& what, const CpuCommSetup& setup);

}  // namespace ddp
