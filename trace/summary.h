// The table printed at the end of a traced run: per phase, mean and p95 ms
// per step (over ranks and steps), and how much of the all-reduce time was
// hidden behind backward.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trace/rank_file.h"
#include "trace/step_window.h"

namespace ddprun::trace {

struct PhaseStats {
  std::string phase;
  size_t samples = 0;  // (rank, attempt, step) triples where the phase ran
  double mean_ms = 0;
  double p95_ms = 0;
};

struct Summary {
  std::vector<PhaseStats> phases;  // in TracePhase order, phases seen only
  size_t ranks = 0;                // distinct ranks
  size_t steps = 0;                // distinct steps
  double allreduce_ms = 0;         // all of it, on the comm tracks
  double hidden_ms = 0;            // of which inside the same rank's backward
  // hidden_ms / allreduce_ms; negative when there was no all-reduce.
  double hidden_fraction() const { return allreduce_ms > 0 ? hidden_ms / allreduce_ms : -1; }
};

// The name a phase has in the trace and the table ("forward", "all_reduce").
const char* phase_name(uint16_t phase);

// Records of steps outside `window` (and outside any step, when it limits)
// are left out.
Summary summarize(const std::vector<const RankTrace*>& traces, const StepWindow& window);

// Nanoseconds of [begin, end) intervals `a` spent inside the union of `b`.
int64_t overlap_ns(const std::vector<std::pair<int64_t, int64_t>>& a, std::vector<std::pair<int64_t, int64_t>> b);

std::string format_summary(const Summary& s);

}  // namespace ddprun::trace
