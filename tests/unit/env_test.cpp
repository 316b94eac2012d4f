#include <gtest/gtest.h>

#include <algorithm>
#include <iterator>
#include <map>

#include "agent/processes/env.h"
#include "ddp/launch_info.h"
#include "rendezvous/store/hex.h"

namespace ddprun {
namespace {

JobEnv job() {
  JobEnv j;
  j.role = "trainer";
  j.master_addr = "10.1.2.3";
  j.master_port = 29511;
  j.restart_count = 2;
  j.max_restarts = 5;
  j.run_id = "run9";
  j.rdzv_address = "127.0.0.1:4567";
  j.round = 3;
  j.local_addr = "10.1.2.3";
  return j;
}

TEST(WorkerEnv, HasEveryTorchrunVariable) {
  WorkerIdentity id{5, 1, 4, 8, 1, 2};
  auto v = worker_variables(id, job(), "/logs/error.json");
  const std::map<std::string, std::string> expected{
      {"RANK", "5"},
      {"LOCAL_RANK", "1"},
      {"WORLD_SIZE", "8"},
      {"LOCAL_WORLD_SIZE", "4"},
      {"GROUP_RANK", "1"},
      {"GROUP_WORLD_SIZE", "2"},
      {"ROLE_RANK", "5"},
      {"ROLE_WORLD_SIZE", "8"},
      {"ROLE_NAME", "trainer"},
      {"MASTER_ADDR", "10.1.2.3"},
      {"MASTER_PORT", "29511"},
      {"TORCHELASTIC_RESTART_COUNT", "2"},
      {"TORCHELASTIC_MAX_RESTARTS", "5"},
      {"TORCHELASTIC_RUN_ID", "run9"},
      {"TORCHELASTIC_ERROR_FILE", "/logs/error.json"},
      {"DDPRUN_RDZV_ADDR", "127.0.0.1:4567"},
      {"DDPRUN_JOB_ID", "run9"},
      {"DDPRUN_ROUND", "3"},
      {"DDPRUN_LOCAL_ADDR", "10.1.2.3"},
  };
  for (const auto& [k, want] : expected) {
    ASSERT_TRUE(v.count(k)) << k;
    EXPECT_EQ(v.at(k), want) << k;
  }
  EXPECT_FALSE(v.count("DDPRUN_NCCL_ID"));  // none handed out
}

TEST(WorkerEnv, NcclIdTravelsAsHex) {
  JobEnv j = job();
  j.nccl_id = std::string("\x00\x01\xfe\xff", 4);
  auto v = worker_variables(WorkerIdentity{}, j, "e");
  EXPECT_EQ(v.at("DDPRUN_NCCL_ID"), "0001feff");
  EXPECT_EQ(from_hex(v.at("DDPRUN_NCCL_ID")), j.nccl_id);
}

TEST(WorkerEnv, MergeOverridesInheritedAndSetsOmpOnlyWhenUnset) {
  std::vector<std::string> inherited{"PATH=/bin", "RANK=99", "DDPRUN_NCCL_ID=stale", "EMPTY="};
  auto env = merge_environment(inherited, {{"RANK", "1"}}, 4);
  auto has = [&](const std::string& e) { return std::find(env.begin(), env.end(), e) != env.end(); };
  EXPECT_TRUE(has("PATH=/bin"));
  EXPECT_TRUE(has("EMPTY="));
  EXPECT_TRUE(has("RANK=1"));
  EXPECT_FALSE(has("RANK=99"));
  EXPECT_FALSE(has("DDPRUN_NCCL_ID=stale"));
  EXPECT_TRUE(has("OMP_NUM_THREADS=1"));

  auto user_omp = merge_environment({"OMP_NUM_THREADS=8"}, {}, 4);
  EXPECT_EQ(std::count_if(user_omp.begin(), user_omp.end(),
                          [](const std::string& e) { return e.rfind("OMP_NUM_THREADS=", 0) == 0; }),
            1);
  EXPECT_EQ(user_omp.front(), "OMP_NUM_THREADS=8");
  auto single = merge_environment({}, {}, 1);
  EXPECT_EQ(std::count_if(single.begin(), single.end(),
                          [](const std::string& e) { return e.rfind("OMP_NUM_THREADS=", 0) == 0; }),
            0);
}

TEST(WorkerEnv, MallocKeepsFreedMemoryUnlessTheUserTunesIt) {
  auto count = [](const std::vector<std::string>& env, const std::string& prefix) {
    return std::count_if(env.begin(), env.end(), [&](const std::string& e) { return e.rfind(prefix, 0) == 0; });
  };
  auto has = [](const std::vector<std::string>& env, const std::string& e) {
    return std::find(env.begin(), env.end(), e) != env.end();
  };
  auto plain = merge_environment({"PATH=/bin"}, {}, 1);
  EXPECT_TRUE(has(plain, "MALLOC_TRIM_THRESHOLD_=134217728"));
  EXPECT_TRUE(has(plain, "MALLOC_MMAP_THRESHOLD_=33554432"));
  // Any malloc setting of the user's own: none of ours, theirs as they were.
  for (std::string own : {"MALLOC_ARENA_MAX=2", "MALLOC_TRIM_THRESHOLD_=0",
                          "GLIBC_TUNABLES=glibc.malloc.trim_threshold=4096"}) {
    SCOPED_TRACE(own);
    auto env = merge_environment({own}, {}, 2);
    EXPECT_TRUE(has(env, own));
    EXPECT_EQ(count(env, "MALLOC_TRIM_THRESHOLD_="), own.rfind("MALLOC_TRIM", 0) == 0 ? 1 : 0);
    EXPECT_EQ(count(env, "MALLOC_MMAP_THRESHOLD_="), 0);
  }
  // Tunables for something else leave malloc to us.
  auto other = merge_environment({"GLIBC_TUNABLES=glibc.cpu.hwcaps=-AVX2"}, {}, 1);
  EXPECT_TRUE(has(other, "MALLOC_MMAP_THRESHOLD_=33554432"));
}

TEST(WorkerEnv, NcclAsyncErrorHandlingIsOnUnlessTheUserSetIt) {
  auto env = merge_environment({"PATH=/bin"}, {}, 1);
  auto has = [&](const std::string& e) { return std::find(env.begin(), env.end(), e) != env.end(); };
  EXPECT_TRUE(has("TORCH_NCCL_ASYNC_ERROR_HANDLING=1"));
  // Not the deprecated name: PyTorch 2.x warns twice in every worker when it is set.
  EXPECT_TRUE(std::none_of(env.begin(), env.end(),
                           [](const std::string& e) { return e.rfind("NCCL_ASYNC_ERROR_HANDLING=", 0) == 0; }));
  auto user = merge_environment({"NCCL_ASYNC_ERROR_HANDLING=0", "TORCH_NCCL_ASYNC_ERROR_HANDLING=3"}, {}, 1);
  std::vector<std::string> nccl;
  std::copy_if(user.begin(), user.end(), std::back_inserter(nccl),
               [](const std::string& e) { return e.find("NCCL") != std::string::npos; });
  EXPECT_EQ(nccl, (std::vector<std::string>{"NCCL_ASYNC_ERROR_HANDLING=0", "TORCH_NCCL_ASYNC_ERROR_HANDLING=3"}));
}

TEST(WorkerEnv, VirtualLocalRankGivesEachWorkerItsOwnGpuAsDeviceZero) {
  std::map<std::string, std::string> v{{"LOCAL_RANK", "2"}};
  apply_virtual_local_rank(v, {"CUDA_VISIBLE_DEVICES=4,5,6,7"}, 2);
  EXPECT_EQ(v.at("LOCAL_RANK"), "0");
  EXPECT_EQ(v.at("CUDA_VISIBLE_DEVICES"), "6");
  std::map<std::string, std::string> w{{"LOCAL_RANK", "1"}};
  apply_virtual_local_rank(w, {"PATH=/bin"}, 1);
  EXPECT_EQ(w.at("LOCAL_RANK"), "0");
  EXPECT_EQ(w.at("CUDA_VISIBLE_DEVICES"), "1");
}

TEST(WorkerEnv, GlooAndNcclBindToTheNodesInterfaceUnlessTheUserChoseOne) {
  JobEnv j;
  j.local_ifname = "veth7";
  auto v = worker_variables(WorkerIdentity{}, j, "e");
  EXPECT_EQ(v.at("GLOO_SOCKET_IFNAME"), "veth7");
  EXPECT_EQ(v.at("NCCL_SOCKET_IFNAME"), "veth7");
  auto env = merge_environment({"NCCL_SOCKET_IFNAME=ib0"}, v, 1);
  auto has = [&](const std::string& e) { return std::find(env.begin(), env.end(), e) != env.end(); };
  EXPECT_TRUE(has("NCCL_SOCKET_IFNAME=ib0"));
  EXPECT_FALSE(has("NCCL_SOCKET_IFNAME=veth7"));
  EXPECT_TRUE(has("GLOO_SOCKET_IFNAME=veth7"));
  EXPECT_FALSE(worker_variables(WorkerIdentity{}, JobEnv{}, "e").count("GLOO_SOCKET_IFNAME"));
}

TEST(WorkerEnv, TracedWorkersGetTheirOwnFileAndTheStepWindow) {
  JobEnv j;
  j.trace_node_dir = "/t/host.42";
  j.attempt = 2;
  j.trace_steps = "5:9";
  auto v = worker_variables(WorkerIdentity{7, 1, 4, 8, 1, 2}, j, "e");
  EXPECT_EQ(v.at("DDPRUN_TRACE_FILE"), "/t/host.42/attempt_2/rank7.trace");
  EXPECT_EQ(v.at("DDPRUN_TRACE_STEPS"), "5:9");
  j.trace_steps.clear();
  EXPECT_FALSE(worker_variables(WorkerIdentity{}, j, "e").count("DDPRUN_TRACE_STEPS"));
  auto off = worker_variables(WorkerIdentity{}, JobEnv{}, "e");
  EXPECT_FALSE(off.count("DDPRUN_TRACE_FILE"));
  EXPECT_FALSE(off.count("DDPRUN_TRACE_STEPS"));
}

TEST(Hex, RoundTripsAndRejectsGarbage) {
  std::string all;
  for (int i = 0; i < 256; ++i) all.push_back(static_cast<char>(i));
  EXPECT_EQ(from_hex(to_hex(all)), all);
  EXPECT_THROW(from_hex("abc"), std::invalid_argument);
  EXPECT_THROW(from_hex("zz"), std::invalid_argument);
}

ddp::EnvLookup env_of(std::map<std::string, std::string> m) {
  return [m](const std::string& k) -> std::optional<std::string> {
    auto it = m.find(k);
    if (it == m.end()) return std::nullopt;
    return it->second;
  };
}

TEST(WorkerEnv, TheAgentsStoreIsAnnouncedOnlyWhenTheAgentHostsIt) {
  JobEnv j = job();
  EXPECT_EQ(worker_variables(WorkerIdentity{}, j, "e").at("TORCHELASTIC_USE_AGENT_STORE"), "False");
  j.agent_store = true;
  EXPECT_EQ(worker_variables(WorkerIdentity{}, j, "e").at("TORCHELASTIC_USE_AGENT_STORE"), "True");
}

TEST(WorkerEnv, OnlyRank0IsToldTheAgentShowsItsProgress) {
  JobEnv j = job();
  EXPECT_EQ(worker_variables(WorkerIdentity{0, 0, 2, 2, 0, 1}, j, "e").count("DDPRUN_PROGRESS_BY_AGENT"), 0u);
  j.progress_by_agent = true;
  EXPECT_EQ(worker_variables(WorkerIdentity{0, 0, 2, 2, 0, 1}, j, "e").at("DDPRUN_PROGRESS_BY_AGENT"), "1");
  EXPECT_EQ(worker_variables(WorkerIdentity{1, 1, 2, 2, 0, 1}, j, "e").count("DDPRUN_PROGRESS_BY_AGENT"), 0u);
}

TEST(LaunchInfo, ReadsTheStoreVariablesOfAnyLauncher) {
  ddp::LaunchInfo info = ddp::read_launch_info(env_of({{"RANK", "1"}, {"WORLD_SIZE", "2"},
                                                       {"MASTER_ADDR", "node0"}, {"MASTER_PORT", "29500"},
                                                       {"TORCHELASTIC_USE_AGENT_STORE", "True"}}));
  EXPECT_EQ(info.master_addr, "node0");
  EXPECT_EQ(info.master_port, 29500);
  EXPECT_TRUE(info.agent_store);
  EXPECT_FALSE(info.local_addr_given);
  EXPECT_FALSE(info.from_ddprun());
}

TEST(LaunchInfo, ReadsWhatTheAgentWrites) {
  WorkerIdentity id{6, 2, 4, 8, 1, 2};
  JobEnv j = job();
  j.nccl_id = "0123456789";
  auto vars = worker_variables(id, j, "/tmp/err.json");
  ddp::LaunchInfo info = ddp::read_launch_info(env_of({vars.begin(), vars.end()}));
  EXPECT_EQ(info.rank, 6);
  EXPECT_EQ(info.local_rank, 2);
  EXPECT_EQ(info.world_size, 8);
  EXPECT_EQ(info.local_world_size, 4);
  EXPECT_EQ(info.group_rank, 1);
  EXPECT_EQ(info.group_world_size, 2);
  EXPECT_EQ(info.restart_count, 2);
  EXPECT_EQ(info.rdzv_address, "127.0.0.1:4567");
  EXPECT_EQ(info.job_id, "run9");
  EXPECT_EQ(info.round, 3);
  EXPECT_EQ(info.nccl_id, "0123456789");
  EXPECT_EQ(info.local_addr, "10.1.2.3");
  EXPECT_EQ(info.error_file, "/tmp/err.json");
  EXPECT_TRUE(info.from_ddprun());
}

TEST(LaunchInfo, NoVariablesMeansOneProcess) {
  ddp::LaunchInfo info = ddp::read_launch_info(env_of({}));
  EXPECT_EQ(info.rank, 0);
  EXPECT_EQ(info.world_size, 1);
  EXPECT_FALSE(info.from_ddprun());
}

std::string config_error(std::map<std::string, std::string> m) {
  try {
    ddp::read_launch_info(env_of(std::move(m)));
  } catch (const ddp::ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(LaunchInfo, BadVariablesAreNamed) {
  EXPECT_NE(config_error({{"RANK", "x"}, {"WORLD_SIZE", "2"}}).find("RANK='x' is not an integer"),
            std::string::npos);
  EXPECT_NE(config_error({{"RANK", "2"}, {"WORLD_SIZE", "2"}}).find("RANK=2 is not in [0, WORLD_SIZE=2)"),
            std::string::npos);
  EXPECT_NE(config_error({{"RANK", "0"}}).find("WORLD_SIZE is not set"), std::string::npos);
  EXPECT_NE(config_error({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"DDPRUN_NCCL_ID", "q"}})
                .find("DDPRUN_NCCL_ID is not hex"),
            std::string::npos);
  EXPECT_NE(config_error({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "3"},
                          {"LOCAL_WORLD_SIZE", "2"}})
                .find("LOCAL_RANK=3"),
            std::string::npos);
  EXPECT_NE(config_error({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "70000"}})
                .find("MASTER_PORT=70000 is not a port"),
            std::string::npos);
}

}  // namespace
}  // namespace ddprun
