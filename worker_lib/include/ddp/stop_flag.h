// Graceful stop: SIGTERM or SIGINT (what ddprun forwards when it is asked
// to stop) set a flag instead of killing the worker, and the ranks agree to
// stop at the same step, so rank 0 can write a final checkpoint.
//
//   ddp::StopFlag stop;                          // while it lives, the signals only set the flag
//   for (...) { step(); if (stop.agreed(world->cpu())) { save; break; } }
//
// Only the user's stop is a stop request: when ddprun stops the workers by
// its own decision (a peer failed, a new round; it says so in the worker's
// heartbeat slot before signalling), the signal kills the worker as if no
// StopFlag lived, so a failure is never taken for a preemption.
//
// Signal handlers belong to the whole process, so only one StopFlag may live
// at a time. No LibTorch here.
#pragma once

namespace ddp {

class Communicator;

class StopFlag {
 public:
  // Throws std::logic_error if another StopFlag is alive.
  StopFlag();
  ~StopFlag();  // restores the previous handlers
  StopFlag(const StopFlag&) = delete;
  StopFlag& operator=(const StopFlag&) = delete;

  // Whether this process received SIGTERM or SIGINT, and which (0: none).
  bool requested() const;
  int signal() const;
};

// Collective: whether any rank of comm has been asked to stop. Every rank
// gets the same answer, so they all stop after the same step.
bool stop_agreed(const StopFlag& flag, Communicator& comm);

}  // namespace ddp
