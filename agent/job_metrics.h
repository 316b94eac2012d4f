// The job's numbers as the agent serves them on /metrics (--metrics-port):
// folded from the events the agent writes (the event log's observer, so a
// number and its event never disagree) and from the progress it reads from
// its ranks' heartbeat slots on every tick. Called from the agent's loop
// only; the metrics server renders on its own thread (metrics.h locks).
//
// Counters: steps and samples (the node's lowest rank's highest), heals,
// restarts, hang verdicts, stragglers replaced, nodes lost. Gauges: world
// size, round, each rank's step time, straggler scores, seconds since the
// newest checkpoint. Histograms: time to detect a hang (its silence) and
// time to recover (a failure to the next step past it). Goodput
// (goodput.h): seconds that trained and were kept beside wall seconds.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "agent/health/goodput.h"
#include "agent/output/metrics.h"
#include "channel/heartbeat_layout.h"

namespace ddprun {

class JobMetrics {
 public:
  using Clock = std::chrono::steady_clock;
  // Every sample is labelled run_id=`job` (Prometheus's own `job` label
  // names the scrape job) and node=`node`.
  JobMetrics(const std::string& job, const std::string& node, Clock::time_point start);

  std::shared_ptr<const Metrics> metrics() const { return metrics_; }

  // An event as the event log writes it (channel/event_log.h's names and fields).
  void on_event(const std::string& event, const nlohmann::json& fields, Clock::time_point now);
  // A rank's progress as read on a tick; `lead`: the node's lowest rank,
  // whose step stands for the job's (data-parallel ranks step together).
  void on_progress(int rank, const channel::Progress& p, bool lead, Clock::time_point now);
  // On every tick: wall and goodput seconds, the checkpoint's age.
  void tick(Clock::time_point now);

 private:
  // Something stopped training: goodput loses the interval, and the time to
  // recover starts (if it has not yet).
  void broken(Clock::time_point now);

  std::shared_ptr<Metrics> metrics_;
  Goodput goodput_;
  std::optional<Clock::time_point> broken_at_;
  std::optional<int64_t> step_after_break_;  // the first step read since
  int64_t highest_step_ = -1;
  int64_t highest_samples_ = -1;
  std::optional<Clock::time_point> checkpoint_at_;
  struct RankStep {
    int64_t step = 0;
    int64_t updated_ns = 0;
  };
  std::map<int, RankStep> rank_steps_;
};

}  // namespace ddprun
