// NcclBackend over the CUDA runtime and NCCL (the production backend).
#include "comm/nccl_backend.h"

#include "ddp/collective_error.h"

#if DDPRUN_HAVE_NCCL
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstring>
#endif

namespace ddp {

#if !DDPRUN_HAVE_NCCL

std::unique_ptr<NcclBackend> make_cuda_nccl_backend() {
  throw CollectiveError("ddp: this build of worker_lib has no NCCL; CUDA tensors cannot be reduced");
}

#else

namespace {

void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw CollectiveError(std::string("ddp: ") + what + ": " + cudaGetErrorString(e));
}
void check_nccl(ncclResult_t r, const char* what) {
  if (r != ncclSuccess && r != ncclInProgress) {
    throw CollectiveError(std::string("ddp: ") + what + ": " + ncclGetErrorString(r));
  }
}

class CudaNcclBackend final : public NcclBackend {
 public:
  void set_device(int device) override { check_cuda(cudaSetDevice(device), "cudaSetDevice"); }
  NcclStreamHandle create_stream() override {
    cudaStream_t s = nullptr;
    // Non-blocking: NCCL's stream is ordered with the caller's by events
    // only, never implicitly with the legacy default stream.
    check_cuda(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    return s;
  }
  void destroy_stream(NcclStreamHandle s) override { cudaStreamDestroy(static_cast<cudaStream_t>(s)); }
  NcclEventHandle create_event() override {
    cudaEvent_t e = nullptr;
    check_cuda(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    return e;
  }
  void destroy_event(NcclEventHandle e) override { cudaEventDestroy(static_cast<cudaEvent_t>(e)); }
  void record_event(NcclEventHandle e, NcclStreamHandle s) override {
    check_cuda(cudaEventRecord(static_cast<cudaEvent_t>(e), static_cast<cudaStream_t>(s)),
               "cudaEventRecord");
  }
  void stream_wait_event(NcclStreamHandle s, NcclEventHandle e) override {
    check_cuda(cudaStreamWaitEvent(static_cast<cudaStream_t>(s), static_cast<cudaEvent_t>(e), 0),
               "cudaStreamWaitEvent");
  }
  void launch_host_func(NcclStreamHandle s, void (*fn)(void*), void* arg) override {
    check_cuda(cudaLaunchHostFunc(static_cast<cudaStream_t>(s), fn, arg), "cudaLaunchHostFunc");
  }
  bool is_capturing(NcclStreamHandle s) override {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    check_cuda(cudaStreamIsCapturing(static_cast<cudaStream_t>(s), &status), "cudaStreamIsCapturing");
    return status == cudaStreamCaptureStatusActive;
  }
  NcclCommHandle start_comm_init(const std::string& unique_id, int size, int rank) override {
    ncclUniqueId id;
    std::memcpy(&id, unique_id.data(), sizeof(id));  // the caller checked the size
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t comm = nullptr;
    ncclResult_t r = ncclCommInitRankConfig(&comm, size, id, rank, &config);
    if (r != ncclSuccess && r != ncclInProgress) {
      if (comm) ncclCommAbort(comm);
      check_nccl(r, "ncclCommInitRankConfig");
    }
    return comm;
  }
  NcclCommState comm_state(NcclCommHandle c) override {
    ncclResult_t async = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError(static_cast<ncclComm_t>(c), &async);
    if (r != ncclSuccess) return {NcclCommState::kFailed, std::string("ncclCommGetAsyncError: ") + ncclGetErrorString(r)};
    if (async == ncclSuccess) return {NcclCommState::kReady, {}};
    if (async == ncclInProgress) return {NcclCommState::kInProgress, {}};
    const char* last = ncclGetLastError(static_cast<ncclComm_t>(c));
    std::string why = ncclGetErrorString(async);
    if (last && *last) why += std::string(" (") + last + ")";
    return {NcclCommState::kFailed, why};
  }
  void abort_comm(NcclCommHandle c) override { ncclCommAbort(static_cast<ncclComm_t>(c)); }
  void destroy_comm(NcclCommHandle c) override {
    // ncclCommDestroy on a non-blocking communicator may answer
    // ncclInProgress and finish on its own; abort only when it fails.
    ncclResult_t r = ncclCommDestroy(static_cast<ncclComm_t>(c));
    if (r != ncclSuccess && r != ncclInProgress) {
      ncclCommAbort(static_cast<ncclComm_t>(c));
    }
  }
};

}  // namespace

std::unique_ptr<NcclBackend> make_cuda_nccl_backend() { return std::make_unique<CudaNcclBackend>(); }

#endif

}  // namespace ddp
