// Where training waits, just before the training state changes, for work
// that still reads that state in the background: a Checkpointer's copy of
// the parameters and the optimizer's tensors runs while the next step's
// forward and backward do, and must end before its optimizer step.
//
// A World holds one (World::state_fence()). A Checkpointer made on the
// World adds its wait; ddp::DistributedDataParallel over the World waits at
// the end of each synchronised backward, a Healer before it changes the
// state. A loop that changes the parameters another way first calls
//   world->state_fence().wait();
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <utility>
#include <vector>

namespace ddp {

class StateFence {
 public:
  using Id = uint64_t;
  // `wait` blocks until its reader is done with the state; it must not throw.
  Id add(std::function<void()> wait);
  void remove(Id id);
  // Runs every wait added and not removed. Any thread may call it.
  void wait() const;

 private:
  mutable std::mutex mu_;
  std::vector<std::pair<Id, std::function<void()>>> waits_;
  Id next_ = 1;
};

}  // namespace ddp
