#include "agent/health/progress_watch.h"

#include <algorithm>
#include <cstdio>

namespace ddprun {

namespace {
double s(std::chrono::milliseconds t) { return t.count() / 1000.0; }
}  // namespace

ProgressWatch::ProgressWatch(int workers, ProgressWatchOptions options)
    : options_(options), w_(workers), busy_at_any_(workers, std::chrono::milliseconds(0)) {}

void ProgressWatch::restart(int w) {
  w_[w] = Worker{};
  w_[w].rebase = true;
}

void ProgressWatch::shift(std::chrono::milliseconds stalled, TimePoint now) {
  if (stalled.count() <= 0) return;
  for (auto& w : w_) {
    if (w.advanced_at) w.advanced_at = std::min(*w.advanced_at + stalled, now);
  }
  if (any_at_) any_at_ = std::min(*any_at_ + stalled, now);
}

std::chrono::milliseconds ProgressWatch::stuck_floor() const {
  return options_.learned ? 4 * options_.learned->floor : std::chrono::milliseconds(kStuckFloor);
}

int ProgressWatch::multiple() const {
  return options_.learned ? options_.learned->multiple : LearnedTimeoutOptions{}.multiple;
}

std::chrono::milliseconds ProgressWatch::stuck_limit() const {
  return std::max({stuck_floor(), options_.explicit_limit, multiple() * longest_gap_});
}

std::chrono::milliseconds ProgressWatch::spin_floor() const {
  return options_.learned ? 2 * options_.learned->floor : std::chrono::milliseconds(kSpinFloor);
}

std::chrono::milliseconds ProgressWatch::spin_bound() const {
  return std::max({spin_floor(), options_.explicit_limit, multiple() * longest_used_});
}

ProgressVerdict ProgressWatch::observe(const std::vector<ProgressReading>& now_read, TimePoint now) {
  using std::chrono::milliseconds;
  const auto since = [&](TimePoint t) { return std::chrono::duration_cast<milliseconds>(now - t); };
  const size_t n = std::min(now_read.size(), w_.size());
  const int startup_gaps = options_.learned ? options_.learned->startup_gaps : LearnedTimeoutOptions{}.startup_gaps;

  // 1. The advances: each closes a gap, learned (after the worker's first
  //    ones, and not when it spanned an announced phase).
  bool any_advanced = false;
  for (size_t i = 0; i < n; ++i) {
    const ProgressReading& r = now_read[i];
    Worker& w = w_[i];
    if (!r.alive) continue;
    if (w.rebase) {
      // A fresh process: its counters start again.
      w.rebase = false;
      w.started_at = now;
      w.advanced = r.advanced;
      w.used_at = r.used;
      busy_at_any_[i] = r.busy;
      continue;
    }
    if (r.advanced == w.advanced) {
      w.phase_seen = w.phase_seen || r.in_phase;
      continue;
    }
    if (w.advanced_at) {
      ++w.gaps;
      if (w.gaps > startup_gaps && !w.phase_seen) {
        longest_gap_ = std::max(longest_gap_, since(*w.advanced_at));
        if (r.cpu_known) longest_used_ = std::max(longest_used_, r.used - w.used_at);
      }
    }
    w.advanced = r.advanced;
    w.advanced_at = now;
    w.used_at = r.used;
    w.phase_seen = r.in_phase;
    any_advanced = true;
  }
  if (any_advanced) {
    any_at_ = now;
    for (size_t i = 0; i < n; ++i) busy_at_any_[i] = now_read[i].busy;
  }

  ProgressVerdict none;
  if (!any_at_) return none;  // no rank has advanced yet: a start-up takes what it takes
  for (size_t i = 0; i < n; ++i) {
    if (now_read[i].alive && now_read[i].finishing) return none;  // the job ends
  }
  const milliseconds still = since(*any_at_);
  // Idle since the node's newest advance (or its own start, if later): ran
  // or waited to run for less than kBusyShare of it (a stopped process
  // runs nothing).
  const auto idle = [&](size_t i) {
    const ProgressReading& r = now_read[i];
    const TimePoint from = w_[i].started_at ? std::max(*any_at_, *w_[i].started_at) : *any_at_;
    return r.cpu_known && (r.stopped || (r.busy - busy_at_any_[i]).count() < kBusyShare * since(from).count());
  };

  // 2. A rank that spins: its CPU time without a step, while a peer idles.
  const milliseconds bound = spin_bound();
  if (still >= bound) {
    for (size_t i = 0; i < n; ++i) {
      const ProgressReading& r = now_read[i];
      const Worker& w = w_[i];
      if (!r.alive || !r.cpu_known || r.stopped || r.in_phase || r.joining || !w.advanced_at) continue;
      const milliseconds ran = r.used - w.used_at;
      const milliseconds own_still = since(*w.advanced_at);
      if (own_still < bound || ran < bound) continue;
      bool peer_waits = false;
      for (size_t p = 0; p < n; ++p) peer_waits = peer_waits || (p != i && now_read[p].alive && idle(p));
      if (!peer_waits) continue;
      ProgressVerdict v;
      v.kind = ProgressVerdict::kSpins;
      v.workers = {static_cast<int>(i)};
      v.still = own_still;
      char why[400];
      std::snprintf(why, sizeof(why),
                    "hung: it spins: no step for %.1f s, and it ran on a CPU for %.1f s of it (%.0f%%) while the "
                    "others of this node wait (the spin bound: %.1f s of CPU without a step, at least %.0f s%s and "
                    "%dx the most one step took, %.2f s)",
                    s(own_still), s(ran), 100.0 * ran.count() / std::max<int64_t>(1, own_still.count()), s(bound),
                    s(spin_floor()), options_.explicit_limit.count() > 0 ? " and --hang-timeout" : "", multiple(),
                    s(longest_used_));
      v.why = why;
      return v;
    }
  }

  // 3. Every rank waits: nobody advanced for the limit, nobody busy.
  if (!options_.whole_job) return none;
  bool joining = false;
  for (size_t i = 0; i < n; ++i) {
    const ProgressReading& r = now_read[i];
    if (!r.alive) continue;
    if (r.checkpoint) return none;  // writing one takes what the disk takes
    if (!idle(i)) return none;
    joining = joining || r.joining;
  }
  const milliseconds limit = stuck_limit();
  if (still < limit) return none;
  ProgressVerdict v;
  v.kind = ProgressVerdict::kAllWait;
  v.still = still;
  for (size_t i = 0; i < n; ++i) {
    if (now_read[i].alive) v.workers.push_back(static_cast<int>(i));
  }
  if (v.workers.empty()) return none;
  char why[400];
  std::snprintf(why, sizeof(why),
                "hung: no rank of the job has advanced a step for %.1f s, and none of them computes (each waits%s; "
                "the limit: %.1f s, at least %.0f s%s and %dx the longest gap between steps, %.2f s)",
                s(still), joining ? ", a heal under way" : "", s(limit), s(stuck_floor()),
                options_.explicit_limit.count() > 0 ? " and --hang-timeout" : "", multiple(), s(longest_gap_));
  v.why = why;
  return v;
}

}  // namespace ddprun
