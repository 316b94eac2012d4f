#include "agent/lease_keeper.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>

#include "agent/base/monotonic_clock.h"

namespace ddprun {
namespace {

// A wake-up later than asked by more than this is a stall of this process.
constexpr auto kLateWake = std::chrono::milliseconds(50);
// At most one fresh connection this often while keep-alives go unanswered.
constexpr auto kReconnectEvery = std::chrono::seconds(1);

// Whether b tells the agent something that a did not.
bool news(const std::optional<NodeView>& a, const NodeView& b) {
  return !a || a->known != b.known || a->round != b.round || a->phase != b.phase ||
         a->nodes_waiting != b.nodes_waiting || a->heal_generation != b.heal_generation ||
         a->takeover_ready != b.takeover_ready || !(a->placement == b.placement) ||
         a->heal_request_id != b.heal_request_id || a->refusals != b.refusals ||
         (a->straggler_score > 0) != (b.straggler_score > 0) || a->control_term != b.control_term;
}

}  // namespace

ClockEstimate better_clock_estimate(const std::optional<ClockEstimate>& best, int64_t send_ns, int64_t recv_ns,
                                    int64_t server_ns) {
  const int64_t rtt = recv_ns - send_ns;
  if (best && best->rtt_ns <= rtt) return *best;
  return ClockEstimate{server_ns - (send_ns + recv_ns) / 2, rtt};
}

std::optional<ClockEstimate> LeaseKeeper::clock() const {
  std::lock_guard lock(mu_);
  return clock_;
}

std::optional<ClockEstimate> LeaseKeeper::clock_within(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  if (!clock_) {
    send_now_ = true;
    stop_cv_.notify_all();
    clock_cv_.wait_for(lock, timeout, [this] { return clock_.has_value() || stop_; });
  }
  return clock_;
}

LeaseKeeper::LeaseKeeper(RendezvousClient& client, LeaseOptions options)
    : client_(client), options_(std::move(options)) {
  event_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (event_fd_ < 0) throw std::runtime_error("eventfd failed for the lease keeper");
  thread_ = std::thread([this] { loop(); });
  hold_thread_ = std::thread([this] { hold_loop(); });
}

void LeaseKeeper::hold() {
  {
    std::lock_guard lock(mu_);
    hold_wanted_ = true;
  }
  stop_cv_.notify_all();
}

// Keeps one Hold call open from the first join on; one the service ended
// (it restarted, or did not know the node yet) is opened again an
// interval later.
void LeaseKeeper::hold_loop() {
  std::unique_lock lock(mu_);
  while (true) {
    stop_cv_.wait(lock, [this] { return stop_ || hold_wanted_; });
    if (stop_) return;
    auto cancel = std::make_shared<CallCanceller>();
    hold_cancel_ = cancel;
    hold_target_ = client_.target();
    lock.unlock();
    // News from the service: the keep-alive goes now, not at its interval.
    client_.hold(options_.job_id, options_.node_id, cancel.get(), nullptr, [this] {
      {
        std::lock_guard news_lock(mu_);
        send_now_ = true;
      }
      stop_cv_.notify_all();
    });
    lock.lock();
    hold_cancel_.reset();
    if (stop_) return;
    stop_cv_.wait_for(lock, options_.interval, [this] { return stop_; });
  }
}

LeaseKeeper::~LeaseKeeper() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  {
    std::lock_guard lock(mu_);
    if (hold_cancel_) hold_cancel_->cancel();
  }
  thread_.join();
  hold_thread_.join();
  close(event_fd_);
}

void LeaseKeeper::notify() {
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = write(event_fd_, &one, sizeof(one));
}

LeaseStatus LeaseKeeper::take() {
  uint64_t count;
  [[maybe_unused]] ssize_t n = read(event_fd_, &count, sizeof(count));
  return peek();
}

void LeaseKeeper::reset() {
  std::lock_guard lock(mu_);
  ++epoch_;
  status_ = LeaseStatus{};
  uint64_t count;
  [[maybe_unused]] ssize_t n = read(event_fd_, &count, sizeof(count));
}

uint64_t LeaseKeeper::request_heal(const std::string& detail) {
  uint64_t id;
  {
    std::lock_guard lock(mu_);
    id = ++heal_.id;
    heal_.detail = detail;
    heal_unanswered_ = true;
    send_now_ = true;
  }
  stop_cv_.notify_all();
  return id;
}

void LeaseKeeper::set_workers_heal_round(int64_t round) {
  if (workers_heal_round_.exchange(round) == round) return;
  {
    std::lock_guard lock(mu_);
    send_now_ = true;
  }
  stop_cv_.notify_all();
}

LeaseStatus LeaseKeeper::peek() const {
  std::lock_guard lock(mu_);
  return status_;
}

std::chrono::steady_clock::duration call_stall(std::chrono::steady_clock::duration took,
                                               std::chrono::steady_clock::duration timeout) {
  const auto past = took - timeout - kLateWake;
  return past > std::chrono::steady_clock::duration::zero() ? past : std::chrono::steady_clock::duration::zero();
}

void LeaseKeeper::loop() {
  using Clock = std::chrono::steady_clock;
  auto last_answer = Clock::now();
  // This thread's own stalls since the last answer (it woke much later than
  // it asked: a loaded machine, a paused process): not the rendezvous'
  // silence, so not counted against it (memberlist's Lifeguard).
  Clock::duration stalled{0};
  // A keep-alive may take a third of the lease: one that is slow to come
  // back (a loaded machine, a long round trip) still renews.
  const auto call_timeout = std::max(options_.interval * 2, options_.lease / 3);
  auto last_reconnect = Clock::now();
  std::unique_lock lock(mu_);
  while (!stop_) {
    const uint64_t epoch = epoch_;
    const HealRequest heal = heal_unanswered_ ? heal_ : HealRequest{};
    lock.unlock();
    // Each call may take up to one interval, so a slow link still renews.
    std::optional<NodeView> view;
    std::string error;
    const int64_t send_ns = monotonic_ns();
    const auto sent = Clock::now();
    try {
      view = client_.keep_alive(options_.job_id, options_.node_id, call_timeout, workers_heal_round_.load(), heal);
    } catch (const std::exception& e) {
      error = e.what();
    }
    const int64_t recv_ns = monotonic_ns();
    const auto now = Clock::now();
    lock.lock();
    if (view && view->heal_request_id >= heal_.id) heal_unanswered_ = false;
    if (view && view->server_mono_ns != 0) {
      clock_ = better_clock_estimate(clock_, send_ns, recv_ns, view->server_mono_ns);
      clock_cv_.notify_all();
    }
    bool changed = false;
    if (epoch != epoch_) {
      // reset() came while the call was out: its answer may predate it.
    } else if (view) {
      last_answer = now;
      stalled = Clock::duration::zero();
      if (options_.on_candidates && !view->control_candidates.empty()) {
        lock.unlock();
        options_.on_candidates(view->control_candidates);
        lock.lock();
      }
      changed = news(status_.view, *view) || status_.contact_lost;
      status_.view = view;
      status_.contact_lost = false;
      status_.error.clear();
    } else {
      status_.error = error;
      // A call that came back long past its deadline: this process was
      // stopped meanwhile (a whole job suspended), not the rendezvous silent.
      stalled += call_stall(now - sent, call_timeout);
      if (!status_.contact_lost && now - last_answer - stalled >= options_.lease + options_.takeover_allowance) {
        status_.contact_lost = true;
        changed = true;
      }
      // A keep-alive went unanswered: the next goes on a fresh connection
      // (at most one a second). After a link blip the old one holds its
      // calls back behind TCP's retransmission back-off (a second or more
      // after the link is up); a new one connects at once, so a blip
      // shorter than the lease costs nothing. The Hold call moves to it too
      // (the service ignores the old one's end: a node's newest Hold is
      // the one that counts, and a closed one drops nobody).
      if (now - last_reconnect >= kReconnectEvery) {
        last_reconnect = now;
        client_.reconnect();
        if (hold_cancel_) hold_cancel_->cancel();
      }
    }
    // The job's control plane moved (the keep-alive followed it): so does
    // the Hold, or the new leader would not hear when this agent dies.
    if (hold_cancel_ && hold_target_ != client_.target()) hold_cancel_->cancel();
    if (changed) notify();
    const auto wake = Clock::now() + options_.interval;
    stop_cv_.wait_until(lock, wake, [this] { return stop_ || send_now_; });
    if (const auto late = Clock::now() - wake; late > kLateWake) stalled += late;
    send_now_ = false;
  }
}

}  // namespace ddprun
