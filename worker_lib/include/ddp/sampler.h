// Which samples each rank reads: a shard of an epoch's order per rank, the
// same number of samples on every rank (so every rank takes the same number
// of steps and no collective waits for a rank that ran out), reshuffled per
// epoch from seed + epoch, and resumable mid-epoch. No LibTorch here.
//
//   ddp::DistributedSampler sampler({n, rank, ws});
//   for (int epoch = 0; epoch < epochs; ++epoch) {
//     sampler.set_epoch(epoch);
//     while (auto batch = sampler.next_batch(64)) { ... }
//   }
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace ddp {

struct SamplerOptions {
  int64_t dataset_size = 0;
  int rank = 0;
  int world_size = 1;
  bool shuffle = true;
  uint64_t seed = 0;
  // Uneven datasets: drop the tail so every rank gets floor(N / ws) samples,
  // or (default) pad by repeating samples from the start, ceil(N / ws) each.
  bool drop_last = false;
  // kStrided: rank r takes positions r, r + ws, ... (PyTorch's sampler);
  // kContiguous: rank r takes one block (the seeds' sharding).
  enum Layout { kStrided, kContiguous };
  Layout layout = kStrided;
};

class DistributedSampler {
 public:
  // Throws std::invalid_argument naming the bad option.
  explicit DistributedSampler(const SamplerOptions& options);

  // Selects the epoch's order and rewinds to its start.
  void set_epoch(int64_t epoch);
  int64_t epoch() const { return epoch_; }

  // Samples per rank in this epoch (the same on every rank): the whole
  // epoch's share, or after set_global_position()/reshard() the share of
  // what was left.
  int64_t num_samples() const { return per_rank_; }
  // The steps an epoch takes with this batch size (the last may be short).
  int64_t num_batches(int64_t batch_size) const;

  // This rank's sample indices for the current epoch, in reading order.
  const std::vector<int64_t>& indices() const { return indices_; }

  // The next batch_size indices (fewer at the end of the epoch), or nullopt
  // when the epoch is done.
  std::optional<std::vector<int64_t>> next_batch(int64_t batch_size);

  // How many of this rank's samples of the epoch have been handed out; a
  // checkpoint stores it, set_position() resumes from it.
  int64_t position() const { return position_; }
  void set_position(int64_t position);

  // Samples of this epoch the whole world has read: the ranks read the
  // epoch's order from its start in turns (kStrided), so this is a prefix
  // of the order. It is the same on every rank and does not depend on the
  // world size: a checkpoint stores it, and a job that goes on at another
  // world size continues from it.
  int64_t global_position() const;
  // Continues the current epoch after `global` samples of its order were
  // read (by any number of ranks): the rest is shared out among this
  // sampler's ranks. With the same world size and a position that divides
  // evenly, this equals set_position(global / world_size). Throws
  // std::invalid_argument for a negative position, or one that does not
  // divide evenly under kContiguous (its blocks are no prefix).
  void set_global_position(int64_t global);
  // The world changed (a node was lost and the job shrank, or one joined):
  // this sampler is now `rank` of `world_size`, and the epoch continues from
  // the global position with the rest shared out among the new ranks.
  // Later epochs are sharded over the new world. Throws like the
  // constructor, and for kContiguous.
  void reshard(int rank, int world_size);
  int rank() const { return options_.rank; }
  int world_size() const { return options_.world_size; }

 private:
  void check_rank(int rank, int world_size) const;
  // Shares out order[base, ...) of the current epoch over the ranks.
  void shard_from(int64_t base);
  // Each rank's share of `left` samples (padded or trimmed).
  int64_t share(int64_t left) const;
  // To `global` samples into the epoch, sharding it only where needed;
  // sharded: whether indices_ are of the current options (they are not
  // when the world just changed).
  void go_to(int64_t global, bool sharded);

  SamplerOptions options_;
  int64_t per_rank_ = 0;
  int64_t epoch_ = 0;
  int64_t position_ = 0;
  int64_t base_ = 0;  // samples of the epoch's order read before this sharding
  std::vector<int64_t> indices_;
};

}  // namespace ddp
