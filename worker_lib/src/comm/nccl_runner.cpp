#include "comm/nccl_runner.h"

#include <algorithm>
#include <stdexcept>

#include "ddp/collective_error.h"

namespace ddp {

// One collective between enqueue() and the watchdog seeing it done.
struct NcclRunner::Pending {
  std::shared_ptr<Shared> shared;  // what the host function locks and wakes
  const char* op = "";
  Clock::time_point deadline;
  std::chrono::milliseconds timeout{0};
  NcclEventHandle end = nullptr;   // recorded after the collective; back to the pool once done
  std::shared_ptr<void> keep_alive;
  bool done = false;               // the stream reached the host function (shared->mu)
  // Enqueued while the caller's stream was captured into a CUDA graph: no
  // host function, not watched (each replay is watched as a whole,
  // NcclRunner::enqueue's comment); its end event goes back to the pool
  // once the caller's stream has joined it (order_after).
  bool captured = false;
};

// Everything the watchdog, the waiters and CUDA's host-function thread share.
// Lock order: comm_mu_ before mu, never the other way.
struct NcclRunner::Shared {
  std::mutex mu;
  // Woken by host functions (a collective is done), by enqueue (one more to
  // watch), by a failure and by the destructor.
  std::condition_variable cv;
  std::vector<Ticket> in_flight;
  std::vector<NcclEventHandle> free_events;
  size_t events_made = 0;
  std::string failure;  // set once: the communicator is aborted
  bool stop = false;
};

namespace {

// Runs on CUDA's host-function thread once NCCL's stream passes the
// collective; must not call CUDA. Holds its own reference: the caller may
// be gone by then.
void signal_done(void* arg) {
  std::unique_ptr<NcclRunner::Ticket> ref(static_cast<NcclRunner::Ticket*>(arg));
  (*ref)->shared->mu.lock();
  (*ref)->done = true;
  (*ref)->shared->mu.unlock();
  (*ref)->shared->cv.notify_all();
}

std::string seconds(std::chrono::milliseconds t) {
  std::string s = std::to_string(t.count() / 1000.0);
  return s.substr(0, s.find('.') + 4);
}

}  // namespace

NcclRunner::NcclRunner(NcclBackend& backend, NcclRunnerOptions options)
    : backend_(backend), options_(std::move(options)), shared_(std::make_shared<Shared>()) {
  try {
    backend_.set_device(options_.device);
    stream_ = backend_.create_stream();
    before_ = backend_.create_event();
    // Non-blocking init: NCCL's bootstrap waits for every rank to connect,
    // and a rank that never comes would hang a blocking ncclCommInitRank
    // forever, outside our timeout and without heartbeats.
    std::lock_guard lock(comm_mu_);
    comm_ = backend_.start_comm_init(options_.unique_id, options_.size, options_.rank);
    wait_ready("ncclCommInitRank", Clock::now() + options_.init_timeout, options_.init_timeout);
  } catch (...) {
    release();  // a constructor that throws runs no destructor
    throw;
  }
  watchdog_ = std::thread([this] { watch(); });
}

NcclRunner::~NcclRunner() { release(); }

void NcclRunner::release() {
  {
    std::lock_guard lock(shared_->mu);
    shared_->stop = true;
  }
  shared_->cv.notify_all();
  if (watchdog_.joinable()) watchdog_.join();

  std::vector<Ticket> left;
  std::vector<NcclEventHandle> events;
  {
    std::lock_guard lock(shared_->mu);
    for (auto& t : shared_->in_flight) {
      if (!t->done) left.push_back(t);
      if (t->end) events.push_back(t->end);
      t->end = nullptr;
      t->keep_alive.reset();
    }
    shared_->in_flight.clear();  // Pending → Shared → Pending would never be freed
    events.insert(events.end(), shared_->free_events.begin(), shared_->free_events.end());
    shared_->free_events.clear();
  }
  {
    std::lock_guard lock(comm_mu_);
    if (comm_) {
      // ncclCommDestroy waits for what is in flight, and a peer that never
      // comes would hold it forever; abort never waits for peers.
      if (left.empty()) {
        backend_.destroy_comm(comm_);
      } else {
        backend_.abort_comm(comm_);
      }
    }
    comm_ = nullptr;
  }
  // An event or stream still in use is freed by CUDA once the device is done with it.
  for (auto e : events) backend_.destroy_event(e);
  if (before_) backend_.destroy_event(before_);
  before_ = nullptr;
  if (stream_) backend_.destroy_stream(stream_);
  stream_ = nullptr;
}

std::string NcclRunner::timeout_message(const char* what, std::chrono::milliseconds timeout) const {
  return std::string("ddp: ") + what + " timed out after " + seconds(timeout) + " s on rank " +
         std::to_string(options_.rank) +
         " (set DDPRUN_TIMEOUT_S or ddp::InitOptions::timeout); the NCCL communicator was aborted";
}

void NcclRunner::fail_locked(const std::string& message) {
  // Waiters learn of the failure before the abort lets aborted collectives
  // "complete" (NCCL's kernels exit early on abort), so no caller takes an
  // aborted result for a real one.
  {
    std::lock_guard lock(shared_->mu);
    if (shared_->failure.empty()) shared_->failure = message;
  }
  shared_->cv.notify_all();
  // NCCL's advice after an error or a timeout: abort (it never waits for
  // peers); the communicator cannot be used again.
  if (comm_) backend_.abort_comm(comm_);
  comm_ = nullptr;
}

void NcclRunner::throw_failure() {
  std::string message;
  {
    std::lock_guard lock(shared_->mu);
    message = shared_->failure;
  }
  throw CollectiveError(message);
}

void NcclRunner::check_failed() {
  bool failed = false;
  {
    std::lock_guard lock(shared_->mu);
    failed = !shared_->failure.empty();
  }
  if (failed) throw_failure();
}

void NcclRunner::abort(const std::string& why) {
  // 1. The failure first, without comm_mu_: waiters in synchronize() wake
  //    now, and an enqueue() polling a non-blocking call (wait_ready, which
  //    holds comm_mu_) sees it at its next poll and lets go of the lock.
  {
    std::lock_guard lock(shared_->mu);
    if (shared_->failure.empty()) shared_->failure = why;
  }
  shared_->cv.notify_all();
  // 2. Then NCCL's abort, under comm_mu_ like every use of the communicator.
  std::lock_guard comm_lock(comm_mu_);
  fail_locked(why);
}

bool NcclRunner::aborted() const {
  std::lock_guard lock(comm_mu_);
  return comm_ == nullptr;
}

size_t NcclRunner::in_flight() const {
  std::lock_guard lock(shared_->mu);
  return shared_->in_flight.size();
}

size_t NcclRunner::events_made() const {
  std::lock_guard lock(shared_->mu);
  return shared_->events_made;
}

void NcclRunner::wait_ready(const char* what, Clock::time_point deadline,
                            std::chrono::milliseconds timeout) {
  // Init and a non-blocking call that returned ncclInProgress can only be
  // polled (NCCL has no callback for them), so poll with a backoff that
  // sleeps: 1 ms doubling up to check_every. Init takes from milliseconds to
  // seconds; a few ms of lateness costs nothing there.
  auto pause = std::chrono::milliseconds(1);
  while (true) {
    check_failed();  // abort() from another thread: its words, and comm_mu_ let go
    NcclCommState st = backend_.comm_state(comm_);
    if (st.code == NcclCommState::kReady) return;
    if (st.code == NcclCommState::kFailed) {
      fail_locked(std::string("ddp: ") + what + " failed on rank " + std::to_string(options_.rank) +
                  ": " + st.error);
      throw_failure();
    }
    beat();
    const auto now = Clock::now();
    if (now >= deadline) {
      fail_locked(timeout_message(what, timeout));
      throw_failure();
    }
    std::this_thread::sleep_for(std::min<Clock::duration>(pause, deadline - now));
    pause = std::min(pause * 2, std::max(options_.check_every, std::chrono::milliseconds(1)));
  }
}

NcclEventHandle NcclRunner::take_event() {
  if (!shared_->free_events.empty()) {
    NcclEventHandle e = shared_->free_events.back();
    shared_->free_events.pop_back();
    return e;
  }
  NcclEventHandle e = backend_.create_event();
  ++shared_->events_made;
  return e;
}

NcclRunner::Ticket NcclRunner::enqueue(const char* op, NcclStreamHandle caller_stream,
                                       const EnqueueFn& enqueue, std::chrono::milliseconds timeout,
                                       std::shared_ptr<void> keep_alive) {
  std::lock_guard comm_lock(comm_mu_);
  check_failed();
  if (!comm_) {
    throw CollectiveError(std::string("ddp: ") + op + " on rank " + std::to_string(options_.rank) +
                          ": the NCCL communicator is closed");
  }
  beat();
  const bool captured = backend_.is_capturing(caller_stream);
  if (captured && !enqueue) {
    // A usage error, not a failed peer: nothing to heal.
    throw std::logic_error(std::string("ddp: ") + op + " on rank " + std::to_string(options_.rank) +
                           ": a replay cannot be watched from inside a CUDA graph's capture");
  }
  auto ticket = std::make_shared<Pending>();
  ticket->captured = captured;
  ticket->shared = shared_;
  ticket->op = op;
  ticket->timeout = timeout;
  ticket->deadline = Clock::now() + timeout;
  ticket->keep_alive = std::move(keep_alive);
  // 1. NCCL's stream waits for what the caller enqueued before this call.
  //    One event serves every call: a stream wait takes the event's record
  //    as it is when the wait is enqueued.
  backend_.record_event(before_, caller_stream);
  backend_.stream_wait_event(stream_, before_);
  // 2. The collective. On a non-blocking communicator NCCL may answer
  //    ncclInProgress; nothing else may be enqueued until it is ready.
  if (enqueue) enqueue(comm_, stream_);
  wait_ready(op, ticket->deadline, timeout);
  // 3. Its end event, and a host function that tells the watchdog it is
  //    done (microseconds after the stream gets there, no core burnt).
  {
    std::lock_guard lock(shared_->mu);
    ticket->end = take_event();
  }
  auto give_back = [&] {
    std::lock_guard lock(shared_->mu);
    shared_->free_events.push_back(ticket->end);
    ticket->end = nullptr;
  };
  try {
    backend_.record_event(ticket->end, stream_);
    if (!captured) {
      auto ref = std::make_unique<Ticket>(ticket);
      backend_.launch_host_func(stream_, &signal_done, ref.get());
      ref.release();  // signal_done deletes it
    }
  } catch (...) {
    give_back();
    throw;
  }
  if (captured) {
    // Captured: the end event joins NCCL's stream back into the caller's
    // (order_after), as a capture requires of every stream it forked. A
    // host function would be captured too and called at every replay with
    // this ticket, long gone: none, and no watchdog entry. The tensors
    // live in the graph's memory pool as long as the graph does.
    ticket->keep_alive.reset();
    return ticket;
  }
  {
    std::lock_guard lock(shared_->mu);
    shared_->in_flight.push_back(ticket);
  }
  shared_->cv.notify_all();
  return ticket;
}

void NcclRunner::order_after(const Ticket& ticket, NcclStreamHandle caller_stream) {
  std::lock_guard lock(shared_->mu);
  if (!shared_->failure.empty()) {
    throw CollectiveError(shared_->failure);
  }
  // Under the lock: a ticket not yet done still owns its end event (the
  // watchdog returns it to the pool only once done).
  if (ticket->captured) {
    if (ticket->end == nullptr) return;  // joined already
    backend_.stream_wait_event(caller_stream, ticket->end);
    shared_->free_events.push_back(ticket->end);
    ticket->end = nullptr;
    return;
  }
  if (!ticket->done) backend_.stream_wait_event(caller_stream, ticket->end);
}

void NcclRunner::synchronize(const Ticket& ticket) {
  if (ticket->captured) {
    // Nothing has run yet: the host would wait for a replay that cannot
    // begin before the capture ends. A usage error, not a failed peer:
    // nothing to heal.
    throw std::logic_error(std::string("ddp: ") + ticket->op + " on rank " + std::to_string(options_.rank) +
                           ": a blocking collective cannot be captured into a CUDA graph (the host would wait "
                           "for work that only runs at a replay)");
  }
  std::unique_lock lock(shared_->mu);
  // The watchdog turns a timeout or an NCCL error into a failure and wakes
  // us; completion wakes us through the host function.
  shared_->cv.wait(lock, [&] { return ticket->done || !shared_->failure.empty(); });
  if (!shared_->failure.empty()) throw CollectiveError(shared_->failure);
}

void NcclRunner::run(const char* op, NcclStreamHandle caller_stream, const EnqueueFn& enqueue_fn,
                     std::chrono::milliseconds timeout) {
  Ticket ticket = enqueue(op, caller_stream, enqueue_fn, timeout);
  order_after(ticket, caller_stream);
  synchronize(ticket);
  beat();
}

// The watchdog: sleeps while nothing is in flight; otherwise wakes on every
// completion and every check_every to reap what is done (its event back to
// the pool, its tensors released), to ask NCCL for asynchronous errors, to
// time out what passed its deadline, and to beat the heartbeat (a rank
// waiting on a slow peer is alive until the collective's timeout says not).
void NcclRunner::watch() {
  Shared& s = *shared_;
  std::unique_lock lock(s.mu);
  auto last_check = Clock::now();
  while (!s.stop) {
    std::erase_if(s.in_flight, [&](const Ticket& t) {
      if (!t->done) return false;
      s.free_events.push_back(t->end);
      t->end = nullptr;
      t->keep_alive.reset();
      return true;
    });
    if (s.in_flight.empty() || !s.failure.empty()) {
      // Nothing to watch (after a failure, only the reaping above is left).
      s.cv.wait(lock, [&] {
        return s.stop || std::any_of(s.in_flight.begin(), s.in_flight.end(),
                                     [](const Ticket& t) { return t->done; }) ||
               (s.failure.empty() && !s.in_flight.empty());
      });
      last_check = Clock::now();
      continue;
    }
    const auto next_check = last_check + options_.check_every;
    const bool woken = s.cv.wait_until(lock, next_check, [&] {
      return s.stop || std::any_of(s.in_flight.begin(), s.in_flight.end(),
                                   [](const Ticket& t) { return t->done; });
    });
    if (woken || s.in_flight.empty()) continue;  // reap first
    last_check = Clock::now();
    // The oldest collective not done names what failed or timed out.
    const char* op = "";
    bool overdue = false;
    std::chrono::milliseconds timeout{0};
    for (const auto& t : s.in_flight) {
      if (t->done) continue;
      if (!*op) op = t->op;
      if (last_check >= t->deadline) {
        overdue = true;
        op = t->op;
        timeout = t->timeout;
        break;
      }
    }
    lock.unlock();
    {
      std::lock_guard comm_lock(comm_mu_);  // lock order: comm_mu_ before s.mu
      if (comm_) {
        NcclCommState st = backend_.comm_state(comm_);
        if (st.code == NcclCommState::kFailed) {
          fail_locked(std::string("ddp: ") + op + " failed on rank " +
                      std::to_string(options_.rank) + ": " + st.error);
        } else if (overdue) {
          fail_locked(timeout_message(op, timeout));
        } else {
          beat();
        }
      }
    }
    lock.lock();
  }
}

}  // namespace ddp
