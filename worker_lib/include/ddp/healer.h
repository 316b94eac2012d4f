// Checkpointless recovery: when a peer dies, the ranks that survive keep
// their processes, a replacement takes the dead rank's place, and it gets
// the training state from a survivor, over the communicator, instead of
// everyone restarting from the last checkpoint. In data parallelism every
// rank holds the whole model and optimizer state: a peer is a checkpoint
// that is always current.
//
//   ddp::Healer healer(*world, {.module = model.module().get(), .optimizer = &optimizer,
//                               .sampler = &sampler, .step = &step, .counters = {&epoch}});
//   while (sampler.position() < sampler.num_samples()) {
//     healer.step([&] {
//       optimizer.zero_grad();
//       auto [x, y] = next_batch(sampler);
//       loss_fn(model(x), y).backward();  // DDP averages the gradients
//       optimizer.step();
//       ++step;                            // the commit: this step is done
//     });
//   }
//
// What happens when a peer dies inside step() (ddprun runs the job on one
// node, DDPRUN_HEALS=1):
//   1. the collective in flight fails with CollectiveError on the
//      survivors (a dead peer is seen at once on shared memory and Gloo);
//      step() catches it, closes its communicator so that peers still
//      blocked on it fail too, and puts back what the step had changed:
//      the sampler's position, the random generator, the module's buffers
//      and the counters;
//   2. it waits for the agent, which has started a replacement, to name
//      the heal generation (a futex in the heartbeat slot), then connects a
//      fresh communicator with every rank of that generation;
//   3. the ranks agree on the newest state: each tells its step, and the
//      lowest rank with the highest step sends its state (module, optimizer,
//      step, sampler, generator, counters) to all. A rank that saw the
//      step's last collective complete took the optimizer step already:
//      all such ranks did it with the same averaged gradients, so they hold
//      the same state, and every rank behind them takes it;
//   4. step() runs the step again, unless it was done: this rank had
//      committed (++step) before its failure (a collective in the rest of
//      the step failed), or the heal brought the step done.
// Across nodes, a lost node's ranks are taken over by a spare node, whose
// workers are replacements as above; or, with no spare waiting, the job
// shrinks: the survivors heal among themselves in a smaller world (rank()
// and size() change), and the sampler shares the rest of the epoch out
// among them from the global sample position. A program that keeps its
// global batch then reads more per rank (see examples/train's
// --keep-global-batch).
// The replacement runs the program from its start: ddp::init() connects it
// into the heal's generation, DistributedDataParallel and Checkpointer skip
// their start-up collectives (World::replacement()), and this constructor
// receives the state. The program then enters its loop where the state says.
// Its optimizer's state, which it has not made, arrives in memory its World
// prepared while the program started (rank 0's Healer tells the job the
// size after its first step): report().prepared_bytes.
//
// Only failures inside step() heal; a collective outside it (an evaluation)
// that fails throws as before, and the agent restarts the group
// (--max-restarts). Programs without a Healer are never healed around.
//
// Replicas compared (ddprun --verify-every N): every N optimizer steps, at
// the end of step(), the ranks compare a fingerprint of their parameters
// (verify/replica_check.h); after every heal, of the whole state (the
// optimizer's, the buffers' that the heal sent), and of the parameters
// again after the next step. Equal: nothing happens. A rank apart from a
// strict majority (a flipped bit, a wrong heal) takes the majority's state
// as a replacement would, and the step goes on; a process found apart a
// second time is replaced by ddprun (it cannot be trusted). No majority
// (2 of 4 apart, 1 of 2): step() throws ddp::ReplicasDiffer on every rank,
// the World's Checkpointer sets aside the checkpoints written since they
// last agreed, and a restart resumes from one they agreed on. Ranks on
// hardware of different kinds are compared within their kind (ddp/replicas.h).
#pragma once

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ddp/reducer.h"
#include "ddp/replicas.h"
#include "ddp/sampler.h"
#include "ddp/world.h"

namespace ddp {

class ReceivePool;               // internal
struct ReplicaComparison;        // internal
class ReplicaReporter;           // internal

// What a heal carries to a replacement: everything the loop needs to go
// on exactly as the dead rank would have.
struct Healable {
  torch::nn::Module* module = nullptr;           // parameters and buffers (required)
  torch::optim::Optimizer* optimizer = nullptr;  // its state (required)
  DistributedSampler* sampler = nullptr;         // epoch and position (optional)
  int64_t* step = nullptr;  // optimizer steps completed (required): which rank is newest
  // The program's own counters (an epoch, a learning-rate schedule's step):
  // put back when a step is abandoned, sent to whoever heals.
  std::vector<int64_t*> counters;
};

// What the heals of this process cost (each one: this rank's view).
struct HealReport {
  int heals = 0;               // heals this process took part in
  int steps_redone = 0;        // steps it ran again after a heal
  int64_t bytes = 0;           // state bytes sent to (or received from) peers, the last heal
  int64_t prepared_bytes = 0;  // a replacement's: of those, received into memory it made while it started
  double wait_seconds = 0;     // from the failure to the agent's generation, the last heal
  double connect_seconds = 0;  // connecting the new generation's communicator
  double transfer_seconds = 0; // agreeing on the newest state and sending it
  uint32_t generation = 0;
  int world_size = 0;          // the world's size after the last heal (it shrinks when a node is lost)
  int64_t step = -1;           // the steps done when the last heal ended: where the healed world went on from
  // The comparisons of the ranks' replicas (see "Replicas compared" above).
  int64_t checks = 0;          // comparisons this process took part in
  int64_t repairs = 0;         // the times ranks apart took a majority's state
  int64_t verified_step = -1;  // the newest step at which every rank agreed
  double verify_seconds = 0;   // spent comparing (and repairing), all of them
};

struct HealOptions {
  // How long a survivor waits for the agent to start a replacement before
  // the step's error is thrown after all. Zero: the World's timeout.
  std::chrono::milliseconds wait_timeout{0};
  // Compare the ranks' parameters every this many optimizer steps (0:
  // never; the whole state after a heal is compared whenever this is not
  // 0). -1: ddprun's --verify-every (DDPRUN_VERIFY_EVERY; 0 elsewhere).
  int64_t verify_every = -1;
};

class Healer {
 public:
  // Says the process can heal (in its heartbeat slot; the agent heals only
  // when every worker does). In a replacement (World::replacement()) this
  // is collective with the survivors' heal: it receives the state. Throws
  // std::invalid_argument when a required field is missing, CollectiveError
  // when the heal fails.
  Healer(World& world, Healable state, HealOptions options = {});
  // Says the process can no longer heal: what runs after is not a step.
  ~Healer();
  Healer(const Healer&) = delete;
  Healer& operator=(const Healer&) = delete;

  // One training step: body() runs forward and backward, the optimizer
  // step, then ++step (the commit), and whatever else a step does (a
  // progress report, a checkpoint, collectives). A CollectiveError inside
  // heals the group and, when it came before the commit, runs body() again
  // (see above); without ddprun's heals, or when no replacement comes, it
  // is thrown. Everything a step changes before its commit must be in
  // Healable (the sampler, counters) or be redone by body() itself. When a
  // comparison of the replicas is due, it ends the step (see above; it
  // throws ReplicasDiffer when no majority can repair them).
  void step(const std::function<void()>& body);

  // Whether this process replaced a failed rank (its state came from a peer).
  bool joined() const { return joined_; }
  const HealReport& report() const { return report_; }

 private:
  struct Snapshot;
  void take_snapshot(Snapshot& s);
  void put_back(const Snapshot& s);
  // Steps 2 and 3 above; `why` is the failure that began it.
  void heal(const std::string& why);
  void next_generation(const std::string& why);
  // A replacement receives its optimizer's state into `pool` (when not null).
  // True when state went across (some rank was behind).
  bool sync_state(bool have_state, ReceivePool* pool = nullptr);
  // Rank `source` sends its state to every rank; those `behind` take it
  // (fresh_process: a replacement, whose module's tensors hold nothing yet); the
  // others keep their own with `keep_own`, else receive it into them.
  void send_state(int source, bool behind, bool fresh_process, bool keep_own, ReceivePool* pool);
  void tell_receive_bytes();
  // The comparisons of the replicas: due at the end of a step begun at
  // `start` steps; of the whole state after a heal (`sent`: state went
  // across, so the buffers agree too); what they found, to the agent.
  void verify_if_due(int64_t start);
  void verify_after_heal(bool sent);
  void verify(bool whole_state, bool with_buffers);
  void repair(const ReplicaComparison& found);
  [[noreturn]] void stop_apart(const std::string& text);
  std::vector<NamedTensor> replica_tensors(bool whole_state, bool with_buffers) const;

  // Replica comparisons' state (the same on every rank but apart_).
  int64_t verify_every_ = 0;
  int64_t verify_after_ = -1;  // compare the parameters after the step past this one too (a heal's)
  int apart_ = 0;              // the times this process was found apart
  bool told_by_design_ = false;
  std::string hardware_kind_;
  std::unique_ptr<ReplicaReporter> reporter_;  // what they found, to the agent
  // The generator a heal brought, set again when the next step starts.
  at::Tensor rng_next_step_;

  World& world_;
  Healable state_;
  HealOptions options_;
  bool joined_ = false;
  bool told_receive_bytes_ = false;
  HealReport report_;
};

}  // namespace ddp
