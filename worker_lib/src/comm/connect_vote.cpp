#include "comm/connect_vote.h"

#include <algorithm>
#include <cstdint>
#include <string>

namespace ddp {
namespace {

constexpr int64_t kGiveUp = int64_t{1} << 32;  // far above any world size
constexpr std::chrono::milliseconds kSlice{100};
const char* const kCount = "vote/count";
const char* const kVerdict = "vote/verdict";
const char* const kConnectWord = "connect";
const char* const kGiveUpWord = "give up";

ConnectVote decide(ddprun::Store& store, ConnectVote v) {
  store.set(kVerdict, v == ConnectVote::kConnect ? kConnectWord : kGiveUpWord);
  return v;
}

}  // namespace

ConnectVote vote_to_connect(ddprun::Store& store, int size, const std::function<bool()>& superseded,
                            std::chrono::milliseconds timeout) {
  // Step 1: arrive.
  if (store.add(kCount, 1) == size) return decide(store, ConnectVote::kConnect);
  bool gave_up = false;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    // Step 2: give up, once, when a newer generation began.
    if (!gave_up && superseded()) {
      gave_up = true;
      const int64_t after = store.add(kCount, kGiveUp);
      if (after < 2 * kGiveUp) {
        // The first to give up: the arrivals before it decide.
        return decide(store, after - kGiveUp >= size ? ConnectVote::kConnect : ConnectVote::kGiveUp);
      }
    }
    // Step 3: the verdict, in slices.
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    try {
      const std::string verdict = store.get(kVerdict, std::clamp(left, std::chrono::milliseconds(1), kSlice));
      return verdict == kConnectWord ? ConnectVote::kConnect : ConnectVote::kGiveUp;
    } catch (const ddprun::StoreTimeout&) {
      if (left <= kSlice) throw;
    }
  }
}

}  // namespace ddp
