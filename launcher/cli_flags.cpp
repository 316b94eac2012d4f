#include "launcher/cli_flags.h"

#include <memory>

#include "launcher/version.h"

namespace ddprun {
namespace {

// Our description already shows the usage line; CLI11's own would say less.
class HelpFormatter : public CLI::Formatter {
 public:
  std::string make_usage(const CLI::App*, std::string) const override { return ""; }
};

}  // namespace

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

std::unique_ptr<CLI::App> make_ddprun_app(CliOptions& o, FlagValues& v) {
  auto app = std::make_unique<CLI::App>(
      "ddprun: launches and supervises data-parallel training workers, torchrun-style.\n"
      "Runs ENTRYPOINT once per worker with RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, ...\n"
      "set; arguments after ENTRYPOINT go to the workers. A .py ENTRYPOINT runs under\n"
      "$PYTHON_EXEC, else $DDPRUN_PYTHON, else $VIRTUAL_ENV/bin/python, else the Python\n"
      "environment pip installed ddprun into, else python3;\n"
      "other names are looked up in PATH, then next to ddprun. torchrun's flags work in\n"
      "both spellings (--nproc-per-node, --nproc_per_node), by unambiguous prefix\n"
      "(--nproc_per), and from PET_* variables (PET_NNODES=2); the command line wins.\n\n"
      "Usage: ddprun [OPTIONS] ENTRYPOINT [ARGS...]\n"
      "       ddprun rendezvous [--host ADDR] --port PORT   (a rendezvous on its own)\n"
      "  e.g. ddprun --nproc 4 train --epochs 2\n"
      "       ddprun --nproc 2 my_script.py --lr 0.1\n"
      "       ddprun --nnodes 2:4 --nproc 8 --rdzv-endpoint node0:29400 --rdzv-id job42 train",
      "ddprun");
  app->set_help_flag("-h,--help", "Print this help and exit");
  app->set_version_flag("--version", version_line());
  app->add_option("--print-completion,--print_completion", v.completion_shell,
                 "Print a completion script for SHELL (bash, zsh or tcsh) and exit")
      ->type_name("SHELL");
  app->prefix_command();
  // A repeated option: the last one wins, as with torchrun's argparse.
  app->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app->formatter(std::make_shared<HelpFormatter>());
  app->get_formatter()->column_width(40);

  auto* g = "Workers (docs/launching.md)";
  app->add_option("--nproc-per-node,--nproc_per_node,--nproc", o.nproc,
                 "Workers on this node: N, auto (GPUs, else CPUs), gpu or cpu [default: 1]")
      ->type_name("N|auto|gpu|cpu")
      ->group(g);
  app->add_option("--role", o.role, "Role name given to the workers (ROLE_NAME) [default: default]")
      ->type_name("NAME")
      ->group(g);
  app->add_flag("--no-python,--no_python", o.no_python,
               "Run ENTRYPOINT as a program even if it ends in .py")->group(g);
  app->add_flag("-m,--module", o.module, "ENTRYPOINT is a Python module (python3 -m)")->group(g);
  app->add_flag("--run-path,--run_path", o.run_path,
               "Run ENTRYPOINT as a Python file by path (torchrun: runpy.run_path), even with "
               "--no-python")->group(g);
  app->add_option("--start-method,--start_method", o.start_method,
                 "Accepted for torchrun compatibility: spawn, fork or forkserver (ddprun always "
                 "starts workers with fork+exec) [default: spawn]")
      ->type_name("METHOD")
      ->group(g);
  app->add_flag("--virtual-local-rank,--virtual_local_rank", o.virtual_local_rank,
               "LOCAL_RANK=0 in every worker, and CUDA_VISIBLE_DEVICES names only its own GPU")
      ->group(g);
  app->add_option("--numa-binding,--numa_binding", o.numa_binding,
                 "Bind each worker's CPUs and memory to the NUMA node of its GPU (or of its share "
                 "of the CPUs): node, socket, exclusive or core-complex")
      ->type_name("MODE")
      ->group(g);

  g = "Nodes and rendezvous (docs/multi-node.md; tokens and TLS: docs/security.md)";
  app->add_option("--nnodes", v.nnodes, "Number of nodes, N or MIN:MAX [default: 1]")->type_name("N|MIN:MAX")->group(g);
  app->add_option("--node-rank,--node_rank", v.node_rank, "Rank of this node")->type_name("N")->group(g);
  app->add_flag("--standalone", o.standalone,
               "Single node with a private rendezvous on a free port (the default)")->group(g);
  app->add_option("--rdzv-endpoint,--rdzv_endpoint", v.endpoint,
                 "HOST[:PORT] the rendezvous listens on [default: 127.0.0.1, a free port]")
      ->type_name("HOST:PORT")
      ->group(g);
  app->add_option("--rdzv-host,--rdzv_host", v.rdzv_host,
                 "Host the rendezvous here: auto (when --rdzv-endpoint is this machine's "
                 "address and free), on, off [default: auto]")
      ->type_name("auto|on|off")
      ->group(g);
  app->add_option("--rdzv-id,--rdzv_id", o.rdzv_id, "Job id (TORCHELASTIC_RUN_ID) [default: random]")->type_name("ID")
      ->group(g);
  app->add_option("--rdzv-backend,--rdzv_backend", o.rdzv_backend,
                 "c10d (from 3 nodes: embedded, else one host), static (one host), embedded (every node "
                 "serves; a Raft majority keeps the job when the serving node is lost), or etcd (also "
                 "etcd-v2, etcd-v3): the rendezvous' state and election in etcd, --rdzv-endpoint naming its members")
      ->type_name("NAME")
      ->group(g);
  app->add_option("--rdzv-conf,--rdzv_conf", v.rdzv_conf,
                 "join_timeout=S,last_call_timeout=S,keep_alive_interval=S,lease_timeout=S")
      ->type_name("K=V,...")
      ->group(g);
  app->add_option("--rdzv-token,--rdzv_token", o.rdzv_auth.token,
                 "Secret every node and worker must present to the rendezvous (better: "
                 "DDPRUN_RDZV_TOKEN or --rdzv-token-file) [default: one-node jobs make their own]")
      ->type_name("TOKEN")
      ->group(g);
  app->add_option("--rdzv-token-file,--rdzv_token_file", o.rdzv_auth.token_file,
                 "File holding the token (one line)")->type_name("FILE")->group(g);
  app->add_option("--rdzv-tls-cert,--rdzv_tls_cert", o.rdzv_auth.tls.cert,
                 "PEM certificate: the rendezvous' when hosting, this node's as a client")
      ->type_name("FILE")
      ->group(g);
  app->add_option("--rdzv-tls-key,--rdzv_tls_key", o.rdzv_auth.tls.key,
                 "PEM private key of --rdzv-tls-cert")->type_name("FILE")->group(g);
  app->add_option("--rdzv-tls-ca,--rdzv_tls_ca", o.rdzv_auth.tls.ca,
                 "PEM CA that signed the certificates: clients verify the rendezvous with it; "
                 "on the host it makes TLS mutual")
      ->type_name("FILE")
      ->group(g);
  app->add_option("--master-addr,--master_addr", o.master_addr,
                 "MASTER_ADDR for the workers [default: 127.0.0.1]")->type_name("ADDR")->group(g);
  app->add_option("--master-port,--master_port", v.master_port,
                 "MASTER_PORT for the workers [default: a free port]")->type_name("PORT")->group(g);
  app->add_option("--local-addr,--local_addr", o.local_addr,
                 "Address this node's workers bind their transport to [default: 127.0.0.1]")
      ->type_name("ADDR")
      ->group(g);

  g = "Supervision (docs/fault-tolerance.md)";
  app->add_option("--max-restarts,--max_restarts", v.max_restarts,
                 "Restarts of the worker group after a failure [default: 0]")->type_name("N")->group(g);
  app->add_option("--max-heals,--max_heals", v.max_heals,
                 "One node: replace a failed worker of a program that can heal (ddp::Healer) while the "
                 "others keep running, at most N times per rank; 0: every failure stops the group "
                 "[default: " + std::to_string(kDefaultMaxHeals) + "]")
      ->type_name("N")
      ->group(g);
  app->add_option("--verify-every,--verify_every", v.verify_every,
                 "Compare the ranks' parameters (a fingerprint of their bytes) every N optimizer steps of a "
                 "program that heals (ddp::Healer, ddprun.Healer), and their whole state after every heal: a "
                 "rank apart from the majority (a flipped bit, a wrong heal) is named and takes its state, one "
                 "found apart twice is replaced; no majority stops the job (as replicas apart do in a worker_lib "
                 "program without a Healer, compared every N forward passes). 0: never. The default is the "
                 "fewest steps whose cost stays within 0.5% of a step (measured: docs/fault-tolerance.md) "
                 "[default: " + std::to_string(kDefaultVerifyEvery) + "]")
      ->type_name("N")
      ->group(g);
  app->add_option("--straggler-action,--straggler_action", o.straggler_action,
                 "What to do with a rank the others keep waiting for (scored from every collective): warn "
                 "names it; replace swaps it for a fresh process through a heal (within --max-heals), "
                 "which helps when the slowness is the process's, not its GPU's or node's [default: warn]")
      ->type_name("warn|replace")
      ->group(g);
  app->add_option("--monitor-interval,--monitor_interval", v.monitor,
                 "Seconds between health checks; exits are seen at once [default: 0.1]")
      ->type_name("SECONDS")->group(g);
  app->add_option("--stop-timeout,--stop_timeout", v.stop_timeout,
                 "Seconds between SIGTERM and SIGKILL when stopping workers [default: 10]")
      ->type_name("SECONDS")
      ->group(g);

  app->add_option("--shutdown-timeout,--shutdown_timeout", v.shutdown_timeout,
                 "torchrun's name for --stop-timeout (wins over it when both are given)")
      ->type_name("SECONDS")
      ->group(g);
  app->add_option("--signals-to-handle,--signals_to_handle", v.signals,
                 "Accepted for torchrun compatibility: ddprun always forwards SIGTERM, SIGINT, "
                 "SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 to the workers")
      ->type_name("SIG,...")
      ->group(g);
  app->add_option("--event-log-handler,--event_log_handler", o.event_log_handler,
                 "Accepted for torchrun compatibility; ddprun logs its events itself (-v)")
      ->type_name("NAME")
      ->group(g);

  app->add_option("--hang-timeout,--hang_timeout", v.hang_timeout,
                 "When a worker_lib worker (or a PyTorch script's optimizer) that stops beating counts "
                 "as hung: auto learns the job's rhythm and fires after 10x the longest gap between "
                 "its heartbeats, never before 15 s (auto:SECONDS sets that floor); SECONDS fixes it; "
                 "0 turns it off [default: auto]")
      ->type_name("auto[:SECONDS]|SECONDS")
      ->group(g);

  app->add_option("--progress-interval,--progress_interval", v.progress_interval,
                 "Seconds between the progress lines rank 0's progress makes when stderr is not "
                 "a terminal (on a terminal: a status line) [default: 10; 0: off]")
      ->type_name("SECONDS")
      ->group(g);

  app->add_flag("--standby", o.standby,
               "Keep warm workers waiting for the next restart (worker_lib programs, and Python "
               "scripts: interpreters that imported torch) [default: on with --max-restarts > 0]")
      ->group(g);
  app->add_flag("--no-standby,--no_standby", o.no_standby, "Start fresh workers on every restart")
      ->group(g);

  g = "Output (docs/launching.md, docs/observability.md)";
  app->add_option("--log-dir,--log_dir", o.log_dir,
                 "Keep per-rank stdout/stderr/error files under DIR/attempt_N/rankR/ and the event log; "
                 "`ddprun report DIR` draws the job from it")
      ->type_name("DIR")->group(g);
  app->add_option("--metrics-port,--metrics_port", v.metrics_port,
                 "Serve the job's numbers (goodput, steps, heals, restarts, hangs, step times) on "
                 "http://HOST:PORT/metrics for Prometheus; 0 picks a free port and prints it "
                 "(docs/observability.md#metrics) [default: $DDPRUN_METRICS_PORT, else off]")
      ->type_name("PORT")->group(g);
  app->add_option("--trace", o.trace_dir,
                 "Record every rank's step phases (forward, backward, bucket all-reduces, ...) and "
                 "merge them into DIR/trace.json (Perfetto, chrome://tracing) with a summary table; "
                 "`ddprun trace-merge DIR` merges folders copied from several hosts")
      ->type_name("DIR")->group(g);
  app->add_option("--trace-steps,--trace_steps", o.trace_steps,
                 "With --trace: record only steps A..B-1 (either side may be empty)")
      ->type_name("A:B")->group(g);
  app->add_option("-t,--tee", v.tee, "Also write these streams to log files: 0-3 or LR:MASK,...")->type_name("MASK")
      ->group(g);
  app->add_option("-r,--redirects", v.redirects,
                 "Send these streams to log files only: 0 none, 1 stdout, 2 stderr, 3 both")
      ->type_name("MASK")
      ->group(g);
  app->add_option("--log-line-prefix-template,--log_line_prefix_template", o.line_prefix_template,
                 "Prefix of each console line: ${rank}, ${local_rank}, ${role_name} and ${hostname} "
                 "are filled in (default [rank${rank}]:)")
      ->type_name("TEMPLATE")
      ->group(g);
  app->add_option("--local-ranks-filter,--local_ranks_filter", v.local_ranks_filter,
                 "Only these local ranks' output reaches the console (log files get all): 0,1,...")
      ->type_name("LR,...")
      ->group(g);
  app->add_option("--duplicate-stdout-filters,--duplicate_stdout_filters", v.dup_stdout,
                 "Also copy stdout lines holding any of these words to filtered_stdout.log in "
                 "the log folder (\",,\" is a comma)")
      ->type_name("WORD,...")
      ->group(g);
  app->add_option("--duplicate-stderr-filters,--duplicate_stderr_filters", v.dup_stderr,
                 "The same for stderr (filtered_stderr.log)")
      ->type_name("WORD,...")
      ->group(g);
  app->add_option("--logs-specs,--logs_specs", o.logs_specs,
                 "Accepted for torchrun compatibility: torchrun's Python LogsSpecs plugins cannot "
                 "load here; --log-dir, --redirects and --tee say where logs go")
      ->type_name("NAME")
      ->group(g);
  app->add_flag("-v,--verbose", o.verbose, "Log what ddprun does")->group(g);
  app->add_flag("-q,--quiet", o.quiet, "Only log errors")->group(g);
  return app;
}

}  // namespace ddprun
