// Gives memory the process freed back to the system, now and then.
//
// The rendezvous' host serves whoever connects: a flood of connections
// (thousands, each with gRPC's buffers) is freed when they close, but
// glibc keeps the freed pages of its per-thread arenas, so the agent stayed
// 27 MiB larger after 2,000 connections came and went. malloc_trim(0)
// returns the free pages of every arena; it runs on a thread of its own
// every `every`, which costs well under a millisecond on a heap this size.
#pragma once

#include <chrono>

#include "rendezvous/server/periodic_task.h"

namespace ddprun {

class MemoryTrimmer {
 public:
  explicit MemoryTrimmer(std::chrono::milliseconds every);
  ~MemoryTrimmer();  // stops the thread at once
  MemoryTrimmer(const MemoryTrimmer&) = delete;
  MemoryTrimmer& operator=(const MemoryTrimmer&) = delete;

 private:
  PeriodicTask task_;
};

}  // namespace ddprun
