// Whether the ranks of one heal generation connect their communicators,
// decided once for all of them.
//
// Why: a rank that gives a generation up (the agent named a newer one) after
// publishing its address leaves its peers inside Gloo's TCP set-up, which no
// store watch can interrupt: they wait for it until the full timeout (a
// shrink followed within milliseconds by a grow turned a heal into a
// restart this way). So before any communicator connects, the ranks vote
// through one counter in the generation's store, and either all connect or
// none does:
//
//   1. Arriving adds 1 to the counter. The arrival that brings it to `size`
//      decides CONNECT and writes that verdict.
//   2. A rank whose generation is superseded while it waits gives up: it
//      adds kVoteGiveUpAmount. The first to do so (its add returns less
//      than twice that) decides: CONNECT if every rank had arrived before it
//      (then the last arrival decided so too), else GIVE UP; it writes the
//      verdict.
//   3. Everyone else waits for the verdict (in slices, so that it can still
//      give up itself, step 2).
//
// Fetch-and-add orders the arrivals and the first give-up: whichever of
// "all arrived" and "someone gave up" came first is the decision, and every
// rank learns the same one. A rank that died before voting leaves the
// others waiting for the verdict until a give-up (the agent names a newer
// generation for its death) or the timeout. One that dies or is cut off
// after a "connect" leaves the others in Gloo's set-up until the agent
// names a newer generation: they leave that connect behind, still serving
// its side of the set-up to whoever else is in it (superseded_connect.h).
#pragma once

#include <chrono>
#include <functional>

#include "ddp/collective_error.h"
#include "rendezvous/store/store.h"

namespace ddp {

// A connect given up because the agent began a newer heal generation: the
// heal connects again in that one (ddp::Healer, World's constructor).
class GenerationSuperseded : public CollectiveError {
 public:
  using CollectiveError::CollectiveError;
};

enum class ConnectVote { kConnect, kGiveUp };

// One rank's vote in a generation's store (its keys and words:
// channel/heal_vote.h, which the Python package's vote reads too); `superseded`
// says whether a newer generation began. Throws ddprun::StoreTimeout when
// no verdict came within `timeout`.
ConnectVote vote_to_connect(ddprun::Store& store, int size, const std::function<bool()>& superseded,
                            std::chrono::milliseconds timeout);

}  // namespace ddp
