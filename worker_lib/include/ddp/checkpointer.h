// Rank-0 checkpoints: written in the background, atomically, with a
// checksum; restored by rank 0 and broadcast to every rank.
//
//   ddp::Checkpointer ckpt(world->cpu(), {.dir = "ckpt", .every_steps = 100});
//   if (auto s = ckpt.restore()) ddp::apply_state(*s, *model, optimizer);  // collective
//   ... after each optimizer step:
//   if (ckpt.due(step)) ckpt.save(*model, optimizer, step, epoch, pos);
//
// Files are DIR/ckpt-<step, 12 digits>-<crc32 of the file, 8 hex>.pt, written
// to a temporary name, fsynced and renamed, so a reader sees whole files
// only; the checksum in the name catches truncation and bit flips. The last
// `keep` are kept.
#pragma once

#include <chrono>
#include <cstdint>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "ddp/communicator.h"
#include "ddp/training_state.h"

namespace ddp {

struct CheckpointOptions {
  std::string dir;
  int64_t every_steps = 0;   // 0: not by steps
  double every_seconds = 0;  // 0: not by time
  int keep = 3;              // newest files kept
};

// One checkpoint file as found in a folder.
struct CheckpointFile {
  std::string path;
  int64_t step = 0;
  uint32_t crc = 0;
};

// The checkpoint files of a folder, newest (highest step) first. Other files
// are ignored.
std::vector<CheckpointFile> list_checkpoints(const std::string& dir);

// The file's bytes if its checksum matches its name; otherwise nullopt and
// why in *problem.
std::optional<std::vector<char>> read_checkpoint(const CheckpointFile& f, std::string* problem);

class SerialWorker;

class Checkpointer {
 public:
  // Collective over comm: rank 0 owns the folder (creates it, clears
  // leftover temporary files). Throws std::runtime_error naming the folder
  // when it cannot be created.
  Checkpointer(Communicator& comm, CheckpointOptions options);
  ~Checkpointer();  // finishes the write in flight
  Checkpointer(const Checkpointer&) = delete;
  Checkpointer& operator=(const Checkpointer&) = delete;

  // Collective: rank 0 reads the newest checkpoint whose checksum and
  // contents are sound (warning on stderr about each one it skips) and
  // broadcasts it; every rank gets the same state, or nullopt on all when
  // there is none.
  std::optional<TrainingState> restore();

  // Whether a checkpoint is due after `step` (every_steps, or every_seconds
  // since the last save). Always false on ranks other than 0.
  bool due(int64_t step) const;

  // Rank 0: waits for the previous write (at most one in flight), then hands
  // the state to the background writer and returns. Other ranks: nothing.
  // A failed earlier write is rethrown here.
  void save(TrainingState state);

  // The same, capturing the state itself (only on rank 0) into the host
  // buffers of the previous checkpoint once it is written: the copy, which
  // is all that training waits for, then allocates nothing.
  void save(const torch::nn::Module& model, torch::optim::Optimizer& optimizer, int64_t step, int64_t epoch,
            int64_t sampler_position);

  // Waits for the write in flight; rethrows its failure.
  void wait();

  // The newest file this process wrote or restored from ("" if none), and
  // the step of the last save() (-1 if none).
  std::string last_path() const;
  int64_t last_saved_step() const { return last_step_; }
  const CheckpointOptions& options() const { return options_; }

 private:
  void write(const TrainingState& state);  // on the writer thread

  Communicator& comm_;
  CheckpointOptions options_;
  std::chrono::steady_clock::time_point last_save_;
  int64_t last_step_ = -1;
  mutable std::mutex path_mu_;  // last_path_ is set by the writer thread
  std::string last_path_;
  std::future<void> in_flight_;
  std::shared_ptr<TrainingState> recycled_;  // the last state written, for its buffers
  std::unique_ptr<SerialWorker> writer_;
};

}  // namespace ddp
