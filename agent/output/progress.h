// Rank 0's progress as the agent shows it: rates worked out from successive
// reports (channel::Progress), and the one-line text of the terminal's
// status line and of the periodic log line. Pure: no I/O, no clock (the
// reports carry their own time), unit-tested.
#pragma once

#include <optional>
#include <string>

#include "channel/heartbeat_layout.h"

namespace ddprun {

struct ProgressRates {
  std::optional<double> samples_per_s;
  std::optional<double> eta_s;  // to total_steps
};

// "step 120/1000 · epoch 1 · loss 0.532 · 2.3k samples/s · ETA 1m02s":
// what is unknown (no flag, no rate yet) is left out. "" when nothing was
// reported.
std::string format_progress(const channel::Progress& p, const ProgressRates& rates);
// "850", "2.3k", "12k", "1.5M".
std::string format_rate(double per_s);
// "42s", "1m02s", "2h05m".
std::string format_duration(double seconds);

// Follows one worker's reports (those with a new updated_ns) and smooths
// the rates of samples and steps over them.
class ProgressMeter {
 public:
  // Returns true when p is a new report.
  bool add(const channel::Progress& p);
  void reset() { *this = ProgressMeter(); }
  bool any() const { return have_; }
  const channel::Progress& last() const { return last_; }
  ProgressRates rates() const;

 private:
  bool have_ = false;
  channel::Progress last_{};
  double samples_per_s_ = -1;  // < 0: not known yet
  double steps_per_s_ = -1;
};

}  // namespace ddprun
