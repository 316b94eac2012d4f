#include "agent/attempt.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "agent/attempt_policy.h"
#include "channel/event_log.h"

namespace ddprun {
namespace ev = channel::events;

Attempt::Attempt(AttemptHost& node, int attempt, const JoinResult& joined, Lifecycle& life)
    : node_(node), cfg_(node.config()), attempt_(attempt), joined_(joined), life_(life), a_(joined.assignment) {}

void Attempt::announce() {
  if (cfg_.wants_nccl_id && joined_.nccl_id.empty()) {
    spdlog::warn("no NCCL id for round {}: {}", a_.round, joined_.nccl_id_error);
  }
  for (const auto& lost : a_.lost_since_last_round) {
    if (a_.heal_generation > 0) {
      spdlog::warn("taking over node rank {} (ranks {}..{}) of lost node {}: the workers start as "
                   "replacements and heal from the others (heal generation {})",
                   a_.node_rank, a_.first_global_rank, a_.first_global_rank + cfg_.nproc - 1, lost,
                   a_.heal_generation);
    } else {
      spdlog::warn("lost node {}; the job goes on without it", lost);  // "'id' (host): why"
    }
  }
  node_.events().write(ev::kRound, {{"round", a_.round}, {"node_rank", a_.node_rank}, {"num_nodes", a_.num_nodes},
                                    {"world_size", a_.world_size}, {"restart_count", a_.restart_count},
                                    {"lost_nodes", a_.lost_since_last_round}});
  if (!a_.lost_since_last_round.empty()) {
    node_.events().write(ev::kNodeLost, {{"nodes", a_.lost_since_last_round}});
  }
  if (a_.heal_generation > 0 && a_.lost_since_last_round.empty()) {
    // It joined the running round: the world grew by its workers.
    spdlog::warn("joining the running round as node rank {} (ranks {}..{} of {}): the workers start as "
                 "replacements and take the state from the others (heal generation {})",
                 a_.node_rank, a_.first_global_rank, a_.first_global_rank + cfg_.nproc - 1, a_.world_size,
                 a_.heal_generation);
    node_.events().write(ev::kGrow, {{"attempt", attempt_}, {"generation", a_.heal_generation},
                                     {"node_rank", a_.node_rank}, {"num_nodes", a_.num_nodes},
                                     {"world_size", a_.world_size}, {"first_rank", a_.first_global_rank},
                                     {"detail", "this node joined the running round"}});
  } else if (a_.heal_generation > 0) {
    node_.events().write(ev::kTakeover, {{"attempt", attempt_}, {"generation", a_.heal_generation},
                                         {"node_rank", a_.node_rank},
                                         {"detail", "this node took over the ranks of lost node(s)"}});
  }
  auto log = cfg_.rdzv.max_nodes > 1 ? spdlog::level::info : spdlog::level::debug;
  spdlog::log(log, "round {}: node rank {} of {}, ranks {}..{} of {}", a_.round, a_.node_rank, a_.num_nodes,
              a_.first_global_rank, a_.first_global_rank + cfg_.nproc - 1, a_.world_size);
  // Why the round opened, unless this node heard it while its workers ran:
  // its own workers may have failed only because another node's did.
  const std::string heard = node_.take_heard_round_detail();  // forgotten whether or not it is said
  if (!a_.opened_because.empty() && a_.opened_because != heard) {
    spdlog::warn("round {} follows the failure of the round before it: {}", a_.round, a_.opened_because);
  }
}

GroupOptions Attempt::group_options() {
  GroupOptions go;
  go.host = this;
  go.heartbeats = node_.heartbeats();
  go.hang_timeout = cfg_.hang_timeout;
  if (cfg_.hang_auto_floor.count() > 0) {
    LearnedTimeoutOptions learned;
    learned.floor = cfg_.hang_auto_floor;
    go.learned_hang = learned;
  }
  go.stop_timeout = cfg_.stop_timeout;
  go.monitor_interval = cfg_.monitor_interval;
  go.events = &node_.events();
  go.attempt = attempt_;
  go.asked_stacks_copy = cfg_.asked_stacks_copy;
  go.stacks_stem = node_.stacks_stem(attempt_);
  go.host_name = cfg_.host;
  go.max_heals = heals_ ? cfg_.max_heals : 0;
  go.replace_stragglers = cfg_.replace_stragglers;
  // Once every worker is past its start (it beats), warm up the next set
  // (for a restart), or one (for a heal's replacement).
  go.warm_standbys = restart_standbys_ || heal_standby_;
  if (go.warm_standbys) go.standby_warmup = cfg_.standby_warmup;
  // A failed worker's replacement heals in the generation the rendezvous
  // names for it; every other node's workers heal in it too. (Also while
  // this node runs alone: the round may grow, and its generations must
  // stay one sequence.)
  go.heals_named_by_rendezvous = node_.names_heals_at_rendezvous();
  if (node_.lease()) go.control_fd = node_.lease()->fd();
  go.asks_other_ranks = cfg_.rdzv.max_nodes > 1;  // a hang's verdict names the other nodes' ranks too
  return go;
}

GroupResult Attempt::run() {
  announce();
  std::vector<WorkerLaunch> launches = node_.launches(attempt_, joined_);
  // As many workers as there are standbys start from one (a heal may have
  // used some), the rest fresh; any beyond this attempt's workers go.
  std::vector<Standby> standbys = node_.take_standbys(launches.size());
  for (size_t i = 0; i < standbys.size(); ++i) launches[i].standby = std::move(standbys[i]);

  heals_ = node_.heals(a_);
  restart_standbys_ = cfg_.standby && life_.can_restart();
  heal_standby_ = heals_ && cfg_.heal_standby;
  GroupOptions go = group_options();
  if (HeartbeatTable* beats = node_.heartbeats()) {
    beats->reset();
    // A takeover's workers are replacements: their slots name the generation
    // they heal in (they wait for a newer one only after a later failure).
    for (int lr = 0; lr < cfg_.nproc && a_.heal_generation > 0; ++lr) {
      beats->set_heal_generation(lr, a_.heal_generation);
    }
    node_.tell_workers_whether_heals_come(a_, nullptr);
  }
  node_.begin_watching(attempt_, a_);
  WorkerGroup group(std::move(launches), node_.signals(), go);
  running_ = &group;
  GroupResult result = group.run();
  running_ = nullptr;
  if (node_.lease()) node_.lease()->set_workers_heal_round(-1);  // none of them runs any more
  if (result.heals > 0 && result.outcome != GroupResult::kWorkerFailed) {
    spdlog::info("{} failed worker(s) were replaced while the others went on (heal generation {}; no restart)",
                 result.heals, result.heal_generation);
  }
  node_.end_watching(attempt_, a_);
  return end_of(std::move(result));
}

void Attempt::on_monitor() {
  node_.watch_progress(attempt_, a_, running_);
  node_.report_workers_heal(a_, running_);
  if (refill_standby_ && !(running_ && running_->any_joining())) {
    // After a heal took the warm standby, once the replacement has the
    // state: a standby loading its libraries competes for the cores with
    // the replacement's start and its heal.
    refill_standby_ = false;
    node_.warm_standbys(attempt_ + 1, joined_, 1);
  }
}

std::optional<std::string> Attempt::stop_now() {
  if (!hand_over_) return std::nullopt;
  return hand_over(*hand_over_);
}

void Attempt::hand_over_if_straggler(const NodeView& view) {
  if (!handed_over_.empty()) return;
  hand_over_.reset();
  const StragglerNews news = straggler_news_of(view, {cfg_.replace_stragglers, cfg_.hosts_rendezvous});
  if (news.verdict == StragglerNews::kHandOver) {
    hand_over_ = view;  // at the next moment all its workers are inside a step's collective
    return;
  }
  if (news.verdict == StragglerNews::kNotNamed || straggler_told_) return;
  node_.tell_straggler_node(attempt_, view, "it goes on (" + news.kept + ")", false, news.kept);
  straggler_told_ = true;
}

std::optional<std::string> Attempt::hand_over(const NodeView& view) {
  HeartbeatTable* beats = node_.heartbeats();
  if (!hand_over_now(!handed_over_.empty(),
                     beats ? std::optional<bool>(beats->all_in_step(/*in_collective=*/true)) : std::nullopt)) {
    return std::nullopt;
  }
  handed_over_ = node_.node_name() + " was the job's straggler (score " + score_text(view.straggler_score) +
                 ") and handed its place to a waiting node (--straggler-action replace)";
  node_.tell_straggler_node(attempt_, view,
                            "stopping its workers and handing its place to a waiting node (--straggler-action replace)",
                            true, handed_over_);
  return handed_over_;
}

void Attempt::on_all_beating() {
  node_.warm_standbys(attempt_ + 1, joined_, restart_standbys_ ? cfg_.nproc : 1);
}

std::optional<Standby> Attempt::take_standby() {
  // A heal's replacement starts from a warm standby, and another is warmed
  // for the next heal on the monitor's next beat.
  if (!heal_standby_) return std::nullopt;
  std::optional<Standby> s = node_.take_standby();
  if (s) refill_standby_ = true;
  return s;
}

void Attempt::ask_heal(const std::string& why) { heal_request_ = node_.lease()->request_heal(why); }

std::optional<uint32_t> Attempt::heal_answer() {
  const LeaseStatus st = node_.lease()->peek();
  const auto answer = answer_of(st.view ? &*st.view : nullptr, heal_request_, a_.round, a_.placement());
  if (!answer) return std::nullopt;
  // The same generation may also move this node's ranks (a node was lost
  // while this one asked: one generation names both): the replacement
  // starts under the new ranks, as the other workers go on under them.
  if (answer->move) move(*st.view);
  node_.heard_generation(answer->generation);  // named for this node's heal: not news to tell
  return answer->generation;
}

bool Attempt::other_nodes() { return a_.num_nodes > 1; }

std::vector<RankView> Attempt::other_ranks() { return node_.other_nodes_ranks(); }

void Attempt::move(const NodeView& view) {
  node_.move_with(attempt_, a_, view);
  if (running_) running_->renumber(a_.first_global_rank, a_.world_size, a_.node_rank, a_.num_nodes);
}

std::optional<std::string> Attempt::on_control() {
  LeaseStatus st = node_.lease()->take();
  if (st.contact_lost) return life_.on_contact_lost() + " (" + st.error + ")";
  if (!st.view) return std::nullopt;
  const NodeView& view = *st.view;
  // A node dropped from the job (it was paused or cut off past its lease,
  // and the others went on without it) acts on nothing the view says of the
  // job: its workers must not heal into a generation the others named
  // without them, under the ranks they had.
  if (!view.known) return life_.on_view(view);
  node_.note_view(attempt_, view);
  const ViewNews news = news_of(view, a_.round, node_.told_generation(), a_.placement());
  switch (news.heal) {
    case ViewNews::Heal::kMove: move(view); break;  // the round shrank or grew: this node's place moved
    case ViewNews::Heal::kHealWithOthers: node_.heal_with_others(attempt_, view); break;
    case ViewNews::Heal::kNone: break;
  }
  if (news.tell_heals_come) node_.tell_workers_whether_heals_come(a_, &view);
  if (auto why = life_.on_view(view)) {
    node_.heard_round_detail(view.detail);
    return why;
  }
  hand_over_if_straggler(view);
  return std::nullopt;
}

GroupResult Attempt::end_of(GroupResult result) {
  if (result.outcome == GroupOutcome::kStoppedForRound && !handed_over_.empty()) {
    // This node's own reason to stop: it hands its place over.
    result.outcome = GroupOutcome::kHandedOver;
    result.why = handed_over_;
  }
  if (result.outcome == GroupResult::kWorkerFailed || result.outcome == GroupResult::kStoppedBySignal) {
    SummaryContext ctx{cfg_.run_id, a_.restart_count, cfg_.rdzv.max_restarts, result.stopped_count,
                       result.outcome == GroupResult::kStoppedBySignal ? "stopped by " + signal_name(result.signal) : ""};
    ctx.python = cfg_.python;
    ctx.control_plane = node_.control_plane_line();
    write_all(cfg_.console_err_fd, format_failure_summary(result.failures, ctx));
  }
  if (result.outcome == GroupResult::kWorkerFailed && !result.failures.empty()) {
    // The root cause, as the summary names it.
    const WorkerExit& root = root_cause(result.failures);
    const std::string message = root.error_message.empty() ? describe_exit(root) : root.error_message;
    result.why = "rank " + std::to_string(root.rank) + " " + message;  // told to the rendezvous with the restart
    nlohmann::json f = {{"attempt", attempt_}, {"rank", root.rank}, {"local_rank", root.local_rank},
                        {"root_cause", true}, {"message", message}};
    if (root.signal != 0) {
      f["signal"] = signal_name(root.signal);
    } else if (root.reason.empty()) {  // a hung worker has neither: its message says why
      f["exit_code"] = root.exit_code;
    }
    node_.events().write(ev::kFailure, std::move(f));
  }
  node_.add_log_losses(result.log_losses);
  if (result.outcome == GroupResult::kWorkerFailed && life_.can_restart()) {
    spdlog::warn("restarting the workers (restart {} of {}{})", a_.restart_count + 1, cfg_.rdzv.max_restarts,
                 node_.has_standbys() ? ", from standby" : "");
    node_.events().write(ev::kRestart, {{"attempt", attempt_ + 1}, {"restart_count", a_.restart_count + 1},
                                   {"max_restarts", cfg_.rdzv.max_restarts}, {"reason", "worker failure"}});
  }
  return result;
}

}  // namespace ddprun
