// Agent, as the AttemptHost of each attempt of its workers (attempt_host.h):
// the standbys it hands out, the progress an attempt watches, the news of
// a keep-alive said once, and the lines a failure summary needs.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <iterator>

#include "agent/agent.h"
#include "agent/base/temp_dir.h"
#include "channel/event_log.h"

namespace ddprun {
namespace ev = channel::events;

std::string Agent::stacks_stem(int attempt) const {
  // A hang's stacks outlive the job: beside the logs, or in TMPDIR.
  return (files_dir_is_temp_ ? temp_base() + "/ddprun-" + cfg_.run_id + "-" : files_dir_ + "/") +
         "stacks-attempt_" + std::to_string(attempt);
}

std::vector<Standby> Agent::take_standbys(size_t n) {
  const auto taken = static_cast<std::ptrdiff_t>(std::min(n, standbys_.size()));
  std::vector<Standby> out(std::make_move_iterator(standbys_.begin()),
                           std::make_move_iterator(standbys_.begin() + taken));
  standbys_.erase(standbys_.begin(), standbys_.begin() + taken);
  dismiss_standbys();  // any beyond the attempt's workers
  return out;
}

std::optional<Standby> Agent::take_standby() {
  if (standbys_.empty()) return std::nullopt;
  Standby s = std::move(standbys_.back());
  standbys_.pop_back();
  return s;
}

void Agent::begin_watching(int attempt, const Assignment& a) {
  seen_.assign(cfg_.nproc, channel::Progress{});
  meter_.reset();
  logged_step_ = -1;
  last_progress_log_ = std::chrono::steady_clock::now();
  heal_generation_ = a.heal_generation;
  if (status_) status_->watch(a.round, 0, a.first_global_rank);  // local rank 0's global rank
}

void Agent::end_watching(int attempt, const Assignment& a) {
  // A checkpoint saved just before the end, since the last tick.
  watch_progress(attempt, a, nullptr);
  if (console_err_) console_err_->clear_status();
  if (status_) status_->unwatch();
  // Every local worker is gone: its keys in the store this node hosts go too.
  if (fresh_key_space_) fresh_key_space_();
}

void Agent::note_view(int attempt, const NodeView& view) {
  if (view.nodes_waiting > nodes_waiting_) {
    spdlog::info("{} node(s) wait to join; the job runs at its --nnodes maximum of {}", view.nodes_waiting,
                 cfg_.rdzv.max_nodes);
  }
  nodes_waiting_ = view.nodes_waiting;
  note_control_plane(attempt, view);
  if (view.refusals > refusals_told_) {
    spdlog::warn("the rendezvous {}", view.refusal);  // it runs on; the late node exits
    const bool refused = view.refusal.rfind("refused", 0) == 0;
    events_.write(refused ? ev::kRefused : ev::kAdmitted, {{"attempt", attempt}, {"detail", view.refusal}});
    refusals_told_ = view.refusals;
  }
}

std::string Agent::node_name() const { return "node '" + node_id_ + "' (" + cfg_.host + ")"; }

std::string Agent::control_plane_line() const {
  if (control_node_.empty()) return "";
  return "node " + control_node_ + " serves the rendezvous (term " + std::to_string(control_term_) + ", " +
         std::to_string(control_takeovers_) + " takeover(s) seen from this node)";
}

}  // namespace ddprun
