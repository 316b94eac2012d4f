// RaftNode's private state (raft_node.h), shared by raft_node.cpp (the
// calls, libraft's I/O) and raft_node_loop.cpp (the Raft thread's loop and
// what it publishes). Not part of the control plane's interface.
#pragma once

#include <raft.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <string>

#include "ddprun/v1/raft.pb.h"
#include "rendezvous/control_plane/raft/raft_node.h"

namespace ddprun {

// Everything libraft touches, on the Raft thread only.
struct RaftNode::Impl {
  RaftNode* node = nullptr;  // libraft keeps io.data for itself: this is how its io finds us
  struct raft raft {};
  struct raft_io io {};
  struct raft_fsm fsm {};

  // What a fresh start loads: nothing, or the bootstrap configuration.
  bool bootstrapped = false;
  std::string bootstrap_conf;  // raft_configuration_encode's bytes
  uint64_t term = 0;           // set_term / set_vote (read back only by load)
  uint64_t voted_for = 0;

  // The newest snapshot libraft stored, for a follower that needs it.
  struct Snapshot {
    uint64_t index = 0, term = 0, conf_index = 0;
    google::protobuf::RepeatedPtrField<ddprun::v1::RaftServer> conf;
    std::string data;
  };
  std::optional<Snapshot> snapshot;

  // I/O completions not yet delivered: run on the Raft thread after the call
  // that started them returns (libraft expects its callbacks later), or with
  // RAFT_CANCELED when it closes.
  std::deque<std::function<void(int status)>> completions;
  // Runs the callbacks of the requests done so far, with `status`.
  void complete(int status) {
    while (!completions.empty()) {
      auto done = std::move(completions.front());
      completions.pop_front();
      done(status);
    }
  }

  raft_io_tick_cb tick = nullptr;
  raft_io_recv_cb recv = nullptr;
  std::chrono::milliseconds tick_every{100};
  bool started = false;
  bool closed = false;
  std::mt19937 rng{std::random_device{}()};
  std::string state;  // the FSM: the newest applied blob
  bool has_state = false;
  uint64_t state_version = 0;  // counts the FSM's changes: publish() copies the blob only after one
  // When each member was last heard from (any message in any term), in
  // lived time (below).
  std::map<uint64_t, std::chrono::steady_clock::time_point> heard;

  // Lived time: the steady clock less the stretches this thread was not
  // running when it should have (it asked to wake for a tick and woke
  // much later: a loaded machine, a paused process). libraft's timers run
  // on it, so a member that was not scheduled does not count that silence
  // against the others: a follower starts no election, and a leader does
  // not step down, for its own stall (memberlist's Lifeguard). Never goes
  // backwards. Raft thread only.
  std::chrono::steady_clock::duration stalled{0};
  std::chrono::steady_clock::time_point last_lived{};
  std::chrono::steady_clock::time_point lived_now() {
    const auto t = std::chrono::steady_clock::now() - stalled;
    if (t > last_lived) last_lived = t;
    return last_lived;
  }
  // A lived instant as the steady clock's (for callers on other threads).
  std::chrono::steady_clock::time_point to_steady(std::chrono::steady_clock::time_point lived) const {
    if (lived == std::chrono::steady_clock::time_point::max() || lived == std::chrono::steady_clock::time_point::min()) {
      return lived;
    }
    return lived + stalled;
  }
};

}  // namespace ddprun
