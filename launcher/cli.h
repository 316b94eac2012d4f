// ddprun's command line: torchrun's flags (both --dash-names and
// --underscore_names), parsed and checked. Every bad value becomes one line
// naming the flag; the launcher prints it and exits with code 2.
#pragma once

#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "agent/agent_config.h"
#include "launcher/auth_options.h"
#include "launcher/env_defaults.h"
#include "rendezvous/store/limits.h"

namespace ddprun {

// A bad command line. what() is the one-line message (without "ddprun: ").
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// --hang-timeout auto: the learned limit is never below this many seconds.
inline constexpr double kDefaultHangFloorS = 15;

// A job whose --nnodes maximum is at least this, on torchrun's default
// backend (c10d), runs the embedded control plane (--rdzv-backend embedded).
inline constexpr int kEmbeddedFromNodes = 3;

struct CliOptions {
  std::string nproc = "1";  // N, auto, gpu or cpu; resolved by the launcher
  int min_nodes = 1;
  int max_nodes = 1;
  int node_rank = -1;
  bool standalone = false;
  std::string rdzv_backend;  // "" (ddprun's own), embedded (the default from 3 nodes), or etcd (also etcd-v2)
  // --rdzv-backend etcd: the etcd members (host:port), from --rdzv-endpoint.
  std::vector<std::string> etcd_endpoints;
  std::string rdzv_host;  // from --rdzv-endpoint (etcd: its first member); empty when not given
  int rdzv_port = 0;
  // --rdzv-endpoint's nodes as (host, port) (embedded: several may be
  // listed; the first is rdzv_host:rdzv_port).
  std::vector<std::pair<std::string, int>> rdzv_peers;
  std::string rdzv_id;
  double join_timeout_s = 600;  // --rdzv-conf join_timeout
  double last_call_s = 1;       // --rdzv-conf last_call_timeout
  double keep_alive_s = 0.25;   // --rdzv-conf keep_alive_interval
  double lease_s = 3;           // --rdzv-conf lease_timeout (or interval x keep_alive_max_attempt)
  std::string rdzv_host_mode = "auto";  // --rdzv-host (or --rdzv-conf is_host): auto, on, off
  AuthFlags rdzv_auth;         // --rdzv-token, --rdzv-token-file, --rdzv-tls-*
  ServiceLimits rdzv_limits;   // --rdzv-conf max_*, idle_timeout (when hosting)
  int max_restarts = 0;
  int max_heals = kDefaultMaxHeals;  // --max-heals: replacements per rank while the others go on
  int verify_every = kDefaultVerifyEvery;  // --verify-every: steps between comparisons of the replicas (0: never)
  double monitor_interval_s = 0.1;
  double stop_timeout_s = 10;
  double hang_timeout_s = 0;  // --hang-timeout SECONDS; 0: none set
  // --hang-timeout auto[:SECONDS] (the default): learn the limit, at least
  // this long; 0: not learned (a number or 0 was given).
  double hang_auto_floor_s = kDefaultHangFloorS;
  double progress_interval_s = 10;  // 0: no progress lines (the terminal's status line stays)
  bool standby = false;     // --standby: the default with --max-restarts > 0
  bool no_standby = false;  // --no-standby
  std::string log_dir;
  std::string trace_dir;    // --trace: every rank's step phases, merged into DIR/trace.json
  std::string trace_steps;  // --trace-steps A:B (checked); empty: every step
  StdSelection tee;
  StdSelection redirects;
  std::string role = "default";
  std::string master_addr = "127.0.0.1";
  int master_port = 0;  // 0: a free port is picked
  // --metrics-port (DDPRUN_METRICS_PORT): where /metrics is served; 0: a
  // free port (printed); -1: not served.
  int metrics_port = -1;
  std::string local_addr;
  bool no_python = false;
  bool module = false;
  bool run_path = false;              // --run-path: a .py path under Python, even with --no-python
  std::string start_method = "spawn";  // accepted (spawn, fork, forkserver); workers are exec'd
  std::string event_log_handler = "null";  // accepted; ddprun's events go to its own log
  std::string logs_specs;             // accepted: torchrun's Python plugins cannot load here
  std::vector<int> local_ranks_filter;  // local ranks whose output reaches the console; empty: all
  std::string line_prefix_template;   // --log-line-prefix-template; empty: the environment's or rank's
  std::vector<std::string> duplicate_stdout_filters;  // lines copied to filtered_stdout.log
  std::vector<std::string> duplicate_stderr_filters;
  std::vector<std::string> signals_to_handle;  // as given; ddprun always forwards its six
  bool virtual_local_rank = false;    // LOCAL_RANK=0, CUDA_VISIBLE_DEVICES one GPU per worker
  std::string numa_binding;           // "", node, socket, exclusive or core-complex
  std::string straggler_action = "warn";  // warn or replace
  bool verbose = false;
  bool quiet = false;
  std::string entrypoint;
  std::vector<std::string> args;  // for the workers
};

struct CliResult {
  enum Kind { kRun, kHelp, kVersion, kCompletion };
  Kind kind = kRun;
  std::string text;  // help or version text, or the completion script
  CliOptions options;
};

// args: the command line without argv[0]; defaults: arguments from the
// environment (PET_*), taken as if they came first, so the command line
// wins; an error in one names its source. Throws UsageError.
CliResult parse_command_line(const std::vector<std::string>& args,
                             const std::vector<DefaultArg>& defaults = {});

// Whether the entrypoint runs under Python (-m, or a .py file without --no-python).
bool runs_under_python(const CliOptions& o);

// Applies one --rdzv-conf KEY=VALUE that sets a limit of the rendezvous
// service (max_value_bytes, max_job_keys, max_job_bytes, max_jobs,
// max_waits_per_client, idle_timeout); false for other keys. Throws UsageError.
bool parse_limit_conf(const std::string& key, const std::string& value, ServiceLimits& limits);

// Parses "3" or "0:1,1:2" for --tee/--redirects (flag names the option).
StdSelection parse_std_selection(const std::string& flag, const std::string& value);

// Makes an output folder (--trace DIR, --log-dir DIR) and checks that this
// process can write there and that no other user can: a folder another
// user owns, or one that others may write to, would let them plant links
// or files where ddprun writes. Throws UsageError naming the flag.
void check_output_dir(const std::string& flag, const std::string& dir);

}  // namespace ddprun
