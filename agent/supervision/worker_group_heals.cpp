// WorkerGroup, heals: whether its workers heal in place, the heal words
// read from their slots, a replacement started in a generation (the others
// told it first), the heal generation the rendezvous names for a node's
// failed worker, and the record of each worker's newest heal.
#include <spdlog/spdlog.h>

#include <string>
#include <utility>

#include "agent/supervision/worker_group.h"
#include "agent/supervision/worker_group_worker.h"
#include "channel/env_names.h"
#include "channel/event_log.h"

namespace ddprun {

bool WorkerGroup::all_heal_in_place() const {
  if (!policy_) return false;
  for (size_t i = 0; i < workers_.size(); ++i) {
    if (!policy_->can_heal(static_cast<int>(i))) return false;
  }
  return true;
}

bool WorkerGroup::any_joining() const {
  if (!policy_) return false;
  for (size_t i = 0; i < workers_.size(); ++i) {
    if (policy_->alive(static_cast<int>(i)) && policy_->joining(static_cast<int>(i))) return true;
  }
  return false;
}

group_event::HealWords WorkerGroup::heal_words() const {
  group_event::HealWords heal;
  if (!options_.heartbeats || options_.max_heals <= 0) return heal;
  if (options_.heals_named_by_rendezvous && options_.host) heal.other_nodes = options_.host->other_nodes();
  heal.ready.resize(workers_.size());
  for (size_t i = 0; i < workers_.size(); ++i) {
    if (policy_->alive(static_cast<int>(i))) {
      heal.ready[i] = options_.heartbeats->heal_ready(workers_[i]->launch->id.local_rank);
    }
  }
  return heal;
}

// Checkpointless recovery: the others are told the generation to heal in
// first (they connect afresh while the replacement starts), then the
// replacement starts with its slot cleared and the generation in its
// environment. Its log files continue the failed worker's.
void WorkerGroup::replace(int i, uint32_t generation) {
  Worker& w = *workers_[i];
  for (auto& loss : w.output->log_losses()) result_.log_losses.push_back(std::move(loss));
  for (int& fd : w.fds) {
    if (fd >= 0) close(fd);
    fd = -1;
  }
  const int local_rank = w.launch->id.local_rank;
  options_.heartbeats->reset_slot(local_rank, generation);
  w.replica_verdicts = 0;  // the new process counts its own
  w.apart_to_replace = false;
  for (size_t o = 0; o < workers_.size(); ++o) {
    if (static_cast<int>(o) != i && policy_->alive(static_cast<int>(o))) {
      options_.heartbeats->set_heal_generation(workers_[o]->launch->id.local_rank, generation);
    }
  }
  if (options_.host) {
    if (auto standby = options_.host->take_standby()) launches_[static_cast<size_t>(i)].standby = std::move(*standby);
  }
  const bool from_standby = start(static_cast<size_t>(i), /*append_logs=*/true,
                                  {{channel::kHeals, "1"}, {channel::kHealGeneration, std::to_string(generation)}});
  policy_->step(group_event::ReplacementStarted{i, from_standby}, std::chrono::steady_clock::now());
  if (options_.events) {
    options_.events->write(channel::events::kHeal, {{"attempt", options_.attempt}, {"rank", w.launch->id.rank},
                                                    {"local_rank", local_rank}, {"pid", w.pid},
                                                    {"generation", generation}, {"heals", policy_->heal_count()}});
  }
  result_.heal_generation = generation;
}

void WorkerGroup::renumber(int first_global_rank, int world_size, int node_rank, int num_nodes) {
  for (size_t i = 0; i < launches_.size(); ++i) {
    WorkerIdentity& id = launches_[i].id;
    id.rank = first_global_rank + id.local_rank;
    id.world_size = world_size;
    id.group_rank = node_rank;
    id.group_world_size = num_nodes;
    if (i < workers_.size() && workers_[i]->output) workers_[i]->output->set_rank(id.rank);
  }
  if (policy_) policy_->step(group_event::WholeJob{num_nodes == 1}, std::chrono::steady_clock::now());
}

// Each worker's newest heal only (what a root cause may need), and a
// count: a job that heals for days keeps no record of every one.
void WorkerGroup::record_heal(int i, WorkerExit e) {
  ++result_.heals;
  if (auto it = latest_heal_.find(i); it != latest_heal_.end()) {
    result_.healed[it->second] = std::move(e);
    return;
  }
  latest_heal_[i] = result_.healed.size();
  result_.healed.push_back(std::move(e));
}

void WorkerGroup::check_heal_answer() {
  if (awaiting_.empty() || !options_.heals_named_by_rendezvous || !options_.host) return;
  const auto generation = options_.host->heal_answer();
  if (!generation) return;
  const auto commands =
      policy_->step(group_event::GenerationNamed{*generation}, std::chrono::steady_clock::now()).commands;
  for (auto& [i, e] : awaiting_) {
    const bool replaced = replaces(commands, i);
    if (!replaced) {
      if (*generation == 0) {
        spdlog::warn("rank {} (pid {}) cannot be replaced: the rendezvous named no heal generation (the round "
                     "is not running, or another node's workers cannot heal now); stopping the other workers",
                     e.rank, e.pid);
      }
      result_.failures.push_back(std::move(e));
    } else {
      spdlog::warn("rank {} (pid {}): its replacement heals from the other workers in generation {} (heal {} of "
                   "the node; --max-heals {} per rank)",
                   e.rank, e.pid, *generation, policy_->heal_count(), options_.max_heals);
      record_heal(i, std::move(e));
    }
  }
  awaiting_.clear();
  execute(commands);
}

}  // namespace ddprun
