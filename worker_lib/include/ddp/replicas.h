// Replicas that must agree: in data parallelism every rank holds the same
// parameters, bit for bit. Under ddprun a Healer compares them (a
// fingerprint of their bytes, every --verify-every optimizer steps and the
// whole state after every heal), repairs a rank apart from a majority with
// the majority's state, and when there is no majority stops with
// ReplicasDiffer. What the comparisons found is kept in the World's
// ReplicaLedger, where a Checkpointer made on that World learns it: when
// the replicas are found apart with no majority, or rank 0 (whose state the
// checkpoints hold) apart from the majority, the checkpoints written since
// they last agreed are set aside, so that a restart resumes from one they
// agreed on; and the newest checkpoint they agreed on is never pruned.
//
//   try { healer.step(body); }
//   catch (const ddp::ReplicasDiffer& e) { /* e.what(): who differs from whom, from which tensor on */ }
//   int64_t good = world->replicas().agreed_step();   // -1: never compared
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace ddp {

// The ranks' replicas differ and no majority says which is right (2 of 4
// apart, 1 of 2), or their models differ: training cannot go on from here.
// Every rank throws it alike; the failure ends the attempt, and a restart
// (ddprun --max-restarts) resumes from a checkpoint the replicas agreed on.
class ReplicasDiffer : public std::runtime_error {
 public:
  ReplicasDiffer(const std::string& what, int64_t step, int64_t agreed_step)
      : std::runtime_error(what), step_(step), agreed_step_(agreed_step) {}
  int64_t step() const { return step_; }                // where they were found apart
  int64_t agreed_step() const { return agreed_step_; }  // where they last agreed (-1: never)

 private:
  int64_t step_;
  int64_t agreed_step_;
};

class ReplicaLedger {
 public:
  using Id = uint64_t;
  // Called with (the step the replicas last agreed at, the step they were
  // found apart at, the ranks apart: empty when no majority says which);
  // must not throw.
  using Listener = std::function<void(int64_t agreed_step, int64_t apart_step, const std::vector<int>& ranks)>;

  // Every rank's replicas agreed at `step` (or were repaired to agree);
  // -1: at a point not counted in steps (DistributedDataParallel counts its
  // forward passes).
  void agreed(int64_t step);
  // The newest step they agreed at (-1: never compared, or not in steps).
  int64_t agreed_step() const;
  // How many comparisons agreed so far: what was saved before the newest of
  // them was saved from a state the replicas agreed on.
  uint64_t agreements() const;
  // A Healer compares (DistributedDataParallel then leaves it to it).
  void set_compared_by_healer(bool yes);
  bool compared_by_healer() const;
  // They were found apart at `step` (-1: not in steps): `ranks` apart from
  // a majority, or no majority (empty). Every listener hears it (before a
  // repair's agreed()).
  void found_apart(int64_t step, const std::vector<int>& ranks);
  Id listen(Listener listener);
  void forget(Id id);

 private:
  mutable std::mutex mu_;
  int64_t agreed_step_ = -1;
  uint64_t agreements_ = 0;
  bool by_healer_ = false;
  std::vector<std::pair<Id, Listener>> listeners_;
  Id next_ = 1;
};

}  // namespace ddp
