#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "ddp/bucket_plan.h"
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
