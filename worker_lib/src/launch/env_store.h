// The store of a job started by a launcher that only sets MASTER_ADDR,
// MASTER_PORT, RANK and WORLD_SIZE (torchrun, a Slurm script, by hand):
// PyTorch's TCPStore protocol at MASTER_ADDR:MASTER_PORT. No LibTorch here.
#pragma once

#include <chrono>
#include <memory>

#include "ddp/launch_info.h"
#include "rendezvous/store/store.h"

namespace ddp {

// With TORCHELASTIC_USE_AGENT_STORE=True the launcher hosts the store and
// every rank is a client; otherwise rank 0 hosts it on MASTER_PORT (as
// PyTorch's env:// rendezvous does) and the others connect, retrying after
// short pauses until timeout. Keys live under "/worker/attempt_<restart>"
// as PyTorch's, so a restart starts from fresh ones. When DDPRUN_LOCAL_ADDR
// is unset, info.local_addr becomes the address the connection to the
// store leaves from (where peers on other hosts can reach this rank).
// DDPRUN_TCPSTORE_PROTOCOL=1|2 skips asking the server its version.
// Throws ConfigError naming the variable that is missing or wrong.
std::shared_ptr<ddprun::Store> connect_env_store(LaunchInfo& info, std::chrono::milliseconds timeout,
                                                 const EnvLookup& env);

}  // namespace ddp
