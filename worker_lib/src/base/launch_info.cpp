#include "ddp/launch_info.h"

#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <limits>

#include "channel/env_names.h"
#include "rendezvous/store/hex.h"

namespace ddp {
namespace {

namespace ch = ddprun::channel;

template <typename T>
T parse_number(const std::string& name, const std::string& value) {
  T v{};
  auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (value.empty() || ec != std::errc() || ptr != value.data() + value.size()) {
    throw ConfigError("ddp: environment variable " + name + "='" + value +
                      "' is not an integer (is this process started by ddprun or torchrun?)");
  }
  return v;
}

// --trace and progress: read for a plain single process too (a benchmark
// sets DDPRUN_TRACE_FILE itself).
void read_observability(const EnvLookup& env, LaunchInfo& info) {
  if (auto v = env(ch::kTraceFile); v && !v->empty()) info.trace_file = *v;
  if (auto v = env(ch::kTraceSteps); v && !v->empty()) {
    parse_trace_steps(*v, &info.trace_first_step, &info.trace_end_step);
  }
  if (auto v = env(ch::kTraceCapacity); v && !v->empty()) {
    const auto n = parse_number<int64_t>(ch::kTraceCapacity, *v);
    if (n < 1 || n > (int64_t{1} << 32)) {
      throw ConfigError("ddp: DDPRUN_TRACE_CAPACITY=" + *v + " is not a number of records in [1, 2^32]");
    }
    info.trace_capacity = static_cast<uint64_t>(n);
  }
  if (auto v = env(ch::kProgressByAgent); v && !v->empty() && *v != "0") info.progress_by_agent = true;
  if (auto v = env(ch::kHeals); v && !v->empty() && *v != "0") info.heals = true;
  if (auto v = env(ch::kHealGeneration); v && !v->empty()) {
    const auto g = parse_number<int64_t>(ch::kHealGeneration, *v);
    if (g < 0 || g > INT32_MAX) throw ConfigError("ddp: DDPRUN_HEAL_GENERATION=" + *v + " is not a heal generation");
    info.heal_generation = static_cast<uint32_t>(g);
  }
  if (auto v = env(ch::kVerifyEvery); v && !v->empty()) {
    info.verify_every = parse_number<int64_t>(ch::kVerifyEvery, *v);
    if (info.verify_every < 0) throw ConfigError("ddp: DDPRUN_VERIFY_EVERY=" + *v + " is not a number of steps >= 0");
  }
  if (auto v = env(ch::kHardwareKind)) info.hardware_kind = *v;
}

}  // namespace

void parse_trace_steps(const std::string& value, int64_t* first, int64_t* end) {
  const auto bad = [&] {
    return ConfigError("ddp: DDPRUN_TRACE_STEPS='" + value +
                       "' is not a step window A:B (steps A..B-1, either side may be empty)");
  };
  const size_t colon = value.find(':');
  if (colon == std::string::npos) throw bad();
  const auto number = [&](const std::string& s, int64_t fallback) {
    if (s.empty()) return fallback;
    char* e = nullptr;
    errno = 0;
    const long long n = std::strtoll(s.c_str(), &e, 10);
    if (*e != '\0' || errno != 0 || n < 0) throw bad();
    return static_cast<int64_t>(n);
  };
  *first = number(value.substr(0, colon), 0);
  *end = number(value.substr(colon + 1), std::numeric_limits<int64_t>::max());
  if (*end <= *first) throw bad();
}

std::optional<std::string> process_env(const std::string& name) {
  const char* v = std::getenv(name.c_str());
  if (!v) return std::nullopt;
  return std::string(v);
}

LaunchInfo read_launch_info(const EnvLookup& env) {
  LaunchInfo info;
  read_observability(env, info);
  if (auto v = env(ch::kCpuComm); v && !v->empty()) {
    if (*v == "auto") {
      info.cpu_comm = CpuComm::kAuto;
    } else if (*v == "shm") {
      info.cpu_comm = CpuComm::kShm;
    } else if (*v == "gloo") {
      info.cpu_comm = CpuComm::kGloo;
    } else {
      throw ConfigError("ddp: DDPRUN_CPU_COMM='" + *v + "' is not auto, shm or gloo");
    }
  }
  if (auto v = env(ch::kShmSlotKb); v && !v->empty()) {
    const auto kb = parse_number<int64_t>(ch::kShmSlotKb, *v);
    if (kb < 4 || kb > (int64_t{1} << 20)) {
      throw ConfigError("ddp: DDPRUN_SHM_SLOT_KB=" + *v + " is not in [4, 1048576] KiB");
    }
    info.shm_slot_bytes = static_cast<size_t>(kb) * 1024;
  }
  auto rank = env(ch::kRank);
  auto ws = env(ch::kWorldSize);
  if (!rank && !ws) return info;  // a plain single process
  if (!rank || !ws) {
    throw ConfigError(std::string("ddp: ") + (rank ? "WORLD_SIZE" : "RANK") +
                      " is not set although " + (rank ? "RANK" : "WORLD_SIZE") +
                      " is; start workers with ddprun");
  }
  info.rank = parse_number<int>(ch::kRank, *rank);
  info.world_size = parse_number<int>(ch::kWorldSize, *ws);
  if (info.world_size < 1 || info.rank < 0 || info.rank >= info.world_size) {
    throw ConfigError("ddp: RANK=" + *rank + " is not in [0, WORLD_SIZE=" + *ws + ")");
  }
  auto number = [&](const char* name, int fallback) {
    auto v = env(name);
    return v ? parse_number<int>(name, *v) : fallback;
  };
  info.local_rank = number(ch::kLocalRank, info.rank);
  info.local_world_size = number(ch::kLocalWorldSize, info.world_size);
  info.group_rank = number(ch::kGroupRank, 0);
  info.group_world_size = number(ch::kGroupWorldSize, 1);
  info.restart_count = number(ch::kRestartCount, 0);
  if (info.local_rank < 0 || info.local_rank >= info.local_world_size) {
    throw ConfigError("ddp: LOCAL_RANK=" + std::to_string(info.local_rank) +
                      " is not in [0, LOCAL_WORLD_SIZE=" + std::to_string(info.local_world_size) +
                      ")");
  }
  if (auto v = env(ch::kRdzvAddr)) info.rdzv_address = *v;
  if (auto v = env(ch::kJobId)) info.job_id = *v;
  if (auto v = env(ch::kRdzvToken)) info.rdzv_token = *v;
  if (auto v = env(ch::kRdzvTlsCa)) info.rdzv_tls_ca = *v;
  if (auto v = env(ch::kRdzvTlsCert)) info.rdzv_tls_cert = *v;
  if (auto v = env(ch::kRdzvTlsKey)) info.rdzv_tls_key = *v;
  if (auto v = env(ch::kRound)) info.round = parse_number<int64_t>(ch::kRound, *v);
  if (auto v = env(ch::kLocalAddr); v && !v->empty()) {
    info.local_addr = *v;
    info.local_addr_given = true;
  }
  if (auto v = env(ch::kMasterAddr); v && !v->empty()) info.master_addr = *v;
  if (auto v = env(ch::kMasterPort); v && !v->empty()) {
    info.master_port = parse_number<int>(ch::kMasterPort, *v);
    if (info.master_port < 1 || info.master_port > 65535) {
      throw ConfigError("ddp: MASTER_PORT=" + *v + " is not a port in [1, 65535]");
    }
  }
  if (auto v = env(ch::kUseAgentStore)) info.agent_store = *v == "True" || *v == "true" || *v == "1";
  if (auto v = env(ch::kErrorFile)) info.error_file = *v;
  if (auto v = env(ch::kHeartbeatFile)) info.heartbeat_file = *v;
  info.heartbeat_slot = number(ch::kHeartbeatSlot, info.local_rank);
  if (auto v = env(ch::kNcclId); v && !v->empty()) {
    try {
      info.nccl_id = ddprun::from_hex(*v);
    } catch (const std::exception& e) {
      throw ConfigError(std::string("ddp: DDPRUN_NCCL_ID is not hex: ") + e.what());
    }
  }
  if (info.from_ddprun() && info.job_id.empty()) {
    throw ConfigError("ddp: DDPRUN_RDZV_ADDR is set but DDPRUN_JOB_ID is not");
  }
  return info;
}

}  // namespace ddp
