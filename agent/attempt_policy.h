// What news from the rendezvous means for one attempt of this node's
// workers, as pure functions (Attempt carries the answers out; the tests
// feed them views). The round-level decisions (restart, rejoin, stop) stay
// the Lifecycle's; a worker's exit, hang or slowness is GroupPolicy's.
//
//   ViewNews n = news_of(view, round, told_generation, placement);
//   if (n.heal == ViewNews::Heal::kMove) ...  // the round shrank or grew around this node
//   StragglerNews s = straggler_news_of(view, rules);
//   if (s.verdict == StragglerNews::kHandOver) ...  // at the next moment all workers are in a collective
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "rendezvous/store/types.h"

namespace ddprun {

struct ViewNews {
  enum class Heal {
    kNone,            // nothing new for the workers
    kHealWithOthers,  // a newer heal generation of this round: the workers heal in it
    kMove,            // a newer generation that moves this node's ranks (a shrink, a grow): renumber, then heal
  };
  Heal heal = Heal::kNone;
  // The view is of the workers' round: tell them whether a heal would come
  // for a failed peer.
  bool tell_heals_come = false;
};

// A keep-alive's view of the job, for workers running in `round` under
// `placement` that were last told heal generation `told_generation`. A view
// of a dropped node (known false) is no news for its workers: they must not
// heal into a generation the others named without them.
ViewNews news_of(const NodeView& view, int64_t round, uint32_t told_generation, const Placement& placement);

// The rendezvous' answer to this node's heal request `request` (a worker of
// its failed): the generation it named (0: refused) and whether this node's
// ranks move in it too (a node was lost while it asked: one generation
// names both). nullopt while no answer came.
struct HealAnswer {
  uint32_t generation = 0;
  bool move = false;
};
std::optional<HealAnswer> answer_of(const NodeView* view, uint64_t request, int64_t round, const Placement& placement);

// Whether this node, named the job's straggler by a keep-alive's view,
// hands its place to a waiting node. Each view decides afresh: a node no
// longer named (it recovered), or whose waiting node went, keeps its place.
struct StragglerRules {
  bool replace_stragglers = false;  // --straggler-action replace
  bool hosts_rendezvous = false;    // its agent serves the round: it cannot leave it
};
struct StragglerNews {
  enum Verdict {
    kNotNamed,  // not the straggler (any more)
    kHandOver,  // hand over, once every worker is inside a step's collective
    kKeep,      // named, but it goes on: `kept` says why
  };
  Verdict verdict = kNotNamed;
  std::string kept;  // the setting or fact that keeps it, for kKeep
};
StragglerNews straggler_news_of(const NodeView& view, const StragglerRules& rules);
// Whether a node that is to hand its place over (kHandOver) stops its
// workers now: once (`handed_over`: it did already), and only when every
// one of them is inside a collective of a Healer step (`all_in_collective`;
// absent: no heartbeats tell). The other nodes' workers then wait for them
// there, and heal; outside a step they would fail and restart.
bool hand_over_now(bool handed_over, std::optional<bool> all_in_collective);

// A straggler score as the log and the events say it ("0.33").
std::string score_text(double score);

}  // namespace ddprun
