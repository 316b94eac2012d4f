// The CUDA and NCCL calls the NCCL communicator's logic needs, behind one
// small interface: the real one (nccl_backend_cuda.cpp) calls the CUDA
// runtime and NCCL; unit tests drive a fake whose streams complete when the
// test says and whose communicator can hang or fail. No LibTorch, no CUDA
// headers here: handles are opaque pointers (cudaStream_t, cudaEvent_t and
// ncclComm_t are all pointers). Every call that fails throws
// CollectiveError naming the call.
#pragma once

#include <memory>
#include <string>

namespace ddp {

using NcclStreamHandle = void*;  // cudaStream_t; nullptr is the legacy default stream
using NcclEventHandle = void*;   // cudaEvent_t
using NcclCommHandle = void*;    // ncclComm_t

// What ncclCommGetAsyncError says about a communicator.
struct NcclCommState {
  enum Code { kReady, kInProgress, kFailed } code = kReady;
  std::string error;  // for kFailed: NCCL's words
};

class NcclBackend {
 public:
  virtual ~NcclBackend() = default;

  virtual void set_device(int device) = 0;
  virtual NcclStreamHandle create_stream() = 0;
  virtual void destroy_stream(NcclStreamHandle s) = 0;
  // Events without timing (cheapest to record and wait on).
  virtual NcclEventHandle create_event() = 0;
  virtual void destroy_event(NcclEventHandle e) = 0;
  virtual void record_event(NcclEventHandle e, NcclStreamHandle s) = 0;
  // Work enqueued on `s` after this waits for the last record of `e`.
  virtual void stream_wait_event(NcclStreamHandle s, NcclEventHandle e) = 0;
  // Calls fn(arg) on a runtime thread once the work before it on `s` is done
  // (cudaLaunchHostFunc). fn must not call CUDA.
  virtual void launch_host_func(NcclStreamHandle s, void (*fn)(void*), void* arg) = 0;
  // Whether `s` is being captured into a CUDA graph (cudaStreamIsCapturing):
  // work enqueued on it is recorded, not run, and runs at each replay.
  virtual bool is_capturing(NcclStreamHandle s) = 0;

  // Starts a non-blocking ncclCommInitRankConfig (config.blocking = 0): the
  // handle comes back at once and comm_state() says when it is ready.
  virtual NcclCommHandle start_comm_init(const std::string& unique_id, int size, int rank) = 0;
  virtual NcclCommState comm_state(NcclCommHandle c) = 0;
  virtual void abort_comm(NcclCommHandle c) = 0;    // ncclCommAbort: never blocks on peers
  virtual void destroy_comm(NcclCommHandle c) = 0;  // ncclCommDestroy
};

// The backend over the CUDA runtime and NCCL; throws CollectiveError when
// this build has no NCCL.
std::unique_ptr<NcclBackend> make_cuda_nccl_backend();

}  // namespace ddp
