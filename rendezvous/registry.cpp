#include "rendezvous/registry.h"

namespace ddprun {

JobRegistry::JobRegistry(IdSource id_source) : id_source_(std::move(id_source)) {}

JobRegistry::Job& JobRegistry::job_locked(const std::string& job_id) {
  auto& slot = jobs_[job_id];
  if (!slot) slot = std::make_unique<Job>();
  return *slot;
}

Store& JobRegistry::store(const std::string& job_id) {
  std::lock_guard lock(mu_);
  if (closed_) throw RegistryClosed("rendezvous: shutting down");
  return job_locked(job_id).store;
}

void JobRegistry::ensure_nccl_id_locked(Job& job) {
  const RoundState& rounds = *job.rounds;
  if (job.nccl_round == rounds.current_round()) return;
  job.nccl_round = rounds.current_round();
  job.nccl_id.clear();
  job.nccl_error.clear();
  if (!rounds.wants_nccl_id()) return;
  try {
    job.nccl_id = id_source_();
  } catch (const std::exception& e) {
    job.nccl_error = e.what();
  }
}

JoinResult JobRegistry::join(const std::string& job_id, const NodeSpec& node,
                             const RoundSettings& settings, std::chrono::milliseconds timeout) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + timeout;
  std::unique_lock lock(mu_);
  if (closed_) throw RegistryClosed("rendezvous: shutting down");
  Job& job = job_locked(job_id);
  if (!job.rounds) job.rounds.emplace(settings);
  RoundState& rounds = *job.rounds;

  const int64_t round = rounds.join(node, settings, Clock::now());
  changed_.notify_all();

  // Wait for the round to close: a join by another node, the end of the
  // last-call window, or our own deadline, whichever comes first.
  while (true) {
    if (closed_) throw RegistryClosed("rendezvous: shutting down");
    if (rounds.advance(Clock::now())) changed_.notify_all();
    if (auto a = rounds.assignment(round, node.node_id)) {
      ensure_nccl_id_locked(job);
      return JoinResult{*a, job.nccl_id, job.nccl_error};
    }
    const auto now = Clock::now();
    if (now >= deadline) {
      throw JoinTimeout("rendezvous: round " + std::to_string(round) + " of job '" + job_id +
                        "' did not close within " + std::to_string(timeout.count()) + " ms: " +
                        std::to_string(rounds.members().size()) + " node(s) joined, " +
                        std::to_string(rounds.settings().min_nodes) + " needed (--nnodes)");
    }
    auto wake = deadline;
    if (auto d = rounds.next_deadline(); d && *d < wake) wake = *d;
    changed_.wait_until(lock, wake);
  }
}

void JobRegistry::close() {
  {
    std::lock_guard lock(mu_);
    closed_ = true;
    for (auto& [id, job] : jobs_) job->store.close();
  }
  changed_.notify_all();
}

}  // namespace ddprun
