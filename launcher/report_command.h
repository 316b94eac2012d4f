// `ddprun report LOG_DIR`: one picture of a finished (or running) job from
// its event log (--log-dir's RUN/events.jsonl): the step rate over time,
// heals, restarts, hangs and lost nodes marked, goodput in the title. The
// numbers are folded by the same JobMetrics the agent serves on /metrics
// (agent/job_metrics.h), fed the log's events at their own times; gnuplot
// draws (SVG, or PNG for an --out ending in .png).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ddprun {

struct JobReport {
  struct Rate {
    double t = 0;          // seconds since the log's first event
    double steps_per_s = 0;
  };
  struct Mark {
    double t = 0;
    std::string what;  // heal, restart, hang, node lost
  };
  std::string run_id;
  std::vector<Rate> rates;
  std::vector<Mark> marks;
  double good_s = 0, wall_s = 0;
  int heals = 0, restarts = 0, hangs = 0, nodes_lost = 0;
};

// The report of one node's events (as events.jsonl holds them, in order).
JobReport report_of(const std::vector<nlohmann::json>& events);

// The gnuplot script that draws `r` from `data` (its rates, written by
// run_report_command) into `out` (.svg or .png).
std::string gnuplot_script(const JobReport& r, const std::string& data, const std::string& out);

// args: what follows "report". Returns 0 drawn, 1 nothing to draw or
// gnuplot failed, 2 a bad command line.
int run_report_command(const std::vector<std::string>& args);

}  // namespace ddprun
