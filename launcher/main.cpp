// ddprun: parse the command line, host the rendezvous (or find it), run this
// node's agent. `ddprun rendezvous` serves a rendezvous on its own;
// `ddprun trace-merge DIR` merges a --trace folder; `ddprun report LOG_DIR`
// draws a job from its event log.
#include <absl/synchronization/mutex.h>
#include <grpc/support/log.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>

#include "agent/agent.h"
#include "agent/processes/env.h"
#include "agent/output/metrics_server.h"
#include "agent/output/status_wiping_sink.h"
#include "launcher/cli.h"
#include "launcher/control_plane_setup.h"
#include "launcher/embedded_control_plane.h"
#include "launcher/env_defaults.h"
#include "launcher/job_file.h"
#include "launcher/net.h"
#include "launcher/plan.h"
#include "launcher/rendezvous_command.h"
#include "launcher/slurm.h"
#include "launcher/status_command.h"
#include "launcher/report_command.h"
#include "launcher/trace_command.h"
#include "rendezvous/server/nccl_unique_id.h"
#include "rendezvous/server/server.h"
#include "tcpstore/server.h"

namespace {

using namespace ddprun;

// gRPC's own log lines (a port already taken while trying to host, a peer
// gone) go to our log at debug level: what matters reaches the user as the
// error of the call that failed.
void grpc_log_to_spdlog(gpr_log_func_args* args) {
  spdlog::debug("grpc: {} ({}:{})", args->message, args->file, args->line);
}

void set_up_logging(bool verbose, bool quiet) {
  gpr_set_log_function(grpc_log_to_spdlog);
  auto logger = spdlog::stderr_color_mt("ddprun");
  // First, so it wipes the agent's progress status line before each of our
  // lines; set up here, before any thread logs (see status_wiping_sink.h).
  logger->sinks().insert(logger->sinks().begin(), std::make_shared<StatusWipingSink>());
  logger->set_pattern("[ddprun %H:%M:%S.%e] %^%l%$: %v");
  spdlog::set_default_logger(logger);
  spdlog::set_level(verbose ? spdlog::level::debug : quiet ? spdlog::level::err : spdlog::level::info);
}

// What the plan names on this machine must be usable before anything
// starts: --local-addr is an interface or one of this machine's addresses
// (Gloo would crash on anything else), and --log-dir can be made and written.
void check_local_setup(LaunchPlan& plan) {
  AgentConfig& a = plan.agent;
  if (!a.local_addr.empty()) {
    // --local-addr may name an interface (hosts with several networks).
    if (std::string addr = address_of_interface(a.local_addr); !addr.empty()) {
      a.local_addr = addr;
    } else {
      std::string resolved;
      try {
        resolved = resolve_address(a.local_addr);
      } catch (const std::exception& e) {
        throw UsageError("--local-addr: '" + a.local_addr +
                         "' is neither an interface nor an address of this machine");
      }
      if (!is_local_address(resolved)) {
        throw UsageError("--local-addr: " + a.local_addr + " (" + resolved +
                         ") is not an address of this machine");
      }
      a.local_addr = resolved;
    }
  }
  if (!a.log_dir.empty()) check_output_dir("--log-dir", a.log_dir);
  if (!a.trace_dir.empty()) check_output_dir("--trace", a.trace_dir);
}

// --trace: the node hosting the rendezvous merges what every node left in
// the folder (each wrote its clock.json before leaving, and it waited for
// them all to leave); the table goes to stderr and DIR/summary.txt.
// Node folders last written before this ddprun started (less 50 ms for
// the file system's coarse, jiffy-grained clock) belong to earlier runs into
// the same folder and are left out.
void merge_trace(const AgentConfig& a, std::filesystem::file_time_type started) {
  if (!a.hosts_rendezvous) {
    spdlog::info("--trace: the node hosting the rendezvous merges {}/trace.json", a.trace_dir);
    return;
  }
  TraceMergeOutcome out = merge_trace_folder(a.trace_dir, a.trace_steps, started - std::chrono::milliseconds(50));
  for (const auto& w : out.warnings) spdlog::warn("--trace: {}", w);
  if (!out.merged) {
    spdlog::warn("--trace: nothing merged: {}", out.error);
    return;
  }
  std::fputs(out.summary.c_str(), stderr);
  spdlog::info("--trace: wrote {}/trace.json (open it in https://ui.perfetto.dev or chrome://tracing)",
               a.trace_dir);
}

// Hosts the rendezvous when this node should: always for a private one; for
// an endpoint when --rdzv-host says on, or (auto) when the endpoint is one
// of this machine's addresses and no other agent took the port first.
// Fills in where the agent and its workers reach it.
std::unique_ptr<RendezvousServer> place_rendezvous(LaunchPlan& plan) {
  AgentConfig& a = plan.agent;
  if (!plan.etcd_endpoints.empty() || plan.embedded_control_plane) return nullptr;  // the control plane's
  if (plan.private_rdzv) {
    // Loopback only, with the job's own token; no TLS needed.
    auto server = std::make_unique<RendezvousServer>(
        ServerOptions{"127.0.0.1", 0, RendezvousAuth{a.rdzv_auth.token, {}}, plan.rdzv_limits},
        make_nccl_unique_id);
    a.rdzv_address = server->address();
    a.hosts_rendezvous = true;
    return server;
  }
  std::string address;
  try {
    address = resolve_address(plan.rdzv_listen_host);
  } catch (const std::exception& e) {
    throw UsageError(std::string("--rdzv-endpoint: ") + e.what());
  }
  a.rdzv_address = with_port(address, plan.rdzv_listen_port);
  if (a.local_addr.empty()) a.local_addr = source_address_towards(address);
  a.local_ifname = interface_of(a.local_addr);
  const bool local = is_local_address(address);
  if (plan.rdzv_listen_port == 0 && (plan.rdzv_host_mode == "off" || !local)) {
    throw UsageError("--rdzv-endpoint " + with_port(plan.rdzv_listen_host, 0) +
                     ": port 0 means a free port of the node that hosts the rendezvous, and this "
                     "node does not host it (" +
                     (plan.rdzv_host_mode == "off" ? std::string("--rdzv-host off")
                                                   : address + " is not one of its addresses") +
                     "); give the port it listens on");
  }
  if (plan.rdzv_host_mode == "off" || (plan.rdzv_host_mode == "auto" && !local)) return nullptr;
  try {
    ServerOptions options{address, plan.rdzv_listen_port, a.rdzv_auth, plan.rdzv_limits};
    options.own_job = a.run_id;  // this job's alone
    auto server = std::make_unique<RendezvousServer>(options, make_nccl_unique_id);
    // Port 0 asked for a free port: join the one the server got.
    a.rdzv_address = with_port(address, server->port());
    a.hosts_rendezvous = true;
    spdlog::info("hosting the rendezvous of job {} on {}", a.run_id, server->address());
    return server;
  } catch (const ListenError& e) {
    if (plan.rdzv_host_mode == "on") throw;
    spdlog::debug("{}: another agent hosts it; joining", e.what());
    return nullptr;
  }
}

// Every worker costs the launcher a few descriptors (pipes, pidfd) and
// every client of a hosted rendezvous one connection: take the whole
// allowance the administrator gave, as servers do, instead of the soft
// default (often 1024).
void raise_fd_limit() {
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    setrlimit(RLIMIT_NOFILE, &lim);
  }
}

// The c10d store the workers reach at MASTER_ADDR:MASTER_PORT. A one-node
// job whose MASTER_ADDR is loopback keeps it on loopback (it has no token).
std::unique_ptr<tcpstore::Server> host_worker_store(const LaunchPlan& plan) {
  tcpstore::ServerOptions o;
  const std::string& addr = plan.agent.master_addr;
  const bool loopback = addr == "localhost" || addr.rfind("127.", 0) == 0;
  o.host = plan.agent.rdzv.max_nodes <= 1 && loopback ? "127.0.0.1" : "0.0.0.0";
  o.port = plan.agent.master_port;
  o.limits = plan.rdzv_limits;
  o.log = [](const std::string& line) { spdlog::warn("worker store: {}", line); };
  return std::make_unique<tcpstore::Server>(o);
}

}  // namespace

int main(int argc, char** argv) {
  const auto started = std::filesystem::file_time_type::clock::now();  // see merge_trace
  const auto launched = std::chrono::steady_clock::now();                // the metrics' wall time
  raise_fd_limit();
  // Before any thread exists, so that every thread inherits the blocked mask.
  SignalChannel signals;
  // Debian's abseil checks every gRPC mutex for lock-order cycles under a
  // global lock: 6.5% of a busy rendezvous' CPU (perf, 10k-agent rounds).
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  std::vector<std::string> args(argv + 1, argv + argc);
  if (!args.empty() && args.front() == "rendezvous") {
    set_up_logging(false, false);
    return run_rendezvous_command({args.begin() + 1, args.end()}, signals);
  }
  if (!args.empty() && args.front() == "status") {
    set_up_logging(false, true);
    return run_status_command({args.begin() + 1, args.end()});
  }
  if (!args.empty() && args.front() == "trace-merge") {
    return run_trace_merge_command({args.begin() + 1, args.end()});
  }
  if (!args.empty() && args.front() == "report") {
    return run_report_command({args.begin() + 1, args.end()});
  }

  CliResult cli;
  LaunchPlan plan;
  SlurmDefaults slurm;
  try {
    // Defaults from the environment, before the command line (which wins):
    // Slurm's (inside a job step), then PET_* (set on purpose, they beat Slurm's).
    slurm = slurm_defaults(environment_map(), args);
    std::vector<DefaultArg> defaults = slurm.args;
    for (auto& d : pet_default_args(current_environment())) defaults.push_back(std::move(d));
    cli = parse_command_line(args, defaults);
    if (cli.kind != CliResult::kRun) {
      std::fputs((cli.text + "\n").c_str(), stdout);
      return kExitOk;
    }
    plan = make_launch_plan(cli.options, gather_host_facts());
  } catch (const UsageError& e) {
    std::fprintf(stderr, "ddprun: error: %s\n", e.what());
    return kExitUsage;
  }
  set_up_logging(cli.options.verbose, cli.options.quiet);
  if (!slurm.summary.empty()) spdlog::info("{}", slurm.summary);
  if (!slurm.warning.empty()) spdlog::warn("{}", slurm.warning);

  try {
    try {
      check_local_setup(plan);
    } catch (const UsageError& e) {
      std::fprintf(stderr, "ddprun: error: %s\n", e.what());
      return kExitUsage;
    }
    std::unique_ptr<HostedControlPlane> control_plane;
    std::unique_ptr<EmbeddedControlPlane> embedded_control_plane;
    std::unique_ptr<RendezvousServer> server;
    std::unique_ptr<ProbeSocket> probe_socket;
    try {
      if (!plan.etcd_endpoints.empty()) control_plane = std::make_unique<HostedControlPlane>(plan);
      if (plan.embedded_control_plane) embedded_control_plane = std::make_unique<EmbeddedControlPlane>(plan);
      server = place_rendezvous(plan);
      // A node that holds a lease on a rendezvous elsewhere, with no
      // service of its own: a socket where its host can say it is gone.
      AgentConfig& a = plan.agent;
      if (a.lease_timeout.count() > 0 && !a.hosts_rendezvous && a.probe_address.empty() && !a.local_addr.empty()) {
        probe_socket = ProbeSocket::listen_on(a.local_addr);
        if (probe_socket) a.probe_address = probe_socket->address();
      }
    } catch (const UsageError& e) {
      std::fprintf(stderr, "ddprun: error: %s\n", e.what());
      return kExitUsage;
    } catch (const AuthConfigError& e) {
      std::fprintf(stderr, "ddprun: error: --rdzv-tls-*: %s\n", e.what());
      return kExitUsage;
    } catch (const ListenError& e) {
      std::fprintf(stderr, "ddprun: error: %s\n", e.what());
      return kExitUsage;
    }
    // Where `ddprun status` finds this job (a private rendezvous' port and
    // token are known to nobody else); removed when ddprun ends.
    std::unique_ptr<JobFile> job_file;
    try {
      const AgentConfig& a = plan.agent;
      job_file = std::make_unique<JobFile>(JobFileEntry{a.run_id, a.rdzv_address, a.rdzv_auth,
                                                        static_cast<long>(getpid()),
                                                        process_start_time(getpid()), own_netns()});
    } catch (const std::exception& e) {
      spdlog::warn("`ddprun status` will not find this job: {}", e.what());
    }
    if (job_file) plan.agent.asked_stacks_copy = asked_stacks_path(job_dir(), static_cast<long>(getpid()));
    // The workers' c10d store (PyTorch's env:// rendezvous) is hosted here,
    // on MASTER_PORT, before any worker starts, as torchrun's agent does:
    // workers are clients at once, with nothing to retry. Every agent hosts
    // one (the round decides later which node is node 0; the others' stay
    // idle). Binding it here also takes the port: no pick-then-release race.
    std::unique_ptr<tcpstore::Server> worker_store;
    try {
      worker_store = host_worker_store(plan);
    } catch (const tcpstore::ListenError& e) {
      std::fprintf(stderr, "ddprun: error: --master-port: %s\n", e.what());
      return kExitUsage;
    }
    plan.agent.master_port = worker_store->port();
    // Said once the command line is known to work: no warning before an error.
    for (const auto& w : plan.warnings) spdlog::warn("{}", w);
    spdlog::debug("rendezvous at {}; run id {}; local address {}", plan.agent.rdzv_address,
                  plan.agent.run_id, plan.agent.local_addr);
    std::unique_ptr<RendezvousClient> client_ptr;
    try {
      client_ptr = std::make_unique<RendezvousClient>(plan.agent.rdzv_address, plan.agent.rdzv_auth);
    } catch (const AuthConfigError& e) {
      std::fprintf(stderr, "ddprun: error: --rdzv-tls-*: %s\n", e.what());
      return kExitUsage;
    }
    RendezvousClient& client = *client_ptr;
    std::function<size_t()> nodes_in_rendezvous;
    if (server) {
      // Every job it serves, not only its own: other jobs may share the endpoint.
      nodes_in_rendezvous = [&server] { return server->registry().nodes_in_all_jobs(); };
    }
    Agent agent(plan.agent, client, signals, nodes_in_rendezvous);
    // --metrics-port: the numbers are folded from this agent's events and
    // progress, and served from a thread of their own.
    std::unique_ptr<MetricsServer> metrics_server;
    if (plan.metrics_port >= 0) {
      auto metrics = std::make_shared<JobMetrics>(plan.agent.run_id, agent.node_id(), launched);
      try {
        MetricsServerOptions mo;
        mo.host = plan.metrics_host;
        mo.port = plan.metrics_port;
        mo.token = plan.metrics_token;
        metrics_server = std::make_unique<MetricsServer>(metrics->metrics(), mo);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "ddprun: error: --metrics-port: %s\n", e.what());
        return kExitUsage;
      }
      agent.keep_metrics(metrics);
      spdlog::info("metrics at http://{}:{}/metrics{}", plan.metrics_host == "0.0.0.0" ? plan.agent.local_addr : plan.metrics_host,
                   metrics_server->port(),
                   plan.metrics_token.empty() ? " (loopback only: a job with --rdzv-token serves them to the network)"
                                              : " (send the job's token as a bearer)");
    }
    // A group's keys go with it: the next one (a restart, a new round)
    // starts from an empty store, and memory does not grow.
    agent.host_worker_store([&worker_store] { worker_store->clear(); });
    const int code = agent.run();
    if (!plan.agent.trace_dir.empty()) merge_trace(plan.agent, started);
    return code;
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    return kExitWorkerFailed;
  }
}
