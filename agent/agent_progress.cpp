// Rank progress as the agent shows it: checkpoint events from the workers'
// heartbeat slots, and rank 0's progress as a status line on a terminal or
// a log line every --progress-interval. run_workers (agent.cpp) calls
// watch_progress on every tick of its loop.
#include <unistd.h>

#include <spdlog/spdlog.h>

#include "agent/agent.h"
#include "agent/status_wiping_sink.h"
#include "channel/event_log.h"

namespace ddprun {

namespace ev = channel::events;

void Agent::watch_progress(int attempt, const Assignment& a, const WorkerGroup* group) {
  using channel::Progress;
  const auto now = std::chrono::steady_clock::now();
  for (int lr = 0; lr < cfg_.nproc; ++lr) {
    Progress p;
    if (!heartbeats_->progress(lr, &p)) continue;  // mid-write: next tick
    Progress& seen = seen_[lr];
    const int rank = a.first_global_rank + lr;
    auto changed = [&](Progress::Flags flag, int64_t Progress::*field) {
      return (p.flags & flag) && (!(seen.flags & flag) || p.*field != seen.*field);
    };
    if (changed(Progress::kHasRestored, &Progress::restored_step)) {
      events_.write(ev::kCheckpointRestored, {{"attempt", attempt}, {"rank", rank}, {"step", p.restored_step}});
    }
    if (changed(Progress::kHasSaved, &Progress::saved_step)) {
      events_.write(ev::kCheckpointSaved, {{"attempt", attempt}, {"rank", rank}, {"step", p.saved_step}});
    }
    seen = p;
    if (rank == 0) meter_.add(p);
  }
  if (status_ && group) status_->set_slowest(group->stragglers().slowest_rank());
  if (a.first_global_rank != 0 || !meter_.any()) return;

  std::string line = format_progress(meter_.last(), meter_.rates());
  if (line.empty()) return;
  // This node's straggler scores, once there are any.
  if (const std::string slow = group ? group->stragglers().slowest() : ""; !slow.empty()) line += " · " + slow;
  if (progress_on_terminal_) {
    // At most 4 draws a second (each one a write to the terminal).
    if (now - last_status_draw_ < std::chrono::milliseconds(250)) return;
    last_status_draw_ = now;
    console_err_->show_status(line);
    return;
  }
  if (cfg_.progress_interval.count() == 0 || now - last_progress_log_ < cfg_.progress_interval) return;
  const auto& p = meter_.last();
  if (!(p.flags & channel::Progress::kHasStep) || p.step == logged_step_) return;
  last_progress_log_ = now;
  logged_step_ = p.step;
  spdlog::info("progress: {}", line);
}

// A status line on a terminal stderr; ddprun's own lines wipe it first.
void Agent::start_progress_display() {
  progress_on_terminal_ = console_err_ != nullptr && isatty(cfg_.console_err_fd);
  if (!progress_on_terminal_) return;
  // The launcher put the wiping sink first on the logger (before any thread
  // existed); without it ddprun's own lines simply share the line.
  for (const auto& sink : spdlog::default_logger()->sinks()) {
    if (auto* wiper = dynamic_cast<StatusWipingSink*>(sink.get())) wiper->wipe(console_err_);
  }
}

void Agent::stop_progress_display() {
  if (!progress_on_terminal_) return;
  for (const auto& sink : spdlog::default_logger()->sinks()) {
    if (auto* wiper = dynamic_cast<StatusWipingSink*>(sink.get())) wiper->wipe(nullptr);
  }
  console_err_->clear_status();
  progress_on_terminal_ = false;
}

}  // namespace ddprun
