#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "data_parallel/bucket_plan.h"
#include "ddp/sampler.h"

namespace {

using ddp::DistributedSampler;
using ddp::SamplerOptions;

std::vector<std::vector<int64_t>> shards(SamplerOptions o, int64_t epoch) {
  std::vector<std::vector<int64_t>> out;
  for (int r = 0; r < o.world_size; ++r) {
    o.rank = r;
    DistributedSampler s(o);
    s.set_epoch(epoch);
    out.push_back(s.indices());
  }
  return out;
}

TEST(Sampler, EverySampleExactlyOncePerEpochWhenItDivides) {
  for (auto layout : {SamplerOptions::kStrided, SamplerOptions::kContiguous}) {
    SamplerOptions o;
    o.dataset_size = 1000;
    o.world_size = 4;
    o.layout = layout;
    for (int64_t epoch : {0, 1, 5}) {
      std::multiset<int64_t> seen;
      for (const auto& s : shards(o, epoch)) {
        EXPECT_EQ(s.size(), 250u);
        seen.insert(s.begin(), s.end());
      }
      std::multiset<int64_t> all;
      for (int64_t i = 0; i < 1000; ++i) all.insert(i);
      EXPECT_EQ(seen, all);
    }
  }
}

TEST(Sampler, UnevenDataPadsOrDropsToEqualCounts) {
  SamplerOptions o;
  o.dataset_size = 10;
  o.world_size = 4;
  // Pad: 3 each, 12 in all: every sample at least once, two twice.
  std::map<int64_t, int> count;
  for (const auto& s : shards(o, 0)) {
    EXPECT_EQ(s.size(), 3u);
    for (auto i : s) ++count[i];
  }
  EXPECT_EQ(count.size(), 10u);
  int twice = 0;
  for (auto& [i, c] : count) twice += c == 2;
  EXPECT_EQ(twice, 2);
  // Drop: 2 each, 8 distinct samples.
  o.drop_last = true;
  std::set<int64_t> kept;
  for (const auto& s : shards(o, 0)) {
    EXPECT_EQ(s.size(), 2u);
    kept.insert(s.begin(), s.end());
  }
  EXPECT_EQ(kept.size(), 8u);
}

TEST(Sampler, ReshufflesPerEpochAndRepeatsPerSeed) {
  SamplerOptions o;
  o.dataset_size = 100;
  o.world_size = 2;
  EXPECT_NE(shards(o, 0), shards(o, 1));
  EXPECT_EQ(shards(o, 3), shards(o, 3));
  SamplerOptions other = o;
  other.seed = 99;
  EXPECT_NE(shards(o, 0), shards(other, 0));
  o.shuffle = false;
  EXPECT_EQ(shards(o, 0)[1], (std::vector<int64_t>{1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31,
                                                     33, 35, 37, 39, 41, 43, 45, 47, 49, 51, 53, 55, 57, 59,
                                                     61, 63, 65, 67, 69, 71, 73, 75, 77, 79, 81, 83, 85, 87,
                                                     89, 91, 93, 95, 97, 99}));
  o.layout = SamplerOptions::kContiguous;
  EXPECT_EQ(shards(o, 0)[1].front(), 50);
}

TEST(Sampler, BatchesAndResumingMidEpoch) {
  SamplerOptions o;
  o.dataset_size = 23;
  o.world_size = 2;
  DistributedSampler s(o);  // 12 per rank
  s.set_epoch(4);
  EXPECT_EQ(s.num_batches(5), 3);
  std::vector<int64_t> read;
  std::vector<size_t> sizes;
  while (auto b = s.next_batch(5)) {
    sizes.push_back(b->size());
    read.insert(read.end(), b->begin(), b->end());
  }
  EXPECT_EQ(sizes, (std::vector<size_t>{5, 5, 2}));
  EXPECT_EQ(read, s.indices());
  // A restarted job picks up where a checkpoint said it was.
  DistributedSampler resumed(o);
  resumed.set_epoch(4);
  resumed.set_position(5);
  auto b = resumed.next_batch(5);
  ASSERT_TRUE(b);
  EXPECT_EQ(*b, std::vector<int64_t>(read.begin() + 5, read.begin() + 10));
  EXPECT_EQ(resumed.position(), 10);
  EXPECT_THROW(resumed.set_position(13), std::invalid_argument);
}

// A node is lost and the job goes on with 3 ranks instead of 4: the rest
// of the epoch is shared out among the 3, so over the epoch every sample is
// read once (the one repeat pads the last step).
TEST(Sampler, ReshardingContinuesFromTheGlobalPositionAndReadsEverySample) {
  SamplerOptions o;
  o.dataset_size = 120;
  o.world_size = 4;
  o.seed = 3;
  std::vector<DistributedSampler> ranks;
  for (int r = 0; r < 4; ++r) {
    o.rank = r;
    ranks.emplace_back(o);
    ranks.back().set_epoch(2);
  }
  std::multiset<int64_t> read;
  for (int step = 0; step < 7; ++step) {
    for (auto& s : ranks) read.insert(*s.next_batch(1)->begin());
  }
  EXPECT_EQ(ranks[0].global_position(), 28);
  ranks.pop_back();  // rank 3's node is gone
  for (int r = 0; r < 3; ++r) {
    ranks[size_t(r)].reshard(r, 3);
    EXPECT_EQ(ranks[size_t(r)].global_position(), 28);
    EXPECT_EQ(ranks[size_t(r)].num_samples(), 31);  // ceil(92 / 3)
  }
  for (auto& s : ranks) {
    while (auto b = s.next_batch(4)) read.insert(b->begin(), b->end());
  }
  EXPECT_EQ(read.size(), 28u + 93u);
  EXPECT_EQ(std::set<int64_t>(read.begin(), read.end()).size(), 120u);
  EXPECT_EQ(ranks[0].global_position(), 28 + 93);
  // Down to 2 ranks at a position both frames share (28 is even): the
  // indices are those of a 2-rank sampler at that point, not the 4-rank
  // order's.
  o.world_size = 4;
  o.rank = 1;
  DistributedSampler four(o);
  four.set_epoch(2);
  for (int i = 0; i < 7; ++i) four.next_batch(1);
  four.reshard(1, 2);
  o.world_size = 2;
  DistributedSampler two(o);
  two.set_epoch(2);
  two.set_position(14);
  EXPECT_EQ(four.num_samples(), two.num_samples());
  EXPECT_EQ(four.next_batch(100), two.next_batch(100));
  // The next epoch is sharded over the 3 ranks from the start.
  ranks[1].set_epoch(3);
  EXPECT_EQ(ranks[1].num_samples(), 40);
  EXPECT_EQ(ranks[1].world_size(), 3);
}

// A heal sends the global position: a replacement that takes it reads what
// the rank it replaces would have read, whether the sender's sharding began
// at the epoch's start or at a shrink.
TEST(Sampler, AGlobalPositionResumesTheSameIndicesInAnySharding) {
  SamplerOptions o;
  o.dataset_size = 101;
  o.world_size = 4;
  o.rank = 1;
  DistributedSampler before(o);
  before.set_epoch(5);
  for (int i = 0; i < 3; ++i) before.next_batch(2);
  DistributedSampler same(o);
  same.set_epoch(5);
  same.set_global_position(before.global_position());
  EXPECT_EQ(same.position(), before.position());  // divides evenly: set_position's frame
  EXPECT_EQ(same.next_batch(100), before.next_batch(100));

  DistributedSampler source(o);
  source.set_epoch(5);
  source.next_batch(2);
  source.reshard(2, 3);  // global 8, shared out over 3 from there
  EXPECT_EQ(source.num_samples(), 31);  // ceil(93 / 3)
  source.next_batch(4);
  o.world_size = 3;
  o.rank = 2;
  DistributedSampler replacement(o);
  replacement.set_epoch(5);
  replacement.set_global_position(source.global_position());  // 20
  EXPECT_EQ(replacement.global_position(), source.global_position());
  EXPECT_EQ(replacement.next_batch(100), source.next_batch(100));

  o.layout = SamplerOptions::kContiguous;
  DistributedSampler blocks(o);
  EXPECT_THROW(blocks.reshard(0, 2), std::invalid_argument);
  EXPECT_THROW(blocks.set_global_position(4), std::invalid_argument);  // 4 is no multiple of 3
  blocks.set_global_position(6);  // where the blocks begin: their frame
  EXPECT_EQ(blocks.position(), 2);
  EXPECT_THROW(source.reshard(3, 3), std::invalid_argument);
  EXPECT_THROW(source.set_global_position(-1), std::invalid_argument);
}

TEST(Sampler, BadOptionsAreNamed) {
  SamplerOptions o;
  o.dataset_size = 10;
  o.world_size = 2;
  o.rank = 2;
  try {
    DistributedSampler s(o);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "ddp::DistributedSampler: rank 2 is not in [0, 2)");
  }
}

TEST(BucketPlan, ReverseOrderFirstCapAndKeys) {
  using V = std::vector<std::vector<size_t>>;
  std::vector<ddp::BucketParam> p{{100, "f"}, {100, "f"}, {100, "f"}, {100, "f"}, {100, "f"}};
  EXPECT_EQ(ddp::assign_buckets(p, 100, 250), (V{{4}, {3, 2, 1}, {0}}));
  EXPECT_EQ(ddp::assign_buckets(p, 0, 0), (V{{4}, {3}, {2}, {1}, {0}}));
  EXPECT_EQ(ddp::assign_buckets(p, 1 << 20, 1 << 20), (V{{4, 3, 2, 1, 0}}));
  // Two dtypes never share a bucket.
  std::vector<ddp::BucketParam> mixed{{8, "half"}, {8, "float"}, {8, "half"}, {8, "float"}};
  EXPECT_EQ(ddp::assign_buckets(mixed, 1000, 1000), (V{{3, 1}, {2, 0}}));
}

}  // namespace
