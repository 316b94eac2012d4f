#include "rendezvous/server/node_scores.h"

#include <algorithm>
#include <cmath>

namespace ddprun {

std::vector<std::optional<NodeScore>> node_scores(const std::vector<const NodeCollectives*>& reports,
                                                  const NodeScoreOptions& options) {
  std::vector<std::optional<NodeScore>> out(reports.size());
  // Only reports of the newest heal generation compare: a heal starts every
  // node's timings over, and a node still on the old ones says nothing of
  // the new connections.
  uint32_t gen = 0;
  for (const NodeCollectives* r : reports) {
    if (r) gen = std::max(gen, r->generation);
  }
  auto usable = [&](const NodeCollectives* r) {
    return r && r->generation == gen && r->samples >= options.min_samples && std::isfinite(r->wait_ms) &&
           std::isfinite(r->period_ms) && r->period_ms > 0 && r->wait_ms >= 0;
  };
  size_t scored = 0;
  for (const NodeCollectives* r : reports) scored += usable(r) ? 1 : 0;
  if (scored < 2) return out;
  for (size_t n = 0; n < reports.size(); ++n) {
    if (!usable(reports[n])) continue;
    // How long the other nodes wait per collective: their (lower) median,
    // so that one node that reports too much (a bug, or a member that lies)
    // cannot make the rest of a job of three or more nodes stragglers.
    std::vector<double> others;
    for (size_t m = 0; m < reports.size(); ++m) {
      if (m != n && usable(reports[m])) others.push_back(reports[m]->wait_ms);
    }
    std::sort(others.begin(), others.end());
    const double other = others[(others.size() - 1) / 2];
    NodeScore s;
    s.score = std::clamp((other - reports[n]->wait_ms) / reports[n]->period_ms, 0.0, 1.0);
    s.straggler = s.score >= options.flag_score;
    out[n] = s;
  }
  return out;
}

std::unordered_map<std::string, NodeScore> StragglerStreaks::pass(const std::vector<std::string>& ids,
                                                                  const std::vector<std::optional<NodeScore>>& scores) {
  std::unordered_map<std::string, int> streak;  // nodes not scored now are forgotten
  std::unordered_map<std::string, NodeScore> out;
  for (size_t i = 0; i < ids.size() && i < scores.size(); ++i) {
    if (!scores[i]) continue;
    NodeScore s = *scores[i];
    const int run = s.straggler ? streak_[ids[i]] + 1 : 0;
    streak[ids[i]] = run;
    s.straggler = run >= kPersist;
    out[ids[i]] = s;
  }
  streak_ = std::move(streak);
  return out;
}

}  // namespace ddprun
