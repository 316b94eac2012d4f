// The heal generation's connect vote, as both of its implementations run
// it: worker_lib's (worker_lib/src/comm/connect_vote.h, which says how the
// vote goes) and the Python package's (python/ddprun/_generation.py). The
// keys its ranks use in the generation's store, the verdict's two words
// and what a rank that gives up adds to the count. C++ and Python workers
// never share a generation's store, but they run one protocol: the package
// reads these words from this header (it ships it; _contract.py).
#pragma once

#include <cstdint>

namespace ddprun::channel {

inline constexpr const char* kVoteCountKey = "vote/count";
inline constexpr const char* kVoteVerdictKey = "vote/verdict";
inline constexpr const char* kVoteConnect = "connect";
inline constexpr const char* kVoteGiveUp = "give up";
// 2^32: far above any world size, so that the count tells the arrivals
// (below it) from the give-ups (multiples of it).
inline constexpr int64_t kVoteGiveUpAmount = 4294967296;

}  // namespace ddprun::channel
