// Which node slows the job: from every node's report of how long its ranks
// spend inside each collective (NodeCollectives: a duration each agent
// measures on its own clock, so no clocks are compared across hosts).
// The ranks of a node that arrives last at every collective wait least: the
// others wait inside the collective for it. A node's score is how much
// longer the other nodes wait per collective than it does (their lower
// median: one node that reports nonsense cannot make the others of a job
// of three or more stragglers), as a share of the time from one collective
// to the next: a node that
// computes 1.5x as long as the others scores about a third; noise spreads
// evenly and scores near 0.
// Pure: reports in, scores out, no I/O.
#pragma once

#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "rendezvous/store/types.h"

namespace ddprun {

struct NodeScoreOptions {
  // A node is scored once its report covers this many collectives (and so
  // is every other node it is compared with).
  int64_t min_samples = 40;
  // A node scoring at least this is a straggler.
  double flag_score = 0.25;
};

// One score per report, in their order; nullopt where a node is not scored
// (too few samples, a generation older than the newest reported, or fewer
// than two such nodes). A null report is a node that reported nothing.
std::vector<std::optional<NodeScore>> node_scores(const std::vector<const NodeCollectives*>& reports,
                                                  const NodeScoreOptions& options = {});

// A node is a straggler only once it has scored as one at kPersist
// successive scorings (the registry scores about once a second): a node
// slowed for a moment (a process starting beside its workers, a heal's
// replacement warming up) is not named, one that stays slow is.
class StragglerStreaks {
 public:
  static constexpr int kPersist = 3;
  // One scoring: the nodes' ids and their scores (node_scores). Returns the
  // scored ones, `straggler` set only where it held kPersist scorings
  // running. A node not scored this time starts over.
  std::unordered_map<std::string, NodeScore> pass(const std::vector<std::string>& ids,
                                                  const std::vector<std::optional<NodeScore>>& scores);

 private:
  std::unordered_map<std::string, int> streak_;
};

}  // namespace ddprun
