// The worker's side of hang detection: a counter in a small shared-memory
// file that the agent reads. beat() is one relaxed atomic increment, cheap
// enough for every collective; a worker whose counter stops moving for
// too long is treated as failed. While the worker waits for its peers, in a
// heal (WaitScope, or a replacement until it has the state) or inside a
// collective (its flight record says so), a thread of its own beats for it:
// waiting for a peer is not a hang (the peer's own silence names the hang),
// but a worker that is stopped (SIGSTOP stops every thread) still falls
// silent. A collective that never ends ends at its timeout.
// No LibTorch here.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "channel/heartbeat_layout.h"

namespace ddp {

// Where the agent placed this worker after the running round shrank.
struct HealPlacement {
  uint32_t generation = 0;  // the heal generation it holds from
  int rank = 0;
  int world_size = 1;
  int node_rank = 0;
  int num_nodes = 1;
};

class Heartbeat {
 public:
  // Maps slot `slot` of `path` (made by the agent). An empty path gives a
  // heartbeat that does nothing (not launched by ddprun, or no hang
  // detection). Throws std::runtime_error naming the file when it cannot be
  // mapped.
  Heartbeat(const std::string& path, int slot);
  ~Heartbeat();
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

  void beat() {
    if (counter_) __atomic_fetch_add(counter_, 1, __ATOMIC_RELAXED);
  }
  uint64_t count() const { return counter_ ? __atomic_load_n(counter_, __ATOMIC_RELAXED) : 0; }

  // The slot's progress block (heartbeat_layout.h), null without a file.
  // One writer at a time: ddp::ProgressReporter serialises them.
  ddprun::channel::ProgressBlock* progress_block() const { return progress_; }
  // The slot's flight record (flight_record.h), null without a file.
  ddprun::channel::FlightRing* flight_ring() const { return flight_; }
  // Tells the agent what the ranks' last comparison of their replicas
  // found (the slot's replicas block); nothing without a file. One writer:
  // the Healer.
  void report_replicas(const ddprun::channel::ReplicaReport& r) {
    if (replicas_) ddprun::channel::write_replicas(replicas_, r);
  }

  // The program announces a stretch without collectives (the slot's phase
  // word, channel::Phase): nested announcements keep the outermost's kind
  // until the last one ends.
  void enter_phase(uint32_t phase);
  void leave_phase();
  // The worker is past its last step (its World ends): the phase word says
  // kFinishing from now on, so that a slow exit is never judged a hang.
  void finish();
  // Whether the worker is inside a ddp::Healer step (the slot's in-step word).
  void set_in_step(bool in_step) {
    if (in_step_) __atomic_store_n(in_step_, in_step ? 1u : 0u, __ATOMIC_RELAXED);
  }

  // Checkpointless recovery (the slot's heal words): tells the agent this
  // worker can heal around a failed peer, or no longer can.
  void set_heal_ready(bool ready);
  // The heal generation the agent last told this worker (0: none, or no file).
  uint32_t heal_generation() const;
  // Sleeps until the generation differs from `seen`, `timeout` passes, the
  // agent says no heal comes (no_heal_coming: it stops the workers, or no
  // spare or shrink can heal a lost node) or (with `cancel`) *cancel is set
  // and wake_heal_waiters() called; returns the generation then. Without a
  // file, returns `seen` at once. heed_no_heal false: only a change of the
  // generation (or the cancel) ends the wait (a watcher of the word, which
  // must not spin while no heal comes).
  uint32_t wait_heal_generation(uint32_t seen, std::chrono::milliseconds timeout,
                                const std::atomic<bool>* cancel = nullptr, bool heed_no_heal = true) const;
  void wake_heal_waiters() const;
  // Whether the agent says no heal will come for a failed peer (it stops
  // the workers; or across nodes, a member's workers cannot heal): heal no
  // longer, fail.
  bool no_heal_coming() const {
    return no_heal_coming_ && __atomic_load_n(no_heal_coming_, __ATOMIC_ACQUIRE) == 1;
  }
  // The newest placement the agent wrote (the round shrank), if any.
  std::optional<HealPlacement> placement() const;
  // Whether the agent gave this worker a slot (a heartbeat file).
  bool has_slot() const { return heal_generation_ != nullptr; }

  // How often the waiting pulse beats (heartbeat_layout.h).
  static constexpr std::chrono::milliseconds kWaitPulse{ddprun::channel::kWaitPulseMs};
  // While one lives, the worker waits for its peers (the next generation,
  // connecting, the state going across) and the pulse beats for it.
  class WaitScope {
   public:
    explicit WaitScope(Heartbeat& hb) : hb_(hb) { hb_.waiting(+1); }
    ~WaitScope() { hb_.waiting(-1); }
    WaitScope(const WaitScope&) = delete;
    WaitScope& operator=(const WaitScope&) = delete;

   private:
    Heartbeat& hb_;
  };
  // A replacement joins (its World connects, its program builds the model
  // and loads data, its Healer takes the state) while the others wait for
  // it: the pulse beats for it from World's start until set_joining(false).
  void set_joining(bool joining) {
    if (joining_.exchange(joining) != joining) waiting(joining ? +1 : -1);
  }

 private:
  void waiting(int delta);
  void pulse_loop();
  void* map_ = nullptr;
  size_t map_len_ = 0;
  uint64_t* counter_ = nullptr;
  ddprun::channel::ProgressBlock* progress_ = nullptr;
  ddprun::channel::FlightRing* flight_ = nullptr;
  ddprun::channel::ReplicaBlock* replicas_ = nullptr;
  uint32_t* heal_ready_ = nullptr;
  uint32_t* heal_generation_ = nullptr;
  uint32_t* no_heal_coming_ = nullptr;
  uint32_t* placement_ = nullptr;
  uint32_t* phase_ = nullptr;
  uint32_t* in_step_ = nullptr;
  std::atomic<int> phase_depth_{0};
  std::atomic<bool> finished_{false};
  // The pulse: a thread made with the mapping, beating every kWaitPulse
  // while waiting_ > 0 or a collective is under way (pulse_loop).
  std::mutex pulse_mu_;
  std::condition_variable pulse_cv_;
  int waiting_ = 0;
  bool pulse_stop_ = false;
  std::atomic<bool> joining_{false};
  std::thread pulse_;
};

}  // namespace ddp
