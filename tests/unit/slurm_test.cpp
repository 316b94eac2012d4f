// Slurm's environment in, ddprun's default flags out.
#include <gtest/gtest.h>

#include "launcher/cli.h"
#include "launcher/slurm.h"

namespace ddprun {
namespace {

using Strings = std::vector<std::string>;
using Env = std::map<std::string, std::string>;

// What srun sets on node `node` of a step over node[01-03] (one task each).
Env srun_env(int node) {
  return {{"SLURM_JOB_ID", "4242"},           {"SLURM_STEP_ID", "0"},
          {"SLURM_NNODES", "3"},              {"SLURM_JOB_NUM_NODES", "3"},
          {"SLURM_STEP_NUM_NODES", "3"},      {"SLURM_STEP_NUM_TASKS", "3"},
          {"SLURM_NTASKS", "3"},              {"SLURM_JOB_NODELIST", "node[01-03]"},
          {"SLURM_STEP_NODELIST", "node[01-03]"}, {"SLURM_NODEID", std::to_string(node)},
          {"SLURM_PROCID", std::to_string(node)}};
}

// The defaults as a command line: {"--nnodes", "3", ...}.
Strings flat(const SlurmDefaults& d) {
  Strings out;
  for (const auto& a : d.args) {
    out.push_back(a.flag);
    out.push_back(a.value);
  }
  return out;
}

std::string error_of(const Env& env, const Strings& args = {"train"}) {
  try {
    slurm_defaults(env, args);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

TEST(SlurmHostlist, ExpandsRangesListsPaddingAndPlainNames) {
  EXPECT_EQ(expand_slurm_hostlist("node[01-03,7],gpu5"),
            (Strings{"node01", "node02", "node03", "node7", "gpu5"}));
  EXPECT_EQ(expand_slurm_hostlist("vm"), (Strings{"vm"}));
  EXPECT_EQ(expand_slurm_hostlist("a[8-10]"), (Strings{"a8", "a9", "a10"}));
  EXPECT_EQ(expand_slurm_hostlist("n[098-101]"), (Strings{"n098", "n099", "n100", "n101"}));
  EXPECT_EQ(expand_slurm_hostlist("rack[1-2]-n[1,3]"), (Strings{"rack1-n1", "rack1-n3", "rack2-n1", "rack2-n3"}));
  EXPECT_EQ(expand_slurm_hostlist("x[1]y,z"), (Strings{"x1y", "z"}));
}

TEST(SlurmHostlist, MalformedListsAreOneLineErrorsNamingTheVariable) {
  for (const char* bad : {"", "node[1-3", "node1-3]", "node[3-1]", "node[a-b]", "node[]", "a,,b",
                          "n[[1]]", "n[1-99999999999]", "n[0-999999999]"}) {
    try {
      expand_slurm_hostlist(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("SLURM_JOB_NODELIST: "), std::string::npos) << e.what();
    }
  }
}

TEST(SlurmDefaults, SrunStepGivesNodesRankEndpointAndJobId) {
  auto d = slurm_defaults(srun_env(2), {"--nproc", "2", "train"});
  EXPECT_EQ(flat(d), (Strings{"--nnodes", "3", "--node-rank", "2", "--rdzv-endpoint", "node01:29642",
                             "--rdzv-id", "4242"}));
  EXPECT_NE(d.summary.find("--rdzv-endpoint node01:29642"), std::string::npos) << d.summary;
  EXPECT_TRUE(d.warning.empty());
}

TEST(SlurmDefaults, PortComesFromTheJobId) {
  EXPECT_EQ(slurm_rdzv_port("4242"), 29642);
  EXPECT_EQ(slurm_rdzv_port("1000"), 29400);
  EXPECT_EQ(slurm_rdzv_port("999"), 30399);
  EXPECT_EQ(slurm_rdzv_port("12_3"), 29400);
}

TEST(SlurmDefaults, TheDerivedFlagsParseAndTheUsersOwnWin) {
  Strings user{"--nproc", "2", "--rdzv-endpoint", "head:1234", "--rdzv-id", "mine", "train"};
  auto d = slurm_defaults(srun_env(1), user);
  CliOptions o = parse_command_line(user, d.args).options;
  EXPECT_EQ(o.min_nodes, 3);
  EXPECT_EQ(o.max_nodes, 3);
  EXPECT_EQ(o.node_rank, 1);
  EXPECT_EQ(o.rdzv_host, "head");
  EXPECT_EQ(o.rdzv_port, 1234);
  EXPECT_EQ(o.rdzv_id, "mine");
}

TEST(SlurmDefaults, OneNodeUsesThePrivateRendezvous) {
  Env env = srun_env(0);
  env["SLURM_STEP_NUM_NODES"] = env["SLURM_STEP_NUM_TASKS"] = "1";
  env["SLURM_STEP_NODELIST"] = "node01";
  EXPECT_EQ(flat(slurm_defaults(env, {"train"})), (Strings{"--nnodes", "1", "--node-rank", "0", "--rdzv-id", "4242"}));
}

TEST(SlurmDefaults, TheStepNotTheAllocationCounts) {
  // srun -N1 inside a 3-node allocation: one node, the step's.
  Env env = srun_env(0);
  env["SLURM_STEP_NUM_NODES"] = env["SLURM_STEP_NUM_TASKS"] = "2";
  env["SLURM_STEP_NODELIST"] = "node[02-03]";
  EXPECT_EQ(flat(slurm_defaults(env, {"train"})),
            (Strings{"--nnodes", "2", "--node-rank", "0", "--rdzv-endpoint", "node02:29642", "--rdzv-id", "4242"}));
}

TEST(SlurmDefaults, OffOutsideAStepWithTheVariableOrWithStandalone) {
  EXPECT_TRUE(slurm_defaults({}, {"train"}).args.empty());
  EXPECT_TRUE(slurm_defaults({{"SLURM_JOB_ID", "7"}}, {"train"}).args.empty());  // salloc shell
  Env env = srun_env(0);
  env["DDPRUN_NO_SLURM"] = "1";
  EXPECT_TRUE(slurm_defaults(env, {"train"}).args.empty());
  EXPECT_TRUE(slurm_defaults(srun_env(0), {"--standalone", "train"}).args.empty());
  Env pet = srun_env(0);
  pet["PET_STANDALONE"] = "1";
  EXPECT_TRUE(slurm_defaults(pet, {"train"}).args.empty());
  env["DDPRUN_NO_SLURM"] = "0";
  EXPECT_FALSE(slurm_defaults(env, {"train"}).args.empty());
}

TEST(SlurmDefaults, AUsersNodeCountKeepsSlurmsCountAndRankOut) {
  // --nnodes 1 on node 2 of 3 would otherwise meet --node-rank 2 and fail.
  Strings user{"--nnodes", "1", "train"};
  auto d = slurm_defaults(srun_env(2), user);
  EXPECT_EQ(flat(d), (Strings{"--rdzv-endpoint", "node01:29642", "--rdzv-id", "4242"}));
  EXPECT_EQ(flat(slurm_defaults(srun_env(2), {"--nnodes=1", "train"})), flat(d));
  Env env = srun_env(2);
  env["PET_NNODES"] = "1";
  EXPECT_EQ(flat(slurm_defaults(env, {"train"})), flat(d));
}

TEST(SlurmDefaults, MoreThanOneTaskPerNodeIsAnError) {
  Env env = srun_env(0);
  env["SLURM_STEP_NUM_TASKS"] = "6";
  EXPECT_NE(error_of(env).find("--ntasks-per-node=1"), std::string::npos) << error_of(env);
  env = srun_env(0);
  env["SLURM_NTASKS_PER_NODE"] = "2";
  EXPECT_NE(error_of(env).find("Slurm started"), std::string::npos);
  env["DDPRUN_NO_SLURM"] = "1";
  EXPECT_EQ(error_of(env), "");
}

TEST(SlurmDefaults, BatchScriptOfAMultiNodeJobDerivesNothingAndSaysWhy) {
  Env env{{"SLURM_JOB_ID", "9"}, {"SLURM_NNODES", "2"}, {"SLURM_NODEID", "0"}, {"SLURM_PROCID", "0"},
          {"SLURM_NTASKS", "8"}, {"SLURM_JOB_NODELIST", "n[1-2]"}};
  auto d = slurm_defaults(env, {"train"});
  EXPECT_TRUE(d.args.empty());
  EXPECT_NE(d.warning.find("srun --ntasks-per-node=1"), std::string::npos) << d.warning;
  // A one-node batch script is a one-node job: ntasks there is the job's, not ddprun's.
  env["SLURM_NNODES"] = "1";
  EXPECT_EQ(flat(slurm_defaults(env, {"train"})), (Strings{"--nnodes", "1", "--node-rank", "0", "--rdzv-id", "9"}));
}

TEST(SlurmDefaults, AValueTheCommandLineRefusesNamesItsVariable) {
  Env env = srun_env(0);
  env["SLURM_NODEID"] = "5";  // of 3 nodes
  try {
    parse_command_line({"train"}, slurm_defaults(env, {"train"}).args);
    ADD_FAILURE() << "accepted";
  } catch (const UsageError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("SLURM_NODEID: 5 is out of range", 0), 0u) << e.what();
  }
}

TEST(SlurmDefaults, BadNumbersNameTheVariable) {
  Env env = srun_env(0);
  env["SLURM_STEP_NUM_NODES"] = "three";
  EXPECT_NE(error_of(env).find("SLURM_STEP_NUM_NODES: expected a number"), std::string::npos) << error_of(env);
  env = srun_env(0);
  env["SLURM_STEP_NODELIST"] = "node[01-";
  EXPECT_NE(error_of(env).find("SLURM_STEP_NODELIST: unclosed '['"), std::string::npos) << error_of(env);
}

}  // namespace
}  // namespace ddprun
