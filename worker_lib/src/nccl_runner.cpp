#include "ddp/nccl_runner.h"

#include <algorithm>
#include <thread>

#include "ddp/collective_error.h"

namespace ddp {
namespace {

using Clock = std::chrono::steady_clock;

// Set by the host function NCCL's stream runs after a collective. Shared:
// a caller that timed out has returned, but the host function may still run
// later (or never, on a hung stream), so it holds its own reference.
struct Done {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
};

void signal_done(void* arg) {
  auto* ref = static_cast<std::shared_ptr<Done>*>(arg);
  {
    std::lock_guard lock((*ref)->mu);
    (*ref)->done = true;
  }
  (*ref)->cv.notify_all();
  delete ref;
}

std::string seconds(std::chrono::milliseconds t) {
  std::string s = std::to_string(t.count() / 1000.0);
  return s.substr(0, s.find('.') + 4);
}

}  // namespace

NcclRunner::NcclRunner(NcclBackend& backend, NcclRunnerOptions options)
    : backend_(backend), options_(std::move(options)) {
  try {
    backend_.set_device(options_.device);
    stream_ = backend_.create_stream();
    before_ = backend_.create_event();
    after_ = backend_.create_event();
    // Non-blocking init: NCCL's bootstrap waits for every rank to connect,
    // and a rank that never comes would hang a blocking ncclCommInitRank
    // forever, outside our timeout and without heartbeats.
    comm_ = backend_.start_comm_init(options_.unique_id, options_.size, options_.rank);
    wait_ready("ncclCommInitRank", Clock::now() + options_.init_timeout, options_.init_timeout);
  } catch (...) {
    release();  // a constructor that throws runs no destructor
    throw;
  }
}

NcclRunner::~NcclRunner() { release(); }

void NcclRunner::release() {
  if (comm_) backend_.destroy_comm(comm_);
  comm_ = nullptr;
  if (after_) backend_.destroy_event(after_);
  after_ = nullptr;
  if (before_) backend_.destroy_event(before_);
  before_ = nullptr;
  if (stream_) backend_.destroy_stream(stream_);
  stream_ = nullptr;
}

void NcclRunner::fail(const std::string& message) {
  // NCCL's advice after an error or a timeout: abort (it never waits for
  // peers); the communicator cannot be used again.
  if (comm_) backend_.abort_comm(comm_);
  comm_ = nullptr;
  throw CollectiveError(message);
}

void NcclRunner::time_out(const char* what, std::chrono::milliseconds timeout) {
  fail(std::string("ddp: ") + what + " timed out after " + seconds(timeout) + " s on rank " +
       std::to_string(options_.rank) +
       " (set DDPRUN_TIMEOUT_S or ddp::InitOptions::timeout); the NCCL communicator was aborted");
}

void NcclRunner::wait_ready(const char* what, Clock::time_point deadline,
                            std::chrono::milliseconds timeout) {
  // Init and a non-blocking call that returned ncclInProgress can only be
  // polled (NCCL has no callback for them), so poll with a backoff that
  // sleeps: 1 ms doubling up to check_every. Init takes from milliseconds to
  // seconds; a few ms of lateness costs nothing there.
  auto pause = std::chrono::milliseconds(1);
  while (true) {
    NcclCommState st = backend_.comm_state(comm_);
    if (st.code == NcclCommState::kReady) return;
    if (st.code == NcclCommState::kFailed) {
      fail(std::string("ddp: ") + what + " failed on rank " + std::to_string(options_.rank) +
           ": " + st.error);
    }
    beat();
    const auto now = Clock::now();
    if (now >= deadline) time_out(what, timeout);
    std::this_thread::sleep_for(std::min<Clock::duration>(pause, deadline - now));
    pause = std::min(pause * 2, std::max(options_.check_every, std::chrono::milliseconds(1)));
  }
}

void NcclRunner::run(const char* op, NcclStreamHandle caller_stream,
                     const std::function<void(NcclCommHandle, NcclStreamHandle)>& enqueue,
                     std::chrono::milliseconds timeout) {
  if (!comm_) {
    throw CollectiveError(std::string("ddp: ") + op + " on rank " + std::to_string(options_.rank) +
                          ": the NCCL communicator was aborted by an earlier failure");
  }
  beat();
  const auto deadline = Clock::now() + timeout;
  // 1. NCCL's stream waits for what the caller enqueued before this call.
  backend_.record_event(before_, caller_stream);
  backend_.stream_wait_event(stream_, before_);
  // 2. The collective. On a non-blocking communicator NCCL may answer
  //    ncclInProgress; nothing else may be enqueued until it is ready.
  enqueue(comm_, stream_);
  wait_ready(op, deadline, timeout);
  // 3. The caller's later work waits for the collective.
  backend_.record_event(after_, stream_);
  backend_.stream_wait_event(caller_stream, after_);
  // 4. Waiting without spinning: a host function on NCCL's stream wakes us
  //    the moment the collective is done (microseconds, no core burnt), and
  //    the condition variable's timed wait wakes us every check_every to ask
  //    NCCL for asynchronous errors (a dead peer never completes the stream)
  //    and to beat the heartbeat. Polling an event with sleeps instead would
  //    add up to one sleep of latency to every DDP bucket.
  auto done = std::make_shared<Done>();
  auto ref = std::make_unique<std::shared_ptr<Done>>(done);
  backend_.launch_host_func(stream_, &signal_done, ref.get());
  ref.release();  // signal_done deletes it
  std::unique_lock lock(done->mu);
  while (!done->done) {
    const auto now = Clock::now();
    if (now >= deadline) {
      lock.unlock();
      time_out(op, timeout);
    }
    done->cv.wait_until(lock, std::min(deadline, now + options_.check_every));
    if (done->done) break;
    lock.unlock();
    NcclCommState st = backend_.comm_state(comm_);
    if (st.code == NcclCommState::kFailed) {
      fail(std::string("ddp: ") + op + " failed on rank " + std::to_string(options_.rank) + ": " +
           st.error);
    }
    beat();
    lock.lock();
  }
  lock.unlock();
  beat();
}

}  // namespace ddp
