#include "launcher/plan.h"

#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <random>
#include <stdexcept>
#include <tuple>

#include "agent/processes/env.h"
#include "channel/env_names.h"
#include "channel/python_standby.h"
#include "rendezvous/wire/security.h"
#include "agent/processes/spawn.h"

namespace ddprun {
namespace {

// Names that can only mean this machine's loopback interface.
bool is_loopback_name(const std::string& host) {
  return host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1";
}

}  // namespace

int count_gpus(const char* cuda_visible_devices) {
  int devices = 0;
  if (DIR* d = opendir("/dev")) {
    while (dirent* e = readdir(d)) {
      std::string n = e->d_name;
      if (n.size() > 6 && n.compare(0, 6, "nvidia") == 0 &&
          std::all_of(n.begin() + 6, n.end(), [](char c) { return std::isdigit(c); })) {
        ++devices;
      }
    }
    closedir(d);
  }
  if (!cuda_visible_devices) return devices;
  // "0,1,2" limits the count; "" or "-1" hides every GPU.
  std::string v = cuda_visible_devices;
  if (v.empty() || v.rfind("-1", 0) == 0) return 0;
  int listed = 1;
  for (char c : v) listed += c == ',';
  return std::min(devices, listed);
}

HostFacts gather_host_facts() {
  HostFacts f;
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  f.cpu_count = cpus > 0 ? static_cast<int>(cpus) : 1;
  f.gpu_count = count_gpus(getenv("CUDA_VISIBLE_DEVICES"));
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) == 0 && host[0]) f.hostname = host;
  if (const char* p = getenv("PATH")) f.path_env = p;
  f.environment = current_environment();
  std::tie(f.python, f.python_source) = choose_python(f.environment, executable_dir());
  if (const char* t = getenv("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE")) f.line_prefix_template = t;
  if (const char* t = getenv(channel::kRdzvToken)) f.rdzv_token = t;
  f.extra_program_dirs = {executable_dir()};
  return f;
}

namespace {

// PREFIX/bin/pythonX.Y for a program in PREFIX/lib/pythonX.Y/{site,dist}-packages/ddprun.scripts
// (where a wheel's installer put it), or "" when it is not there or not executable.
std::string python_installed_for(const std::string& program_dir) {
  namespace fs = std::filesystem;
  fs::path dir = fs::path(program_dir).lexically_normal();
  if (dir.filename().empty()) dir = dir.parent_path();  // "ddprun.scripts/"
  const fs::path packages = dir.parent_path(), version = packages.parent_path(), lib = version.parent_path();
  const std::string name = version.filename().string();
  const bool packages_folder = packages.filename() == "site-packages" || packages.filename() == "dist-packages";
  if (dir.filename() != "ddprun.scripts" || !packages_folder || lib.filename() != "lib" || name.rfind("python", 0) != 0) {
    return "";
  }
  const fs::path python = lib.parent_path() / "bin" / name;
  return access(python.c_str(), X_OK) == 0 ? python.string() : "";
}

}  // namespace

std::pair<std::string, std::string> choose_python(const std::vector<std::string>& environment,
                                                  const std::string& program_dir) {
  auto get = [&](const std::string& key) -> std::string {
    for (const auto& e : environment) {
      if (e.size() > key.size() && e.compare(0, key.size(), key) == 0 && e[key.size()] == '=') {
        return e.substr(key.size() + 1);
      }
    }
    return "";
  };
  if (std::string p = get("PYTHON_EXEC"); !p.empty()) return {p, "PYTHON_EXEC"};
  if (std::string p = get("DDPRUN_PYTHON"); !p.empty()) return {p, "DDPRUN_PYTHON"};
  if (std::string venv = get("VIRTUAL_ENV"); !venv.empty()) {
    const std::string p = venv + "/bin/python";
    if (access(p.c_str(), X_OK) == 0) return {p, "the virtualenv in VIRTUAL_ENV"};
  }
  if (std::string p = python_installed_for(program_dir); !p.empty()) {
    return {p, "the Python environment ddprun is installed in"};
  }
  return {"python3", "python3 from PATH"};
}

int resolve_nproc(const std::string& spec, const HostFacts& facts) {
  if (spec == "cpu") return facts.cpu_count;
  if (spec == "auto") return facts.gpu_count > 0 ? facts.gpu_count : facts.cpu_count;
  if (spec == "gpu") {
    if (facts.gpu_count == 0) {
      throw UsageError("--nproc-per-node gpu: no GPU is visible here (no /dev/nvidiaN, or "
                       "CUDA_VISIBLE_DEVICES hides them); use a number or cpu");
    }
    return facts.gpu_count;
  }
  return std::stoi(spec);  // checked by parse_command_line
}

namespace {

// Python workers never beat, so their standbys start this long after the
// workers: by then the workers are past `import torch` (1 to 3 s for 4 of
// them on 2 cores) and the standbys' own imports do not slow them down.
constexpr int kPythonStandbyWarmupMs = 3000;

std::chrono::milliseconds from_seconds(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

}  // namespace

LaunchPlan make_launch_plan(const CliOptions& o, const HostFacts& facts) {
  LaunchPlan plan;
  AgentConfig& a = plan.agent;
  a.nproc = resolve_nproc(o.nproc, facts);
  for (const auto& [flag, selection] : {std::pair{"--tee", &o.tee}, {"--redirects", &o.redirects}}) {
    for (const auto& [local_rank, mask] : selection->by_local_rank) {
      if (local_rank >= a.nproc) {
        throw UsageError(std::string(flag) + ": local rank " + std::to_string(local_rank) +
                         " does not exist; this node runs " + std::to_string(a.nproc) +
                         " worker(s), local ranks 0 to " + std::to_string(a.nproc - 1));
      }
    }
  }

  // The program and its argv.
  if (runs_under_python(o)) {
    a.program = resolve_program(facts.python, facts.path_env, {});
    if (a.program.empty()) {
      throw UsageError("cannot find the Python interpreter " + facts.python + " (" +
                       facts.python_source + ") to run " + o.entrypoint +
                       " (set PYTHON_EXEC or DDPRUN_PYTHON, or use --no-python)");
    }
    a.python = a.program + " (" + facts.python_source + ")";
    a.argv = {facts.python, "-u"};  // unbuffered, as torchrun runs scripts
    if (o.module && !o.run_path) a.argv.push_back("-m");  // --run-path wins, as in torchrun
    a.argv.push_back(o.entrypoint);
  } else {
    a.program = resolve_program(o.entrypoint, facts.path_env, facts.extra_program_dirs);
    if (a.program.empty()) {
      throw UsageError("cannot find program " + o.entrypoint +
                       " (not an executable file, not in PATH nor next to ddprun)");
    }
    a.argv = {o.entrypoint};
  }
  a.argv.insert(a.argv.end(), o.args.begin(), o.args.end());

  a.run_id = o.rdzv_id.empty() ? random_run_id() : o.rdzv_id;
  a.rdzv = RoundSettings{o.min_nodes, o.max_nodes, from_seconds(o.last_call_s), o.max_restarts};
  a.node_rank = o.node_rank;
  // The launcher makes no NCCL id: ncclGetUniqueId starts NCCL's bootstrap
  // root, a thread that waits in accept() for every rank with no timeout,
  // and here it would run in the long-lived launcher for every round,
  // whether or not the workers ever use NCCL (a CPU job on a GPU host never
  // does). Instead rank 0 of the workers makes the id when its first CUDA
  // collective needs one and shares it through the round's store
  // (ddp::World::cuda()), so the root lives in a member of the group and
  // dies with it. Setting NCCL_COMM_ID would also put the root in rank 0,
  // but needs a port on rank 0's host picked ahead of time. The rendezvous
  // still answers agents that ask (wants_nccl_id), outside its lock.
  a.wants_nccl_id = false;
  a.join_timeout = from_seconds(o.join_timeout_s);
  a.monitor_interval = from_seconds(o.monitor_interval_s);
  a.stop_timeout = from_seconds(o.stop_timeout_s);
  a.hang_timeout = from_seconds(o.hang_timeout_s);
  a.hang_auto_floor = from_seconds(o.hang_auto_floor_s);
  a.max_heals = o.max_heals;
  a.verify_every = o.verify_every;
  a.replace_stragglers = o.straggler_action == "replace";
  a.heal_standby = !o.no_standby;
  a.progress_interval = from_seconds(o.progress_interval_s);
  // Restarts are wanted fast: with any, standbys are on unless --no-standby.
  a.standby = !o.no_standby && o.max_restarts > 0;
  if (o.standby && o.max_restarts == 0) {
    plan.warnings.push_back("--standby does nothing without --max-restarts: there is no restart to wait for");
  }
  if (runs_under_python(o)) {
    // python -u -c <standby> [-m] ENTRYPOINT ARGS: imports torch, then waits.
    // Also without restart standbys: a heal's replacement starts from one
    // (a script run as it is would not wait for its assignment).
    a.standby_argv = {a.argv[0], "-u", "-c", channel::python_standby()};
    a.standby_argv.insert(a.standby_argv.end(), a.argv.begin() + 2, a.argv.end());
    a.standby_warmup = std::chrono::milliseconds(kPythonStandbyWarmupMs);
  }
  a.log_dir = o.log_dir;
  a.trace_dir = o.trace_dir;
  a.trace_steps = o.trace_steps;
  a.tee = o.tee;
  a.redirects = o.redirects;
  a.role = o.role;
  a.console_local_ranks = o.local_ranks_filter;
  // The flag wins over TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE, as in torchrun 2.x.
  a.line_prefix_template = o.line_prefix_template.empty() ? facts.line_prefix_template : o.line_prefix_template;
  a.duplicate_filters[0] = o.duplicate_stdout_filters;
  a.duplicate_filters[1] = o.duplicate_stderr_filters;
  a.virtual_local_rank = o.virtual_local_rank;
  a.numa_binding = o.numa_binding;
  if (!o.logs_specs.empty()) {
    plan.warnings.push_back("--logs-specs " + o.logs_specs +
                            ": torchrun's Python LogsSpecs plugins cannot be loaded by ddprun; "
                            "logs go where --log-dir, --redirects and --tee say");
  }
  if (o.event_log_handler != "null" && o.event_log_handler != "console") {
    plan.warnings.push_back("--event-log-handler " + o.event_log_handler +
                            ": ddprun has no event handlers to load; its events go to its own "
                            "log (-v shows them)");
  }
  a.master_addr = o.master_addr;
  a.master_port = o.master_port;
  a.local_addr = o.local_addr;
  a.host = facts.hostname;
  a.base_env = facts.environment;
  // torchrun 2.x puts its --signals-to-handle into its own environment, and
  // so into the workers'.
  std::string signals;
  for (const auto& name : o.signals_to_handle.empty() ? std::vector<std::string>{"SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT"}
                                                       : o.signals_to_handle) {
    signals += (signals.empty() ? "" : ",") + name;
  }
  const std::string signals_var = std::string(channel::kSignalsToHandle) + "=";
  std::erase_if(a.base_env, [&](const std::string& e) { return e.rfind(signals_var, 0) == 0; });
  a.base_env.push_back(signals_var + signals);

  if (!o.etcd_endpoints.empty()) {
    plan.private_rdzv = false;
    plan.etcd_endpoints = o.etcd_endpoints;
    plan.rdzv_listen_host = o.rdzv_host;  // the route to etcd picks this node's address
    plan.rdzv_host_mode = "on";
    a.keep_alive_interval = from_seconds(o.keep_alive_s);
    a.lease_timeout = from_seconds(o.lease_s);
  } else if (!o.rdzv_host.empty() && !o.standalone) {
    if (o.master_port != 0 && o.master_port == o.rdzv_port) {
      throw UsageError("--master-port: " + std::to_string(o.master_port) +
                       " is the rendezvous' port too (--rdzv-endpoint); pick another");
    }
    plan.private_rdzv = false;
    plan.rdzv_listen_host = o.rdzv_host;
    plan.rdzv_listen_port = o.rdzv_port;
    plan.rdzv_host_mode = o.rdzv_host_mode;
    plan.embedded_control_plane = o.rdzv_backend == "embedded";
    if (plan.embedded_control_plane) plan.rdzv_peers = o.rdzv_peers;
    // Nodes that may live elsewhere hold a lease, so a lost one is noticed.
    if (o.max_nodes > 1 || o.rdzv_host_mode == "off" || plan.embedded_control_plane) {
      a.keep_alive_interval = from_seconds(o.keep_alive_s);
      a.lease_timeout = from_seconds(o.lease_s);
    }
  } else if (o.rdzv_host_mode == "off") {
    throw UsageError("--rdzv-host off: needs --rdzv-endpoint, the rendezvous to join");
  }
  plan.rdzv_limits = o.rdzv_limits;
  std::vector<std::string> auth_warnings;
  RendezvousAuth auth = resolve_auth(o.rdzv_auth, facts.rdzv_token, auth_warnings);
  if (plan.private_rdzv) {
    // Nobody else joins a private rendezvous: its own token, on loopback,
    // keeps other users of this machine out of the job's store.
    a.rdzv_auth.token = random_token();
  } else {
    a.rdzv_auth = auth;
    plan.warnings.insert(plan.warnings.end(), auth_warnings.begin(), auth_warnings.end());
    if (auth.token.empty() && o.max_nodes <= 1 && is_loopback_name(o.rdzv_host)) {
      // One node on a loopback endpoint (torchrun's `--rdzv-endpoint
      // localhost:0 --nnodes 1`): no other node can join, so it is as
      // private as ddprun's own and gets a token of its own the same way.
      a.rdzv_auth.token = random_token();
    } else if (auth.token.empty()) {
      plan.warnings.push_back(
          "the rendezvous at " + o.rdzv_host + ":" + std::to_string(o.rdzv_port) +
          " takes calls from anyone who reaches it: give every node the same --rdzv-token "
          "(or DDPRUN_RDZV_TOKEN, --rdzv-token-file)");
    }
  }
  plan.metrics_port = o.metrics_port;
  if (o.metrics_port >= 0 && !auth.token.empty()) {
    if (auth.tls.cert.empty()) {
      plan.metrics_host = "0.0.0.0";
      plan.metrics_token = auth.token;
    } else {
      plan.warnings.push_back("--metrics-port: served on the loopback only: /metrics speaks no TLS, and the "
                              "job's rendezvous does (scrape it through a local proxy)");
    }
  }
  // One node on its own talks over loopback; with an endpoint, the address
  // is the one the route to it leaves from (found by the launcher).
  if (a.local_addr.empty() && plan.private_rdzv) a.local_addr = "127.0.0.1";
  return plan;
}

int pick_free_port() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error("socket() failed while picking a free port");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    close(fd);
    throw std::runtime_error("cannot bind a free port for MASTER_PORT (set --master-port)");
  }
  int port = ntohs(addr.sin_port);
  close(fd);
  return port;
}

std::string random_run_id() {
  std::random_device rd;
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%08x", static_cast<unsigned>(rd()));
  return buf;
}

}  // namespace ddprun
