#include "ddp/sampler.h"

#include <algorithm>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>

namespace ddp {

DistributedSampler::DistributedSampler(const SamplerOptions& o) : options_(o) {
  check_rank(o.rank, o.world_size);
  if (o.dataset_size < 0) throw std::invalid_argument("ddp::DistributedSampler: negative dataset_size");
  if (o.drop_last && o.dataset_size < o.world_size) {
    throw std::invalid_argument("ddp::DistributedSampler: drop_last with " +
                                std::to_string(o.dataset_size) + " samples and " +
                                std::to_string(o.world_size) + " ranks leaves nothing to read");
  }
  set_epoch(0);
}

void DistributedSampler::check_rank(int rank, int world_size) const {
  if (world_size < 1) {
    throw std::invalid_argument("ddp::DistributedSampler: world_size " + std::to_string(world_size) + " < 1");
  }
  if (rank < 0 || rank >= world_size) {
    throw std::invalid_argument("ddp::DistributedSampler: rank " + std::to_string(rank) + " is not in [0, " +
                                std::to_string(world_size) + ")");
  }
}

void DistributedSampler::set_epoch(int64_t epoch) {
  epoch_ = epoch;
  shard_from(0);
}

void DistributedSampler::shard_from(int64_t base) {
  base_ = base;
  position_ = 0;
  const int64_t n = options_.dataset_size;
  const int64_t ws = options_.world_size;
  // The epoch's order over the whole dataset, the same on every rank: a
  // Fisher-Yates shuffle driven by a generator seeded with seed + epoch
  // (our own, so the order does not depend on the LibTorch version).
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  if (options_.shuffle) {
    std::mt19937_64 gen(options_.seed + static_cast<uint64_t>(epoch_));
    for (int64_t i = n - 1; i > 0; --i) {
      std::uniform_int_distribution<int64_t> pick(0, i);
      std::swap(order[i], order[pick(gen)]);
    }
  }
  // What is left of the order from `base` on is shared out: every rank
  // reads per_rank_ samples of it. Trim the tail, or pad it with samples
  // from the start of the order.
  per_rank_ = share(std::max<int64_t>(0, n - base));
  const int64_t total = std::min(n, base) + per_rank_ * ws;
  order.resize(static_cast<size_t>(std::min(total, n)));
  for (int64_t i = 0; static_cast<int64_t>(order.size()) < total; ++i) order.push_back(order[i % n]);

  indices_.clear();
  indices_.reserve(static_cast<size_t>(per_rank_));
  for (int64_t i = 0; i < per_rank_; ++i) {
    const int64_t at = options_.layout == SamplerOptions::kStrided ? base + i * ws + options_.rank
                                                                   : options_.rank * per_rank_ + i;
    indices_.push_back(order[static_cast<size_t>(at)]);
  }
}

int64_t DistributedSampler::share(int64_t left) const {
  const int64_t ws = options_.world_size;
  return options_.drop_last ? left / ws : (left + ws - 1) / ws;
}

int64_t DistributedSampler::global_position() const {
  return base_ + position_ * options_.world_size;
}

void DistributedSampler::set_global_position(int64_t global) {
  if (global < 0) {
    throw std::invalid_argument("ddp::DistributedSampler: global position " + std::to_string(global) + " < 0");
  }
  go_to(global, /*sharded=*/true);
}

void DistributedSampler::go_to(int64_t global, bool sharded) {
  const int64_t ws = options_.world_size;
  if (global % ws == 0 && global / ws <= share(options_.dataset_size)) {
    // Where the epoch's first sharding reaches it: the same indices as ever
    // (a heal or a resume at the same world size changes nothing).
    if (!sharded || base_ != 0) shard_from(0);
    position_ = global / ws;
    return;
  }
  if (options_.layout != SamplerOptions::kStrided) {
    throw std::invalid_argument("ddp::DistributedSampler: global position " + std::to_string(global) +
                                " is not where the " + std::to_string(ws) +
                                " ranks' blocks begin, and only the strided layout can go on from "
                                "there (kContiguous ranks read blocks, not a prefix of the order)");
  }
  shard_from(global);  // past the end of the order: the epoch is read
}

void DistributedSampler::reshard(int rank, int world_size) {
  check_rank(rank, world_size);
  if (rank == options_.rank && world_size == options_.world_size) return;
  if (options_.layout != SamplerOptions::kStrided) {
    throw std::invalid_argument("ddp::DistributedSampler: reshard needs the strided layout "
                                "(kContiguous ranks read blocks, not a prefix of the order)");
  }
  const int64_t global = global_position();
  options_.rank = rank;
  options_.world_size = world_size;
  go_to(global, /*sharded=*/false);  // the indices are the old world's
}

int64_t DistributedSampler::num_batches(int64_t batch_size) const {
  if (batch_size < 1) throw std::invalid_argument("ddp::DistributedSampler: batch_size < 1");
  return (per_rank_ + batch_size - 1) / batch_size;
}

std::optional<std::vector<int64_t>> DistributedSampler::next_batch(int64_t batch_size) {
  if (batch_size < 1) throw std::invalid_argument("ddp::DistributedSampler: batch_size < 1");
  if (position_ >= per_rank_) return std::nullopt;
  const int64_t end = std::min(per_rank_, position_ + batch_size);
  std::vector<int64_t> batch(indices_.begin() + position_, indices_.begin() + end);
  position_ = end;
  return batch;
}

void DistributedSampler::set_position(int64_t position) {
  if (position < 0 || position > per_rank_) {
    throw std::invalid_argument("ddp::DistributedSampler: position " + std::to_string(position) +
                                " is not in [0, " + std::to_string(per_rank_) + "]");
  }
  position_ = position;
}

}  // namespace ddp
