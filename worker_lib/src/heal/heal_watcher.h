// Releases collectives blocked on a peer that will never answer. A worker
// that heals waits in a collective with its peers; when one dies its
// sockets close and the others fail at once, but a peer behind a cut link
// (or a node that vanished) closes nothing, and they would wait out the
// collective timeout. The agent, though, names a newer heal generation in
// this worker's heartbeat slot as soon as it starts the replacement (on
// one node) or a spare takes over the lost node (across nodes). This
// thread sleeps on that word (a futex) and, when it grows, calls
// on_newer(generation): World aborts its connections of older generations,
// so the blocked collective throws and the Healer heals now.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>

#include "base/heartbeat.h"

namespace ddp {

class HealWatcher {
 public:
  // heartbeat must have a slot (Heartbeat::has_slot()). connected: the
  // generation the caller's connection is of; any newer one in the slot,
  // even one written before the thread runs, is passed to on_newer.
  HealWatcher(std::shared_ptr<Heartbeat> heartbeat, uint32_t connected, std::function<void(uint32_t)> on_newer);
  ~HealWatcher();  // wakes the thread and joins it
  HealWatcher(const HealWatcher&) = delete;
  HealWatcher& operator=(const HealWatcher&) = delete;

 private:
  void loop();

  std::shared_ptr<Heartbeat> heartbeat_;
  uint32_t connected_;
  std::function<void(uint32_t)> on_newer_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> done_{false};  // the loop has returned
  std::thread thread_;
};

}  // namespace ddp
