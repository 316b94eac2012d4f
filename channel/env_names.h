// The agent ↔ worker contract, part 1: the environment variables. The agent
// (agent/processes/env.cpp) writes them, worker_lib (launch_info.cpp, standby.cpp,
// world.cpp) reads them; both name them only through these constants.
// Dependency-free: no gRPC, no LibTorch.
#pragma once

namespace ddprun::channel {

// What torchrun sets (PyTorch scripts read these).
inline constexpr const char* kRank = "RANK";
inline constexpr const char* kLocalRank = "LOCAL_RANK";
inline constexpr const char* kWorldSize = "WORLD_SIZE";
inline constexpr const char* kLocalWorldSize = "LOCAL_WORLD_SIZE";
inline constexpr const char* kGroupRank = "GROUP_RANK";
inline constexpr const char* kGroupWorldSize = "GROUP_WORLD_SIZE";
inline constexpr const char* kRoleRank = "ROLE_RANK";
inline constexpr const char* kRoleWorldSize = "ROLE_WORLD_SIZE";
inline constexpr const char* kRoleName = "ROLE_NAME";
inline constexpr const char* kMasterAddr = "MASTER_ADDR";
inline constexpr const char* kMasterPort = "MASTER_PORT";
inline constexpr const char* kRestartCount = "TORCHELASTIC_RESTART_COUNT";
inline constexpr const char* kMaxRestarts = "TORCHELASTIC_MAX_RESTARTS";
inline constexpr const char* kRunId = "TORCHELASTIC_RUN_ID";
inline constexpr const char* kUseAgentStore = "TORCHELASTIC_USE_AGENT_STORE";
inline constexpr const char* kSignalsToHandle = "TORCHELASTIC_SIGNALS_TO_HANDLE";  // torchrun 2.x
// worker_lib without ddprun: the TCPStore protocol to speak (1 or 2), instead
// of asking the server.
inline constexpr const char* kTcpStoreProtocol = "DDPRUN_TCPSTORE_PROTOCOL";
inline constexpr const char* kErrorFile = "TORCHELASTIC_ERROR_FILE";

// What worker_lib reads besides.
inline constexpr const char* kRdzvAddr = "DDPRUN_RDZV_ADDR";      // host:port of the rendezvous
// Who may call it: the job's token (also the launcher's input), and TLS
// files (the CA that signed the rendezvous' certificate; a client pair).
inline constexpr const char* kRdzvToken = "DDPRUN_RDZV_TOKEN";
inline constexpr const char* kRdzvTlsCa = "DDPRUN_RDZV_TLS_CA";
inline constexpr const char* kRdzvTlsCert = "DDPRUN_RDZV_TLS_CERT";
inline constexpr const char* kRdzvTlsKey = "DDPRUN_RDZV_TLS_KEY";
inline constexpr const char* kJobId = "DDPRUN_JOB_ID";
inline constexpr const char* kRound = "DDPRUN_ROUND";             // the store keys' round
inline constexpr const char* kLocalAddr = "DDPRUN_LOCAL_ADDR";    // where Gloo binds
inline constexpr const char* kNcclId = "DDPRUN_NCCL_ID";          // hex ncclUniqueId
inline constexpr const char* kHeartbeatFile = "DDPRUN_HEARTBEAT_FILE";
inline constexpr const char* kHeartbeatSlot = "DDPRUN_HEARTBEAT_SLOT";
inline constexpr const char* kStandbyFd = "DDPRUN_STANDBY_FD";
inline constexpr const char* kTimeoutS = "DDPRUN_TIMEOUT_S";      // collective timeout
// CPU tensors' communicator: auto (shared memory when every rank of a group
// is on one node, else Gloo), shm or gloo.
inline constexpr const char* kCpuComm = "DDPRUN_CPU_COMM";
// Shared memory's slot per rank, in KiB (how much of a tensor moves at a time).
inline constexpr const char* kShmSlotKb = "DDPRUN_SHM_SLOT_KB";
// --trace: the file this worker records into (channel/trace_format.h), the
// step window "A:B" (steps A..B-1; either side may be empty), and the most
// records it keeps.
inline constexpr const char* kTraceFile = "DDPRUN_TRACE_FILE";
inline constexpr const char* kTraceSteps = "DDPRUN_TRACE_STEPS";
inline constexpr const char* kTraceCapacity = "DDPRUN_TRACE_CAPACITY";
// Progress (heartbeat_layout.h): set when ddprun shows rank 0's progress
// itself, so worker_lib's own progress printer stays quiet.
inline constexpr const char* kProgressByAgent = "DDPRUN_PROGRESS_BY_AGENT";
// Checkpointless recovery (heartbeat_layout.h, the heal words): set to 1
// when the agent replaces a failed worker of a program that can heal
// (ddp::Healer) instead of restarting them all; its absence means a failed
// peer ends the attempt as before. A replacement also gets the heal
// generation it joins (its communicators' store keys are that generation's).
inline constexpr const char* kHeals = "DDPRUN_HEALS";
inline constexpr const char* kHealGeneration = "DDPRUN_HEAL_GENERATION";
// --verify-every N: the ranks compare their parameters' fingerprints every
// N optimizer steps of a Healer, and the whole state after every heal (0:
// never; unset: not launched by ddprun, never).
inline constexpr const char* kVerifyEvery = "DDPRUN_VERIFY_EVERY";
// This node's hardware kind, as the user names it (nodes of different kinds
// may round differently: their replicas' differences are told once, never
// repaired). Unset: the CPU's model name, and the GPU's.
inline constexpr const char* kHardwareKind = "DDPRUN_HARDWARE_KIND";

// Which interface PyTorch's Gloo and NCCL bind to (multi-node jobs).
inline constexpr const char* kGlooSocketIfname = "GLOO_SOCKET_IFNAME";
inline constexpr const char* kNcclSocketIfname = "NCCL_SOCKET_IFNAME";

// Per-job variables an outer ddprun may have left in the environment; a
// job never inherits them.
inline constexpr const char* kNeverInherited[] = {kNcclId,    kHeartbeatFile, kHeartbeatSlot, kStandbyFd,
                                                  kTraceFile, kTraceSteps,    kProgressByAgent, kHeals,
                                                  kHealGeneration, kVerifyEvery};

}  // namespace ddprun::channel
