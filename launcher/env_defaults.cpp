#include "launcher/env_defaults.h"

#include <charconv>

#include "launcher/cli.h"

namespace ddprun {
namespace {

struct PetFlag {
  const char* variable;
  const char* flag;
  bool boolean;
};

// torchrun's flags that read PET_<DEST> (argparse_util's env/check_env);
// --logs-specs and --numa-binding read none there either.
constexpr PetFlag kPetFlags[] = {
    {"PET_NNODES", "--nnodes", false},
    {"PET_NPROC_PER_NODE", "--nproc-per-node", false},
    {"PET_RDZV_BACKEND", "--rdzv-backend", false},
    {"PET_RDZV_ENDPOINT", "--rdzv-endpoint", false},
    {"PET_RDZV_ID", "--rdzv-id", false},
    {"PET_RDZV_CONF", "--rdzv-conf", false},
    {"PET_STANDALONE", "--standalone", true},
    {"PET_MAX_RESTARTS", "--max-restarts", false},
    {"PET_MONITOR_INTERVAL", "--monitor-interval", false},
    {"PET_START_METHOD", "--start-method", false},
    {"PET_EVENT_LOG_HANDLER", "--event-log-handler", false},
    {"PET_ROLE", "--role", false},
    {"PET_MODULE", "--module", true},
    {"PET_NO_PYTHON", "--no-python", true},
    {"PET_RUN_PATH", "--run-path", true},
    {"PET_LOG_DIR", "--log-dir", false},
    {"PET_REDIRECTS", "--redirects", false},
    {"PET_TEE", "--tee", false},
    {"PET_LOG_LINE_PREFIX_TEMPLATE", "--log-line-prefix-template", false},
    {"PET_LOCAL_RANKS_FILTER", "--local-ranks-filter", false},
    {"PET_DUPLICATE_STDOUT_FILTERS", "--duplicate-stdout-filters", false},
    {"PET_DUPLICATE_STDERR_FILTERS", "--duplicate-stderr-filters", false},
    {"PET_NODE_RANK", "--node-rank", false},
    {"PET_MASTER_ADDR", "--master-addr", false},
    {"PET_MASTER_PORT", "--master-port", false},
    {"PET_LOCAL_ADDR", "--local-addr", false},
    {"PET_SIGNALS_TO_HANDLE", "--signals-to-handle", false},
    {"PET_SHUTDOWN_TIMEOUT", "--shutdown-timeout", false},
    {"PET_VIRTUAL_LOCAL_RANK", "--virtual-local-rank", true},
    // ddprun's own flags read from the environment the same way.
    {"DDPRUN_METRICS_PORT", "--metrics-port", false},
};

}  // namespace

std::vector<DefaultArg> pet_default_args(const std::vector<std::string>& environment) {
  std::vector<DefaultArg> out;
  // torchrun 2.x's fallback for --shutdown-timeout; PET_SHUTDOWN_TIMEOUT,
  // later in the list, wins over it.
  const std::string shutdown = "TORCH_ELASTIC_SHUTDOWN_TIMEOUT=";
  for (const auto& entry : environment) {
    if (entry.rfind(shutdown, 0) == 0) {
      out.push_back({"--shutdown-timeout", entry.substr(shutdown.size()), "TORCH_ELASTIC_SHUTDOWN_TIMEOUT"});
    }
  }
  for (const PetFlag& p : kPetFlags) {
    const std::string prefix = std::string(p.variable) + "=";
    for (const auto& entry : environment) {
      if (entry.rfind(prefix, 0) != 0) continue;
      const std::string value = entry.substr(prefix.size());
      if (!p.boolean) {
        // Set but empty (PET_LOG_DIR=) reads as not set.
        if (!value.empty()) out.push_back({p.flag, value, p.variable});
        continue;
      }
      long v = 0;
      auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
      if (value.empty() || ec != std::errc() || ptr != value.data() + value.size()) {
        throw UsageError(std::string(p.variable) + ": expected 0 or 1, got '" + value + "'");
      }
      if (v != 0) out.push_back({p.flag, "", p.variable});
    }
  }
  return out;
}

}  // namespace ddprun
