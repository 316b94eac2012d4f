// WorkerGroup, stragglers: the local ranks' scores from their flight
// records on the monitor's beat, a slowness this node's load explains told
// apart, and --straggler-action replace carried out through a heal.
#include "agent/supervision/worker_group.h"
#include "agent/supervision/worker_group_worker.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "agent/health/cpu_busy.h"
#include "channel/event_log.h"

namespace ddprun {

void WorkerGroup::check_stragglers() {
  if (!options_.heartbeats || policy_->stopping()) return;
  std::map<int, std::vector<channel::FlightEntry>> records;
  std::map<int, int> worker_of;  // rank → index in workers_
  for (size_t i = 0; i < workers_.size(); ++i) {
    if (!policy_->alive(static_cast<int>(i))) return;  // a heal or an exit under way: not now
    const auto& id = workers_[i]->launch->id;
    records[id.rank] = options_.heartbeats->flight(id.local_rank);
    worker_of[id.rank] = static_cast<int>(i);
  }
  const uint32_t generation = stragglers_.generation();
  stragglers_.update(records);
  const auto now = std::chrono::steady_clock::now();
  if (stragglers_.generation() != generation || cpu_window_.empty()) {
    // A heal (or the start): judged afresh, and the CPU times counted from now.
    if (stragglers_.generation() != generation) {
      stragglers_said_.clear();
      excused_by_load_.clear();
    }
    cpu_window_.clear();
    for (size_t i = 0; i < workers_.size(); ++i) {
      cpu_window_.push_back(cpu_times(workers_[i]->cgroup, workers_[i]->pid).value_or(CpuTimes{}));
    }
    cpu_window_start_ = now;
  }
  using Action = GroupPolicy::StragglerAction;
  for (int rank : stragglers_.stragglers()) {
    if (std::find(stragglers_said_.begin(), stragglers_said_.end(), rank) != stragglers_said_.end()) continue;
    const int w = worker_of[rank];
    const StragglerScore& s = stragglers_.scores().at(rank);
    const std::string load = slowed_by_load(w, s.score);
    const Action action =
        policy_->straggler_action(w, !load.empty(), options_.replace_stragglers, options_.heartbeats->all_in_step());
    if (action == Action::kWait) continue;  // the next beat
    stragglers_said_.push_back(rank);
    nlohmann::json event = {{"attempt", options_.attempt}, {"rank", rank},
                            {"local_rank", workers_[w]->launch->id.local_rank}, {"score", s.score},
                            {"wait_share", s.wait_share}, {"late_ms", s.late_ms}};
    if (action == Action::kLoad) {
      excused_by_load_.push_back(rank);
      spdlog::info("rank {} is the slowest here (score {:.2f}), but {}: this node's load, not the rank; it goes on",
                   rank, s.score, load);
      event["action"] = "load";
      event["detail"] = load;
      if (options_.events) options_.events->write(channel::events::kStraggler, std::move(event));
      continue;
    }
    char why[200];
    std::snprintf(why, sizeof(why),
                  "a straggler: %.0f%% of the time the others wait is for it, %.1f ms a collective on average; "
                  "it is %.0f%% of their time between collectives (score %.2f)",
                  100 * s.wait_share, s.late_ms, 100 * s.score, s.score);
    std::vector<GroupCommand> kill;
    if (action == Action::kReplace) {
      kill = policy_->step(group_event::Replace{w, group_event::Replace::kStraggler, why},
                           std::chrono::steady_clock::now())
                 .commands;
    }
    if (action == Action::kWarn) {
      spdlog::warn("rank {} is {} (--straggler-action replace would replace it)", rank, why);
      event["action"] = "warn";
    } else if (kill.empty()) {
      spdlog::warn("rank {} is {}; it is not replaced: {}", rank, why,
                   policy_->heals_ran_out(w)
                       ? "its heals ran out (--max-heals " + std::to_string(options_.max_heals) + ")"
                       : std::string("not every worker can heal around it now"));
      event["action"] = "kept";
    } else {
      event["action"] = "replace";
    }
    if (options_.events) options_.events->write(channel::events::kStraggler, std::move(event));
    execute(kill);
  }
}

std::optional<StragglerScores::Slowest> WorkerGroup::slowest() const {
  return stragglers_.slowest_rank(excused_by_load_);
}

std::string WorkerGroup::slowest_text() const { return stragglers_.slowest(excused_by_load_); }

// Each worker's share of the time since the scores' generation began that
// it spent waiting for a CPU (StragglerScores::slowed_by_load); "" when
// the times cannot be read, else why the load explains worker w.
std::string WorkerGroup::slowed_by_load(int w, double score) const {
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - cpu_window_start_).count();
  if (wall <= 0 || cpu_window_.size() != workers_.size()) return "";
  std::vector<double> waited(workers_.size(), 0);
  for (size_t i = 0; i < workers_.size(); ++i) {
    const auto t = cpu_times(workers_[i]->cgroup, workers_[i]->pid);
    if (!t) return "";
    waited[i] = std::chrono::duration<double>(t->waited - cpu_window_[i].waited).count() / wall;
  }
  return StragglerScores::slowed_by_load(waited, static_cast<size_t>(w), score);
}

}  // namespace ddprun
