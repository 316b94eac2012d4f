// Everything the agent needs to run one node's workers; the launcher fills it
// from the command line.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "rendezvous/store/types.h"
#include "rendezvous/wire/security.h"

namespace ddprun {

// --max-heals' default: replacements per rank while the others go on.
inline constexpr int kDefaultMaxHeals = 3;

// --verify-every's default: optimizer steps between comparisons of the
// ranks' parameters, the fewest whose cost stays within 0.5% of a step of
// train, gpt --model tiny and examples/python/ddp_heal.py on a 2-core CPU
// (bench/verify_cost.py; docs/fault-tolerance.md has the figures).
inline constexpr int kDefaultVerifyEvery = 100;

// A stream selection per local rank, as torchrun's --redirects/--tee take it:
// one mask for all ("3") or masks for some local ranks ("0:1,1:2").
struct StdSelection {
  int all = 0;                       // kNone/kStdout/kStderr/kBoth for every rank
  std::map<int, int> by_local_rank;  // overrides `all` where present

  int for_local_rank(int local_rank) const {
    auto it = by_local_rank.find(local_rank);
    return it == by_local_rank.end() ? all : it->second;
  }
};

struct AgentConfig {
  // The worker program: resolved path and its argv (argv[0] first).
  std::string program;
  std::vector<std::string> argv;
  int nproc = 1;
  // For a .py entrypoint: the interpreter and how it was chosen, for the
  // failure summary ("/usr/bin/python3 (PYTHON_EXEC)"); "" otherwise.
  std::string python;

  // Rendezvous.
  std::string run_id;
  std::string node_id;  // this agent's id in the job; "" makes one: host:pid
  std::string rdzv_address;  // host:port, handed to workers
  RendezvousAuth rdzv_auth;  // token and TLS files, for the agent and its workers
  RoundSettings rdzv;
  int node_rank = -1;  // -1: assigned by the rendezvous
  bool wants_nccl_id = false;
  std::chrono::milliseconds join_timeout{std::chrono::minutes(10)};
  // Multi-node jobs hold a lease on the rendezvous by keep-alive; 0 turns
  // it off (one-node jobs, whose rendezvous lives in the same process).
  std::chrono::milliseconds keep_alive_interval{250};
  std::chrono::milliseconds lease_timeout{0};
  // With a control plane: how long the job may be without a serving node
  // while one takes over (the etcd term, two Raft election timeouts). The
  // agent gives up on the rendezvous only after this and a lease without
  // an answer: a takeover is not a lost rendezvous, and the successor
  // starts every node's lease afresh.
  std::chrono::milliseconds takeover_allowance{0};
  // This agent hosts the rendezvous, so it stays until every node has left.
  bool hosts_rendezvous = false;
  // With the embedded control plane: why this node may not join again (""
  // when it may): it has been out of a majority's reach for longer than a
  // lease (a partition left it on the smaller side).
  std::function<std::string()> fenced;
  // With a control plane: what it says is wrong ("" when nothing is: a
  // leader serves), for the errors of joins and keep-alives, which would
  // otherwise name this agent's own service (etcd out of reach, no listed
  // node answering).
  std::function<std::string()> control_plane_state;
  // The embedded control plane: where this agent takes the job's Raft
  // messages, sent in its joins so that the leader may make it a voter
  // ("": none).
  std::string control_address;
  // host:port this agent listens on while it lives (NodeSpec::probe_address):
  // its own rendezvous service, or a socket kept for it; "": none.
  std::string probe_address;
  // ... and what it learns from keep-alives: the services of the control
  // plane's voters (whom its own service asks when it knows no leader).
  std::function<void(const std::vector<std::string>&)> on_control_candidates;

  // Supervision (restarts: rdzv.max_restarts, counted for the whole job).
  std::chrono::milliseconds monitor_interval{100};
  std::chrono::milliseconds stop_timeout{std::chrono::seconds(10)};  // SIGTERM → SIGKILL
  // A worker whose heartbeat (worker_lib) stops for this long counts as
  // failed; 0: no fixed limit.
  std::chrono::milliseconds hang_timeout{0};
  // --hang-timeout auto: the limit is learned (agent/health/learned_timeout.h),
  // never below this; 0: not learned.
  std::chrono::milliseconds hang_auto_floor{0};
  // Rank 0's progress (heartbeat_layout.h), shown by the agent that runs
  // it: on a terminal stderr a status line under the output; elsewhere a
  // log line this often when the step moved (0: none).
  std::chrono::milliseconds progress_interval{std::chrono::seconds(10)};
  // Keep a warm set of workers for the next restart: worker_lib programs
  // wait in ddp::init(); Python scripts run under standby_argv (an
  // interpreter that imports torch, then waits), warmed standby_warmup
  // after the start since they never beat.
  bool standby = false;
  std::vector<std::string> standby_argv;  // empty: argv
  std::chrono::milliseconds standby_warmup{0};
  // Checkpointless recovery: in a one-node job, a failed worker of a
  // program that can heal (ddp::Healer) is replaced while the others keep
  // running, at most this many times per rank; 0: every failure restarts
  // the group (rdzv.max_restarts).
  int max_heals = kDefaultMaxHeals;
  // --straggler-action replace: a rank found slow is replaced through a
  // heal (within max_heals); otherwise only named.
  bool replace_stragglers = false;
  // Keep one warm standby for a heal's replacement (off with --no-standby).
  bool heal_standby = true;
  // --verify-every: the workers' Healers compare the ranks' parameters
  // every this many optimizer steps, and their whole state after a heal
  // (0: never).
  int verify_every = kDefaultVerifyEvery;

  // Output.
  std::string log_dir;  // per-rank log files when set
  // --trace: workers record into DIR/<node>/attempt_A/rankR.trace
  // (channel/trace_format.h); the agent keeps clock.json there. Empty: off.
  std::string trace_dir;
  // Stacks asked for on a live job are copied here too, whole, for
  // `ddprun status --stacks` (empty: not).
  std::string asked_stacks_copy;
  std::string trace_steps;  // --trace-steps "A:B", handed to workers as it is
  StdSelection redirects;
  StdSelection tee;
  // Local ranks whose output reaches the console (--local-ranks-filter);
  // empty: all. Log files get every rank's.
  std::vector<int> console_local_ranks;
  // The console line prefix (TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE): with
  // ${role_name}, ${rank}, ${local_rank}; empty: "[rankN]:".
  std::string line_prefix_template;
  // Lines holding one of these go also to filtered_std{out,err}.log in the
  // run's log folder (--duplicate-std{out,err}-filters).
  std::vector<std::string> duplicate_filters[2];
  int console_out_fd = 1;
  int console_err_fd = 2;

  // Worker environment.
  std::string role = "default";
  std::string master_addr = "127.0.0.1";
  int master_port = 0;
  std::string local_addr = "127.0.0.1";
  // The interface holding local_addr: PyTorch's Gloo and NCCL bind to it
  // (GLOO_SOCKET_IFNAME, NCCL_SOCKET_IFNAME) unless the user chose one.
  std::string local_ifname;
  std::string host;
  // LOCAL_RANK=0 and one GPU in CUDA_VISIBLE_DEVICES per worker.
  bool virtual_local_rank = false;
  // NUMA binding of each worker: "", node, socket, exclusive, core-complex.
  std::string numa_binding;
  std::vector<std::string> base_env;  // inherited KEY=VALUE entries
};

}  // namespace ddprun
