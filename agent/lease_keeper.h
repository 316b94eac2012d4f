// Holds a node's lease on the rendezvous: a thread that sends a keep-alive
// every interval (and at once when the Hold call says the job has news, or
// a heal is asked for) and keeps the latest answer. The agent's event loop polls
// fd(), which becomes readable when the answer changes (a new round, the job
// ended, the node was dropped) or when the rendezvous has not answered for a
// whole lease (and, with a control plane, a takeover's allowance); it never
// blocks on the network itself. When a keep-alive goes unanswered it has
// the client connect afresh (a cut link can leave the old connection
// holding answers back for seconds after the link is up), at most once a
// second, and opens its Hold call again on the new connection.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "rendezvous/client/client.h"

namespace ddprun {

struct LeaseOptions {
  std::string job_id;
  std::string node_id;
  std::chrono::milliseconds interval{250};
  std::chrono::milliseconds lease{2000};
  // Each answer's control-plane voters (NodeView::control_candidates), on
  // the keeper's thread; may be empty.
  std::function<void(const std::vector<std::string>&)> on_candidates;
  // Added to the lease before contact counts as lost: a control plane's
  // takeover (AgentConfig::takeover_allowance).
  std::chrono::milliseconds takeover_allowance{0};
};

struct LeaseStatus {
  std::optional<NodeView> view;  // the latest answer, if any came
  bool contact_lost = false;     // no answer for a whole lease (and a takeover's allowance)
  std::string error;             // why the last keep-alive failed
};

// How this host's CLOCK_MONOTONIC relates to the rendezvous host's
// (ddprun --trace): reference = local + offset_ns, from the keep-alive with
// the smallest round trip (its error is at most half of rtt_ns).
struct ClockEstimate {
  int64_t offset_ns = 0;
  int64_t rtt_ns = 0;
};

// The better of `best` and the sample of one keep-alive sent at send_ns and
// answered at recv_ns (local clock), stamped server_ns by the service:
// offset = server - (send + recv) / 2; the smaller round trip wins.
ClockEstimate better_clock_estimate(const std::optional<ClockEstimate>& best, int64_t send_ns, int64_t recv_ns,
                                    int64_t server_ns);

// The part of a keep-alive call's time that was this process's own stall,
// not the rendezvous' silence: a call cannot outlive its deadline by more
// than a moment while its process runs, so what it took past its timeout
// (and a wake-up's slack) is time the process was stopped or starved (a
// whole job suspended and resumed: the call in flight when it stopped
// returns, past its deadline, long after). Zero otherwise.
std::chrono::steady_clock::duration call_stall(std::chrono::steady_clock::duration took,
                                               std::chrono::steady_clock::duration timeout);

class LeaseKeeper {
 public:
  LeaseKeeper(RendezvousClient& client, LeaseOptions options);
  ~LeaseKeeper();  // stops the thread
  LeaseKeeper(const LeaseKeeper&) = delete;
  LeaseKeeper& operator=(const LeaseKeeper&) = delete;

  int fd() const { return event_fd_; }
  // Clears fd()'s readiness and returns the latest status.
  LeaseStatus take();
  LeaseStatus peek() const;
  // Opens the node's Hold call (after its first join) and keeps it open,
  // so that the rendezvous learns at once when this process dies, and this
  // keeper when the job has news (it sends a keep-alive at once).
  void hold();
  // Forgets what was learnt so far (call after each join): answers to
  // keep-alives sent before it are dropped, so a view from before the join
  // ("not in the job yet") is never taken for news about the new round.
  void reset();
  // The round in which all of this node's workers heal in place (-1: none),
  // sent with every keep-alive from now on; a change goes at once (a node
  // that arrives meanwhile joins the running round only if the rendezvous
  // knows that every member heals).
  void set_workers_heal_round(int64_t round);
  // Asks the rendezvous for the running round's next heal generation (a
  // local worker failed and is to be replaced): sent at once, and again with
  // every keep-alive until a view answers it. Returns the request's id; the
  // answer is the view's heal_request_generation once its heal_request_id
  // is this id (fd() becomes readable then).
  uint64_t request_heal(const std::string& detail);
  // The clock offset estimated so far; nullopt before the first answer
  // stamped with the service's clock.
  std::optional<ClockEstimate> clock() const;
  // The same, but with none yet a keep-alive goes at once and its answer is
  // waited for, up to `timeout` (a job shorter than one interval still
  // measures its clocks).
  std::optional<ClockEstimate> clock_within(std::chrono::milliseconds timeout);

 private:
  void loop();
  void hold_loop();
  void notify();

  RendezvousClient& client_;
  LeaseOptions options_;
  int event_fd_ = -1;
  mutable std::mutex mu_;
  std::condition_variable stop_cv_;
  std::condition_variable clock_cv_;  // a clock sample came
  bool stop_ = false;
  uint64_t epoch_ = 0;  // bumped by reset()
  LeaseStatus status_;
  std::optional<ClockEstimate> clock_;  // kept across reset(): the clocks do not change
  bool hold_wanted_ = false;
  std::atomic<int64_t> workers_heal_round_{-1};
  HealRequest heal_;          // the newest request (id 0: none yet)
  bool heal_unanswered_ = false;
  bool send_now_ = false;     // wakes the loop before its interval is up
  std::shared_ptr<CallCanceller> hold_cancel_;  // the Hold call open now (null: none)
  std::string hold_target_;  // where it is open
  std::thread thread_;
  std::thread hold_thread_;
};

}  // namespace ddprun
