// Turns checked command-line options and facts about this machine into the
// agent's configuration: how many workers, which program with which argv,
// where the rendezvous listens.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "agent/agent_config.h"
#include "launcher/cli.h"

namespace ddprun {

struct HostFacts {
  int cpu_count = 1;
  int gpu_count = 0;
  std::string hostname = "localhost";
  std::string path_env;               // $PATH
  std::string python = "python3";     // see choose_python
  std::string python_source = "python3 from PATH";  // how it was chosen
  std::string line_prefix_template;   // $TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE
  std::string rdzv_token;             // $DDPRUN_RDZV_TOKEN
  std::vector<std::string> extra_program_dirs;  // searched after PATH (ddprun's own folder)
  std::vector<std::string> environment;         // KEY=VALUE
};

// The interpreter for .py entrypoints, from environment entries (KEY=VALUE):
// $PYTHON_EXEC (torchrun 2.x), else $DDPRUN_PYTHON, else the active
// virtualenv's ($VIRTUAL_ENV/bin/python, when executable), else the Python
// whose environment a wheel installed ddprun into (`program_dir`, ddprun's
// folder, is PREFIX/lib/pythonX.Y/site-packages/ddprun.scripts: then
// PREFIX/bin/pythonX.Y, when executable: a venv's own, as torchrun's is its
// script's interpreter), else python3 from PATH. Returns {interpreter, how it
// was chosen}.
std::pair<std::string, std::string> choose_python(const std::vector<std::string>& environment,
                                                  const std::string& program_dir = "");

// Reads the facts from this process and machine.
HostFacts gather_host_facts();

// Visible NVIDIA GPUs: /dev/nvidiaN devices, limited by CUDA_VISIBLE_DEVICES.
int count_gpus(const char* cuda_visible_devices);

// N, auto, gpu or cpu → a worker count. Throws UsageError.
int resolve_nproc(const std::string& spec, const HostFacts& facts);

struct LaunchPlan {
  AgentConfig agent;
  // Where the rendezvous is: a private one on loopback (one node, no
  // --rdzv-endpoint), or the endpoint every node was given.
  bool private_rdzv = true;
  std::string rdzv_listen_host = "127.0.0.1";
  int rdzv_listen_port = 0;  // 0: pick a free port
  std::string rdzv_host_mode = "auto";  // host it here: auto, on, off
  ServiceLimits rdzv_limits;            // when this node hosts it
  // --rdzv-backend etcd: the members of the etcd cluster that elects which
  // agent serves the job and keeps its state (control_plane.h). Every agent
  // then runs a rendezvous service on its own address (a free port), and
  // its workers reach the leader through it.
  std::vector<std::string> etcd_endpoints;
  // --rdzv-backend embedded (embedded_control_plane.h): the same, with the
  // election and the state in a Raft group among the job's first agents.
  bool embedded_control_plane = false;
  // With it, the nodes --rdzv-endpoint lists (HOST:PORT; the first is
  // rdzv_listen_host:rdzv_listen_port): each serves at its entry, and a late
  // node finds the job at any of them.
  std::vector<std::pair<std::string, int>> rdzv_peers;
  // --metrics-port: where /metrics listens (-1: off) and the bearer token
  // it asks for. Off the loopback only with the job's own token (the
  // rendezvous's, which Prometheus then sends); with TLS on the rendezvous,
  // the loopback only (/metrics speaks no TLS).
  int metrics_port = -1;
  std::string metrics_host = "127.0.0.1";
  std::string metrics_token;
  // Said once logging is up (things that work but should be known).
  std::vector<std::string> warnings;
};

// Throws UsageError (bad combination, program not found).
LaunchPlan make_launch_plan(const CliOptions& options, const HostFacts& facts);

// A TCP port that was free a moment ago (bound to port 0, then released).
int pick_free_port();

// 8 random hex digits.
std::string random_run_id();

}  // namespace ddprun
