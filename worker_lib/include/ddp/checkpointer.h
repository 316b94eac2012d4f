// Rank-0 checkpoints: copied and written in the background, atomically,
// with a checksum; restored by rank 0 and broadcast to every rank.
//
//   ddp::Checkpointer ckpt(*world, {.dir = "ckpt", .every_steps = 100});
//   if (auto s = ckpt.restore()) ddp::apply_state(*s, *model, optimizer);  // collective
//   ... after each optimizer step:
//   if (ckpt.due(step)) ckpt.save(*model, optimizer, step, epoch, pos);
//   ... at the end:
//   ddp::CheckpointReport r = ckpt.finish();  // r.failed: saves that did not reach the disk
//
// Training hardly waits for a save: save() copies only what the next
// step's forward changes (the module's buffers; the RNG and the counters)
// and returns. The parameters and the optimizer's tensors stay unchanged
// until the next optimizer step, so they are copied in the background
// while that step's forward and backward run, into the host buffers of the
// previous save (one staged copy at most), and written out from there.
// fence() waits for that copy; ddp::DistributedDataParallel calls it at the
// end of backward, through the World's state fence (state_fence.h), and so
// does a heal. A loop whose optimizer step no such backward precedes calls
// ckpt.fence() before it (or sets CheckpointOptions::copy = kInSave).
//
// Files are DIR/ckpt-<step, 12 digits>-<crc32 of the file, 8 hex>.pt, written
// to a temporary name, fsynced and renamed, so a reader sees whole files
// only; the checksum in the name catches truncation and bit flips. The
// newest `keep` sound files are kept: a corrupt file is set aside as
// <name>.corrupt (with a warning) and never counts, nor does an entry that
// only looks like a checkpoint (a folder) or one newer than the newest save.
//
// Replicas (ddp/replicas.h): a Checkpointer made on a World hears the
// comparisons of the ranks' replicas there. When rank 0's state (what the
// files hold) is found apart from the majority's, or no majority says which
// is right, the checkpoints written since the replicas last agreed are set
// aside as <name>.unagreed, with a warning, so that a restart resumes from
// one they agreed on; and pruning never deletes the newest checkpoint
// written when they agreed. Each file records the fingerprint of its
// tensors; a restore that finds other tensors than it records skips it.
//
// A save that fails (full disk, read-only folder) does not stop training: it
// is a warning on stderr naming the file and the OS error, the older
// checkpoints stay, and the next due step tries again. finish() reports the
// failures; a Checkpointer destroyed without it says so on stderr.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <map>
#include <string>
#include <vector>

#include "ddp/checkpoint_files.h"
#include "ddp/communicator.h"
#include "ddp/progress.h"
#include "ddp/replicas.h"
#include "ddp/state_fence.h"
#include "ddp/trace.h"
#include "ddp/training_state.h"
#include "ddp/world.h"

namespace ddp {

struct CheckpointOptions {
  std::string dir;
  int64_t every_steps = 0;   // 0: not by steps
  double every_seconds = 0;  // 0: not by time
  int keep = 3;              // newest files kept
  // Where the copy (kCheckpointCopy), the write (kCheckpointWrite) and the
  // restore (kRestore) are recorded, and where saved_step / restored_step
  // are reported (progress.h); null: nowhere. The World constructor fills
  // in the World's.
  Tracer* tracer = nullptr;
  ProgressReporter* progress = nullptr;
  // Where training waits for a save's copy of the parameters and the
  // optimizer's tensors (see the top of this file).
  //   kAuto:       kBackground for a Checkpointer made on a World (its
  //                DDP's backward and Healer fence), kInSave on a bare
  //                Communicator (nothing would call fence()).
  //   kBackground: save() returns at once; fence() waits for the copy.
  //   kInSave:     save() returns once the copy is done.
  enum class Copy { kAuto, kBackground, kInSave };
  Copy copy = Copy::kAuto;
};

// What became of the saves of a Checkpointer (rank 0; zeros elsewhere).
struct CheckpointReport {
  int64_t written = 0;     // saves that reached the disk
  int64_t failed = 0;      // saves that did not (each one warned about on stderr)
  std::string last_error;  // the newest failure, "" if none
  // What the saves cost training: the training thread's time inside save()
  // and waiting in fence() (the stall), and the copies' own time (in the
  // background, unless they ran in save()).
  double stall_seconds = 0;
  double copy_seconds = 0;
};

class SerialWorker;

class Checkpointer {
 public:
  // Collective over comm: rank 0 owns the folder (creates it, clears
  // leftover temporary files). Throws std::runtime_error naming the folder
  // when it cannot be created.
  Checkpointer(Communicator& comm, CheckpointOptions options);
  // Over world.cpu(), recording into the World's tracer and progress.
  Checkpointer(World& world, CheckpointOptions options);
  // Waits for the write in flight; never throws. Says on stderr when a
  // write failed and finish() did not report it.
  ~Checkpointer();
  Checkpointer(const Checkpointer&) = delete;
  Checkpointer& operator=(const Checkpointer&) = delete;

  // Collective: rank 0 reads the newest checkpoint whose checksum and
  // contents are sound (warning on stderr about each one it skips) and
  // broadcasts it; every rank gets the same state, or nullopt on all when
  // there is none. In a replacement that joins a heal (World::replacement())
  // nullopt at once: its peers are past their restore, and the heal brings
  // the current state.
  std::optional<TrainingState> restore();

  // Whether a checkpoint is due after `step` (every_steps, or every_seconds
  // since the last save). Always false on ranks other than 0.
  bool due(int64_t step) const;

  // Rank 0: waits for the previous write (at most one in flight), then hands
  // the state to the background writer and returns. Other ranks: nothing.
  // A failed write does not throw: see the class comment.
  void save(TrainingState state);

  // The same, taking the state itself (only on rank 0): the buffers, the
  // RNG and the counters now; the parameters and the optimizer's tensors in
  // the background, into the host buffers of the previous checkpoint (no
  // allocation), until fence(). Nothing may change them before fence().
  void save(const torch::nn::Module& model, torch::optim::Optimizer& optimizer, int64_t step, int64_t epoch,
            int64_t sampler_position);

  // Waits until the last save's copy of the state is done (not its write):
  // from then on the parameters and the optimizer's state may change. Cheap
  // when there is nothing to wait for; any thread may call it.
  void fence();

  // Waits for the write in flight; false if it failed (already warned about).
  bool wait();

  // Waits for the write in flight and reports every save so far. Call it
  // once training is over: what it returns is what made it to disk.
  CheckpointReport finish();
  CheckpointReport report() const;

  // The newest file this process wrote or restored from ("" if none), and
  // the step of the last save() (-1 if none).
  std::string last_path() const;
  int64_t last_saved_step() const { return last_step_; }
  const CheckpointOptions& options() const { return options_; }

 private:
  // restore()'s reading and broadcast.
  std::optional<TrainingState> restore_broadcast();
  void start_threads();
  // Hands a task writing `step` to the writer thread (at most one in flight).
  void submit(int64_t step, std::function<void()> task);
  // Waits for the staged copy; true if it had to wait.
  bool wait_for_copy();
  // On the writer thread.
  void write(const TrainingState& state);
  void prune(int64_t newest_step);
  bool known_sound(const CheckpointFile& f);
  void failed(int64_t step, const std::string& why);
  // The World's replicas were found apart at `step` (ranks: who; empty: no
  // majority): rank 0 sets aside what it wrote after `agreed_step`.
  void on_replicas_apart(int64_t agreed_step, int64_t step, const std::vector<int>& ranks);
  bool replicas_agreed_on(int64_t step) const;

  Communicator& comm_;
  CheckpointOptions options_;
  Tracer no_tracer_;  // off: what tracer_ points at without options_.tracer
  Tracer* tracer_;
  std::chrono::steady_clock::time_point last_save_;
  int64_t last_step_ = -1;
  mutable std::mutex path_mu_;  // last_path_ is set by the writer thread
  std::string last_path_;
  CheckpointReport report_;        // guarded by path_mu_
  bool reported_ = true;           // no failure that finish() has not returned
  // Entries checked or written by us: true sound, false bad but left in
  // place (a folder, or a file that could not be renamed). Guarded by path_mu_.
  std::map<std::string, bool> checked_;
  std::future<void> in_flight_;
  int64_t failed_before_in_flight_ = 0;  // report_.failed when it was submitted
  std::shared_ptr<TrainingState> recycled_;  // the last state written, for its buffers
  bool joins_heal_ = false;                  // made by a replacement (World::replacement())
  bool copy_in_background_ = false;
  std::mutex copy_mu_;
  std::shared_future<void> copied_;  // the last save's staged copy; guarded by copy_mu_
  std::shared_ptr<StateFence> fence_;  // the World's, where fence() is registered
  StateFence::Id fence_id_ = 0;
  std::shared_ptr<ReplicaLedger> replicas_;  // the World's, where on_replicas_apart is registered
  ReplicaLedger::Id replicas_id_ = 0;
  // The ledger's agreements when each step was saved (by this process).
  // Guarded by path_mu_.
  std::map<int64_t, uint64_t> saved_at_agreement_;
  std::unique_ptr<SerialWorker> copier_;  // stages copies (normal priority)
  std::unique_ptr<SerialWorker> writer_;  // writes files (nice 10)
};

}  // namespace ddp
