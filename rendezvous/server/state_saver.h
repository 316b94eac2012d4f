// The leader's side of the control plane: keeps what the control plane has
// saved for a job (control_plane.h) up to date with the job's registry.
//
// Callers say the job changed (changed() returns the change's number) and,
// before they tell anyone what changed (a heal generation, an assignment),
// wait until a save that includes it is done (wait_saved): a successor
// never serves a state older than what some agent has already heard.
// Saves are coalesced: while one is in flight, any number of changes make
// one more. A save the control plane refuses means another leads: the
// saver is fenced and saves nothing more (its leader must stop serving).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

#include "rendezvous/control_plane/control_plane.h"
#include "rendezvous/server/registry.h"

namespace ddprun {

class StateSaver {
 public:
  // node_id: this leader's node, saved with the state (job_state.h).
  StateSaver(JobRegistry& registry, ControlPlane& plane, std::string job_id, int64_t term,
             std::string node_id = "");
  ~StateSaver();  // stops; a save in flight finishes first
  StateSaver(const StateSaver&) = delete;
  StateSaver& operator=(const StateSaver&) = delete;

  // The job changed; returns the change's number.
  uint64_t changed();
  // Blocks until change `n` is saved (true), or until the saver is fenced
  // or the timeout passes (false).
  bool wait_saved(uint64_t n, std::chrono::milliseconds timeout);
  bool fenced() const;
  uint64_t saves() const;  // saves done so far
  std::string last_error() const;  // why the newest save failed ("" when it did not)

 private:
  void loop();

  JobRegistry& registry_;
  ControlPlane& plane_;
  const std::string job_id_;
  const int64_t term_;
  const std::string node_id_;
  mutable std::mutex mu_;
  std::condition_variable wake_;   // the loop: a change, or the end
  std::condition_variable saved_;  // waiters: a save is done, or fenced
  uint64_t changes_ = 0;   // the newest change's number
  uint64_t saved_up_to_ = 0;
  uint64_t saves_ = 0;
  bool fenced_ = false;
  bool stop_ = false;
  std::string last_error_;
  std::thread thread_;
};

}  // namespace ddprun
