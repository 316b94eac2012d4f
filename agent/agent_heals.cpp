// The agent's part in healing across nodes: what it tells the rendezvous
// (its workers heal in this round), what it tells its workers (whether a
// heal comes; the generation to heal in; new ranks after a shrink or a
// grow), and a spare's warm-up. The decisions are the rendezvous's
// (rendezvous/server/round.cpp: takeover, shrink, grow, worker heal) and the group
// policy's (agent/supervision/group_policy.cpp); these functions carry them to the
// heartbeat slots and the event log. The Attempt (attempt.cpp) calls them
// from the lease keeper's news.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>

#include "agent/agent.h"
#include "agent/attempt_policy.h"
#include "channel/event_log.h"
#include "rendezvous/store/printable.h"

namespace ddprun {

namespace ev = channel::events;

void Agent::warm_up_spare(int attempt, const NodeView& view) {
  if (!view.known || !view.takeover_ready || !takes_over() || !cfg_.heal_standby || !standbys_.empty()) return;
  // The members' workers heal: they run a program that waits in ddp::init()
  // as a standby (the same program as this node's). Where they will run is
  // a guess; the variables that matter come at release.
  JoinResult guess;
  guess.assignment.round = view.round;
  guess.assignment.num_nodes = cfg_.rdzv.max_nodes;
  guess.assignment.world_size = cfg_.rdzv.max_nodes * cfg_.nproc;
  spawn_standbys(attempt, guess);
  if (!standbys_.empty()) spdlog::info("warmed up {} worker(s) to take over a lost node's ranks", standbys_.size());
}

std::string Agent::program_identity() const {
  // The name, not the path: nodes install the same program in other places.
  // A script's interpreter is left out (python3 here, python3.11 there).
  size_t first = 0;
  if (!cfg_.python.empty() && !cfg_.argv.empty()) first = cfg_.argv.size() > 1 && cfg_.argv[1] == "-u" ? 2 : 1;
  if (first >= cfg_.argv.size()) return printable(cfg_.program, false).substr(0, kMaxProgramBytes);
  std::string id = cfg_.argv[first];
  id = id.substr(id.find_last_of('/') == std::string::npos ? 0 : id.find_last_of('/') + 1);
  for (size_t i = first + 1; i < cfg_.argv.size(); ++i) id += " " + cfg_.argv[i];
  return printable(id, false).substr(0, kMaxProgramBytes);
}

void Agent::report_workers_heal(const Assignment& a, const WorkerGroup* group) {
  if (!names_heals_at_rendezvous()) return;
  // A replacement still joining heals too (a failure during its heal begins
  // the next generation), and so does a failed worker waiting for its
  // generation: a node lost meanwhile is taken over or shrunk past.
  const bool all = group && group->all_heal_in_place();
  lease_->set_workers_heal_round(all ? a.round : -1);
}

void Agent::tell_workers_whether_heals_come(const Assignment& a, const NodeView* view) {
  if (!heals_across(a)) return;
  // Before any view of this round: not known. With every member healing, a
  // failed worker is replaced in a generation the rendezvous names, a spare
  // that waits takes over a lost node, or the job shrinks past it. (A lost
  // node healed neither way supersedes the round: the agent then stops the
  // workers, which wakes the ones waiting.)
  const bool comes = view && view->takeover_ready;
  for (int lr = 0; lr < cfg_.nproc; ++lr) heartbeats_->set_no_heal_coming(lr, !comes);
}

void Agent::heal_with_others(int attempt, const NodeView& view) {
  heal_generation_ = view.heal_generation;
  if (view.heal_reason == HealReason::kWorker) {
    spdlog::warn("{}; the workers here heal with the replacement (no restart)", view.detail);
    events_.write(ev::kPeerHeal, {{"attempt", attempt}, {"generation", heal_generation_}, {"detail", view.detail}});
  } else {
    spdlog::warn("{}; the workers heal with its new workers in generation {} (no restart)", view.detail,
                 heal_generation_);
    events_.write(ev::kTakeover, {{"attempt", attempt}, {"generation", heal_generation_}, {"detail", view.detail}});
  }
  // Workers blocked on the lost ranks have failed, or will at their next
  // collective; either way they heal in this generation.
  for (int lr = 0; lr < cfg_.nproc; ++lr) heartbeats_->set_heal_generation(lr, heal_generation_);
}

void Agent::move_with(int attempt, Assignment& a, const NodeView& view) {
  const Placement& p = view.placement;
  heal_generation_ = view.heal_generation;
  const bool grew = view.heal_reason == HealReason::kGrow;
  spdlog::warn("{}; this node's workers go on as ranks {}..{} of {} (node rank {} of {}) and heal {} in "
               "generation {} (no restart)",
               view.detail, p.first_global_rank, p.first_global_rank + cfg_.nproc - 1, p.world_size, p.node_rank,
               p.num_nodes, grew ? "with the newcomer's" : "among the survivors", heal_generation_);
  events_.write(grew ? ev::kGrow : ev::kShrink,
                {{"attempt", attempt}, {"generation", heal_generation_}, {"node_rank", p.node_rank},
                 {"num_nodes", p.num_nodes}, {"world_size", p.world_size}, {"first_rank", p.first_global_rank},
                 {"detail", view.detail}});
  a.node_rank = p.node_rank;
  a.num_nodes = p.num_nodes;
  a.world_size = p.world_size;
  a.first_global_rank = p.first_global_rank;
  if (status_) status_->watch(a.round, 0, a.first_global_rank);
  // The new ranks first, then the generation that names them (the workers
  // read their placement when they see it).
  for (int lr = 0; lr < cfg_.nproc; ++lr) {
    heartbeats_->set_placement(lr, heal_generation_, a.first_global_rank + lr, a.world_size, a.node_rank,
                               a.num_nodes);
  }
  for (int lr = 0; lr < cfg_.nproc; ++lr) heartbeats_->set_heal_generation(lr, heal_generation_);
}

void Agent::tell_straggler_node(int attempt, const NodeView& view, const std::string& what_now, bool handed_over,
                                const std::string& detail) {
  spdlog::warn("this node is the job's straggler (score {}: the other nodes wait for its ranks that share of each "
               "collective); {}",
               score_text(view.straggler_score), what_now);
  events_.write(ev::kStragglerNode, {{"attempt", attempt}, {"node_rank", view.placement.node_rank},
                                     {"score", view.straggler_score}, {"handed_over", handed_over}, {"detail", detail}});
}

}  // namespace ddprun
