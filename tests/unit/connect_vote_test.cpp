// worker_lib/src/comm/connect_vote.h: the ranks of a heal generation all
// connect or none does, whenever a newer generation begins.
#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "comm/connect_vote.h"
#include "rendezvous/store/memory_store.h"

namespace {

using namespace std::chrono_literals;
using ddp::ConnectVote;
using ddp::vote_to_connect;

TEST(ConnectVote, EveryRankArrivedConnectsThemAll) {
  ddprun::MemoryStore store;
  std::vector<ConnectVote> votes(3);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 3; ++r) {
    ranks.emplace_back([&, r] { votes[r] = vote_to_connect(store, 3, [] { return false; }, 60s); });
  }
  for (auto& t : ranks) t.join();
  for (ConnectVote v : votes) EXPECT_EQ(v, ConnectVote::kConnect);
}

// The case that hung: a rank gives the generation up while a peer has not
// voted yet; the late peer must give up too, not connect towards it.
TEST(ConnectVote, ARankThatGaveUpBeforeAllArrivedTakesEveryRankWithIt) {
  ddprun::MemoryStore store;
  std::atomic<bool> newer{false};
  std::vector<ConnectVote> votes(3);
  std::vector<std::thread> early;
  for (int r = 0; r < 2; ++r) {
    early.emplace_back([&, r] { votes[r] = vote_to_connect(store, 3, [&] { return newer.load(); }, 60s); });
  }
  newer = true;  // the agent names the next generation
  for (auto& t : early) t.join();
  votes[2] = vote_to_connect(store, 3, [] { return false; }, 60s);  // the slow one, after all
  for (ConnectVote v : votes) EXPECT_EQ(v, ConnectVote::kGiveUp);
}

// Once every rank has arrived, a newer generation changes nothing: they all
// connect (and the newer one fails their first collective).
TEST(ConnectVote, ANewerGenerationAfterAllArrivedStillConnectsThemAll) {
  ddprun::MemoryStore store;
  std::vector<ConnectVote> votes(2);
  // The first rank asks "superseded?" only once it has arrived.
  std::promise<void> arrived;
  std::once_flag once;
  std::thread first([&] {
    votes[0] = vote_to_connect(store, 2, [&] {
      std::call_once(once, [&] { arrived.set_value(); });
      return false;
    }, 60s);
  });
  arrived.get_future().wait();
  votes[1] = vote_to_connect(store, 2, [] { return true; }, 60s);
  first.join();
  EXPECT_EQ(votes[0], ConnectVote::kConnect);
  EXPECT_EQ(votes[1], ConnectVote::kConnect);
}

// Whenever the newer generation comes among their votes, the ranks agree
// (the two tests above pin each outcome).
TEST(ConnectVote, RanksAgreeWhereverTheNewerGenerationFallsAmongTheirVotes) {
  std::mt19937 gen(std::random_device{}());
  for (int trial = 0; trial < 300; ++trial) {
    ddprun::MemoryStore store;
    std::atomic<bool> newer{false};
    const int size = 2 + trial % 4;
    const int flip_after = std::uniform_int_distribution<>(0, size)(gen);  // votes begun before it
    std::vector<ConnectVote> votes(size);
    std::vector<std::thread> ranks;
    for (int r = 0; r < size; ++r) {
      if (r == flip_after) newer = true;
      ranks.emplace_back([&, r] { votes[r] = vote_to_connect(store, size, [&] { return newer.load(); }, 60s); });
    }
    newer = true;
    for (auto& t : ranks) t.join();
    for (int r = 1; r < size; ++r) ASSERT_EQ(votes[r], votes[0]) << "trial " << trial << ", rank " << r;
  }
}

TEST(ConnectVote, AMissingRankAndNoNewerGenerationEndsAtTheTimeout) {
  ddprun::MemoryStore store;
  EXPECT_THROW(vote_to_connect(store, 2, [] { return false; }, 200ms), ddprun::StoreTimeout);
}

}  // namespace
