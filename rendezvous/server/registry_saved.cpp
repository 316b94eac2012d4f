// JobRegistry, the saved state: a job written out for the control plane
// (save_job), served again from it by the next leader (restore_job), and
// the revision that says whether it changed since. The registry's calls
// and rounds are in registry.cpp.
#include <chrono>

#include "rendezvous/server/job_state.h"
#include "rendezvous/server/registry.h"

namespace ddprun {
namespace {
using Clock = std::chrono::steady_clock;
}  // namespace

std::optional<std::string> JobRegistry::save_job(const std::string& job_id, const std::string& leader_node_id,
                                                 int64_t term) {
  std::lock_guard lock(mu_);
  Job* job = find_locked(job_id);
  if (!job) return std::nullopt;
  JobStateParts parts;
  parts.job_id = &job->id;
  parts.rounds = job->rounds ? &*job->rounds : nullptr;
  parts.store = job->store->entries();
  parts.store_round = job->store_round;
  parts.leader_node_id = leader_node_id;
  parts.term = term;
  if (job->nccl && job->nccl->made.load(std::memory_order_acquire)) {
    parts.nccl_round = job->nccl_round;
    parts.nccl_id = job->nccl->id;
    parts.nccl_id_error = job->nccl->error;
  }
  return encode_job_state(parts, Clock::now());
}

std::string JobRegistry::restore_job(std::string_view saved, std::string* saved_by) {
  RestoredJob r = decode_job_state(saved, Clock::now());
  if (saved_by) *saved_by = r.leader_node_id;
  std::vector<Completion> completions;
  {
    std::lock_guard lock(mu_);
    if (closed_) throw RegistryClosed("rendezvous: shutting down");
    if (find_locked(r.job_id)) {
      throw JobStateError("saved job state: job '" + r.job_id + "' is served here already");
    }
    Job& job = job_locked(r.job_id);
    job.rounds = std::move(r.rounds);
    for (const auto& [k, v] : r.store) job.store->set(k, v);
    job.store_round = r.store_round;
    if (r.nccl_round >= 0) {
      job.nccl_round = r.nccl_round;
      job.nccl = std::make_shared<RoundNcclId>();
      std::call_once(job.nccl->once, [&] {
        job.nccl->id = r.nccl_id;
        job.nccl->error = r.nccl_id_error;
      });
      job.nccl->made.store(true, std::memory_order_release);
    }
    if (job.rounds) settle_locked(job, Clock::now(), completions);
  }
  wake_timer_.notify_all();
  run(completions);
  return r.job_id;
}

uint64_t JobRegistry::revision(const std::string& job_id) {
  std::lock_guard lock(mu_);
  Job* job = find_locked(job_id);
  return job ? job->revision : 0;
}

}  // namespace ddprun
