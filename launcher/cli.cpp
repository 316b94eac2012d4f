#include "launcher/cli.h"

#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>

#include "launcher/completion.h"
#include "launcher/flag_matching.h"
#include "trace/step_window.h"

namespace ddprun {
namespace {

std::string quote(const std::string& s) { return "'" + s + "'"; }

int parse_int(const std::string& flag, const std::string& value, int min, int max) {
  int v = 0;
  auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (ec != std::errc() || ptr != value.data() + value.size() || value.empty()) {
    throw UsageError(flag + ": expected an integer, got " + quote(value));
  }
  if (v < min || v > max) {
    throw UsageError(flag + ": " + value + " is out of range [" + std::to_string(min) + ", " +
                     std::to_string(max) + "]");
  }
  return v;
}

// A duration in seconds: 0 when allow_zero, else within [min, max]. Below
// a millisecond (our resolution) a poll loop would spin; past 30 days a
// value is a typo, and would overflow the clocks' arithmetic.
double parse_seconds(const std::string& flag, const std::string& value, bool allow_zero,
                     double min = 0.001, double max = 30 * 86400.0) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != value.size() || value.empty() || !std::isfinite(v)) {
    throw UsageError(flag + ": expected a number of seconds, got " + quote(value));
  }
  if (v < 0 || (!allow_zero && v == 0)) {
    throw UsageError(flag + ": must be " + (allow_zero ? "at least 0" : "greater than 0") +
                     ", got " + value);
  }
  if (v != 0 && (v < min || v > max)) {
    auto num = [](double d) {
      std::ostringstream s;
      s << d;
      return s.str();
    };
    throw UsageError(flag + ": " + value + " s is outside [" + num(min) + ", " + num(max) +
                     "] s" + (allow_zero ? " (0 turns it off)" : ""));
  }
  return v;
}

void check_nproc(const std::string& value) {
  if (value == "auto" || value == "gpu" || value == "cpu") return;
  if (value == "xpu") {
    throw UsageError("--nproc-per-node xpu: no XPU is visible here (ddprun runs workers on NVIDIA "
                     "GPUs or CPUs); use a number, auto, gpu or cpu");
  }
  int v = 0;
  auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (ec != std::errc() || ptr != value.data() + value.size() || value.empty() || v < 1) {
    throw UsageError("--nproc-per-node: expected a positive integer, auto, gpu or cpu, got " +
                     quote(value));
  }
  if (v > 4096) throw UsageError("--nproc-per-node: " + value + " workers is more than 4096");
}

void parse_nnodes(const std::string& value, CliOptions& o) {
  const auto colon = value.find(':');
  if (colon == std::string::npos) {
    o.min_nodes = o.max_nodes = parse_int("--nnodes", value, 1, 65536);
  } else {
    o.min_nodes = parse_int("--nnodes", value.substr(0, colon), 1, 65536);
    o.max_nodes = parse_int("--nnodes", value.substr(colon + 1), 1, 65536);
    if (o.min_nodes > o.max_nodes) {
      throw UsageError("--nnodes: MIN:MAX needs MIN <= MAX, got " + quote(value));
    }
  }
}

void parse_endpoint(const std::string& value, CliOptions& o) {
  // host, host:port or [v6addr]:port
  std::string host = value;
  std::string port;
  if (!value.empty() && value.front() == '[') {
    auto close = value.find(']');
    if (close == std::string::npos) throw UsageError("--rdzv-endpoint: unclosed '[' in " + quote(value));
    host = value.substr(1, close - 1);
    if (close + 1 < value.size()) {
      if (value[close + 1] != ':') throw UsageError("--rdzv-endpoint: expected HOST:PORT, got " + quote(value));
      port = value.substr(close + 2);
    }
  } else if (auto colon = value.rfind(':'); colon != std::string::npos) {
    host = value.substr(0, colon);
    port = value.substr(colon + 1);
  }
  if (host.empty()) throw UsageError("--rdzv-endpoint: expected HOST:PORT, got " + quote(value));
  o.rdzv_host = host;
  o.rdzv_port = port.empty() ? 29400 : parse_int("--rdzv-endpoint port", port, 0, 65535);
}

// on/off/auto for --rdzv-host; torchrun's is_host takes true/false/1/0.
std::string parse_host_mode(const std::string& flag, const std::string& value) {
  std::string v;
  for (char c : value) v += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (v == "auto") return "auto";
  if (v == "on" || v == "1" || v == "true" || v == "yes") return "on";
  if (v == "off" || v == "0" || v == "false" || v == "no") return "off";
  throw UsageError(flag + ": expected on, off or auto, got " + quote(value));
}

}  // namespace

bool parse_limit_conf(const std::string& key, const std::string& val, ServiceLimits& limits) {
  const std::string flag = "--rdzv-conf " + key;
  constexpr int kMax = 2147483647;
  if (key == "max_value_bytes") {
    limits.max_value_bytes = parse_int(flag, val, 1, 64 << 20);
  } else if (key == "max_job_keys") {
    limits.max_job_keys = parse_int(flag, val, 1, kMax);
  } else if (key == "max_job_bytes") {
    limits.max_job_bytes = parse_int(flag, val, 1, kMax);
  } else if (key == "max_jobs") {
    limits.max_jobs = parse_int(flag, val, 1, 1000000);
  } else if (key == "max_waits_per_client") {
    limits.max_waits_per_client = parse_int(flag, val, 1, 1000000);
  } else if (key == "idle_timeout") {
    const double s = parse_seconds(flag, val, false);
    if (s < 1 || s > 86400) throw UsageError(flag + ": must be in [1, 86400] seconds, got " + val);
    limits.idle_timeout = std::chrono::milliseconds(static_cast<int64_t>(s * 1000));
  } else {
    return false;
  }
  return true;
}

namespace {

void parse_rdzv_conf(const std::string& value, CliOptions& o) {
  int max_attempts = 0;
  bool lease_given = false;
  size_t start = 0;
  while (start < value.size()) {
    size_t end = value.find(',', start);
    if (end == std::string::npos) end = value.size();
    const std::string item = value.substr(start, end - start);
    start = end + 1;
    if (item.empty()) continue;
    const auto eq = item.find('=');
    if (eq == std::string::npos) {
      throw UsageError("--rdzv-conf: expected KEY=VALUE, got " + quote(item));
    }
    const std::string key = item.substr(0, eq), val = item.substr(eq + 1);
    if (key == "join_timeout") {
      o.join_timeout_s = parse_seconds("--rdzv-conf join_timeout", val, false);
    } else if (key == "last_call_timeout") {
      o.last_call_s = parse_seconds("--rdzv-conf last_call_timeout", val, true);
    } else if (key == "keep_alive_interval") {
      o.keep_alive_s = parse_seconds("--rdzv-conf keep_alive_interval", val, false);
    } else if (key == "lease_timeout") {
      o.lease_s = parse_seconds("--rdzv-conf lease_timeout", val, false);
      lease_given = true;
    } else if (key == "keep_alive_max_attempt") {
      max_attempts = parse_int("--rdzv-conf keep_alive_max_attempt", val, 1, 1000);
    } else if (key == "is_host") {
      o.rdzv_host_mode = parse_host_mode("--rdzv-conf is_host", val);
    } else if (parse_limit_conf(key, val, o.rdzv_limits)) {
    } else if (key == "close_timeout" || key == "timeout" || key == "read_timeout") {
      // torchrun keys with no meaning here; accepted so old commands still run.
    } else {
      throw UsageError("--rdzv-conf: unknown key " + quote(key) +
                       " (known: join_timeout, last_call_timeout, keep_alive_interval, "
                       "lease_timeout, keep_alive_max_attempt, is_host, max_value_bytes, "
                       "max_job_keys, max_job_bytes, max_jobs, max_waits_per_client, "
                       "idle_timeout)");
    }
  }
  // torchrun's way to say it: a node is lost after this many missed keep-alives.
  if (max_attempts > 0 && !lease_given) o.lease_s = o.keep_alive_s * max_attempts;
  if (o.lease_s < 2 * o.keep_alive_s) {
    throw UsageError("--rdzv-conf: lease_timeout (" + std::to_string(o.lease_s).substr(0, 5) +
                     " s) must be at least twice keep_alive_interval (" +
                     std::to_string(o.keep_alive_s).substr(0, 5) + " s)");
  }
}

// torchrun's --local-ranks-filter: "0,1,2".
std::vector<int> parse_local_ranks(const std::string& value) {
  std::vector<int> out;
  size_t start = 0;
  while (start <= value.size()) {
    size_t end = value.find(',', start);
    if (end == std::string::npos) end = value.size();
    const std::string item = value.substr(start, end - start);
    int v = -1;
    auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (item.empty() || ec != std::errc() || ptr != item.data() + item.size() || v < 0) {
      throw UsageError("--local-ranks-filter: expected comma-separated local ranks (e.g. 0,1,2), got " +
                       quote(value));
    }
    out.push_back(v);
    start = end + 1;
  }
  return out;
}

// torchrun's comma_separated_list: "a,b"; ",," is a comma inside an item.
std::vector<std::string> parse_filters(const std::string& value) {
  std::vector<std::string> out;
  if (value.empty()) return out;
  std::string item;
  for (size_t i = 0; i < value.size(); ++i) {
    if (value[i] == ',' && i + 1 < value.size() && value[i + 1] == ',') {
      item += ',';
      ++i;
    } else if (value[i] == ',') {
      out.push_back(item);
      item.clear();
    } else {
      item += value[i];
    }
  }
  out.push_back(item);
  return out;
}

// The signals ddprun handles; torchrun's --signals-to-handle picks among
// more, but ddprun always forwards these and handles no others.
std::vector<std::string> parse_signals(const std::string& value) {
  static const std::set<std::string> kHandled{"SIGTERM", "SIGINT", "SIGHUP",
                                              "SIGQUIT", "SIGUSR1", "SIGUSR2"};
  std::vector<std::string> out;
  for (const auto& name : parse_filters(value)) {
    if (!kHandled.count(name)) {
      throw UsageError("--signals-to-handle: " + quote(name) +
                       " is not one ddprun handles (it always forwards SIGTERM, SIGINT, SIGHUP, "
                       "SIGQUIT, SIGUSR1 and SIGUSR2 to the workers)");
    }
    out.push_back(name);
  }
  return out;
}

// Our description already shows the usage line; CLI11's own would say less.
class HelpFormatter : public CLI::Formatter {
 public:
  std::string make_usage(const CLI::App*, std::string) const override { return ""; }
};

}  // namespace

bool runs_under_python(const CliOptions& o) {
  const std::string& e = o.entrypoint;
  return o.module || o.run_path || (!o.no_python && e.size() > 3 && e.compare(e.size() - 3, 3, ".py") == 0);
}

StdSelection parse_std_selection(const std::string& flag, const std::string& value) {
  StdSelection sel;
  auto mask = [&](const std::string& v) {
    if (v.size() != 1 || v[0] < '0' || v[0] > '3') {
      throw UsageError(flag + ": expected 0 (none), 1 (stdout), 2 (stderr), 3 (both) or " +
                       "LOCAL_RANK:MASK,..., got " + quote(value));
    }
    return v[0] - '0';
  };
  if (value.find(':') == std::string::npos) {
    sel.all = mask(value);
    return sel;
  }
  size_t start = 0;
  while (start <= value.size()) {
    size_t end = value.find(',', start);
    if (end == std::string::npos) end = value.size();
    const std::string item = value.substr(start, end - start);
    start = end + 1;
    const auto colon = item.find(':');
    if (colon == std::string::npos) {
      throw UsageError(flag + ": expected LOCAL_RANK:MASK in " + quote(value) + ", got " +
                       quote(item));
    }
    const int lr = parse_int(flag + " local rank", item.substr(0, colon), 0, 1 << 20);
    sel.by_local_rank[lr] = mask(item.substr(colon + 1));
  }
  return sel;
}

namespace {

// The options of app, as flag_matching sees them.
std::vector<FlagSpec> flag_specs(const CLI::App& app) {
  std::vector<FlagSpec> out;
  for (const CLI::Option* opt : app.get_options()) {
    if (!opt->nonpositional()) continue;
    FlagSpec f;
    f.long_names = opt->get_lnames();
    for (const auto& s : opt->get_snames()) f.short_names.push_back(s.front());
    f.takes_value = opt->get_type_size_min() > 0 && opt->get_expected_min() > 0;
    out.push_back(std::move(f));
  }
  return out;
}

CliResult parse_canonical(const std::vector<std::string>& args,
                          const std::vector<DefaultArg>& defaults,
                          std::map<std::string, std::string>& source_of) {
  CLI::App app{
      "ddprun: launches and supervises data-parallel training workers, torchrun-style.\n"
      "Runs ENTRYPOINT once per worker with RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, ...\n"
      "set; arguments after ENTRYPOINT go to the workers. A .py ENTRYPOINT runs under\n"
      "$PYTHON_EXEC, else $DDPRUN_PYTHON, else $VIRTUAL_ENV/bin/python, else python3;\n"
      "other names are looked up in PATH, then next to ddprun. torchrun's flags work in\n"
      "both spellings (--nproc-per-node, --nproc_per_node), by unambiguous prefix\n"
      "(--nproc_per), and from PET_* variables (PET_NNODES=2); the command line wins.\n\n"
      "Usage: ddprun [OPTIONS] ENTRYPOINT [ARGS...]\n"
      "       ddprun rendezvous [--host ADDR] --port PORT   (a rendezvous on its own)\n"
      "  e.g. ddprun --nproc 4 train --epochs 2\n"
      "       ddprun --nproc 2 my_script.py --lr 0.1\n"
      "       ddprun --nnodes 2:4 --nproc 8 --rdzv-endpoint node0:29400 --rdzv-id job42 train",
      "ddprun"};
  app.set_help_flag("-h,--help", "Print this help and exit");
  app.set_version_flag("--version", "ddprun 0.1.0");
  std::string completion_shell;
  app.add_option("--print-completion,--print_completion", completion_shell,
                 "Print a completion script for SHELL (bash, zsh or tcsh) and exit")
      ->type_name("SHELL");
  app.prefix_command();
  // A repeated option: the last one wins, as with torchrun's argparse.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.formatter(std::make_shared<HelpFormatter>());
  app.get_formatter()->column_width(40);

  CliOptions o;
  std::string nnodes = "1", node_rank, endpoint, rdzv_conf, tee, redirects, rdzv_host;
  std::string max_restarts = "0", max_heals = "3", monitor = "0.1", stop_timeout = "10", hang_timeout = "0", master_port = "0";
  std::string progress_interval = "10";
  std::string shutdown_timeout, local_ranks_filter, dup_stdout, dup_stderr, signals;

  auto* g = "Workers";
  app.add_option("--nproc-per-node,--nproc_per_node,--nproc", o.nproc,
                 "Workers on this node: N, auto (GPUs, else CPUs), gpu or cpu [default: 1]")
      ->type_name("N|auto|gpu|cpu")
      ->group(g);
  app.add_option("--role", o.role, "Role name given to the workers (ROLE_NAME) [default: default]")
      ->type_name("NAME")
      ->group(g);
  app.add_flag("--no-python,--no_python", o.no_python,
               "Run ENTRYPOINT as a program even if it ends in .py")->group(g);
  app.add_flag("-m,--module", o.module, "ENTRYPOINT is a Python module (python3 -m)")->group(g);
  app.add_flag("--run-path,--run_path", o.run_path,
               "Run ENTRYPOINT as a Python file by path (torchrun: runpy.run_path), even with "
               "--no-python")->group(g);
  app.add_option("--start-method,--start_method", o.start_method,
                 "Accepted for torchrun compatibility: spawn, fork or forkserver (ddprun always "
                 "starts workers with fork+exec) [default: spawn]")
      ->type_name("METHOD")
      ->group(g);
  app.add_flag("--virtual-local-rank,--virtual_local_rank", o.virtual_local_rank,
               "LOCAL_RANK=0 in every worker, and CUDA_VISIBLE_DEVICES names only its own GPU")
      ->group(g);
  app.add_option("--numa-binding,--numa_binding", o.numa_binding,
                 "Bind each worker's CPUs and memory to the NUMA node of its GPU (or of its share "
                 "of the CPUs): node, socket, exclusive or core-complex")
      ->type_name("MODE")
      ->group(g);

  g = "Nodes and rendezvous";
  app.add_option("--nnodes", nnodes, "Number of nodes, N or MIN:MAX [default: 1]")->type_name("N|MIN:MAX")->group(g);
  app.add_option("--node-rank,--node_rank", node_rank, "Rank of this node")->type_name("N")->group(g);
  app.add_flag("--standalone", o.standalone,
               "Single node with a private rendezvous on a free port (the default)")->group(g);
  app.add_option("--rdzv-endpoint,--rdzv_endpoint", endpoint,
                 "HOST[:PORT] the rendezvous listens on [default: 127.0.0.1, a free port]")
      ->type_name("HOST:PORT")
      ->group(g);
  app.add_option("--rdzv-host,--rdzv_host", rdzv_host,
                 "Host the rendezvous here: auto (when --rdzv-endpoint is this machine's "
                 "address and free), on, off [default: auto]")
      ->type_name("auto|on|off")
      ->group(g);
  app.add_option("--rdzv-id,--rdzv_id", o.rdzv_id, "Job id (TORCHELASTIC_RUN_ID) [default: random]")->type_name("ID")
      ->group(g);
  app.add_option("--rdzv-backend,--rdzv_backend", o.rdzv_backend,
                 "Accepted for torchrun compatibility (c10d, static); ddprun uses its own")
      ->type_name("NAME")
      ->group(g);
  app.add_option("--rdzv-conf,--rdzv_conf", rdzv_conf,
                 "join_timeout=S,last_call_timeout=S,keep_alive_interval=S,lease_timeout=S")
      ->type_name("K=V,...")
      ->group(g);
  app.add_option("--rdzv-token,--rdzv_token", o.rdzv_auth.token,
                 "Secret every node and worker must present to the rendezvous (better: "
                 "DDPRUN_RDZV_TOKEN or --rdzv-token-file) [default: one-node jobs make their own]")
      ->type_name("TOKEN")
      ->group(g);
  app.add_option("--rdzv-token-file,--rdzv_token_file", o.rdzv_auth.token_file,
                 "File holding the token (one line)")->type_name("FILE")->group(g);
  app.add_option("--rdzv-tls-cert,--rdzv_tls_cert", o.rdzv_auth.tls.cert,
                 "PEM certificate: the rendezvous' when hosting, this node's as a client")
      ->type_name("FILE")
      ->group(g);
  app.add_option("--rdzv-tls-key,--rdzv_tls_key", o.rdzv_auth.tls.key,
                 "PEM private key of --rdzv-tls-cert")->type_name("FILE")->group(g);
  app.add_option("--rdzv-tls-ca,--rdzv_tls_ca", o.rdzv_auth.tls.ca,
                 "PEM CA that signed the certificates: clients verify the rendezvous with it; "
                 "on the host it makes TLS mutual")
      ->type_name("FILE")
      ->group(g);
  app.add_option("--master-addr,--master_addr", o.master_addr,
                 "MASTER_ADDR for the workers [default: 127.0.0.1]")->type_name("ADDR")->group(g);
  app.add_option("--master-port,--master_port", master_port,
                 "MASTER_PORT for the workers [default: a free port]")->type_name("PORT")->group(g);
  app.add_option("--local-addr,--local_addr", o.local_addr,
                 "Address this node's workers bind their transport to [default: 127.0.0.1]")
      ->type_name("ADDR")
      ->group(g);

  g = "Supervision";
  app.add_option("--max-restarts,--max_restarts", max_restarts,
                 "Restarts of the worker group after a failure [default: 0]")->type_name("N")->group(g);
  app.add_option("--max-heals,--max_heals", max_heals,
                 "One node: replace a failed worker of a program that can heal (ddp::Healer) while the "
                 "others keep running, at most N times per rank; 0: every failure stops the group "
                 "[default: 3]")
      ->type_name("N")
      ->group(g);
  app.add_option("--monitor-interval,--monitor_interval", monitor,
                 "Seconds between health checks; exits are seen at once [default: 0.1]")
      ->type_name("SECONDS")->group(g);
  app.add_option("--stop-timeout,--stop_timeout", stop_timeout,
                 "Seconds between SIGTERM and SIGKILL when stopping workers [default: 10]")
      ->type_name("SECONDS")
      ->group(g);

  app.add_option("--shutdown-timeout,--shutdown_timeout", shutdown_timeout,
                 "torchrun's name for --stop-timeout (wins over it when both are given)")
      ->type_name("SECONDS")
      ->group(g);
  app.add_option("--signals-to-handle,--signals_to_handle", signals,
                 "Accepted for torchrun compatibility: ddprun always forwards SIGTERM, SIGINT, "
                 "SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 to the workers")
      ->type_name("SIG,...")
      ->group(g);
  app.add_option("--event-log-handler,--event_log_handler", o.event_log_handler,
                 "Accepted for torchrun compatibility; ddprun logs its events itself (-v)")
      ->type_name("NAME")
      ->group(g);

  app.add_option("--hang-timeout,--hang_timeout", hang_timeout,
                 "Seconds without a heartbeat from a worker_lib worker before it counts as hung "
                 "[default: 0, off]")
      ->type_name("SECONDS")
      ->group(g);

  app.add_option("--progress-interval,--progress_interval", progress_interval,
                 "Seconds between the progress lines rank 0's progress makes when stderr is not "
                 "a terminal (on a terminal: a status line) [default: 10; 0: off]")
      ->type_name("SECONDS")
      ->group(g);

  app.add_flag("--standby", o.standby,
               "Keep warm workers waiting for the next restart (worker_lib programs, and Python "
               "scripts: interpreters that imported torch) [default: on with --max-restarts > 0]")
      ->group(g);
  app.add_flag("--no-standby,--no_standby", o.no_standby, "Start fresh workers on every restart")
      ->group(g);

  g = "Output";
  app.add_option("--log-dir,--log_dir", o.log_dir,
                 "Keep per-rank stdout/stderr/error files under DIR/attempt_N/rankR/")
      ->type_name("DIR")->group(g);
  app.add_option("--trace", o.trace_dir,
                 "Record every rank's step phases (forward, backward, bucket all-reduces, ...) and "
                 "merge them into DIR/trace.json (Perfetto, chrome://tracing) with a summary table; "
                 "`ddprun trace-merge DIR` merges folders copied from several hosts")
      ->type_name("DIR")->group(g);
  app.add_option("--trace-steps,--trace_steps", o.trace_steps,
                 "With --trace: record only steps A..B-1 (either side may be empty)")
      ->type_name("A:B")->group(g);
  app.add_option("-t,--tee", tee, "Also write these streams to log files: 0-3 or LR:MASK,...")->type_name("MASK")
      ->group(g);
  app.add_option("-r,--redirects", redirects,
                 "Send these streams to log files only: 0 none, 1 stdout, 2 stderr, 3 both")
      ->type_name("MASK")
      ->group(g);
  app.add_option("--log-line-prefix-template,--log_line_prefix_template", o.line_prefix_template,
                 "Prefix of each console line: ${rank}, ${local_rank}, ${role_name} and ${hostname} "
                 "are filled in (default [rank${rank}]:)")
      ->type_name("TEMPLATE")
      ->group(g);
  app.add_option("--local-ranks-filter,--local_ranks_filter", local_ranks_filter,
                 "Only these local ranks' output reaches the console (log files get all): 0,1,...")
      ->type_name("LR,...")
      ->group(g);
  app.add_option("--duplicate-stdout-filters,--duplicate_stdout_filters", dup_stdout,
                 "Also copy stdout lines holding any of these words to filtered_stdout.log in "
                 "the log folder (\",,\" is a comma)")
      ->type_name("WORD,...")
      ->group(g);
  app.add_option("--duplicate-stderr-filters,--duplicate_stderr_filters", dup_stderr,
                 "The same for stderr (filtered_stderr.log)")
      ->type_name("WORD,...")
      ->group(g);
  app.add_option("--logs-specs,--logs_specs", o.logs_specs,
                 "Accepted for torchrun compatibility: torchrun's Python LogsSpecs plugins cannot "
                 "load here; --log-dir, --redirects and --tee say where logs go")
      ->type_name("NAME")
      ->group(g);
  app.add_flag("-v,--verbose", o.verbose, "Log what ddprun does")->group(g);
  app.add_flag("-q,--quiet", o.quiet, "Only log errors")->group(g);

  // Long names made canonical, prefixes expanded; the defaults first, so
  // that the command line wins, except those the command line gives.
  std::vector<std::string> given;
  const std::vector<std::string> cmdline = canonicalize_flags(args, flag_specs(app), &given);
  std::vector<std::string> full;
  for (const auto& d : defaults) {
    if (std::find(given.begin(), given.end(), d.flag) != given.end()) continue;
    source_of[d.flag] = d.source;
    full.push_back(d.value.empty() && app.get_option(d.flag)->get_expected_min() == 0
                       ? d.flag
                       : d.flag + "=" + d.value);
  }
  full.insert(full.end(), cmdline.begin(), cmdline.end());
  std::vector<std::string> argv_rev(full.rbegin(), full.rend());
  try {
    app.parse(argv_rev);
  } catch (const CLI::CallForHelp&) {
    return CliResult{CliResult::kHelp, app.help(), {}};
  } catch (const CLI::CallForVersion& e) {
    return CliResult{CliResult::kVersion, "ddprun 0.1.0", {}};
  } catch (const CLI::ParseError& e) {
    std::string msg = e.what();
    throw UsageError(msg);
  }

  if (!completion_shell.empty()) {
    if (!is_completion_shell(completion_shell)) {
      throw UsageError("--print-completion: " + quote(completion_shell) +
                       " is not a shell it knows (bash, zsh, tcsh)");
    }
    std::vector<std::string> flags;
    for (const FlagSpec& f : flag_specs(app)) {
      for (const auto& name : f.long_names) flags.push_back("--" + name);
    }
    return CliResult{CliResult::kCompletion, completion_script(completion_shell, flags), {}};
  }

  std::vector<std::string> rest = app.remaining();
  if (!rest.empty() && rest.front() == "--") rest.erase(rest.begin());
  if (rest.empty()) {
    throw UsageError("missing ENTRYPOINT, the program to run (e.g. ddprun --nproc 4 train)");
  }
  if (rest.front().size() > 1 && rest.front()[0] == '-') {
    throw UsageError("unknown option " + quote(rest.front()) + " (see ddprun --help)");
  }
  o.entrypoint = rest.front();
  o.args.assign(rest.begin() + 1, rest.end());

  check_nproc(o.nproc);
  parse_nnodes(nnodes, o);
  if (!node_rank.empty()) {
    o.node_rank = parse_int("--node-rank", node_rank, 0, o.max_nodes - 1);
  }
  if (!endpoint.empty()) parse_endpoint(endpoint, o);
  if (!rdzv_conf.empty()) parse_rdzv_conf(rdzv_conf, o);
  if (!rdzv_host.empty()) o.rdzv_host_mode = parse_host_mode("--rdzv-host", rdzv_host);
  if (!o.rdzv_backend.empty() && o.rdzv_backend != "c10d" && o.rdzv_backend != "static" &&
      o.rdzv_backend != "ddprun") {
    throw UsageError("--rdzv-backend: " + quote(o.rdzv_backend) +
                     " is not supported (ddprun uses its own gRPC rendezvous; c10d and static "
                     "are accepted)");
  }
  if (o.max_nodes > 1 && endpoint.empty()) {
    throw UsageError("--nnodes " + nnodes + ": several nodes need --rdzv-endpoint HOST:PORT (the "
                     "same on every node) to find each other");
  }
  if (o.rdzv_id.empty() && !endpoint.empty() && (o.max_nodes > 1 || o.rdzv_host_mode == "off")) {
    throw UsageError("--rdzv-id: needed with --rdzv-endpoint on several nodes, so they find each other");
  }
  if (o.max_nodes > 1 && o.rdzv_port == 0) {
    throw UsageError("--rdzv-endpoint: port 0 cannot be found by the other nodes; give a port, "
                     "e.g. " + o.rdzv_host + ":29400");
  }
  if (o.standalone && o.max_nodes > 1) {
    throw UsageError("--standalone runs one node; it cannot be used with --nnodes " + nnodes);
  }
  if (o.rdzv_id.size() > 128) {
    throw UsageError("--rdzv-id: at most 128 characters, got " + std::to_string(o.rdzv_id.size()));
  }
  for (size_t i = 0; i < o.rdzv_id.size(); ++i) {
    // It names files and travels in protobuf strings (UTF-8 only): keep it
    // plain. The bad byte is shown as a number: it may be a control code.
    const unsigned char c = static_cast<unsigned char>(o.rdzv_id[i]);
    if (c <= 0x20 || c >= 0x7f || c == '/') {
      char code[8];
      std::snprintf(code, sizeof code, "0x%02x", c);
      throw UsageError("--rdzv-id: only printable ASCII without '/' or spaces; byte " +
                       std::to_string(i + 1) + " is " + code);
    }
  }
  if (app.count("--log-dir") > 0 && o.log_dir.empty()) {
    throw UsageError("--log-dir: must not be empty");
  }
  if (app.count("--trace") > 0 && o.trace_dir.empty()) throw UsageError("--trace: must not be empty");
  if (!o.trace_steps.empty()) {
    if (!trace::parse_step_window(o.trace_steps)) {
      throw UsageError("--trace-steps: expected A:B, steps A to B-1 with A < B (either side may be "
                       "empty), got " + quote(o.trace_steps));
    }
    if (o.trace_dir.empty()) throw UsageError("--trace-steps: needs --trace DIR");
  }
  o.max_restarts = parse_int("--max-restarts", max_restarts, 0, 1000000);
  o.max_heals = parse_int("--max-heals", max_heals, 0, 1000000);
  o.monitor_interval_s = parse_seconds("--monitor-interval", monitor, false, 0.01, 3600);
  o.stop_timeout_s = parse_seconds("--stop-timeout", stop_timeout, true);
  // --shutdown-timeout (torchrun's name) wins over --stop-timeout, unless
  // only --stop-timeout is on the command line (the other from a variable).
  auto on_command_line = [&](const char* flag) {
    return std::find(given.begin(), given.end(), flag) != given.end();
  };
  if (!shutdown_timeout.empty() &&
      (on_command_line("--shutdown-timeout") || !on_command_line("--stop-timeout"))) {
    o.stop_timeout_s = parse_seconds("--shutdown-timeout", shutdown_timeout, true);
  }
  if (o.start_method != "spawn" && o.start_method != "fork" && o.start_method != "forkserver") {
    throw UsageError("--start-method: expected spawn, fork or forkserver, got " +
                     quote(o.start_method));
  }
  if (!o.numa_binding.empty() && o.numa_binding != "node" && o.numa_binding != "socket" &&
      o.numa_binding != "exclusive" && o.numa_binding != "core-complex") {
    throw UsageError("--numa-binding: expected node, socket, exclusive or core-complex, got " +
                     quote(o.numa_binding));
  }
  if (!local_ranks_filter.empty()) o.local_ranks_filter = parse_local_ranks(local_ranks_filter);
  o.duplicate_stdout_filters = parse_filters(dup_stdout);
  o.duplicate_stderr_filters = parse_filters(dup_stderr);
  if (!signals.empty()) o.signals_to_handle = parse_signals(signals);
  o.hang_timeout_s = parse_seconds("--hang-timeout", hang_timeout, true);
  o.progress_interval_s = parse_seconds("--progress-interval", progress_interval, true);
  o.master_port = parse_int("--master-port", master_port, 0, 65535);
  if (o.master_addr.empty()) throw UsageError("--master-addr: must not be empty");
  if (!tee.empty()) o.tee = parse_std_selection("--tee", tee);
  if (!redirects.empty()) o.redirects = parse_std_selection("--redirects", redirects);
  if (o.run_path) o.no_python = false;  // torchrun: --run-path takes precedence
  if (o.module && o.no_python) {
    throw UsageError("--module and --no-python cannot be used together");
  }
  if (o.verbose && o.quiet) throw UsageError("--verbose and --quiet cannot be used together");
  if (o.standby && o.no_standby) throw UsageError("--standby and --no-standby cannot be used together");
  return CliResult{CliResult::kRun, "", std::move(o)};
}

}  // namespace

void check_output_dir(const std::string& flag, const std::string& dir) {
  std::error_code ec;
  const bool made = std::filesystem::create_directories(dir, ec);
  if (ec || access(dir.c_str(), W_OK | X_OK) != 0) {
    throw UsageError(flag + ": cannot write to '" + dir + "': " + (ec ? ec.message() : std::strerror(errno)));
  }
  // A folder made here is ours alone whatever the umask (002 would leave
  // it open to the group).
  if (made) chmod(dir.c_str(), 0755);
  struct stat st {};
  if (stat(dir.c_str(), &st) != 0) {
    throw UsageError(flag + ": cannot write to '" + dir + "': " + std::strerror(errno));
  }
  std::string why;
  if (st.st_uid != geteuid()) {
    why = "it belongs to uid " + std::to_string(st.st_uid);
  } else if (st.st_mode & (S_IWGRP | S_IWOTH)) {
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(st.st_mode & 07777));
    why = std::string("other users may write to it (mode ") + mode + ")";
  }
  if (!why.empty()) {
    throw UsageError(flag + ": refusing '" + dir + "': " + why +
                     ", who could plant links there that ddprun would write through; use a folder of your own");
  }
}

CliResult parse_command_line(const std::vector<std::string>& args,
                             const std::vector<DefaultArg>& defaults) {
  std::map<std::string, std::string> source_of;  // flag → the variable its value came from
  try {
    return parse_canonical(args, defaults, source_of);
  } catch (const UsageError& e) {
    // "--nnodes: ..." about a value from PET_NNODES: "PET_NNODES: ...".
    const std::string msg = e.what();
    const std::string flag = msg.substr(0, msg.find_first_of(": "));
    if (auto it = source_of.find(flag); it != source_of.end()) {
      throw UsageError(it->second + msg.substr(flag.size()));
    }
    throw;
  }
}

}  // namespace ddprun
