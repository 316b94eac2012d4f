// What news from the rendezvous means for one attempt of this node's
// workers, as pure functions (Attempt carries the answers out; the tests
// feed them views). The round-level decisions (restart, rejoin, stop) stay
// the Lifecycle's; a worker's exit, hang or slowness is GroupPolicy's.
//
//   ViewNews n = news_of(view, round, told_generation, placement);
//   if (n.heal == ViewNews::Heal::kMove) ...  // the round shrank or grew around this node
#pragma once

#include <cstdint>
#include <optional>

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

}  // namespace ddprun
