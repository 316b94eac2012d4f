#include "ddp/nccl_communicator.h"

#if DDPRUN_HAVE_NCCL
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstring>
#include <thread>
#endif

namespace ddp {

#if !DDPRUN_HAVE_NCCL

bool nccl_available() { return false; }

std::string nccl_unique_id() {
  throw CollectiveError("ddp: this build of worker_lib has no NCCL; no NCCL id can be made");
}

std::unique_ptr<Communicator> make_nccl_communicator(const NcclOptions&) {
  throw CollectiveError(
      "ddp: this build of worker_lib has no NCCL (NCCL or the CUDA runtime was not found when it "
      "was built; see DDPRUN_CUDA_ROOT); CUDA tensors cannot be reduced");
}

#else

bool nccl_available() { return true; }

std::string nccl_unique_id() {
  ncclUniqueId id;
  ncclResult_t r = ncclGetUniqueId(&id);
  if (r != ncclSuccess) {
    throw CollectiveError(std::string("ddp: ncclGetUniqueId failed: ") + ncclGetErrorString(r));
  }
  return std::string(reinterpret_cast<const char*>(&id), sizeof(id));
}

namespace {

ncclDataType_t nccl_type(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return ncclFloat32;
    case at::kDouble: return ncclFloat64;
    case at::kHalf: return ncclFloat16;
    case at::kBFloat16: return ncclBfloat16;
    case at::kInt: return ncclInt32;
    case at::kLong: return ncclInt64;
    case at::kChar: return ncclInt8;
    case at::kByte: return ncclUint8;
    default:
      throw std::invalid_argument("ddp: NCCL does not support dtype " +
                                  std::string(c10::toString(t)));
  }
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kAvg: return ncclAvg;
    case ReduceOp::kMax: return ncclMax;
    case ReduceOp::kMin: return ncclMin;
  }
  return ncclSum;
}

class NcclCommunicator final : public Communicator {
 public:
  explicit NcclCommunicator(const NcclOptions& o) : options_(o) {
    if (o.unique_id.size() != sizeof(ncclUniqueId)) {
      throw CollectiveError("ddp: no NCCL unique id for this round (DDPRUN_NCCL_ID has " +
                            std::to_string(o.unique_id.size()) + " bytes, need " +
                            std::to_string(sizeof(ncclUniqueId)) +
                            "); ddprun hands one out only when it sees GPUs");
    }
    check_cuda(cudaSetDevice(o.device), "cudaSetDevice");
    check_cuda(cudaStreamCreate(&stream_), "cudaStreamCreate");
    ncclUniqueId id;
    std::memcpy(&id, o.unique_id.data(), sizeof(id));
    check_nccl(ncclCommInitRank(&comm_, o.size, id, o.rank), "ncclCommInitRank");
  }
  ~NcclCommunicator() override {
    if (comm_) ncclCommDestroy(comm_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  int rank() const override { return options_.rank; }
  int size() const override { return options_.size; }
  Timeout default_timeout() const override { return options_.timeout; }
  std::string backend() const override { return "nccl"; }

  void all_reduce(at::Tensor& t, ReduceOp op, Timeout timeout) override {
    check_cuda_tensor(t, "all_reduce");
    at::Tensor work = t.contiguous();
    check_nccl(ncclAllReduce(work.data_ptr(), work.data_ptr(), work.numel(),
                             nccl_type(work.scalar_type()), nccl_op(op), comm_, stream_),
               "ncclAllReduce");
    wait("all_reduce", timeout);
    if (!work.is_same(t)) t.copy_(work);
  }

  void broadcast(at::Tensor& t, int root, Timeout timeout) override {
    check_cuda_tensor(t, "broadcast");
    at::Tensor work = t.contiguous();
    check_nccl(ncclBroadcast(work.data_ptr(), work.data_ptr(), work.nbytes(), ncclUint8, root,
                             comm_, stream_),
               "ncclBroadcast");
    wait("broadcast", timeout);
    if (!work.is_same(t)) t.copy_(work);
  }

  at::Tensor all_gather(const at::Tensor& input, Timeout timeout) override {
    check_cuda_tensor(input, "all_gather");
    std::vector<int64_t> shape{options_.size};
    shape.insert(shape.end(), input.sizes().begin(), input.sizes().end());
    at::Tensor out = at::empty(shape, input.options());
    at::Tensor in = input.contiguous();
    check_nccl(ncclAllGather(in.data_ptr(), out.data_ptr(), in.nbytes(), ncclUint8, comm_, stream_),
               "ncclAllGather");
    wait("all_gather", timeout);
    return out;
  }

  void barrier(Timeout timeout) override {
    at::Tensor one = at::ones({1}, at::TensorOptions().dtype(at::kFloat).device(at::kCUDA, options_.device));
    all_reduce(one, ReduceOp::kSum, timeout);
  }

 private:
  void check_cuda(cudaError_t e, const char* what) {
    if (e != cudaSuccess) {
      throw CollectiveError(std::string("ddp: ") + what + " on rank " +
                            std::to_string(options_.rank) + ": " + cudaGetErrorString(e));
    }
  }
  void check_nccl(ncclResult_t r, const char* what) {
    if (r != ncclSuccess) {
      throw CollectiveError(std::string("ddp: ") + what + " on rank " +
                            std::to_string(options_.rank) + ": " + ncclGetErrorString(r));
    }
  }
  void check_cuda_tensor(const at::Tensor& t, const char* op) {
    if (!t.defined() || !t.device().is_cuda()) {
      throw std::invalid_argument(std::string("ddp: ") + op +
                                  ": the NCCL communicator takes CUDA tensors");
    }
  }
  // Waits for the stream; a peer that never arrives must not hang us, so past
  // the timeout the communicator is aborted and the call throws.
  void wait(const char* op, Timeout timeout) {
    if (options_.heartbeat) options_.heartbeat->beat();
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
      cudaError_t e = cudaStreamQuery(stream_);
      if (e == cudaSuccess) {
        if (options_.heartbeat) options_.heartbeat->beat();
        return;
      }
      if (e != cudaErrorNotReady) check_cuda(e, op);
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(comm_, &async);
      if (async != ncclSuccess) check_nccl(async, op);
      if (std::chrono::steady_clock::now() >= deadline) {
        ncclCommAbort(comm_);
        comm_ = nullptr;
        throw CollectiveError(std::string("ddp: ") + op + " timed out after " +
                              std::to_string(timeout.count()) + " ms on rank " +
                              std::to_string(options_.rank) +
                              " (set ddp::InitOptions::timeout or DDPRUN_TIMEOUT_S)");
      }
      std::this_thread::yield();
    }
  }

  NcclOptions options_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(const NcclOptions& options) {
  return std::make_unique<NcclCommunicator>(options);
}

#endif

}  // namespace ddp
