#include "agent/job_metrics.h"

#include "channel/event_log.h"

namespace ddprun {
namespace {

namespace ev = channel::events;

double seconds(JobMetrics::Clock::duration d) { return std::chrono::duration<double>(d).count(); }

Metrics::Labels rank_label(const nlohmann::json& fields) {
  return {{"rank", std::to_string(fields.value("rank", -1))}};
}

}  // namespace

JobMetrics::JobMetrics(const std::string& job, const std::string& node, Clock::time_point start)
    : metrics_(std::make_shared<Metrics>(Metrics::Labels{{"run_id", job}, {"node", node}})), goodput_(start) {
  Metrics& m = *metrics_;
  m.describe("ddprun_goodput_seconds_total", Metrics::kCounter,
             "Seconds that trained and were kept: not start-up, recovery, steps redone after a restart, or waiting "
             "for nodes. Goodput ratio: rate(ddprun_goodput_seconds_total) / rate(ddprun_wall_seconds_total).");
  m.describe("ddprun_wall_seconds_total", Metrics::kCounter, "Seconds since this node's agent started the job.");
  m.describe("ddprun_steps_total", Metrics::kCounter, "The highest training step the node's lowest rank reported.");
  m.describe("ddprun_samples_total", Metrics::kCounter, "Samples of the whole job, as the program counts them.");
  m.describe("ddprun_redone_steps_total", Metrics::kCounter, "Steps trained again after a restart went back.");
  m.describe("ddprun_heals_total", Metrics::kCounter, "Failed workers replaced while the others went on.");
  m.describe("ddprun_restarts_total", Metrics::kCounter, "Restarts of the job's workers.");
  m.describe("ddprun_hang_verdicts_total", Metrics::kCounter, "Workers found hung.");
  m.describe("ddprun_straggler_replacements_total", Metrics::kCounter, "Stragglers replaced (--straggler-action replace).");
  m.describe("ddprun_nodes_lost_total", Metrics::kCounter, "Nodes the job lost (taken over by a spare, or shrunk past).");
  m.describe("ddprun_world_size", Metrics::kGauge, "Ranks in the job's current round.");
  m.describe("ddprun_round", Metrics::kGauge, "The job's current round.");
  m.describe("ddprun_step_seconds", Metrics::kGauge, "Seconds per step of each of this node's ranks, between its last two reports.");
  m.describe("ddprun_straggler_score", Metrics::kGauge, "A straggler's score: the share of the others' time spent waiting for it.");
  m.describe("ddprun_seconds_since_checkpoint", Metrics::kGauge, "Seconds since a rank of this node saved its newest checkpoint.");
  m.describe("ddprun_detect_seconds", Metrics::kHistogram, "Time to detect a hang: how long the worker was silent.",
             {1, 5, 15, 30, 60, 120, 300, 900});
  m.describe("ddprun_recovery_seconds", Metrics::kHistogram,
             "Time from a failure (an exit, a hang verdict, a lost node) to the next step past it.",
             {0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300});
}

void JobMetrics::broken(Clock::time_point now) {
  goodput_.lost(now);
  if (!broken_at_) {
    broken_at_ = now;
    step_after_break_.reset();
  }
}

void JobMetrics::on_event(const std::string& event, const nlohmann::json& fields, Clock::time_point now) {
  Metrics& m = *metrics_;
  if (event == ev::kExit) {
    // A worker that did not end well (a crash, a kill, a non-zero code).
    if (fields.contains("signal") || fields.value("exit_code", 0) != 0) broken(now);
  } else if (event == ev::kHeal) {
    m.add("ddprun_heals_total");
    broken(now);
  } else if (event == ev::kRestart) {
    m.add("ddprun_restarts_total");
    broken(now);
  } else if (event == ev::kHang) {
    m.add("ddprun_hang_verdicts_total");
    m.observe("ddprun_detect_seconds", {}, fields.value("silent_s", 0.0));
    broken(now);
  } else if (event == ev::kStraggler) {
    m.set("ddprun_straggler_score", rank_label(fields), fields.value("score", 0.0));
    if (fields.value("action", "") == "replace") m.add("ddprun_straggler_replacements_total");
  } else if (event == ev::kNodeLost) {
    const auto nodes = fields.find("nodes");
    m.add("ddprun_nodes_lost_total", {}, nodes != fields.end() && nodes->is_array() ? double(nodes->size()) : 1.0);
    broken(now);
  } else if (event == ev::kRound) {
    m.set("ddprun_world_size", fields.value("world_size", 0));
    m.set("ddprun_round", static_cast<double>(fields.value("round", int64_t{0})));
    goodput_.lost(now);  // a new round's workers start up
  } else if (event == ev::kShrink || event == ev::kGrow || event == ev::kTakeover || event == ev::kPeerHeal) {
    if (fields.contains("world_size")) m.set("ddprun_world_size", fields.value("world_size", 0));
    goodput_.lost(now);
  } else if (event == ev::kCheckpointSaved) {
    checkpoint_at_ = now;
  }
}

void JobMetrics::on_progress(int rank, const channel::Progress& p, bool lead, Clock::time_point now) {
  if (!(p.flags & channel::Progress::kHasStep)) return;
  Metrics& m = *metrics_;
  // 1. This rank's step time, between its last two reports of a new step.
  auto& last = rank_steps_[rank];
  if (p.step > last.step && last.updated_ns > 0 && p.updated_ns > last.updated_ns) {
    m.set("ddprun_step_seconds", {{"rank", std::to_string(rank)}},
          static_cast<double>(p.updated_ns - last.updated_ns) / 1e9 / static_cast<double>(p.step - last.step));
  }
  if (p.step != last.step) last = {p.step, p.updated_ns};
  if (!lead) return;
  // 2. The job's step: goodput, the counters, and the end of a recovery
  //    (the first step past the one read after the failure).
  goodput_.step(p.step, now);
  if (p.step > highest_step_) {
    highest_step_ = p.step;
    m.set("ddprun_steps_total", {}, static_cast<double>(p.step));
  }
  if (p.samples > highest_samples_) {
    highest_samples_ = p.samples;
    m.set("ddprun_samples_total", {}, static_cast<double>(p.samples));
  }
  if (broken_at_) {
    if (!step_after_break_) {
      step_after_break_ = p.step;
    } else if (p.step > *step_after_break_) {
      m.observe("ddprun_recovery_seconds", {}, seconds(now - *broken_at_));
      broken_at_.reset();
    }
  }
}

void JobMetrics::tick(Clock::time_point now) {
  Metrics& m = *metrics_;
  m.set("ddprun_wall_seconds_total", {}, goodput_.wall_seconds(now));
  m.set("ddprun_goodput_seconds_total", {}, goodput_.good_seconds());
  m.set("ddprun_redone_steps_total", {}, static_cast<double>(goodput_.redone_steps()));
  if (checkpoint_at_) m.set("ddprun_seconds_since_checkpoint", seconds(now - *checkpoint_at_));
}

}  // namespace ddprun
