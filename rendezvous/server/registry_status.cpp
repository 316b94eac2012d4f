// JobRegistry, what it reports: the nodes' progress (and the node scores
// made from it) and a job's status for `ddprun status`. The registry's
// calls and rounds are in registry.cpp.
#include <algorithm>
#include <chrono>

#include "rendezvous/server/node_scores.h"
#include "rendezvous/server/registry.h"

namespace ddprun {
namespace {
using Clock = std::chrono::steady_clock;
}  // namespace

void JobRegistry::report_progress(const std::string& job_id, const std::string& node_id,
                                  const std::string& lease_key, const std::optional<ProgressInfo>& progress,
                                  const std::optional<NodeCollectives>& collectives) {
  std::lock_guard lock(mu_);
  if (closed_) throw RegistryClosed("rendezvous: shutting down");
  Job* job = find_locked(job_id);
  if (!job || !job->rounds) {
    throw UnknownJob("rendezvous: no job '" + job_id + "' here to report progress for");
  }
  if (!job->rounds->knows(node_id)) {
    throw RendezvousError("rendezvous: node '" + node_id + "' is not in job '" + job_id +
                          "'; only its nodes report its progress");
  }
  job->rounds->check_lease(node_id, lease_key);
  const auto now = Clock::now();
  if (progress) {
    job->progress = progress;
    job->progress_at = now - progress->age;
  }
  if (collectives) {
    // Reports of nodes gone from the job go once they are as many as the
    // nodes in it (each node has at most one).
    if (job->collectives.size() > 2 * job->rounds->num_nodes()) {
      for (auto it = job->collectives.begin(); it != job->collectives.end();) {
        it = job->rounds->knows(it->first) ? std::next(it) : job->collectives.erase(it);
      }
    }
    job->collectives[node_id] = Job::Collectives{*collectives, now - collectives->age};
  }
}

void JobRegistry::score_nodes_locked(Job& job, std::chrono::steady_clock::time_point now) {
  if (now - job.scored_at < std::chrono::seconds(1)) return;
  job.scored_at = now;
  std::vector<std::string> ids;
  std::vector<const NodeCollectives*> reports;
  for (const auto& [id, c] : job.collectives) {
    // Members of the running round only: a waiting node or one gone from
    // the job does not slow it.
    if (!job.rounds->knows(id) || !job.rounds->assignment(id)) continue;
    ids.push_back(id);
    reports.push_back(&c.report);
  }
  job.scores = job.streaks.pass(ids, node_scores(reports));
}

JobStatus JobRegistry::status(const std::string& job_id) {
  std::vector<Completion> completions;
  JobStatus s;
  {
    std::lock_guard lock(mu_);
    if (closed_) throw RegistryClosed("rendezvous: shutting down");
    Job* job = find_locked(job_id);
    if (!job || !job->rounds) {
      throw UnknownJob("rendezvous: no job '" + job_id +
                       "' here (is the job id right, and does the job still run?)");
    }
    const auto now = Clock::now();
    settle_locked(*job, now, completions);
    s = job->rounds->status(now);
    if (job->progress) {
      s.progress = job->progress;
      s.progress->age = std::chrono::duration_cast<std::chrono::milliseconds>(now - job->progress_at);
      // On one node the agent names its heals itself: the workers' generation counts them.
      if (s.progress->round == s.round) s.heal_generation = std::max(s.heal_generation, s.progress->heal_generation);
    }
    score_nodes_locked(*job, now);  // at most a second old
    for (NodeStatus& n : s.nodes) {
      if (auto c = job->collectives.find(n.node_id); c != job->collectives.end()) {
        // Ages as of now: a rank's as of the report's making, plus the
        // report's age.
        NodeCollectives report = c->second.report;
        const auto since = std::chrono::duration_cast<std::chrono::milliseconds>(now - c->second.at);
        for (RankCollective& r : report.ranks) r.age += since;
        report.age = since;
        n.collectives = std::move(report);
      }
      if (auto sc = job->scores.find(n.node_id); sc != job->scores.end()) n.score = sc->second;
    }
  }
  run(completions);
  return s;
}

}  // namespace ddprun
