#include "trace/summary.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <tuple>

namespace ddprun::trace {

using channel::TracePhase;
using channel::TraceTrack;

const char* phase_name(uint16_t phase) {
  switch (static_cast<TracePhase>(phase)) {
    case TracePhase::kStep: return "step";
    case TracePhase::kData: return "data";
    case TracePhase::kForward: return "forward";
    case TracePhase::kBackward: return "backward";
    case TracePhase::kAllReduce: return "all_reduce";
    case TracePhase::kFinalizeWait: return "finalize_wait";
    case TracePhase::kOptimizer: return "optimizer";
    case TracePhase::kCheckpointCopy: return "checkpoint_copy";
    case TracePhase::kCheckpointWrite: return "checkpoint_write";
    case TracePhase::kCollective: return "collective";
    case TracePhase::kRestore: return "restore";
    case TracePhase::kInit: return "init";
    case TracePhase::kHealWait: return "heal_wait";
    case TracePhase::kHealConnect: return "heal_connect";
    case TracePhase::kHealTransfer: return "heal_transfer";
  }
  return "unknown";
}

int64_t overlap_ns(const std::vector<std::pair<int64_t, int64_t>>& a, std::vector<std::pair<int64_t, int64_t>> b) {
  // Merge b into disjoint sorted intervals, then sum each a's intersections.
  std::sort(b.begin(), b.end());
  std::vector<std::pair<int64_t, int64_t>> merged;
  for (const auto& iv : b) {
    if (!merged.empty() && iv.first <= merged.back().second) {
      merged.back().second = std::max(merged.back().second, iv.second);
    } else {
      merged.push_back(iv);
    }
  }
  int64_t total = 0;
  for (const auto& [lo, hi] : a) {
    auto it = std::upper_bound(merged.begin(), merged.end(), std::make_pair(lo, INT64_MAX));
    if (it != merged.begin()) --it;
    for (; it != merged.end() && it->first < hi; ++it) {
      int64_t s = std::max(lo, it->first), e = std::min(hi, it->second);
      if (e > s) total += e - s;
    }
  }
  return total;
}

namespace {

double percentile(std::vector<double> v, double p) {
  // Nearest rank.
  std::sort(v.begin(), v.end());
  size_t rank = static_cast<size_t>(std::ceil(p * static_cast<double>(v.size())));
  return v[std::clamp<size_t>(rank, 1, v.size()) - 1];
}

}  // namespace

Summary summarize(const std::vector<const RankTrace*>& traces, const StepWindow& window) {
  Summary s;
  // phase -> (rank, attempt, step) -> ns spent in it during that step.
  std::map<uint16_t, std::map<std::tuple<int, int, int64_t>, int64_t>> per_step;
  std::set<int> ranks;
  std::set<int64_t> steps;
  int64_t allreduce_ns = 0, hidden_ns = 0;
  for (const RankTrace* t : traces) {
    std::vector<std::pair<int64_t, int64_t>> allreduces, backwards;
    for (const auto& r : t->records) {
      if (r.step < 0 || !window.contains(r.step)) continue;
      ranks.insert(t->header.rank);
      steps.insert(r.step);
      per_step[r.phase][{t->header.rank, t->header.attempt, r.step}] += r.end_ns - r.begin_ns;
      if (r.phase == static_cast<uint16_t>(TracePhase::kAllReduce)) allreduces.emplace_back(r.begin_ns, r.end_ns);
      if (r.phase == static_cast<uint16_t>(TracePhase::kBackward) && r.track == static_cast<uint8_t>(TraceTrack::kMain)) {
        backwards.emplace_back(r.begin_ns, r.end_ns);
      }
    }
    for (const auto& [b, e] : allreduces) allreduce_ns += e - b;
    hidden_ns += overlap_ns(allreduces, backwards);
  }
  for (const auto& [phase, by_step] : per_step) {
    std::vector<double> ms;
    for (const auto& [key, ns] : by_step) ms.push_back(static_cast<double>(ns) / 1e6);
    PhaseStats p;
    p.phase = phase_name(phase);
    p.samples = ms.size();
    double sum = 0;
    for (double v : ms) sum += v;
    p.mean_ms = sum / static_cast<double>(ms.size());
    p.p95_ms = percentile(ms, 0.95);
    s.phases.push_back(p);
  }
  s.ranks = ranks.size();
  s.steps = steps.size();
  s.allreduce_ms = static_cast<double>(allreduce_ns) / 1e6;
  s.hidden_ms = static_cast<double>(hidden_ns) / 1e6;
  return s;
}

std::string format_summary(const Summary& s) {
  std::string out;
  char line[160];
  std::snprintf(line, sizeof line, "trace summary: %zu rank(s), %zu step(s); ms per step\n", s.ranks, s.steps);
  out += line;
  std::snprintf(line, sizeof line, "  %-18s %10s %10s %8s\n", "phase", "mean", "p95", "samples");
  out += line;
  for (const auto& p : s.phases) {
    std::snprintf(line, sizeof line, "  %-18s %10.3f %10.3f %8zu\n", p.phase.c_str(), p.mean_ms, p.p95_ms, p.samples);
    out += line;
  }
  if (s.hidden_fraction() < 0) {
    out += "  all-reduce hidden behind backward: - (no all-reduce recorded)\n";
  } else {
    std::snprintf(line, sizeof line, "  all-reduce hidden behind backward: %.1f%% (%.3f of %.3f ms)\n",
                  100.0 * s.hidden_fraction(), s.hidden_ms, s.allreduce_ms);
    out += line;
  }
  return out;
}

}  // namespace ddprun::trace
