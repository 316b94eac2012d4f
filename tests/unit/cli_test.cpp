#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "launcher/cli.h"
#include "launcher/env_defaults.h"
#include "launcher/flag_matching.h"
#include "launcher/plan.h"

namespace ddprun {
namespace {

CliOptions parse(std::vector<std::string> args) {
  CliResult r = parse_command_line(args);
  EXPECT_EQ(r.kind, CliResult::kRun);
  return r.options;
}

// The UsageError message for args, or "" when they parse.
std::string error_of(std::vector<std::string> args) {
  try {
    parse_command_line(args);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

TEST(Cli, EntrypointAndItsArgumentsAreSeparatedFromOurs) {
  auto o = parse({"--nproc", "4", "train", "--epochs", "3", "--nproc", "2"});
  EXPECT_EQ(o.nproc, "4");
  EXPECT_EQ(o.entrypoint, "train");
  EXPECT_EQ(o.args, (std::vector<std::string>{"--epochs", "3", "--nproc", "2"}));
}

TEST(Cli, TorchrunSpellingsAreAccepted) {
  auto o = parse({"--nproc_per_node=3", "--max_restarts", "2", "--monitor_interval", "0.5",
                  "--rdzv_id", "job7", "--master_port", "1234", "--log_dir", "/tmp/x",
                  "--rdzv_backend", "c10d", "--standalone", "--no_python", "prog.py"});
  EXPECT_EQ(o.nproc, "3");
  EXPECT_EQ(o.max_restarts, 2);
  EXPECT_DOUBLE_EQ(o.monitor_interval_s, 0.5);
  EXPECT_EQ(o.rdzv_id, "job7");
  EXPECT_EQ(o.master_port, 1234);
  EXPECT_EQ(o.log_dir, "/tmp/x");
  EXPECT_TRUE(o.standalone);
  EXPECT_TRUE(o.no_python);
  auto dashed = parse({"--nproc-per-node", "auto", "--max-restarts=1", "x"});
  EXPECT_EQ(dashed.nproc, "auto");
  EXPECT_EQ(dashed.max_restarts, 1);
}

// --hang-timeout: learned by default (at least 15 s), auto:SECONDS sets
// that floor, a number fixes the limit, 0 turns detection off.
TEST(Cli, HangTimeoutIsLearnedUnlessANumberIsGiven) {
  auto o = parse({"p"});
  EXPECT_EQ(o.hang_timeout_s, 0);
  EXPECT_EQ(o.hang_auto_floor_s, 15);
  o = parse({"--hang-timeout", "auto:2.5", "p"});
  EXPECT_EQ(o.hang_timeout_s, 0);
  EXPECT_EQ(o.hang_auto_floor_s, 2.5);
  o = parse({"--hang-timeout", "30", "p"});
  EXPECT_EQ(o.hang_timeout_s, 30);
  EXPECT_EQ(o.hang_auto_floor_s, 0);
  o = parse({"--hang-timeout", "0", "p"});
  EXPECT_EQ(o.hang_timeout_s, 0);
  EXPECT_EQ(o.hang_auto_floor_s, 0);
  EXPECT_EQ(error_of({"--hang-timeout", "soon", "p"}),
            "--hang-timeout: expected auto, auto:SECONDS or a number of seconds (0: off), got 'soon'");
  EXPECT_EQ(error_of({"--hang-timeout", "auto:0", "p"}), "--hang-timeout auto:SECONDS: must be greater than 0, got 0");
  EXPECT_EQ(error_of({"--hang-timeout", "auto:", "p"}),
            "--hang-timeout auto:SECONDS: expected a number of seconds, got ''");
  EXPECT_EQ(error_of({"--hang-timeout", "-3", "p"}), "--hang-timeout: must be at least 0, got -3");
}

TEST(Cli, StragglerActionIsWarnOrReplace) {
  EXPECT_EQ(parse({"p"}).straggler_action, "warn");
  EXPECT_EQ(parse({"--straggler-action", "replace", "p"}).straggler_action, "replace");
  EXPECT_EQ(error_of({"--straggler-action", "kill", "p"}), "--straggler-action: expected warn or replace, got 'kill'");
}

TEST(Cli, DoubleDashBeforeTheEntrypointIsSkipped) {
  auto o = parse({"--nproc", "2", "--", "prog", "-x"});
  EXPECT_EQ(o.entrypoint, "prog");
  EXPECT_EQ(o.args, std::vector<std::string>{"-x"});
}

TEST(Cli, NnodesTakesNOrMinMax) {
  auto a = parse({"--nnodes", "1", "p"});
  EXPECT_EQ(a.min_nodes, 1);
  EXPECT_EQ(a.max_nodes, 1);
  auto b = parse({"--nnodes", "2:4", "--rdzv-endpoint", "h:1", "--rdzv-id", "j", "p"});
  EXPECT_EQ(b.min_nodes, 2);
  EXPECT_EQ(b.max_nodes, 4);
}

TEST(Cli, TeeAndRedirectsTakeMasksOrPerRankMaps) {
  auto o = parse({"--tee", "3", "--redirects", "0:1,2:2", "p"});
  EXPECT_EQ(o.tee.all, 3);
  EXPECT_EQ(o.redirects.all, 0);
  EXPECT_EQ(o.redirects.for_local_rank(0), 1);
  EXPECT_EQ(o.redirects.for_local_rank(1), 0);
  EXPECT_EQ(o.redirects.for_local_rank(2), 2);
}

TEST(Cli, RdzvConfAndEndpoint) {
  auto o = parse({"--rdzv-conf", "join_timeout=30,last_call_timeout=0.5", "--rdzv-endpoint",
                  "localhost:29500", "p"});
  EXPECT_DOUBLE_EQ(o.join_timeout_s, 30);
  EXPECT_DOUBLE_EQ(o.last_call_s, 0.5);
  EXPECT_EQ(o.rdzv_host, "localhost");
  EXPECT_EQ(o.rdzv_port, 29500);
  auto v6 = parse({"--rdzv-endpoint", "[::1]:7", "p"});
  EXPECT_EQ(v6.rdzv_host, "::1");
  EXPECT_EQ(v6.rdzv_port, 7);
  EXPECT_EQ(parse({"--rdzv-endpoint", "node0", "p"}).rdzv_port, 29400);
}

TEST(Cli, BadValuesNameTheFlagAndTheValue) {
  EXPECT_EQ(error_of({"--nproc", "abc", "p"}),
            "--nproc-per-node: expected a positive integer, auto, gpu or cpu, got 'abc'");
  EXPECT_EQ(error_of({"--nproc", "0", "p"}),
            "--nproc-per-node: expected a positive integer, auto, gpu or cpu, got '0'");
  EXPECT_EQ(error_of({"--nnodes", "3:2", "p"}), "--nnodes: MIN:MAX needs MIN <= MAX, got '3:2'");
  EXPECT_EQ(error_of({"--max-restarts", "-1", "p"}),
            "--max-restarts: -1 is out of range [0, 1000000]");
  EXPECT_EQ(error_of({"--master-port", "70000", "p"}),
            "--master-port: 70000 is out of range [0, 65535]");
  EXPECT_EQ(error_of({"--monitor-interval", "0", "p"}),
            "--monitor-interval: must be greater than 0, got 0");
  EXPECT_EQ(error_of({"--monitor-interval", "soon", "p"}),
            "--monitor-interval: expected a number of seconds, got 'soon'");
  EXPECT_EQ(error_of({"--progress-interval", "-1", "p"}),
            "--progress-interval: must be at least 0, got -1");
  EXPECT_EQ(error_of({"--progress-interval", "often", "p"}),
            "--progress-interval: expected a number of seconds, got 'often'");
  EXPECT_NE(error_of({"--tee", "5", "p"}).find("--tee: expected 0 (none)"), std::string::npos);
  EXPECT_EQ(error_of({"--rdzv-conf", "bogus=1", "p"}),
            "--rdzv-conf: unknown key 'bogus' (known: join_timeout, last_call_timeout, "
            "keep_alive_interval, lease_timeout, keep_alive_max_attempt, is_host, "
            "max_value_bytes, max_job_keys, max_job_bytes, max_jobs, max_waits_per_client, "
            "idle_timeout)");
  EXPECT_EQ(error_of({"--rdzv-host", "maybe", "p"}),
            "--rdzv-host: expected on, off or auto, got 'maybe'");
  EXPECT_EQ(error_of({"--nnodes", "2", "--rdzv-id", "j", "p"}),
            "--nnodes 2: several nodes need --rdzv-endpoint HOST:PORT (the same on every node) to "
            "find each other");
  EXPECT_EQ(error_of({"--rdzv-conf", "keep_alive_interval=1,lease_timeout=1", "p"}),
            "--rdzv-conf: lease_timeout (1.000 s) must be at least twice keep_alive_interval "
            "(1.000 s)");
  EXPECT_EQ(error_of({"--rdzv-backend", "zookeeper", "p"}).rfind("--rdzv-backend: 'zookeeper'", 0), 0u);
  // etcd (and torchrun's names for it) needs its members and the job's id.
  EXPECT_EQ(error_of({"--rdzv-backend", "etcd-v2", "p"}),
            "--rdzv-backend etcd: needs --rdzv-endpoint naming the etcd members (HOST:PORT[,HOST:PORT...])");
  EXPECT_EQ(error_of({"--rdzv-backend", "etcd", "--rdzv-endpoint", "10.0.0.1:2379", "p"}),
            "--rdzv-id: needed with --rdzv-backend etcd; it names the job's keys in etcd");
  EXPECT_EQ(error_of({"--rdzv-backend", "etcd", "--rdzv-endpoint", "10.0.0.1:2379,10.0.0.2", "--rdzv-id", "j", "p"}),
            "--rdzv-endpoint: etcd endpoint '10.0.0.2' is not host:port (e.g. 10.0.0.1:2379)");
  EXPECT_EQ(error_of({"--rdzv-backend", "etcd", "--rdzv-endpoint", "https://e:2379", "--rdzv-id", "j", "p"})
                .rfind("--rdzv-endpoint: etcd endpoint 'https://e:2379': https is not supported", 0),
            0u);
  // The embedded control plane needs the endpoint where it starts and the job's id.
  EXPECT_EQ(error_of({"--rdzv-backend", "embedded", "--nnodes", "3", "p"}),
            "--rdzv-backend embedded: needs --rdzv-endpoint HOST:PORT, where the job's first node starts its "
            "control plane (the same on every node)");
  EXPECT_EQ(error_of({"--rdzv-backend", "embedded", "--rdzv-endpoint", "10.0.0.1:29400", "p"}),
            "--rdzv-id: needed with --rdzv-backend embedded; it names the job's control plane");
  EXPECT_EQ(error_of({"--rdzv-backend", "embedded", "--standalone", "p"}),
            "--standalone runs a private rendezvous; it cannot be used with --rdzv-backend embedded");
  EXPECT_EQ(error_of({"--node-rank", "1", "p"}), "--node-rank: 1 is out of range [0, 0]");
  EXPECT_EQ(error_of({"--frobnicate", "p"}), "unknown option '--frobnicate' (see ddprun --help)");
  EXPECT_EQ(error_of({"--nproc", "2"}),
            "missing ENTRYPOINT, the program to run (e.g. ddprun --nproc 4 train)");
  EXPECT_EQ(error_of({"-m", "--no-python", "p"}),
            "--module and --no-python cannot be used together");
  EXPECT_NE(error_of({"--nproc"}), "");  // a flag without its value
}

TEST(Cli, CarelessValuesAreRefusedWithTheFlagNamed) {
  // Sane bounds: a monitor interval of 1e-300 s would spin a core.
  EXPECT_EQ(error_of({"--monitor-interval", "1e-300", "p"}),
            "--monitor-interval: 1e-300 s is outside [0.01, 3600] s");
  EXPECT_EQ(error_of({"--stop-timeout", "1e9", "p"}),
            "--stop-timeout: 1e9 s is outside [0.001, 2.592e+06] s (0 turns it off)");
  EXPECT_EQ(error_of({"--rdzv-conf", "keep_alive_interval=1e-9", "p"}),
            "--rdzv-conf keep_alive_interval: 1e-9 s is outside [0.001, 2.592e+06] s");
  EXPECT_EQ(error_of({"--log-dir", "", "p"}), "--log-dir: must not be empty");
  EXPECT_EQ(error_of({"--rdzv-id", std::string(300, 'j'), "p"}),
            "--rdzv-id: at most 128 characters, got 300");
  EXPECT_EQ(error_of({"--rdzv-id", "job\xff", "p"}),
            "--rdzv-id: only printable ASCII without '/' or spaces; byte 4 is 0xff");
  EXPECT_EQ(error_of({"--rdzv-id", "a\x1b[2Jb", "p"}),
            "--rdzv-id: only printable ASCII without '/' or spaces; byte 2 is 0x1b");
  EXPECT_EQ(error_of({"--rdzv-conf", "max_jobs=0", "p"}),
            "--rdzv-conf max_jobs: 0 is out of range [1, 1000000]");
}

TEST(Cli, HelpAndVersion) {
  auto h = parse_command_line({"--help"});
  EXPECT_EQ(h.kind, CliResult::kHelp);
  EXPECT_NE(h.text.find("--nproc-per-node"), std::string::npos);
  EXPECT_NE(h.text.find("ENTRYPOINT"), std::string::npos);
  EXPECT_EQ(parse_command_line({"--version"}).kind, CliResult::kVersion);
}

HostFacts facts(int cpus, int gpus) {
  HostFacts f;
  f.cpu_count = cpus;
  f.gpu_count = gpus;
  f.path_env = "/usr/bin:/bin";
  f.python = "sh";  // any program found on PATH stands in for python3
  return f;
}

TEST(Plan, NprocResolvesLikeTorchrun) {
  EXPECT_EQ(resolve_nproc("3", facts(8, 2)), 3);
  EXPECT_EQ(resolve_nproc("cpu", facts(8, 2)), 8);
  EXPECT_EQ(resolve_nproc("gpu", facts(8, 2)), 2);
  EXPECT_EQ(resolve_nproc("auto", facts(8, 2)), 2);
  EXPECT_EQ(resolve_nproc("auto", facts(8, 0)), 8);
  try {
    resolve_nproc("gpu", facts(8, 0));
    FAIL() << "gpu without GPUs must fail";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--nproc-per-node gpu: no GPU"), std::string::npos);
  }
}

TEST(Plan, PythonScriptsRunUnderTheInterpreterUnbuffered) {
  auto plan = make_launch_plan(parse({"--nproc", "2", "job.py", "--lr", "1"}), facts(2, 0));
  EXPECT_EQ(plan.agent.program, "/usr/bin/sh");
  EXPECT_EQ(plan.agent.argv, (std::vector<std::string>{"sh", "-u", "job.py", "--lr", "1"}));
  auto mod = make_launch_plan(parse({"-m", "pkg.train"}), facts(2, 0));
  EXPECT_EQ(mod.agent.argv, (std::vector<std::string>{"sh", "-u", "-m", "pkg.train"}));
  auto direct = make_launch_plan(parse({"--no-python", "true", "x.py"}), facts(2, 0));
  EXPECT_EQ(direct.agent.program, "/usr/bin/true");
  EXPECT_EQ(direct.agent.argv, (std::vector<std::string>{"true", "x.py"}));
}

TEST(Plan, ProgramsAreFoundInPathThenInExtraDirs) {
  HostFacts f = facts(2, 0);
  f.path_env = "/nonexistent";
  f.extra_program_dirs = {"/usr/bin"};
  EXPECT_EQ(make_launch_plan(parse({"true"}), f).agent.program, "/usr/bin/true");
  try {
    make_launch_plan(parse({"no-such-program-xyz"}), f);
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_EQ(std::string(e.what()),
              "cannot find program no-such-program-xyz (not an executable file, not in PATH nor "
              "next to ddprun)");
  }
}

TEST(Plan, MultiNodeJobsJoinTheEndpointAndHoldALease) {
  auto plan = make_launch_plan(
      parse({"--nnodes", "2:3", "--rdzv-endpoint", "node0:29500", "--rdzv-id", "j",
             "--max-restarts", "4", "--rdzv-conf", "keep_alive_interval=0.5,keep_alive_max_attempt=6",
             "true"}),
      facts(2, 0));
  EXPECT_FALSE(plan.private_rdzv);
  EXPECT_EQ(plan.rdzv_listen_host, "node0");
  EXPECT_EQ(plan.rdzv_listen_port, 29500);
  EXPECT_EQ(plan.rdzv_host_mode, "auto");
  EXPECT_EQ(plan.agent.rdzv, (RoundSettings{2, 3, std::chrono::milliseconds(1000), 4}));
  EXPECT_EQ(plan.agent.keep_alive_interval.count(), 500);
  EXPECT_EQ(plan.agent.lease_timeout.count(), 3000);
  // One node on its own keeps its private rendezvous and holds no lease.
  auto one = make_launch_plan(parse({"true"}), facts(2, 0));
  EXPECT_TRUE(one.private_rdzv);
  EXPECT_EQ(one.agent.lease_timeout.count(), 0);
}

// torchrun's etcd backend names: the control plane in etcd; every agent,
// even a lone one, runs its own rendezvous service and holds a lease.
TEST(Plan, EtcdJobsNameTheMembersAndHoldALease) {
  for (const char* backend : {"etcd", "etcd-v2", "etcd-v3"}) {
    auto plan = make_launch_plan(parse({"--nnodes", "1:3", "--rdzv-backend", backend, "--rdzv-endpoint",
                                        "http://e1:2379,e2:2379", "--rdzv-id", "j", "true"}),
                                 facts(2, 0));
    EXPECT_FALSE(plan.private_rdzv) << backend;
    EXPECT_EQ(plan.etcd_endpoints, (std::vector<std::string>{"e1:2379", "e2:2379"})) << backend;
    EXPECT_EQ(plan.rdzv_listen_host, "e1") << backend;
    EXPECT_EQ(plan.agent.lease_timeout.count(), 3000) << backend;
  }
  EXPECT_TRUE(make_launch_plan(parse({"true"}), facts(2, 0)).etcd_endpoints.empty());
}

// torchrun's default backend: the embedded control plane once a job may
// span 3 nodes (a majority survives losing the serving one); one host below
// that, and whenever `static` or `ddprun` is named.
TEST(Plan, ThreeOrMoreNodesGetTheEmbeddedControlPlaneByDefault) {
  auto embedded = [](std::vector<std::string> args) {
    args.insert(args.end(), {"--rdzv-endpoint", "10.0.0.1:29400", "--rdzv-id", "j", "true"});
    return make_launch_plan(parse(args), facts(2, 0)).embedded_control_plane;
  };
  EXPECT_TRUE(embedded({"--nnodes", "3"}));
  EXPECT_TRUE(embedded({"--nnodes", "2:4"}));
  EXPECT_TRUE(embedded({"--nnodes", "3", "--rdzv-backend", "c10d"}));
  EXPECT_TRUE(embedded({"--nnodes", "2", "--rdzv-backend", "embedded"}));
  EXPECT_FALSE(embedded({"--nnodes", "2"}));
  EXPECT_FALSE(embedded({"--nnodes", "3", "--rdzv-backend", "static"}));
  EXPECT_FALSE(embedded({"--nnodes", "3", "--rdzv-backend", "ddprun"}));
  // A list of nodes: each serves at its entry; the first starts the job.
  auto plan = make_launch_plan(parse({"--nnodes", "3", "--rdzv-endpoint", "10.0.0.1:29400,10.0.0.2:29500", "--rdzv-id",
                                      "j", "true"}),
                               facts(2, 0));
  EXPECT_EQ(plan.rdzv_peers,
            (std::vector<std::pair<std::string, int>>{{"10.0.0.1", 29400}, {"10.0.0.2", 29500}}));
  EXPECT_EQ(plan.rdzv_listen_host, "10.0.0.1");
  EXPECT_EQ(plan.rdzv_listen_port, 29400);
  // Careless use: a list without the embedded control plane, an empty entry.
  EXPECT_EQ(error_of({"--nnodes", "2", "--rdzv-endpoint", "a:1,b:2", "--rdzv-id", "j", "p"}),
            "--rdzv-endpoint: a list of nodes ('a:1,b:2') needs the embedded control plane (--nnodes up to 3 or "
            "more, or --rdzv-backend embedded); give one HOST:PORT");
  EXPECT_EQ(error_of({"--nnodes", "3", "--rdzv-endpoint", "a:1,,b:2", "--rdzv-id", "j", "p"}),
            "--rdzv-endpoint: an empty entry in 'a:1,,b:2'");
}

TEST(Plan, CarriesSettingsToTheAgent) {
  auto plan = make_launch_plan(
      parse({"--nproc", "3", "--max-restarts", "2", "--stop-timeout", "1.5", "--role", "trainer",
             "--rdzv-id", "abc", "--master-addr", "10.0.0.1", "--master-port", "4000", "true"}),
      facts(2, 1));
  EXPECT_EQ(plan.agent.nproc, 3);
  EXPECT_EQ(plan.agent.rdzv.max_restarts, 2);
  EXPECT_EQ(plan.agent.stop_timeout.count(), 1500);
  EXPECT_EQ(plan.agent.progress_interval.count(), 10000);  // the default
  EXPECT_EQ(make_launch_plan(parse({"--progress-interval", "0.5", "true"}), facts(2, 1))
                .agent.progress_interval.count(),
            500);
  EXPECT_EQ(make_launch_plan(parse({"--progress-interval", "0", "true"}), facts(2, 1))
                .agent.progress_interval.count(),
            0);
  EXPECT_EQ(plan.agent.role, "trainer");
  EXPECT_EQ(plan.agent.run_id, "abc");
  EXPECT_EQ(plan.agent.master_addr, "10.0.0.1");
  EXPECT_EQ(plan.agent.master_port, 4000);
  EXPECT_FALSE(plan.agent.wants_nccl_id);  // worker rank 0 makes NCCL ids, even with a GPU
  EXPECT_EQ(plan.rdzv_listen_host, "127.0.0.1");
  EXPECT_EQ(plan.rdzv_listen_port, 0);
  EXPECT_EQ(random_run_id().size(), 8u);
}

TEST(Plan, CudaVisibleDevicesCanHideGpus) {
  EXPECT_EQ(count_gpus(""), 0);
  EXPECT_EQ(count_gpus("-1"), 0);
  EXPECT_LE(count_gpus("0"), 1);
}

TEST(Plan, FreePortsCanBeBound) {
  int port = pick_free_port();
  EXPECT_GT(port, 0);
  EXPECT_LT(port, 65536);
}

TEST(Plan, SettingsThatCannotApplyToThisNodeAreUsageErrors) {
  auto plan_error = [](std::vector<std::string> args) {
    try {
      make_launch_plan(parse(args), facts(2, 0));
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(plan_error({"--redirects", "5:3", "true"}),
            "--redirects: local rank 5 does not exist; this node runs 1 worker(s), local ranks 0 "
            "to 0");
  EXPECT_EQ(plan_error({"--nproc", "2", "--tee", "1:1,2:3", "true"}),
            "--tee: local rank 2 does not exist; this node runs 2 worker(s), local ranks 0 to 1");
  EXPECT_EQ(plan_error({"--nnodes", "2", "--rdzv-endpoint", "h:29400", "--rdzv-id", "j",
                        "--master-port", "29400", "true"}),
            "--master-port: 29400 is the rendezvous' port too (--rdzv-endpoint); pick another");
  EXPECT_EQ(plan_error({"--nproc", "2", "--redirects", "1:3", "true"}), "");
}

TEST(Plan, OneNodeJobsMakeTheirOwnTokenAndMultiNodeJobsTakeTheUsers) {
  auto one = make_launch_plan(parse({"true"}), facts(2, 0));
  EXPECT_EQ(one.agent.rdzv_auth.token.size(), 64u);
  EXPECT_NE(one.agent.rdzv_auth.token, make_launch_plan(parse({"true"}), facts(2, 0)).agent.rdzv_auth.token);
  const std::vector<std::string> multi{"--nnodes", "2", "--rdzv-endpoint", "h:29400",
                                       "--rdzv-id", "j", "true"};
  HostFacts f = facts(2, 0);
  auto open = make_launch_plan(parse(multi), f);
  EXPECT_EQ(open.agent.rdzv_auth.token, "");
  ASSERT_EQ(open.warnings.size(), 1u);
  EXPECT_NE(open.warnings[0].find("--rdzv-token"), std::string::npos);
  f.rdzv_token = "from-env";
  auto guarded = make_launch_plan(parse(multi), f);
  EXPECT_EQ(guarded.agent.rdzv_auth.token, "from-env");
  EXPECT_TRUE(guarded.warnings.empty());
  std::vector<std::string> flag = multi;
  flag.insert(flag.begin(), {"--rdzv-token", "from-flag"});
  auto on_command_line = make_launch_plan(parse(flag), f);
  EXPECT_EQ(on_command_line.agent.rdzv_auth.token, "from-flag");
  ASSERT_EQ(on_command_line.warnings.size(), 1u);  // visible in ps
  EXPECT_NE(on_command_line.warnings[0].find("ps"), std::string::npos);
}

// torchrun drop-in compatibility: flags, prefixes, PET_* variables.

CliOptions parse_with(std::vector<std::string> args, std::vector<std::string> environment) {
  CliResult r = parse_command_line(args, pet_default_args(environment));
  EXPECT_EQ(r.kind, CliResult::kRun);
  return r.options;
}

std::string error_with(std::vector<std::string> args, std::vector<std::string> environment) {
  try {
    parse_command_line(args, pet_default_args(environment));
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

TEST(TorchrunCli, EveryTorchrunTwoFlagInBothSpellings) {
  for (const char* spelling : {"dash", "under"}) {
    const bool dash = std::string(spelling) == "dash";
    auto n = [&](std::string name) {
      if (!dash) std::replace(name.begin(), name.end(), '-', '_');
      return "--" + name;
    };
    SCOPED_TRACE(spelling);
    auto o = parse({n("start-method"), "fork", n("run-path"), n("local-ranks-filter"), "0,2",
                    n("logs-specs"), "custom", n("event-log-handler"), "console",
                    n("signals-to-handle"), "SIGTERM,SIGUSR1", n("shutdown-timeout"), "7",
                    n("virtual-local-rank"), n("numa-binding"), "exclusive",
                    n("duplicate-stdout-filters"), "loss,,acc,step", n("duplicate-stderr-filters"),
                    "warn", n("nproc-per-node"), "2", n("max-restarts"), "1",
                    n("monitor-interval"), "0.5", n("node-rank"), "0", n("master-addr"), "h",
                    n("master-port"), "1234", n("local-addr"), "127.0.0.1", n("rdzv-backend"),
                    "c10d", n("rdzv-id"), "j", n("rdzv-conf"), "join_timeout=5", n("log-dir"),
                    "/tmp/l", n("no-python"), "--role", "trainer", "-r", "1", "-t", "2",
                    "/abs/job.py"});
    EXPECT_EQ(o.start_method, "fork");
    EXPECT_TRUE(o.run_path);
    EXPECT_FALSE(o.no_python);  // --run-path takes precedence, as in torchrun
    EXPECT_TRUE(runs_under_python(o));
    EXPECT_EQ(o.local_ranks_filter, (std::vector<int>{0, 2}));
    EXPECT_EQ(o.logs_specs, "custom");
    EXPECT_EQ(o.event_log_handler, "console");
    EXPECT_EQ(o.signals_to_handle, (std::vector<std::string>{"SIGTERM", "SIGUSR1"}));
    EXPECT_DOUBLE_EQ(o.stop_timeout_s, 7);
    EXPECT_TRUE(o.virtual_local_rank);
    EXPECT_EQ(o.numa_binding, "exclusive");
    EXPECT_EQ(o.duplicate_stdout_filters, (std::vector<std::string>{"loss,acc", "step"}));
    EXPECT_EQ(o.duplicate_stderr_filters, (std::vector<std::string>{"warn"}));
    EXPECT_EQ(o.nproc, "2");
    EXPECT_EQ(o.max_restarts, 1);
    EXPECT_EQ(o.master_addr, "h");
    EXPECT_EQ(o.master_port, 1234);
    EXPECT_EQ(o.role, "trainer");
    EXPECT_EQ(o.redirects.all, 1);
    EXPECT_EQ(o.tee.all, 2);
    EXPECT_EQ(o.entrypoint, "/abs/job.py");
  }
  auto m = parse({"-m", "--standalone", "--nnodes", "1", "pkg.mod"});
  EXPECT_TRUE(m.module);
  EXPECT_TRUE(m.standalone);
}

TEST(TorchrunCli, NewFlagsCheckTheirValues) {
  EXPECT_EQ(error_of({"--start-method", "thread", "p"}),
            "--start-method: expected spawn, fork or forkserver, got 'thread'");
  EXPECT_EQ(error_of({"--numa-binding", "yes", "p"}),
            "--numa-binding: expected node, socket, exclusive or core-complex, got 'yes'");
  for (const char* mode : {"node", "socket", "exclusive", "core-complex"}) {
    EXPECT_EQ(parse({"--numa-binding", mode, "p"}).numa_binding, mode);
  }
  EXPECT_EQ(error_of({"--local-ranks-filter", "0,x", "p"}),
            "--local-ranks-filter: expected comma-separated local ranks (e.g. 0,1,2), got '0,x'");
  EXPECT_EQ(error_of({"--signals-to-handle", "SIGTERM,SIGALRM", "p"}).rfind(
                "--signals-to-handle: 'SIGALRM' is not one ddprun handles", 0),
            0u);
  EXPECT_EQ(error_of({"--shutdown-timeout", "soon", "p"}),
            "--shutdown-timeout: expected a number of seconds, got 'soon'");
  EXPECT_EQ(error_of({"--nproc-per-node", "xpu", "p"}).rfind("--nproc-per-node xpu: no XPU is visible here", 0),
            0u);
  // --shutdown-timeout wins over --stop-timeout, whatever the order.
  EXPECT_DOUBLE_EQ(parse({"--shutdown-timeout", "3", "--stop-timeout", "9", "p"}).stop_timeout_s, 3);
}

TEST(TorchrunCli, UnambiguousPrefixesStandForTheWholeFlag) {
  auto o = parse({"--nproc_per", "3", "--max-rest=2", "--rdzv_end", "h:5", "--monitor", "0.5",
                  "--virtual", "--numa", "node", "p", "--nproc_per", "9"});
  EXPECT_EQ(o.nproc, "3");
  EXPECT_EQ(o.max_restarts, 2);
  EXPECT_EQ(o.rdzv_host, "h");
  EXPECT_DOUBLE_EQ(o.monitor_interval_s, 0.5);
  EXPECT_TRUE(o.virtual_local_rank);
  EXPECT_EQ(o.numa_binding, "node");
  // What follows the entrypoint is the workers', untouched.
  EXPECT_EQ(o.args, (std::vector<std::string>{"--nproc_per", "9"}));
  // An exact name wins over longer ones it is a prefix of (--nproc, --nnodes).
  EXPECT_EQ(parse({"--nproc", "4", "p"}).nproc, "4");
}

TEST(TorchrunCli, AmbiguousPrefixesListTheCandidates) {
  EXPECT_EQ(error_of({"--master", "h", "p"}),
            "ambiguous option '--master' could match --master-addr, --master-port");
  EXPECT_EQ(error_of({"--log=x", "p"}),
            "ambiguous option '--log' could match --log-dir, --log-line-prefix-template, --logs-specs");
  // Both spellings of one flag are one candidate, not two.
  EXPECT_EQ(parse({"--local_ranks", "0", "p"}).local_ranks_filter, std::vector<int>{0});
}

TEST(TorchrunCli, UnknownFlagsSuggestTheNearestOne) {
  EXPECT_EQ(error_of({"--nprocs", "2", "p"}),
            "unknown option '--nprocs' (did you mean --nproc-per-node?)");
  EXPECT_EQ(error_of({"--max_restart_count", "2", "p"}),
            "unknown option '--max_restart_count' (see ddprun --help)");
  EXPECT_EQ(error_of({"--rdvz-id", "j", "p"}), "unknown option '--rdvz-id' (did you mean --rdzv-id?)");
  EXPECT_EQ(error_of({"--monitor-intervall", "1", "p"}),
            "unknown option '--monitor-intervall' (did you mean --monitor-interval?)");
  EXPECT_EQ(error_of({"-x", "p"}), "unknown option '-x' (see ddprun --help)");
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
}

TEST(TorchrunCli, PetVariablesConfigureTheLauncher) {
  auto o = parse_with({"p"}, {"PET_NPROC_PER_NODE=3", "PET_MAX_RESTARTS=2", "PET_RDZV_ENDPOINT=h:7",
                              "PET_MASTER_ADDR=m", "PET_MONITOR_INTERVAL=0.5", "PET_ROLE=r",
                              "PET_START_METHOD=fork", "PET_LOCAL_RANKS_FILTER=1",
                              "PET_VIRTUAL_LOCAL_RANK=1", "PET_NO_PYTHON=0", "PET_SHUTDOWN_TIMEOUT=4",
                              "OTHER=1"});
  EXPECT_EQ(o.nproc, "3");
  EXPECT_EQ(o.max_restarts, 2);
  EXPECT_EQ(o.rdzv_host, "h");
  EXPECT_EQ(o.rdzv_port, 7);
  EXPECT_EQ(o.master_addr, "m");
  EXPECT_DOUBLE_EQ(o.monitor_interval_s, 0.5);
  EXPECT_EQ(o.role, "r");
  EXPECT_EQ(o.start_method, "fork");
  EXPECT_EQ(o.local_ranks_filter, std::vector<int>{1});
  EXPECT_TRUE(o.virtual_local_rank);
  EXPECT_FALSE(o.no_python);
  EXPECT_DOUBLE_EQ(o.stop_timeout_s, 4);
  auto multi = parse_with({"p"}, {"PET_NNODES=2", "PET_RDZV_ENDPOINT=h:29400", "PET_RDZV_ID=j",
                                  "PET_NODE_RANK=1", "PET_STANDALONE=0"});
  EXPECT_EQ(multi.max_nodes, 2);
  EXPECT_EQ(multi.node_rank, 1);
  EXPECT_EQ(multi.rdzv_id, "j");
  EXPECT_FALSE(multi.standalone);
  EXPECT_TRUE(parse_with({"p"}, {"PET_STANDALONE=1"}).standalone);
  EXPECT_TRUE(parse_with({"p"}, {"PET_MODULE=1"}).module);
  EXPECT_EQ(parse_with({"p"}, {"PET_LOG_DIR="}).log_dir, "");  // set but empty: not set
}

TEST(TorchrunCli, TorchElasticShutdownTimeoutIsTheLastFallback) {
  EXPECT_DOUBLE_EQ(parse_with({"p"}, {"TORCH_ELASTIC_SHUTDOWN_TIMEOUT=5"}).stop_timeout_s, 5);
  EXPECT_DOUBLE_EQ(
      parse_with({"p"}, {"PET_SHUTDOWN_TIMEOUT=6", "TORCH_ELASTIC_SHUTDOWN_TIMEOUT=5"}).stop_timeout_s, 6);
  EXPECT_DOUBLE_EQ(
      parse_with({"--shutdown_timeout", "7", "p"}, {"TORCH_ELASTIC_SHUTDOWN_TIMEOUT=5"}).stop_timeout_s, 7);
  // ddprun's own flag on the command line beats the variables too.
  EXPECT_DOUBLE_EQ(parse_with({"--stop-timeout", "8", "p"}, {"PET_SHUTDOWN_TIMEOUT=6"}).stop_timeout_s, 8);
  EXPECT_EQ(error_with({"p"}, {"TORCH_ELASTIC_SHUTDOWN_TIMEOUT=x"}),
            "TORCH_ELASTIC_SHUTDOWN_TIMEOUT: expected a number of seconds, got 'x'");
}

TEST(TorchrunCli, TheCommandLineWinsOverPetVariables) {
  auto o = parse_with({"--nproc_per_node", "4", "--max_rest", "1", "p"},
                      {"PET_NPROC_PER_NODE=3", "PET_MAX_RESTARTS=x"});
  EXPECT_EQ(o.nproc, "4");
  EXPECT_EQ(o.max_restarts, 1);  // the bad variable is overridden, not an error
  EXPECT_EQ(parse_with({"--tee", "1", "p"}, {"PET_TEE=3"}).tee.all, 1);
}

TEST(TorchrunCli, ErrorsInPetVariablesNameTheVariable) {
  EXPECT_EQ(error_with({"p"}, {"PET_NNODES=x"}), "PET_NNODES: expected an integer, got 'x'");
  EXPECT_EQ(error_with({"p"}, {"PET_NPROC_PER_NODE=many"}),
            "PET_NPROC_PER_NODE: expected a positive integer, auto, gpu or cpu, got 'many'");
  EXPECT_EQ(error_with({"p"}, {"PET_MASTER_PORT=70000"}),
            "PET_MASTER_PORT: 70000 is out of range [0, 65535]");
  EXPECT_EQ(error_with({"p"}, {"PET_STANDALONE=yes"}), "PET_STANDALONE: expected 0 or 1, got 'yes'");
  EXPECT_EQ(error_with({"p"}, {"PET_START_METHOD=thread"}),
            "PET_START_METHOD: expected spawn, fork or forkserver, got 'thread'");
  // The same value on the command line is the flag's error.
  EXPECT_EQ(error_with({"--nnodes", "x", "p"}, {}), "--nnodes: expected an integer, got 'x'");
}

TEST(Plan, PythonInterpreterChoice) {
  using P = std::pair<std::string, std::string>;
  EXPECT_EQ(choose_python({"PYTHON_EXEC=/opt/py", "DDPRUN_PYTHON=/x/py", "VIRTUAL_ENV=/usr"}),
            (P{"/opt/py", "PYTHON_EXEC"}));
  EXPECT_EQ(choose_python({"DDPRUN_PYTHON=/x/py", "VIRTUAL_ENV=/usr"}), (P{"/x/py", "DDPRUN_PYTHON"}));
  // /usr/bin/python stands in for a virtualenv's interpreter where it exists.
  if (access("/usr/bin/python", X_OK) == 0) {
    EXPECT_EQ(choose_python({"VIRTUAL_ENV=/usr"}).first, "/usr/bin/python");
  }
  EXPECT_EQ(choose_python({"VIRTUAL_ENV=/nonexistent"}), (P{"python3", "python3 from PATH"}));
  EXPECT_EQ(choose_python({"PYTHON_EXEC="}), (P{"python3", "python3 from PATH"}));
}

// A wheel's ddprun run by its path, its venv not activated: the venv's
// Python runs the scripts (the one with the user's PyTorch and ddprun's
// package), as torchrun's own interpreter would, not python3 from PATH.
TEST(Plan, AWheelsDdprunRunsScriptsWithThePythonItIsInstalledIn) {
  using P = std::pair<std::string, std::string>;
  namespace fs = std::filesystem;
  char made[] = "/tmp/ddprun-plan-venv.XXXXXX";
  ASSERT_NE(mkdtemp(made), nullptr);
  const fs::path venv = made;
  const fs::path scripts = venv / "lib" / "python3.11" / "site-packages" / "ddprun.scripts";
  fs::create_directories(scripts);
  fs::create_directories(venv / "bin");
  const std::string python = (venv / "bin" / "python3.11").string();
  EXPECT_EQ(choose_python({}, scripts.string()), (P{"python3", "python3 from PATH"})) << "no interpreter there yet";
  std::ofstream(python) << "#!/bin/sh\n";
  fs::permissions(python, fs::perms::owner_all);
  EXPECT_EQ(choose_python({}, scripts.string()), (P{python, "the Python environment ddprun is installed in"}));
  EXPECT_EQ(choose_python({}, scripts.string() + "/"), (P{python, "the Python environment ddprun is installed in"}));
  // What the user set still comes first; a build's ddprun has no environment.
  EXPECT_EQ(choose_python({"DDPRUN_PYTHON=/x/py"}, scripts.string()), (P{"/x/py", "DDPRUN_PYTHON"}));
  EXPECT_EQ(choose_python({}, (venv / "lib" / "python3.11" / "site-packages").string()),
            (P{"python3", "python3 from PATH"}));
  EXPECT_EQ(choose_python({}, "/work/build/bin"), (P{"python3", "python3 from PATH"}));
  fs::remove_all(venv);
}

TEST(Plan, TorchrunSettingsReachTheAgent) {
  HostFacts f = facts(4, 0);
  f.line_prefix_template = "[${role_name}-${rank}]";
  auto plan = make_launch_plan(parse({"--nproc", "2", "--local-ranks-filter", "1", "--virtual-local-rank",
                                      "--numa-binding", "node", "--logs-specs", "mine", "true"}),
                               f);
  EXPECT_EQ(plan.agent.console_local_ranks, std::vector<int>{1});
  EXPECT_TRUE(plan.agent.virtual_local_rank);
  EXPECT_EQ(plan.agent.numa_binding, "node");
  EXPECT_EQ(plan.agent.line_prefix_template, "[${role_name}-${rank}]");
  ASSERT_EQ(plan.warnings.size(), 1u);
  EXPECT_NE(plan.warnings[0].find("--logs-specs mine"), std::string::npos);
  auto run_path = make_launch_plan(parse({"--run-path", "-m", "/abs/x.py"}), f);
  EXPECT_EQ(run_path.agent.argv, (std::vector<std::string>{"sh", "-u", "/abs/x.py"}));
  EXPECT_NE(run_path.agent.python.find("python3 from PATH"), std::string::npos);
}

}  // namespace
}  // namespace ddprun

namespace ddprun {
namespace {

LaunchPlan plan_of(std::vector<std::string> args) {
  HostFacts facts;
  facts.python = "/bin/sh";  // any program that exists
  facts.path_env = "/usr/bin:/bin";
  return make_launch_plan(parse_command_line(args).options, facts);
}

TEST(Cli, StandbyIsOnWithRestartsUnlessTurnedOffAndCoversPythonScripts) {
  EXPECT_FALSE(plan_of({"--nproc", "2", "/bin/true"}).agent.standby);
  EXPECT_TRUE(plan_of({"--max-restarts", "1", "/bin/true"}).agent.standby);
  EXPECT_FALSE(plan_of({"--max-restarts", "1", "--no-standby", "/bin/true"}).agent.standby);
  EXPECT_FALSE(plan_of({"--max_restarts", "1", "--no_standby", "/bin/true"}).agent.standby);
  EXPECT_TRUE(plan_of({"--max-restarts", "1", "/bin/true"}).agent.standby_argv.empty());

  LaunchPlan py = plan_of({"--max-restarts", "1", "job.py", "--lr", "1"});
  ASSERT_TRUE(py.agent.standby);
  ASSERT_GE(py.agent.standby_argv.size(), 7u);
  EXPECT_EQ(py.agent.standby_argv[2], "-c");
  EXPECT_EQ(std::vector<std::string>(py.agent.standby_argv.end() - 3, py.agent.standby_argv.end()),
            (std::vector<std::string>{"job.py", "--lr", "1"}));
  EXPECT_GT(py.agent.standby_warmup.count(), 0);
  LaunchPlan mod = plan_of({"--max-restarts", "1", "-m", "pkg.train"});
  EXPECT_EQ(std::vector<std::string>(mod.agent.standby_argv.end() - 2, mod.agent.standby_argv.end()),
            (std::vector<std::string>{"-m", "pkg.train"}));

  EXPECT_NE(plan_of({"--standby", "/bin/true"}).warnings.size(), 0u);
  EXPECT_NE(error_of({"--standby", "--no-standby", "/bin/true"}).find("--no-standby"), std::string::npos);
}

TEST(Cli, TraceTakesAFolderAndAStepWindow) {
  auto o = parse({"--trace", "/tmp/t", "--trace-steps", "10:20", "p"});
  EXPECT_EQ(o.trace_dir, "/tmp/t");
  EXPECT_EQ(o.trace_steps, "10:20");
  EXPECT_EQ(parse({"--trace", "/tmp/t", "--trace_steps", "5:", "p"}).trace_steps, "5:");
  EXPECT_EQ(parse({"p"}).trace_dir, "");
  auto plan = make_launch_plan(parse({"--trace", "/tmp/t", "--trace-steps", ":3", "true"}), facts(1, 0));
  EXPECT_EQ(plan.agent.trace_dir, "/tmp/t");
  EXPECT_EQ(plan.agent.trace_steps, ":3");

  EXPECT_EQ(error_of({"--trace", "", "p"}), "--trace: must not be empty");
  for (const char* bad : {"7", "5:5", "9:3", "a:b", "-1:2", "1:2:3"}) {
    EXPECT_EQ(error_of({"--trace", "/tmp/t", "--trace-steps", bad, "p"}),
              std::string("--trace-steps: expected A:B, steps A to B-1 with A < B (either side may be "
                          "empty), got '") + bad + "'");
  }
  EXPECT_EQ(error_of({"--trace-steps", "1:2", "p"}), "--trace-steps: needs --trace DIR");
}

TEST(Cli, TraceFolderMustBeWritable) {
  const std::string dir = "/tmp/ddprun-cli-trace-" + std::to_string(getpid()) + "/a/b";
  EXPECT_NO_THROW(check_output_dir("--trace", dir));  // made when missing
  EXPECT_EQ(access(dir.c_str(), W_OK), 0);
  std::filesystem::remove_all("/tmp/ddprun-cli-trace-" + std::to_string(getpid()));
  try {
    check_output_dir("--trace", "/proc/ddprun-cannot-write-here");
    FAIL() << "no error for /proc";
  } catch (const UsageError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("--trace: cannot write to '/proc/ddprun-cannot-write-here': ", 0), 0u)
        << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
  }
}

// Another user's folder, or one others may write to, could hold links
// planted where ddprun writes (trace.json -> /etc/...): refused, one line.
TEST(Cli, OutputFoldersOthersCanWriteToAreRefused) {
  const std::string base = "/tmp/ddprun-cli-out-" + std::to_string(getpid());
  std::filesystem::create_directories(base);
  auto error_of_dir = [](const std::string& flag, const std::string& dir) -> std::string {
    try {
      check_output_dir(flag, dir);
      return "";
    } catch (const UsageError& e) {
      return e.what();
    }
  };
  const std::string open_dir = base + "/open";
  std::filesystem::create_directories(open_dir);
  chmod(open_dir.c_str(), 01777);  // like /tmp
  std::string e = error_of_dir("--trace", open_dir);
  EXPECT_EQ(e.rfind("--trace: refusing '" + open_dir + "': other users may write to it (mode 1777)", 0), 0u) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos);
  const std::string theirs = base + "/theirs";
  std::filesystem::create_directories(theirs);
  if (geteuid() == 0) {
    ASSERT_EQ(chown(theirs.c_str(), 65534, 65534), 0);
    e = error_of_dir("--log-dir", theirs);
    EXPECT_EQ(e.rfind("--log-dir: refusing '" + theirs + "': it belongs to uid 65534", 0), 0u) << e;
  }
  // Made here: ours alone, even under umask 002.
  const mode_t old = umask(002);
  EXPECT_EQ(error_of_dir("--log-dir", base + "/made/here"), "");
  umask(old);
  struct stat st {};
  ASSERT_EQ(stat((base + "/made/here").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0755u);
  std::filesystem::remove_all(base);
}

}  // namespace
}  // namespace ddprun
