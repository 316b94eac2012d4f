#include "agent/output/progress.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace ddprun {

using channel::Progress;

std::string format_rate(double per_s) {
  char buf[32];
  if (per_s >= 1e6) {
    std::snprintf(buf, sizeof(buf), per_s >= 1e7 ? "%.0fM" : "%.1fM", per_s / 1e6);
  } else if (per_s >= 1e3) {
    std::snprintf(buf, sizeof(buf), per_s >= 1e4 ? "%.0fk" : "%.1fk", per_s / 1e3);
  } else if (per_s >= 10) {
    std::snprintf(buf, sizeof(buf), "%.0f", per_s);
  } else {
    std::snprintf(buf, sizeof(buf), "%.2g", per_s);
  }
  return buf;
}

std::string format_duration(double seconds) {
  const long long s = std::llround(std::max(0.0, seconds));
  char buf[32];
  if (s < 60) {
    std::snprintf(buf, sizeof(buf), "%llds", s);
  } else if (s < 3600) {
    std::snprintf(buf, sizeof(buf), "%lldm%02llds", s / 60, s % 60);
  } else {
    std::snprintf(buf, sizeof(buf), "%lldh%02lldm", s / 3600, (s % 3600) / 60);
  }
  return buf;
}

std::string format_progress(const Progress& p, const ProgressRates& rates) {
  std::string out;
  auto part = [&out](const std::string& s) {
    if (!out.empty()) out += " \u00b7 ";
    out += s;
  };
  if (p.flags & Progress::kHasStep) {
    std::string s = "step " + std::to_string(p.step);
    if (p.flags & Progress::kHasTotalSteps) s += "/" + std::to_string(p.total_steps);
    part(s);
  }
  // Epochs count from 0 in the contract; people count from 1 (as train prints them).
  if (p.flags & Progress::kHasEpoch) part("epoch " + std::to_string(p.epoch + 1));
  if ((p.flags & Progress::kHasLoss) && std::isfinite(p.loss)) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "loss %.4g", p.loss);
    part(buf);
  } else if (p.flags & Progress::kHasLoss) {
    part(std::isnan(p.loss) ? "loss nan" : "loss inf");
  }
  if (rates.samples_per_s) part(format_rate(*rates.samples_per_s) + " samples/s");
  if (rates.eta_s) part("ETA " + format_duration(*rates.eta_s));
  return out;
}

bool ProgressMeter::add(const Progress& p) {
  if (p.flags == 0) return false;
  if (have_ && p.updated_ns == last_.updated_ns) return false;
  if (have_ && p.updated_ns > last_.updated_ns) {
    const double dt = static_cast<double>(p.updated_ns - last_.updated_ns) / 1e9;
    // Each rate from the last two reports, smoothed: a step that took
    // longer (a checkpoint, an evaluation) moves it, does not throw it.
    auto smooth = [](double& rate, double now) { rate = rate < 0 ? now : 0.7 * rate + 0.3 * now; };
    if (p.samples > last_.samples) smooth(samples_per_s_, (p.samples - last_.samples) / dt);
    if ((p.flags & Progress::kHasStep) && (last_.flags & Progress::kHasStep) && p.step > last_.step) {
      smooth(steps_per_s_, (p.step - last_.step) / dt);
    }
  }
  // A report from an earlier time (a restarted worker's clock is the same
  // host's, so only a reset) starts the rates again.
  if (have_ && p.updated_ns < last_.updated_ns) {
    samples_per_s_ = steps_per_s_ = -1;
  }
  last_ = p;
  have_ = true;
  return true;
}

ProgressRates ProgressMeter::rates() const {
  ProgressRates r;
  if (samples_per_s_ > 0) r.samples_per_s = samples_per_s_;
  const bool counted = (last_.flags & Progress::kHasStep) && (last_.flags & Progress::kHasTotalSteps);
  if (counted && steps_per_s_ > 0 && last_.total_steps >= last_.step) {
    r.eta_s = static_cast<double>(last_.total_steps - last_.step) / steps_per_s_;
  }
  return r;
}

}  // namespace ddprun
