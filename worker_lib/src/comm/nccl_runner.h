// The part of the NCCL communicator that is logic, not data types: bringing
// the NCCL communicator up within our timeout, ordering collectives between
// the caller's stream and NCCL's, and watching the ones in flight for NCCL
// errors and the deadline without spinning a core. Written against
// NcclBackend so unit tests run it over a fake, without a GPU.
//
// Two ways to run a collective:
//   - enqueue() + order_after(): the host never waits. The caller's stream
//     waits on the device for the collective's end event; a watchdog thread
//     notices completion, errors and timeouts. DDP's buckets go this way.
//   - run(): enqueue, order, then block the calling thread until the
//     collective is done (what a blocking Communicator call promises).
// After an error or a timeout the communicator is aborted and every later
// call throws CollectiveError with the first failure's words.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/nccl_backend.h"
#include "base/heartbeat.h"

namespace ddp {

struct NcclRunnerOptions {
  std::string unique_id;
  int rank = 0;
  int size = 1;
  int device = 0;
  std::chrono::milliseconds init_timeout{std::chrono::minutes(5)};
  // How often the watchdog wakes, while collectives are in flight, to ask
  // NCCL for asynchronous errors (a lost peer, a network failure), to check
  // deadlines and to beat the heartbeat.
  std::chrono::milliseconds check_every{std::chrono::milliseconds(100)};
  std::shared_ptr<Heartbeat> heartbeat;  // may be null
};

class NcclRunner {
 public:
  // A collective in flight; shared with the watchdog until it completes.
  struct Pending;
  using Ticket = std::shared_ptr<Pending>;
  using EnqueueFn = std::function<void(NcclCommHandle, NcclStreamHandle)>;

  // Sets the device, makes NCCL's stream and an event, and brings the
  // communicator up (non-blocking init, polled until ready). Past
  // init_timeout the communicator is aborted and CollectiveError names
  // DDPRUN_TIMEOUT_S / ddp::InitOptions::timeout.
  NcclRunner(NcclBackend& backend, NcclRunnerOptions options);
  // Destroys the communicator, or aborts it when collectives are still in
  // flight (ncclCommDestroy would wait for peers that may never come).
  ~NcclRunner();
  NcclRunner(const NcclRunner&) = delete;
  NcclRunner& operator=(const NcclRunner&) = delete;

  // Puts one collective on NCCL's stream and returns without waiting:
  //   1. an event recorded on caller_stream; NCCL's stream waits on it, so the
  //      collective reads what the caller's earlier kernels wrote;
  //   2. enqueue(comm, nccl_stream) puts the collective on NCCL's stream;
  //   3. the collective's own end event is recorded after it, and a host
  //      function tells the watchdog when the stream gets there.
  // keep_alive (the tensors the collective reads and writes) is released
  // once the collective is done. Past `timeout` without completing, the
  // watchdog aborts the communicator. Throws CollectiveError after a failure.
  //
  // An empty `enqueue` puts no collective: the ticket is done when NCCL's
  // stream reaches what the caller's stream had enqueued (a replayed CUDA
  // graph's collectives), watched for the deadline and NCCL's errors as a
  // collective is.
  //
  // While caller_stream is being captured into a CUDA graph (a captured
  // training step, ddp/captured_step.h) the collective is recorded into
  // the graph with its ordering events, and nothing else: no host
  // function, no watchdog entry, no tensors kept. order_after() must join
  // it before the capture ends; synchronize() throws std::logic_error (the
  // host cannot wait for a replay). The graph's replays are watched by
  // enqueueing an empty collective after each.
  Ticket enqueue(const char* op, NcclStreamHandle caller_stream, const EnqueueFn& enqueue,
                 std::chrono::milliseconds timeout, std::shared_ptr<void> keep_alive = nullptr);

  // Work enqueued on caller_stream from now on waits, on the device, for the
  // collective (nothing, if it is already done). Throws CollectiveError if
  // the communicator failed.
  void order_after(const Ticket& ticket, NcclStreamHandle caller_stream);

  // Blocks the calling thread until the collective is done (woken by its
  // host function, not by polling); throws CollectiveError on failure or
  // timeout.
  void synchronize(const Ticket& ticket);

  // enqueue, order_after and synchronize in one.
  void run(const char* op, NcclStreamHandle caller_stream, const EnqueueFn& enqueue,
           std::chrono::milliseconds timeout);

  // Fails every waiter now with CollectiveError(why) and aborts the
  // communicator (ncclCommAbort never waits for peers): a heal began, and a
  // collective blocked on a dead peer must not wait for its timeout. Any
  // thread, more than once; the first failure's words stay.
  void abort(const std::string& why);

  bool aborted() const;
  // Collectives enqueued and not yet seen completing by the watchdog.
  size_t in_flight() const;
  // Events made so far: end events are reused once their collective is done.
  size_t events_made() const;

 private:
  using Clock = std::chrono::steady_clock;

  // Polls comm_state with a sleeping backoff while it is in progress (init,
  // or a non-blocking call that returned ncclInProgress); throws at the
  // deadline or on failure. Called with comm_mu_ held.
  void wait_ready(const char* what, Clock::time_point deadline, std::chrono::milliseconds timeout);
  NcclEventHandle take_event();  // pending_mu_ held
  void release();
  void watch();
  // Records the first failure and aborts the communicator; comm_mu_ held.
  void fail_locked(const std::string& message);
  [[noreturn]] void throw_failure();
  void check_failed();
  std::string timeout_message(const char* what, std::chrono::milliseconds timeout) const;
  void beat() {
    if (options_.heartbeat) options_.heartbeat->beat();
  }

  NcclBackend& backend_;
  NcclRunnerOptions options_;
  NcclStreamHandle stream_ = nullptr;
  NcclEventHandle before_ = nullptr;  // reused: a stream wait takes the record at the time of the call

  // Serialises every use of the communicator: enqueues, state checks, abort.
  mutable std::mutex comm_mu_;
  NcclCommHandle comm_ = nullptr;
  std::string failure_;  // the first error or timeout; the communicator is then aborted

  // The collectives in flight, the event pool and the watchdog's wake-ups.
  struct Shared;
  std::shared_ptr<Shared> shared_;
  std::thread watchdog_;
};

}  // namespace ddp
