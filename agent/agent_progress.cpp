// Rank progress as the agent shows it: checkpoint events from the workers'
// heartbeat slots, and rank 0's progress as a status line on a terminal or
// a log line every --progress-interval. The Attempt (attempt.cpp) calls
// watch_progress on every tick of its loop.
#include <unistd.h>

#include <spdlog/spdlog.h>

#include "agent/agent.h"
#include "agent/base/monotonic_clock.h"
#include "agent/output/status_wiping_sink.h"
#include "channel/event_log.h"

namespace ddprun {

namespace ev = channel::events;

void Agent::keep_metrics(std::shared_ptr<JobMetrics> metrics) {
  metrics_ = std::move(metrics);
  events_.observe([m = metrics_.get()](const char* event, const nlohmann::json& fields) {
    m->on_event(event, fields, std::chrono::steady_clock::now());
  });
}

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
    // The node's first rank's step in the event log, at most once a second
    // while it moves (`ddprun report` draws the step rate from it).
    if (lr == 0 && (p.flags & Progress::kHasStep) && p.step != seen.step &&
        now - last_progress_event_ >= std::chrono::seconds(1)) {
      last_progress_event_ = now;
      events_.write(ev::kProgress, {{"attempt", attempt}, {"rank", rank}, {"step", p.step}, {"samples", p.samples}});
    }
    seen = p;
    if (rank == 0) meter_.add(p);
    if (metrics_) metrics_->on_progress(rank, p, lr == 0, now);
  }
  if (metrics_) metrics_->tick(now);
  if (status_ && group) status_->set_slowest(group->slowest());
  if (group) report_collectives(a, *group);
  if (a.first_global_rank != 0 || !meter_.any()) return;

  std::string line = format_progress(meter_.last(), meter_.rates());
  if (line.empty()) return;
  // This node's straggler scores, once there are any.
  if (const std::string slow = group ? group->slowest_text() : ""; !slow.empty()) line += " · " + slow;
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

namespace {

// A rank's newest collective: on the CPU communicator if it has one.
std::optional<channel::FlightEntry> newest(const std::vector<channel::FlightEntry>& flight) {
  std::optional<channel::FlightEntry> best;
  for (const auto& e : flight) {
    if (!best || (e.comm == 0 && best->comm != 0) || (e.comm == best->comm && e.id > best->id)) best = e;
  }
  return best;
}

}  // namespace

void Agent::report_collectives(const Assignment& a, const WorkerGroup& group) {
  if (!status_ || !heartbeats_ || cfg_.rdzv.max_nodes <= 1) return;
  const auto now = std::chrono::steady_clock::now();
  if (now - last_collectives_ < std::chrono::milliseconds(500)) return;
  last_collectives_ = now;
  const StragglerScores& s = group.stragglers();
  NodeCollectives c;
  c.generation = s.generation();
  c.wait_ms = s.node_wait_ms();
  c.period_ms = s.node_period_ms();
  c.samples = s.node_samples();
  if (const auto slow = group.slowest()) {
    c.slowest_rank = slow->rank;
    c.slowest_score = slow->score;
    c.slowest_is_straggler = slow->straggler;
  }
  const int64_t now_ns = monotonic_ns();
  for (int lr = 0; lr < cfg_.nproc; ++lr) {
    const auto e = newest(heartbeats_->flight(lr));
    if (!e) continue;
    RankCollective r;
    r.global_rank = a.first_global_rank + lr;
    r.op = e->op;
    r.seq = e->seq;
    r.generation = e->generation;
    r.comm = e->comm;
    r.bytes = e->bytes;
    r.inside = e->state == static_cast<uint32_t>(channel::FlightState::kStarted);
    const int64_t since = r.inside || e->finished_ns == 0 ? e->started_ns : e->finished_ns;
    r.age = std::chrono::milliseconds(std::max<int64_t>(0, now_ns - since) / 1'000'000);
    c.ranks.push_back(r);
  }
  status_->set_collectives(std::move(c));
}

std::vector<RankView> Agent::other_nodes_ranks() {
  std::vector<RankView> out;
  const JobStatus s = rdzv_.status(cfg_.run_id, std::chrono::seconds(2));
  const int64_t now_ns = monotonic_ns();
  for (const NodeStatus& n : s.nodes) {
    if (n.node_id == node_id_ || !n.collectives) continue;
    for (const RankCollective& r : n.collectives->ranks) {
      RankView v;
      v.rank = r.global_rank;
      channel::FlightEntry e;
      e.id = 1;
      e.op = r.op;
      e.seq = r.seq;
      e.bytes = r.bytes;
      e.generation = r.generation;
      e.comm = r.comm;
      const int64_t at = now_ns - static_cast<int64_t>(r.age.count()) * 1'000'000;
      e.state = static_cast<uint32_t>(r.inside ? channel::FlightState::kStarted : channel::FlightState::kFinished);
      e.started_ns = at;
      e.finished_ns = r.inside ? 0 : at;
      v.flight.push_back(e);
      v.stacks.state = StackReport::kRemote;
      out.push_back(std::move(v));
    }
  }
  return out;
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
