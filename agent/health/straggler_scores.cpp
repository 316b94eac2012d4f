#include "agent/health/straggler_scores.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace ddprun {
namespace {

constexpr double kAlpha = 0.02;  // the weight of the newest collective: about the last 50 count

void smooth(double& v, double x) { v += kAlpha * (x - v); }

// An EWMA that started from nothing after n samples, as a mean: the
// weights it gave them sum to 1 - (1 - kAlpha)^n, not 1.
double unbiased(double ewma, int64_t n) { return ewma / (1.0 - std::pow(1.0 - kAlpha, static_cast<double>(n))); }

}  // namespace

void StragglerScores::update(const std::map<int, std::vector<channel::FlightEntry>>& records) {
  if (records.empty()) return;
  // The newest generation any rank is in; a heal starts the numbering over.
  uint32_t gen = 0;
  for (const auto& [rank, entries] : records) {
    for (const auto& e : entries) {
      if (e.comm == 0) gen = std::max(gen, e.generation);
    }
  }
  if (gen != generation_) {
    // A heal: new processes, new connections. What was learned of the old
    // ones says nothing of them; start over.
    *this = StragglerScores();
    generation_ = gen;
  }
  update_node(records);
  if (records.size() < 2) return;  // no local rank to compare with
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
    // The first collectives of a generation are its start (connecting, a
    // replacement taking the state, warming up): no rank's pace.
    const bool next = last_seq_ != 0 && seq == last_seq_ + 1 && first > last_first_ && seq > kSettling;
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
    // who came last is who they waited for, for as long as they waited. A
    // step of several collectives has short waits at random among the long
    // ones for the straggler; weighed by time, those count for little.
    const bool waited = (last - first) * 20 > period;
    if (waited) smooth(wait_ns_, static_cast<double>(last - first));
    for (const auto& [rank, t] : by_rank) {
      smooth(late_ns_[rank], static_cast<double>(t - first));
      StragglerScore& s = scores_[rank];
      s.score = std::clamp(late_ns_[rank] / period_ns_, 0.0, 1.0);
      s.late_ms = unbiased(late_ns_[rank], scored_) / 1e6;
      if (waited) {
        double& waited_for = waited_for_ns_[rank];
        smooth(waited_for, t == last ? static_cast<double>(last - first) : 0.0);
        ++s.samples;
        s.wait_share = wait_ns_ > 0 ? std::clamp(waited_for / wait_ns_, 0.0, 1.0) : 0.0;
      }
    }
  }
}

// Each collective once, when every local rank has finished it (a reader
// that took the newest, still running, would count the long waits less
// often than the short ones), in order; one that left the ring unread is
// skipped.
void StragglerScores::update_node(const std::map<int, std::vector<channel::FlightEntry>>& records) {
  using channel::FlightState;
  // seq → each rank's record, for the CPU communicator's collectives of
  // this generation after the last one counted.
  std::map<uint64_t, std::vector<const channel::FlightEntry*>> by_seq;
  for (const auto& [rank, entries] : records) {
    for (const auto& e : entries) {
      if (e.comm == 0 && e.generation == generation_ && e.seq > node_seq_) by_seq[e.seq].push_back(&e);
    }
  }
  for (const auto& [seq, entries] : by_seq) {
    if (entries.size() != records.size()) continue;  // not every rank has it in its ring any more: skipped
    bool under_way = false, finished = true;
    for (const auto* e : entries) {
      under_way = under_way || e->state == static_cast<uint32_t>(FlightState::kStarted);
      finished = finished && e->state == static_cast<uint32_t>(FlightState::kFinished) && e->finished_ns >= e->started_ns;
    }
    if (under_way) break;  // counted at a later read
    if (!finished) {       // it failed somewhere: no timing
      node_seq_ = seq;
      continue;
    }
    int64_t first = INT64_MAX;
    double inside = 0;
    for (const auto* e : entries) {
      first = std::min(first, e->started_ns);
      inside += static_cast<double>(e->finished_ns - e->started_ns);
    }
    inside /= static_cast<double>(entries.size());
    const bool next = node_seq_ != 0 && seq == node_seq_ + 1 && first > node_first_ && seq > kSettling;
    const int64_t period = first - node_first_;
    node_seq_ = seq;
    node_first_ = first;
    if (!next) continue;
    smooth(node_period_ns_, static_cast<double>(period));
    smooth(node_wait_ns_, inside);
    ++node_scored_;
  }
}

double StragglerScores::node_wait_ms() const {
  return node_scored_ ? unbiased(node_wait_ns_, node_scored_) / 1e6 : 0;
}

double StragglerScores::node_period_ms() const {
  return node_scored_ ? unbiased(node_period_ns_, node_scored_) / 1e6 : 0;
}

std::optional<StragglerScores::Slowest> StragglerScores::slowest_rank(const std::vector<int>& excused) const {
  std::optional<Slowest> top;
  for (const auto& [rank, s] : scores_) {
    if (s.samples >= kMinSamples && (!top || s.score > top->score)) top = Slowest{rank, s.score, false};
  }
  if (top) {
    const auto flagged = stragglers();
    const bool by_scores = std::find(flagged.begin(), flagged.end(), top->rank) != flagged.end();
    top->excused = by_scores && std::find(excused.begin(), excused.end(), top->rank) != excused.end();
    top->straggler = by_scores && !top->excused;
  }
  return top;
}

std::string StragglerScores::slowest(const std::vector<int>& excused) const {
  const auto top = slowest_rank(excused);
  if (!top) return "";
  char buf[96];
  std::snprintf(buf, sizeof(buf), "slowest: rank %d (%.2f)%s", top->rank, top->score,
                top->straggler ? " straggler" : top->excused ? ", this node's load" : "");
  return buf;
}

std::vector<int> StragglerScores::stragglers() const {
  std::vector<int> out;
  for (const auto& [rank, s] : scores_) {
    if (s.samples >= kMinSamples && s.score >= kFlagScore && s.wait_share >= kFlagWaitShare) out.push_back(rank);
  }
  return out;
}

std::string StragglerScores::slowed_by_load(const std::vector<double>& waited, size_t slow, double score) {
  if (slow >= waited.size() || waited.size() < 2) return "";
  double peers = 0;
  for (size_t i = 0; i < waited.size(); ++i) {
    if (i != slow) peers += waited[i];
  }
  peers /= static_cast<double>(waited.size() - 1);
  char text[200];
  // 1. It waited for a CPU more than its peers did, by enough to explain
  //    much of its lateness (more threads than cores, a neighbour on its
  //    cores).
  if (waited[slow] - peers >= kLoadExplains * score) {
    std::snprintf(text, sizeof(text), "it waited for a CPU %.0f%% of the time against its peers' %.0f%%",
                  100 * waited[slow], 100 * peers);
    return text;
  }
  // 2. Or it was kept off a CPU at least as long as its peers waited for it:
  //    on a machine loaded past its cores the ranks' turns fall unevenly,
  //    and the one whose turns come late is late by no fault of its own.
  if (waited[slow] >= score) {
    std::snprintf(text, sizeof(text),
                  "it waited for a CPU %.0f%% of the time, as long as or longer than the %.0f%% its peers waited "
                  "for it",
                  100 * waited[slow], 100 * score);
    return text;
  }
  return "";
}

}  // namespace ddprun
