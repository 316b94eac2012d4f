// The part of the NCCL communicator that is logic, not data types: bringing
// the NCCL communicator up within our timeout, ordering a collective between
// the caller's stream and NCCL's, and waiting for it without spinning a core
// while watching for NCCL errors, the deadline and the heartbeat. Written
// against NcclBackend so unit tests run it over a fake, without a GPU.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "ddp/heartbeat.h"
#include "ddp/nccl_backend.h"

namespace ddp {

struct NcclRunnerOptions {
  std::string unique_id;
  int rank = 0;
  int size = 1;
  int device = 0;
  std::chrono::milliseconds init_timeout{std::chrono::minutes(5)};
  // How often a waiting caller wakes to ask NCCL for asynchronous errors
  // (a lost peer, a network failure) and to beat the heartbeat.
  std::chrono::milliseconds check_every{std::chrono::milliseconds(100)};
  std::shared_ptr<Heartbeat> heartbeat;  // may be null
};

class NcclRunner {
 public:
  // Sets the device, makes NCCL's stream and two events, and brings the
  // communicator up (non-blocking init, polled until ready). Past
  // init_timeout the communicator is aborted and CollectiveError names
  // DDPRUN_TIMEOUT_S / ddp::InitOptions::timeout.
  NcclRunner(NcclBackend& backend, NcclRunnerOptions options);
  ~NcclRunner();
  NcclRunner(const NcclRunner&) = delete;
  NcclRunner& operator=(const NcclRunner&) = delete;

  // Enqueues one collective and waits for it:
  //   1. an event recorded on caller_stream; NCCL's stream waits on it, so the
  //      collective reads what the caller's earlier kernels wrote;
  //   2. enqueue(comm, nccl_stream) puts the collective on NCCL's stream;
  //   3. an event recorded after it; caller_stream waits on it, so the
  //      caller's later kernels see the result;
  //   4. a host function after it wakes this thread when it is done.
  // Throws CollectiveError on an NCCL error or past `timeout` (the
  // communicator is then aborted and unusable).
  void run(const char* op, NcclStreamHandle caller_stream,
           const std::function<void(NcclCommHandle, NcclStreamHandle)>& enqueue,
           std::chrono::milliseconds timeout);

  bool aborted() const { return comm_ == nullptr; }

 private:
  // Polls comm_state with a sleeping backoff while it is in progress (init,
  // or a non-blocking call that returned ncclInProgress); throws at the
  // deadline or on failure.
  void wait_ready(const char* what, std::chrono::steady_clock::time_point deadline,
                  std::chrono::milliseconds timeout);
  void release();
  [[noreturn]] void fail(const std::string& message);
  [[noreturn]] void time_out(const char* what, std::chrono::milliseconds timeout);
  void beat() {
    if (options_.heartbeat) options_.heartbeat->beat();
  }

  NcclBackend& backend_;
  NcclRunnerOptions options_;
  NcclStreamHandle stream_ = nullptr;
  NcclEventHandle before_ = nullptr;
  NcclEventHandle after_ = nullptr;
  NcclCommHandle comm_ = nullptr;
};

}  // namespace ddp
