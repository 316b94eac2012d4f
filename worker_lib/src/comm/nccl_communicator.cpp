#include "comm/nccl_communicator.h"

#if DDPRUN_HAVE_NCCL
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstring>

#include "comm/nccl_backend.h"
#include "comm/nccl_runner.h"

#if DDPRUN_TORCH_CUDA
#include <c10/cuda/CUDAStream.h>
#endif
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

// Collectives on CUDA tensors. The logic (init within our timeout, stream
// ordering, waiting, the watchdog) is NcclRunner's; this class only turns
// tensors into NCCL calls.
class NcclCommunicator final : public Communicator {
 public:
  explicit NcclCommunicator(const NcclOptions& o) : options_(o) {
    if (o.unique_id.size() != sizeof(ncclUniqueId)) {
      throw CollectiveError("ddp: no NCCL unique id for this round (DDPRUN_NCCL_ID has " +
                            std::to_string(o.unique_id.size()) + " bytes, need " +
                            std::to_string(sizeof(ncclUniqueId)) + ")");
    }
    backend_ = make_cuda_nccl_backend();
    NcclRunnerOptions r;
    r.unique_id = o.unique_id;
    r.rank = o.rank;
    r.size = o.size;
    r.device = o.device;
    r.init_timeout = o.timeout;
    r.heartbeat = o.heartbeat;
    runner_ = std::make_unique<NcclRunner>(*backend_, r);
  }

  int rank() const override { return options_.rank; }
  int size() const override { return options_.size; }
  Timeout default_timeout() const override { return options_.timeout; }
  std::string backend() const override { return "nccl"; }

  void all_reduce(at::Tensor& t, ReduceOp op, Timeout timeout) override {
    check_cuda_tensor(t, "all_reduce");
    at::Tensor work = t.contiguous();
    const ncclDataType_t type = nccl_type(work.scalar_type());
    runner_->run("all_reduce", caller_stream(), [&](NcclCommHandle c, NcclStreamHandle s) {
      check_nccl(ncclAllReduce(work.data_ptr(), work.data_ptr(), work.numel(), type, nccl_op(op),
                               static_cast<ncclComm_t>(c), static_cast<cudaStream_t>(s)),
                 "ncclAllReduce");
    }, timeout);
    if (!work.is_same(t)) t.copy_(work);
  }

  // Enqueued on NCCL's stream after the caller's current stream, and not
  // waited for: the Work's wait() makes the caller's stream (then current)
  // wait for it on the device, and the runner's watchdog reports errors and
  // timeouts. The tensor stays referenced until the collective is done.
  std::unique_ptr<Work> all_reduce_async(at::Tensor t, ReduceOp op, Timeout timeout) override {
    check_cuda_tensor(t, "all_reduce");
    if (!t.is_contiguous()) return Communicator::all_reduce_async(t, op, timeout);  // blocking
    const ncclDataType_t type = nccl_type(t.scalar_type());
    auto ticket = runner_->enqueue("all_reduce", caller_stream(), [&](NcclCommHandle c, NcclStreamHandle s) {
      check_nccl(ncclAllReduce(t.data_ptr(), t.data_ptr(), t.numel(), type, nccl_op(op),
                               static_cast<ncclComm_t>(c), static_cast<cudaStream_t>(s)),
                 "ncclAllReduce");
    }, timeout, std::make_shared<at::Tensor>(t));
    return std::make_unique<NcclWork>(*this, std::move(ticket));
  }
  bool enqueues_on_device() const override { return true; }
  std::unique_ptr<Work> watch_stream(const char* what, Timeout timeout) override {
    return std::make_unique<NcclWork>(*this, runner_->enqueue(what, caller_stream(), nullptr, timeout));
  }

  // A heal began: collectives waiting on a dead peer fail now, and NCCL's
  // communicator is aborted (World connects a fresh one for the next
  // generation).
  void abort(const std::string& why) override { runner_->abort(why); }

  void broadcast(at::Tensor& t, int root, Timeout timeout) override {
    check_cuda_tensor(t, "broadcast");
    at::Tensor work = t.contiguous();
    runner_->run("broadcast", caller_stream(), [&](NcclCommHandle c, NcclStreamHandle s) {
      check_nccl(ncclBroadcast(work.data_ptr(), work.data_ptr(), work.nbytes(), ncclUint8, root,
                               static_cast<ncclComm_t>(c), static_cast<cudaStream_t>(s)),
                 "ncclBroadcast");
    }, timeout);
    if (!work.is_same(t)) t.copy_(work);
  }

  at::Tensor all_gather(const at::Tensor& input, Timeout timeout) override {
    check_cuda_tensor(input, "all_gather");
    std::vector<int64_t> shape{options_.size};
    shape.insert(shape.end(), input.sizes().begin(), input.sizes().end());
    at::Tensor out = at::empty(shape, input.options());
    at::Tensor in = input.contiguous();
    runner_->run("all_gather", caller_stream(), [&](NcclCommHandle c, NcclStreamHandle s) {
      check_nccl(ncclAllGather(in.data_ptr(), out.data_ptr(), in.nbytes(), ncclUint8,
                               static_cast<ncclComm_t>(c), static_cast<cudaStream_t>(s)),
                 "ncclAllGather");
    }, timeout);
    return out;
  }

  void barrier(Timeout timeout) override {
    at::Tensor one = at::ones({1}, at::TensorOptions().dtype(at::kFloat).device(at::kCUDA, options_.device));
    all_reduce(one, ReduceOp::kSum, timeout);
  }

 private:
  // The stream the caller's kernels go to: LibTorch's current stream where
  // LibTorch has CUDA (DDPRUN_TORCH_CUDA, set by CMake), else the legacy
  // default stream (a CPU LibTorch makes no CUDA tensors anyway).
  NcclStreamHandle caller_stream() const {
#if DDPRUN_TORCH_CUDA
    return c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(options_.device)).stream();
#else
    return nullptr;
#endif
  }
  void check_nccl(ncclResult_t r, const char* what) {
    // ncclInProgress: a non-blocking communicator took the call and will
    // finish enqueuing it; NcclRunner waits for that.
    if (r != ncclSuccess && r != ncclInProgress) {
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

  class NcclWork final : public Work {
   public:
    NcclWork(NcclCommunicator& comm, NcclRunner::Ticket ticket) : comm_(comm), ticket_(std::move(ticket)) {}
    void wait() override { comm_.runner_->order_after(ticket_, comm_.caller_stream()); }

   private:
    NcclCommunicator& comm_;
    NcclRunner::Ticket ticket_;
  };

  NcclOptions options_;
  std::unique_ptr<NcclBackend> backend_;
  std::unique_ptr<NcclRunner> runner_;  // after backend_: destroyed first
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(const NcclOptions& options) {
  return std::make_unique<NcclCommunicator>(options);
}

#endif

}  // namespace ddp
