#include <gtest/gtest.h>

#include "launcher/cli.h"
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
  EXPECT_EQ(error_of({"--rdzv-backend", "etcd", "p"}).rfind("--rdzv-backend: 'etcd'", 0), 0u);
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

TEST(Plan, CarriesSettingsToTheAgent) {
  auto plan = make_launch_plan(
      parse({"--nproc", "3", "--max-restarts", "2", "--stop-timeout", "1.5", "--role", "trainer",
             "--rdzv-id", "abc", "--master-addr", "10.0.0.1", "--master-port", "4000", "true"}),
      facts(2, 1));
  EXPECT_EQ(plan.agent.nproc, 3);
  EXPECT_EQ(plan.agent.rdzv.max_restarts, 2);
  EXPECT_EQ(plan.agent.stop_timeout.count(), 1500);
  EXPECT_EQ(plan.agent.role, "trainer");
  EXPECT_EQ(plan.agent.run_id, "abc");
  EXPECT_EQ(plan.agent.master_addr, "10.0.0.1");
  EXPECT_EQ(plan.agent.master_port, 4000);
  EXPECT_TRUE(plan.agent.wants_nccl_id);  // a GPU is visible
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

}  // namespace
}  // namespace ddprun
