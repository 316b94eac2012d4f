// The environment every worker gets: what torchrun sets, so unmodified
// PyTorch scripts work, plus DDPRUN_* for worker_lib.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "rendezvous/wire/security.h"

namespace ddprun {

struct WorkerIdentity {
  int rank = 0;
  int local_rank = 0;
  int local_world_size = 1;
  int world_size = 1;
  int group_rank = 0;        // node rank
  int group_world_size = 1;  // number of nodes
};

struct JobEnv {
  std::string role = "default";
  std::string master_addr = "127.0.0.1";
  int master_port = 0;
  int restart_count = 0;
  int max_restarts = 0;
  std::string run_id;
  std::string rdzv_address;  // host:port of the rendezvous service
  RendezvousAuth rdzv_auth;  // the token and TLS files workers call it with
  int64_t round = 0;
  std::string nccl_id;  // raw bytes; empty when none
  std::string local_addr;
  std::string local_ifname;  // empty: leave the *_SOCKET_IFNAME variables alone
  std::string heartbeat_file;  // empty: no hang detection
  // Put first on PYTHONPATH (channel/python_startup.h); empty: nothing.
  std::string python_startup_dir;
  // Put next on PYTHONPATH: the folder holding the ddprun package
  // (python/ddprun: ddprun.Healer); empty: none found.
  std::string python_package_dir;
  // The agent shows rank 0's progress (DDPRUN_PROGRESS_BY_AGENT=1 to the
  // worker of global rank 0 only).
  bool progress_by_agent = false;
  // The agent replaces a failed worker of a program that can heal
  // (DDPRUN_HEALS=1, channel/env_names.h).
  bool heals = false;
  // > 0: the workers start as replacements in this heal generation (their
  // node took over a lost one's ranks; DDPRUN_HEAL_GENERATION).
  uint32_t heal_generation = 0;
  // --verify-every (DDPRUN_VERIFY_EVERY): 0 never.
  int verify_every = 0;
  bool agent_store = false;    // the launcher hosts the c10d store on MASTER_PORT
  // --trace: this node's folder in the trace folder (empty: no tracing); each
  // worker records into channel::trace_rank_file(trace_node_dir, attempt, rank).
  std::string trace_node_dir;
  int attempt = 0;
  std::string trace_steps;  // "A:B"; empty: every step
};

// The variables ddprun sets for one worker (not the inherited ones).
std::map<std::string, std::string> worker_variables(const WorkerIdentity& id, const JobEnv& job,
                                                    const std::string& error_file);

// The full environment of a worker: `inherited` (KEY=VALUE entries, e.g. the
// launcher's environ) with `vars` replacing or adding entries. OMP_NUM_THREADS
// is set to 1 when the launcher runs several workers and the user did not set it;
// TORCH_NCCL_ASYNC_ERROR_HANDLING is set to 1 unless set already (torchrun
// 2.x does: a collective stuck on a dead peer then fails instead of
// hanging); the deprecated NCCL_ASYNC_ERROR_HANDLING is passed through, never
// added.
std::vector<std::string> merge_environment(const std::vector<std::string>& inherited,
                                           const std::map<std::string, std::string>& vars,
                                           int local_world_size);

// --virtual-local-rank: LOCAL_RANK becomes 0 and CUDA_VISIBLE_DEVICES names
// only the worker's own GPU (entry local_rank of the inherited list, or
// local_rank when none is set), as torchrun does.
void apply_virtual_local_rank(std::map<std::string, std::string>& vars,
                              const std::vector<std::string>& inherited, int local_rank);

// The process environment as KEY=VALUE entries.
std::vector<std::string> current_environment();

}  // namespace ddprun
