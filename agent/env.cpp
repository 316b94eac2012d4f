#include "agent/env.h"

#include "rendezvous/hex.h"

extern char** environ;

namespace ddprun {

std::map<std::string, std::string> worker_variables(const WorkerIdentity& id, const JobEnv& job,
                                                    const std::string& error_file) {
  auto s = [](auto v) { return std::to_string(v); };
  std::map<std::string, std::string> v{
      // What torchrun sets.
      {"RANK", s(id.rank)},
      {"LOCAL_RANK", s(id.local_rank)},
      {"WORLD_SIZE", s(id.world_size)},
      {"LOCAL_WORLD_SIZE", s(id.local_world_size)},
      {"GROUP_RANK", s(id.group_rank)},
      {"GROUP_WORLD_SIZE", s(id.group_world_size)},
      // One role per job: role ranks are the global ranks.
      {"ROLE_RANK", s(id.rank)},
      {"ROLE_WORLD_SIZE", s(id.world_size)},
      {"ROLE_NAME", job.role},
      {"MASTER_ADDR", job.master_addr},
      {"MASTER_PORT", s(job.master_port)},
      {"TORCHELASTIC_RESTART_COUNT", s(job.restart_count)},
      {"TORCHELASTIC_MAX_RESTARTS", s(job.max_restarts)},
      {"TORCHELASTIC_RUN_ID", job.run_id},
      {"TORCHELASTIC_USE_AGENT_STORE", "False"},
      {"TORCHELASTIC_ERROR_FILE", error_file},
      // What worker_lib reads.
      {"DDPRUN_RDZV_ADDR", job.rdzv_address},
      {"DDPRUN_JOB_ID", job.run_id},
      {"DDPRUN_ROUND", s(job.round)},
      {"DDPRUN_LOCAL_ADDR", job.local_addr},
  };
  if (!job.nccl_id.empty()) v["DDPRUN_NCCL_ID"] = to_hex(job.nccl_id);
  if (!job.heartbeat_file.empty()) {
    v["DDPRUN_HEARTBEAT_FILE"] = job.heartbeat_file;
    v["DDPRUN_HEARTBEAT_SLOT"] = s(id.local_rank);
  }
  return v;
}

std::vector<std::string> merge_environment(const std::vector<std::string>& inherited,
                                           const std::map<std::string, std::string>& vars,
                                           int local_world_size) {
  std::vector<std::string> out;
  out.reserve(inherited.size() + vars.size() + 1);
  bool has_omp = false;
  for (const auto& entry : inherited) {
    const auto eq = entry.find('=');
    const std::string key = entry.substr(0, eq);
    if (key == "OMP_NUM_THREADS") has_omp = true;
    if (vars.count(key)) continue;  // replaced below
    // Stale per-job settings from an outer ddprun must not leak into this job.
    if (key == "DDPRUN_NCCL_ID" || key == "DDPRUN_HEARTBEAT_FILE" || key == "DDPRUN_HEARTBEAT_SLOT") continue;
    out.push_back(entry);
  }
  for (const auto& [k, val] : vars) out.push_back(k + "=" + val);
  if (!has_omp && !vars.count("OMP_NUM_THREADS") && local_world_size > 1) {
    out.push_back("OMP_NUM_THREADS=1");
  }
  return out;
}

std::vector<std::string> current_environment() {
  std::vector<std::string> out;
  for (char** e = environ; e && *e; ++e) out.emplace_back(*e);
  return out;
}

}  // namespace ddprun
