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

  // Samples per rank per epoch (the same on every rank).
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

 private:
  SamplerOptions options_;
  int64_t per_rank_ = 0;
  int64_t epoch_ = 0;
  int64_t position_ = 0;
  std::vector<int64_t> indices_;
};

}  // namespace ddp
