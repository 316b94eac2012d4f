#include "agent/processes/env.h"

#include <algorithm>
#include <iterator>
#include <set>

#include "channel/env_names.h"
#include "channel/trace_format.h"
#include "rendezvous/store/hex.h"

extern char** environ;

namespace ddprun {

namespace ch = channel;

std::map<std::string, std::string> worker_variables(const WorkerIdentity& id, const JobEnv& job,
                                                    const std::string& error_file) {
  auto s = [](auto v) { return std::to_string(v); };
  std::map<std::string, std::string> v{
      // What torchrun sets.
      {ch::kRank, s(id.rank)},
      {ch::kLocalRank, s(id.local_rank)},
      {ch::kWorldSize, s(id.world_size)},
      {ch::kLocalWorldSize, s(id.local_world_size)},
      {ch::kGroupRank, s(id.group_rank)},
      {ch::kGroupWorldSize, s(id.group_world_size)},
      // One role per job: role ranks are the global ranks.
      {ch::kRoleRank, s(id.rank)},
      {ch::kRoleWorldSize, s(id.world_size)},
      {ch::kRoleName, job.role},
      {ch::kMasterAddr, job.master_addr},
      {ch::kMasterPort, s(job.master_port)},
      {ch::kRestartCount, s(job.restart_count)},
      {ch::kMaxRestarts, s(job.max_restarts)},
      {ch::kRunId, job.run_id},
      {ch::kUseAgentStore, job.agent_store ? "True" : "False"},
      {ch::kErrorFile, error_file},
      // What worker_lib reads.
      {ch::kRdzvAddr, job.rdzv_address},
      {ch::kJobId, job.run_id},
      {ch::kRound, s(job.round)},
      {ch::kLocalAddr, job.local_addr},
  };
  if (!job.nccl_id.empty()) v[ch::kNcclId] = to_hex(job.nccl_id);
  const RendezvousAuth& auth = job.rdzv_auth;
  if (!auth.token.empty()) v[ch::kRdzvToken] = auth.token;
  if (!auth.tls.ca.empty()) v[ch::kRdzvTlsCa] = auth.tls.ca;
  if (!auth.tls.cert.empty()) v[ch::kRdzvTlsCert] = auth.tls.cert;
  if (!auth.tls.key.empty()) v[ch::kRdzvTlsKey] = auth.tls.key;
  if (!job.local_ifname.empty()) {
    v[ch::kGlooSocketIfname] = job.local_ifname;
    v[ch::kNcclSocketIfname] = job.local_ifname;
  }
  if (!job.heartbeat_file.empty()) {
    v[ch::kHeartbeatFile] = job.heartbeat_file;
    v[ch::kHeartbeatSlot] = s(id.local_rank);
  }
  if (!job.python_startup_dir.empty() || !job.python_package_dir.empty()) {
    std::string first = job.python_startup_dir;
    if (!job.python_package_dir.empty()) first += (first.empty() ? "" : ":") + job.python_package_dir;
    const char* path = getenv("PYTHONPATH");
    v["PYTHONPATH"] = first + (path && *path ? std::string(":") + path : "");
  }
  if (job.progress_by_agent && id.rank == 0) v[ch::kProgressByAgent] = "1";
  if (job.heals) v[ch::kHeals] = "1";
  if (job.heal_generation > 0) v[ch::kHealGeneration] = s(job.heal_generation);
  v[ch::kVerifyEvery] = s(job.verify_every);
  if (!job.trace_node_dir.empty()) {
    v[ch::kTraceFile] = ch::trace_rank_file(job.trace_node_dir, job.attempt, id.rank);
    if (!job.trace_steps.empty()) v[ch::kTraceSteps] = job.trace_steps;
  }
  return v;
}

std::vector<std::string> merge_environment(const std::vector<std::string>& inherited,
                                           const std::map<std::string, std::string>& vars,
                                           int local_world_size) {
  std::vector<std::string> out;
  out.reserve(inherited.size() + vars.size() + 1);
  bool has_omp = false;
  std::set<std::string> user_set;
  // Set unless the user (or vars) set them.
  // Only the current name: PyTorch 2.x warns in every worker that the old
  // one (NCCL_ASYNC_ERROR_HANDLING) is deprecated when it is set, and
  // torchrun 2.x sets only this one.
  std::map<std::string, std::string> defaults{{"TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"}};
  // glibc malloc, tuned for a training step that frees and allocates the
  // same few-MB tensors every step. Its defaults hand freed memory back to
  // the kernel (trim above 2x the dynamic mmap threshold, a few MB here) and
  // map tensors above that threshold afresh, so every step faults its pages
  // in again: the default job ran its first epoch at a quarter of the speed
  // of its later ones (the evaluation's large batches raised the dynamic
  // thresholds by chance). Kept: 128 MiB at the top of the heap; mapped:
  // blocks of 32 MiB and more (glibc's own largest dynamic threshold).
  // Left alone where the user tunes malloc in any of its ways.
  const std::map<std::string, std::string> malloc_defaults{{"MALLOC_TRIM_THRESHOLD_", "134217728"},
                                                           {"MALLOC_MMAP_THRESHOLD_", "33554432"}};
  bool user_tunes_malloc = false;
  for (const auto& entry : inherited) {
    const auto eq = entry.find('=');
    const std::string key = entry.substr(0, eq);
    if (key.rfind("MALLOC_", 0) == 0 || (key == "GLIBC_TUNABLES" && entry.find("glibc.malloc.") != std::string::npos)) {
      user_tunes_malloc = true;
    }
  }
  if (!user_tunes_malloc) defaults.insert(malloc_defaults.begin(), malloc_defaults.end());
  for (const auto& entry : inherited) {
    const auto eq = entry.find('=');
    const std::string key = entry.substr(0, eq);
    if (key == "OMP_NUM_THREADS") has_omp = true;
    defaults.erase(key);
    if (vars.count(key)) {
      // The user's own interface choice wins over the one ddprun found.
      if (key == ch::kGlooSocketIfname || key == ch::kNcclSocketIfname) {
        user_set.insert(key);
        out.push_back(entry);
      }
      continue;  // replaced below
    }
    // Stale per-job settings from an outer ddprun must not leak into this job.
    if (std::find(std::begin(ch::kNeverInherited), std::end(ch::kNeverInherited), key) !=
        std::end(ch::kNeverInherited)) {
      continue;
    }
    out.push_back(entry);
  }
  for (const auto& [k, val] : vars) {
    if (user_set.count(k)) continue;
    out.push_back(k + "=" + val);
  }
  if (!has_omp && !vars.count("OMP_NUM_THREADS") && local_world_size > 1) {
    out.push_back("OMP_NUM_THREADS=1");
  }
  for (const auto& [k, val] : defaults) {
    if (!vars.count(k)) out.push_back(k + "=" + val);
  }
  return out;
}

void apply_virtual_local_rank(std::map<std::string, std::string>& vars,
                              const std::vector<std::string>& inherited, int local_rank) {
  vars.insert_or_assign(ch::kLocalRank, std::string(1, '0'));
  std::string visible = std::to_string(local_rank);
  const std::string prefix = "CUDA_VISIBLE_DEVICES=";
  for (const auto& entry : inherited) {
    if (entry.rfind(prefix, 0) != 0 || entry.size() == prefix.size()) continue;
    std::vector<std::string> devices;
    size_t start = prefix.size();
    while (start <= entry.size()) {
      size_t end = entry.find(',', start);
      if (end == std::string::npos) end = entry.size();
      devices.push_back(entry.substr(start, end - start));
      start = end + 1;
    }
    if (local_rank < static_cast<int>(devices.size())) visible = devices[local_rank];
  }
  vars["CUDA_VISIBLE_DEVICES"] = visible;
}

std::vector<std::string> current_environment() {
  std::vector<std::string> out;
  for (char** e = environ; e && *e; ++e) out.emplace_back(*e);
  return out;
}

}  // namespace ddprun
