#include "comm/connect_vote.h"

#include <algorithm>
#include <cstdint>
#include <string>

#include "channel/heal_vote.h"

namespace ddp {
namespace {

using ddprun::channel::kVoteConnect;
using ddprun::channel::kVoteCountKey;
using ddprun::channel::kVoteGiveUp;
using ddprun::channel::kVoteGiveUpAmount;
using ddprun::channel::kVoteVerdictKey;
constexpr std::chrono::milliseconds kSlice{100};

ConnectVote decide(ddprun::Store& store, ConnectVote v) {
  store.set(kVoteVerdictKey, v == ConnectVote::kConnect ? kVoteConnect : kVoteGiveUp);
  return v;
}

}  // namespace

ConnectVote vote_to_connect(ddprun::Store& store, int size, const std::function<bool()>& superseded,
                            std::chrono::milliseconds timeout) {
  // Step 1: arrive.
  if (store.add(kVoteCountKey, 1) == size) return decide(store, ConnectVote::kConnect);
  bool gave_up = false;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    // Step 2: give up, once, when a newer generation began.
    if (!gave_up && superseded()) {
      gave_up = true;
      const int64_t after = store.add(kVoteCountKey, kVoteGiveUpAmount);
      if (after < 2 * kVoteGiveUpAmount) {
        // The first to give up: the arrivals before it decide.
        return decide(store, after - kVoteGiveUpAmount >= size ? ConnectVote::kConnect : ConnectVote::kGiveUp);
      }
    }
    // Step 3: the verdict, in slices.
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    try {
      const std::string verdict = store.get(kVoteVerdictKey, std::clamp(left, std::chrono::milliseconds(1), kSlice));
      return verdict == kVoteConnect ? ConnectVote::kConnect : ConnectVote::kGiveUp;
    } catch (const ddprun::StoreTimeout&) {
      if (left <= kSlice) throw;
    }
  }
}

}  // namespace ddp
