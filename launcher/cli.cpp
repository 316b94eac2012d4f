#include "launcher/cli.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <tuple>

#include "launcher/cli_flags.h"
#include "launcher/cli_values.h"
#include "launcher/completion.h"
#include "launcher/flag_matching.h"
#include "launcher/version.h"
#include "rendezvous/control_plane/etcd/etcd_client.h"
#include "trace/step_window.h"

namespace ddprun {

bool runs_under_python(const CliOptions& o) {
  const std::string& e = o.entrypoint;
  return o.module || o.run_path || (!o.no_python && e.size() > 3 && e.compare(e.size() - 3, 3, ".py") == 0);
}

namespace {

CliResult parse_canonical(const std::vector<std::string>& args,
                          const std::vector<DefaultArg>& defaults,
                          std::map<std::string, std::string>& source_of) {
  CliOptions o;
  FlagValues v;
  const std::unique_ptr<CLI::App> app_owner = make_ddprun_app(o, v);
  CLI::App& app = *app_owner;

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
    return CliResult{CliResult::kVersion, version_line(), {}};
  } catch (const CLI::ParseError& e) {
    std::string msg = e.what();
    throw UsageError(msg);
  }

  if (!v.completion_shell.empty()) {
    if (!is_completion_shell(v.completion_shell)) {
      throw UsageError("--print-completion: " + quote(v.completion_shell) +
                       " is not a shell it knows (bash, zsh, tcsh)");
    }
    std::vector<std::string> flags;
    for (const FlagSpec& f : flag_specs(app)) {
      for (const auto& name : f.long_names) flags.push_back("--" + name);
    }
    return CliResult{CliResult::kCompletion, completion_script(v.completion_shell, flags), {}};
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
  parse_nnodes(v.nnodes, o);
  if (!v.node_rank.empty()) {
    o.node_rank = parse_int("--node-rank", v.node_rank, 0, o.max_nodes - 1);
  }
  const bool etcd = o.rdzv_backend == "etcd" || o.rdzv_backend == "etcd-v2" || o.rdzv_backend == "etcd-v3";
  if (etcd) {
    // The control plane's state and election live in etcd (v3 API; the v2
    // API of torchrun's etcd backends is gone from etcd 3.6).
    o.rdzv_backend = "etcd";
    if (v.endpoint.empty()) {
      throw UsageError("--rdzv-backend etcd: needs --rdzv-endpoint naming the etcd members "
                       "(HOST:PORT[,HOST:PORT...])");
    }
    try {
      o.etcd_endpoints = EtcdClient::parse_endpoints(v.endpoint);
    } catch (const std::invalid_argument& e) {
      throw UsageError(std::string("--rdzv-endpoint: ") + e.what());
    }
    parse_endpoint(o.etcd_endpoints.front(), o);
    if (o.rdzv_id.empty()) {
      throw UsageError("--rdzv-id: needed with --rdzv-backend etcd; it names the job's keys in etcd");
    }
  } else if (!v.endpoint.empty()) {
    // torchrun's default backend on a job that may span 3 or more nodes: the
    // embedded control plane, so that losing the node that serves it costs
    // what losing any node costs. (With fewer there is no majority to go on
    // without it; `static` and `ddprun` name the single-host rendezvous.)
    if ((o.rdzv_backend.empty() || o.rdzv_backend == "c10d") && !o.standalone && o.max_nodes >= kEmbeddedFromNodes) {
      o.rdzv_backend = "embedded";
    }
    // With the embedded control plane, a list of nodes: the first starts the
    // job's control plane, each listed one serves at its address, and a node
    // that comes late finds the job at any of them.
    for (const std::string& one : split_list(v.endpoint)) {
      if (one.empty()) throw UsageError("--rdzv-endpoint: an empty entry in " + quote(v.endpoint));
      CliOptions parsed;
      parse_endpoint(one, parsed);
      o.rdzv_peers.emplace_back(parsed.rdzv_host, parsed.rdzv_port);
    }
    std::tie(o.rdzv_host, o.rdzv_port) = o.rdzv_peers.front();
    if (o.rdzv_peers.size() > 1 && o.rdzv_backend != "embedded") {
      throw UsageError("--rdzv-endpoint: a list of nodes (" + quote(v.endpoint) + ") needs the embedded control "
                       "plane (--nnodes up to 3 or more, or --rdzv-backend embedded); give one HOST:PORT");
    }
    if (o.rdzv_peers.size() > 1 && o.rdzv_port == 0) {
      throw UsageError("--rdzv-endpoint: port 0 in a list of nodes cannot be found by the others; give ports");
    }
  }
  if (!v.rdzv_conf.empty()) parse_rdzv_conf(v.rdzv_conf, o);
  if (!v.rdzv_host.empty()) o.rdzv_host_mode = parse_host_mode("--rdzv-host", v.rdzv_host);
  if (!o.rdzv_backend.empty() && o.rdzv_backend != "c10d" && o.rdzv_backend != "static" &&
      o.rdzv_backend != "ddprun" && o.rdzv_backend != "etcd" && o.rdzv_backend != "embedded") {
    throw UsageError("--rdzv-backend: " + quote(o.rdzv_backend) +
                     " is not supported (ddprun's own gRPC rendezvous: c10d, static, ddprun; embedded: the same, "
                     "surviving the loss of the node that serves it; or etcd, etcd-v2, etcd-v3: its state in etcd, "
                     "v3 API)");
  }
  if (etcd && o.standalone) throw UsageError("--standalone runs a private rendezvous; it cannot be used with --rdzv-backend etcd");
  if (o.rdzv_backend == "embedded") {
    if (o.standalone) {
      throw UsageError("--standalone runs a private rendezvous; it cannot be used with --rdzv-backend embedded");
    }
    if (v.endpoint.empty()) {
      throw UsageError("--rdzv-backend embedded: needs --rdzv-endpoint HOST:PORT, where the job's first node "
                       "starts its control plane (the same on every node)");
    }
    if (o.rdzv_id.empty()) {
      throw UsageError("--rdzv-id: needed with --rdzv-backend embedded; it names the job's control plane");
    }
  }
  if (o.max_nodes > 1 && v.endpoint.empty()) {
    throw UsageError("--nnodes " + v.nnodes + ": several nodes need --rdzv-endpoint HOST:PORT (the "
                     "same on every node) to find each other");
  }
  if (o.rdzv_id.empty() && !v.endpoint.empty() && (o.max_nodes > 1 || o.rdzv_host_mode == "off")) {
    throw UsageError("--rdzv-id: needed with --rdzv-endpoint on several nodes, so they find each other");
  }
  if (o.max_nodes > 1 && o.rdzv_port == 0) {
    throw UsageError("--rdzv-endpoint: port 0 cannot be found by the other nodes; give a port, "
                     "e.g. " + o.rdzv_host + ":29400");
  }
  if (o.standalone && o.max_nodes > 1) {
    throw UsageError("--standalone runs one node; it cannot be used with --nnodes " + v.nnodes);
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
  o.max_restarts = parse_int("--max-restarts", v.max_restarts, 0, 1000000);
  o.max_heals = parse_int("--max-heals", v.max_heals, 0, 1000000);
  o.verify_every = parse_int("--verify-every", v.verify_every, 0, 1000000000);
  o.monitor_interval_s = parse_seconds("--monitor-interval", v.monitor, false, 0.01, 3600);
  o.stop_timeout_s = parse_seconds("--stop-timeout", v.stop_timeout, true);
  // --shutdown-timeout (torchrun's name) wins over --stop-timeout, unless
  // only --stop-timeout is on the command line (the other from a variable).
  auto on_command_line = [&](const char* flag) {
    return std::find(given.begin(), given.end(), flag) != given.end();
  };
  if (!v.shutdown_timeout.empty() &&
      (on_command_line("--shutdown-timeout") || !on_command_line("--stop-timeout"))) {
    o.stop_timeout_s = parse_seconds("--shutdown-timeout", v.shutdown_timeout, true);
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
  if (o.straggler_action != "warn" && o.straggler_action != "replace") {
    throw UsageError("--straggler-action: expected warn or replace, got " + quote(o.straggler_action));
  }
  if (!v.local_ranks_filter.empty()) o.local_ranks_filter = parse_local_ranks(v.local_ranks_filter);
  o.duplicate_stdout_filters = parse_filters(v.dup_stdout);
  o.duplicate_stderr_filters = parse_filters(v.dup_stderr);
  if (!v.signals.empty()) o.signals_to_handle = parse_signals(v.signals);
  parse_hang_timeout(v.hang_timeout, o);
  o.progress_interval_s = parse_seconds("--progress-interval", v.progress_interval, true);
  o.master_port = parse_int("--master-port", v.master_port, 0, 65535);
  if (!v.metrics_port.empty()) o.metrics_port = parse_int("--metrics-port", v.metrics_port, 0, 65535);
  if (o.master_addr.empty()) throw UsageError("--master-addr: must not be empty");
  if (!v.tee.empty()) o.tee = parse_std_selection("--tee", v.tee);
  if (!v.redirects.empty()) o.redirects = parse_std_selection("--redirects", v.redirects);
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
