#include "agent/straggler_scores.h"

#include <algorithm>
#include <cmath>

namespace ddprun {
namespace {

constexpr double kAlpha = 0.02;  // the weight of the newest collective: about the last 50 count

void smooth(double& v, double x) { v += kAlpha * (x - v); }

// An EWMA that started from nothing after n samples, as a mean: the
// weights it gave them sum to 1 - (1 - kAlpha)^n, not 1.
double unbiased(double ewma, int64_t n) { return ewma / (1.0 - std::pow(1.0 - kAlpha, static_cast<double>(n))); }

}  // namespace

void StragglerScores::update(const std::map<int, std::vector<channel::FlightEntry>>& records) {
  if (records.size() < 2) return;
  // The newest generation any rank is in; a heal starts the numbering over.
  uint32_t gen = 0;
  for (const auto& [rank, entries] : records) {
    for (const auto& e : entries) {
      if (e.comm == 0) gen = std::max(gen, e.generation);
    }
  }
  if (gen != generation_) {
    generation_ = gen;
    last_seq_ = 0;
    last_first_ = 0;
  }
  // seq → each rank's start, for the CPU communicator's collectives of
  // this generation that every rank has in its ring.
  std::map<uint64_t, std::map<int, int64_t>> starts;
  for (const auto& [rank, entries] : records) {
    for (const auto& e : entries) {
      if (e.comm == 0 && e.generation == gen && e.seq > last_seq_) starts[e.seq][rank] = e.started_ns;
    }
  }
  for (const auto& [seq, by_rank] : starts) {
    if (by_rank.size() != records.size()) continue;  // not every rank has it (yet, or any more)
    int64_t first = INT64_MAX, last = INT64_MIN;
    for (const auto& [rank, t] : by_rank) {
      first = std::min(first, t);
      last = std::max(last, t);
    }
    // Scored only against the collective just before it: after a gap (the
    // ring went round between two reads) the period is unknown.
    const bool next = last_seq_ != 0 && seq == last_seq_ + 1 && first > last_first_;
    const int64_t period = first - last_first_;
    last_seq_ = seq;
    last_first_ = first;
    if (!next) continue;
    // Weighed by time: a step of several collectives (DDP's buckets, the
    // later ones back to back) counts by how long it took, not by how many
    // collectives it had.
    smooth(period_ns_, static_cast<double>(period));
    ++scored_;
    // Someone waited for someone (more than a twentieth of the period):
    // who came last counts towards its share.
    const bool waited = (last - first) * 20 > period;
    for (const auto& [rank, t] : by_rank) {
      smooth(late_ns_[rank], static_cast<double>(t - first));
      StragglerScore& s = scores_[rank];
      s.score = std::clamp(late_ns_[rank] / period_ns_, 0.0, 1.0);
      s.late_ms = unbiased(late_ns_[rank], scored_) / 1e6;
      if (waited) {
        double& raw = last_raw_[rank];
        smooth(raw, t == last ? 1.0 : 0.0);
        ++s.samples;
        s.last_share = unbiased(raw, s.samples);  // a mean that leans to the recent
      }
    }
  }
}

std::vector<int> StragglerScores::stragglers() const {
  std::vector<int> out;
  for (const auto& [rank, s] : scores_) {
    if (s.samples >= kMinSamples && s.score >= kFlagScore && s.last_share >= kFlagLastShare) out.push_back(rank);
  }
  return out;
}

}  // namespace ddprun
