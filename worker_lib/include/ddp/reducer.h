// Averages gradients over the ranks of a communicator, the engine of
// DistributedDataParallel. A training step reads, as in PyTorch,
//
//   loss.backward();      // hooks all-reduce buckets as gradients arrive; at
//                         // the end of backward the reducer finalizes itself
//   optimizer.step();     // every .grad is now the average over the ranks
//
// With the hook-driven strategies (kBucketed, the default, and kOverlap) the
// first gradient hook of an iteration queues finalize() on the autograd
// engine's final callback, which runs once the whole backward is done.
// Calling finalize() by hand afterwards is a no-op until the next iteration
// starts. kNaive and kFlat have no hooks: call finalize() after backward.
//
// Construction is collective: it checks that every rank has the same
// parameters (names, shapes, dtypes) and then broadcasts rank 0's values or
// verifies that they agree (DdpOptions::init_sync).
//
// Between backward() and the end of finalize() the communicator belongs to
// the reducer: run no other collective on it there.
//
// On a communicator that enqueues on the device (NCCL, enqueues_on_device()),
// the hooks enqueue each bucket's all_reduce themselves on NCCL's stream,
// where it overlaps the rest of backward, and finalize() only makes the
// caller's stream wait for them on the device: the host never waits for a
// bucket, and optimizer.step()'s kernels run after the averages. Elsewhere
// (Gloo) a communication thread runs the buckets' all_reduces in order.
// Where overlapping costs more than it hides (shared memory on a node with
// no core to spare, Communicator::overlap_pays) the buckets run after
// backward instead, in order, on the thread that finishes it
// (DdpOptions::overlap).
//
// With the hook-driven strategies, each .grad becomes a view of its slot in
// a bucket after the first synchronised step (PyTorch's
// gradient_as_bucket_view): backward accumulates straight into the buckets
// and the averages land in .grad without copies. Replacing or resetting
// .grad is fine; the next step copies it in and makes it a view again.
#pragma once

#include <ATen/ATen.h>

#include <atomic>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ddp/communicator.h"
#include "ddp/ddp_options.h"
#include "ddp/trace.h"

namespace ddp {

class SerialWorker;
class ReplicaReporter;

class Reducer {
 public:
  // params: the trainable parameters in registration order; buffers: state
  // that is not trained (batch-norm statistics). Throws std::runtime_error
  // (on every rank alike) when the ranks' models disagree.
  Reducer(std::vector<NamedTensor> params, std::vector<NamedTensor> buffers, Communicator& comm,
          DdpOptions options = {});
  ~Reducer();
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  // Waits until every gradient is the average over the ranks (and, with
  // broadcast_buffers, rank 0's buffers are everywhere). Does nothing while
  // gradient sync is disabled, nor (hook-driven strategies) when this
  // iteration was already finalized, by hand or at the end of backward.
  // Throws CollectiveError when communication fails, std::runtime_error when
  // a parameter got no gradient and find_unused_parameters is off; at the end
  // of backward these come out of backward().
  //
  // A backward that reaches none of the parameters fires no hook and so
  // finalizes nothing. With find_unused_parameters, where a rank may use no
  // parameter in a step while others do, call finalize() after backward on
  // every rank: it is a no-op where it already ran.
  void finalize();

  // Marks the start of an iteration (DistributedDataParallel's forward calls
  // it): the next finalize() runs even if no gradient hook fires.
  void prepare_for_backward();
  // At a forward pass with gradients (DistributedDataParallel's calls it):
  // every DdpOptions::verify_every of them the ranks compare their
  // parameters; apart, every rank throws ReplicasDiffer. Collective.
  void verify_if_due();

  // Gradient accumulation: while sync is disabled, backward() only adds to
  // .grad and finalize() does nothing; the next synchronised step averages
  // everything accumulated.
  void enable_grad_sync() { sync_enabled_ = true; }
  void disable_grad_sync() { sync_enabled_ = false; }
  bool grad_sync_enabled() const { return sync_enabled_; }

  // Disables sync until it goes out of scope, then restores what was before.
  class NoSync {
   public:
    explicit NoSync(Reducer& r) : reducer_(&r), was_enabled_(r.grad_sync_enabled()) {
      r.disable_grad_sync();
    }
    NoSync(NoSync&& other) noexcept : reducer_(other.reducer_), was_enabled_(other.was_enabled_) {
      other.reducer_ = nullptr;
    }
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;
    NoSync& operator=(NoSync&&) = delete;
    ~NoSync() {
      if (reducer_ && was_enabled_) reducer_->enable_grad_sync();
    }

   private:
    Reducer* reducer_;
    bool was_enabled_;
  };
  [[nodiscard]] NoSync no_sync() { return NoSync(*this); }

  // Parameter indices of each bucket, in launch order (overlap and bucketed).
  const std::vector<std::vector<size_t>>& bucket_layout() const { return layout_; }
  const DdpOptions& options() const { return options_; }
  // Whether buckets are all-reduced during backward (DdpOptions::overlap,
  // with kAuto decided by the communicator).
  bool overlaps_backward() const { return overlap_; }
  Communicator& communicator() { return comm_; }
  // options().tracer, or one that is off.
  Tracer& tracer() { return *tracer_; }

 private:
  struct Bucket {
    std::vector<size_t> params;     // parameter indices
    at::Tensor buffer;              // flat, all gradients of the bucket
    std::vector<at::Tensor> slots;  // views of buffer, one per parameter
    size_t pending = 0;             // gradients not yet copied in
    bool ready = false;
    std::future<void> work;         // on the communication thread (Gloo)
    // On a communicator that enqueues on the device (NCCL): the all_reduce
    // enqueued by the hook itself, what enqueueing threw, and the bf16 copy
    // on the wire.
    std::unique_ptr<Work> device_work;
    std::exception_ptr error;
    at::Tensor wire;
  };

  // kOverlap and kBucketed sync during backward, through hooks and buckets.
  bool hook_driven() const {
    return options_.strategy == SyncStrategy::kOverlap || options_.strategy == SyncStrategy::kBucketed;
  }
  void check_same_model();
  // The replicas compared (DdpOptions::verify_every).
  void compare_replicas_now();
  void broadcast_state(const std::vector<NamedTensor>& tensors);
  void verify_params();
  void build_buckets();
  void on_grad_ready(size_t index);
  void mark_ready_locked(Bucket& b);
  void launch_ready_buckets_locked();
  void average_bucket(Bucket& b);
  // Enqueues the bucket's average on a device communicator; finish_bucket
  // orders the caller's stream after it (and widens a bf16 wire back).
  void start_bucket(Bucket& b);
  void finish_bucket(Bucket& b);
  void run_buckets_after_backward();
  void run_finalize();
  void finalize_hooked();
  // Averages a flat tensor in place over the ranks, in options_.comm_dtype.
  void average(at::Tensor& flat);
  void finalize_after_backward();
  // With find_unused_parameters: which parameters some rank used (collective).
  std::vector<bool> used_anywhere(const std::vector<bool>& used_here);
  [[noreturn]] void throw_unused(const std::vector<size_t>& missing);
  void reset_iteration_locked();

  std::vector<NamedTensor> params_;
  std::vector<NamedTensor> buffers_;
  Communicator& comm_;
  DdpOptions options_;
  std::atomic<bool> sync_enabled_{true};
  Tracer no_tracer_;  // off: what tracer_ points at without options_.tracer
  Tracer* tracer_;

  // Hook-driven strategies (kOverlap, kBucketed).
  std::vector<std::vector<size_t>> layout_;
  std::vector<Bucket> buckets_;
  std::vector<size_t> bucket_of_;  // parameter → bucket
  std::vector<size_t> slot_of_;    // parameter → slot in its bucket
  // The parameters' gradient accumulators with our hooks, kept alive (a
  // shared_ptr in LibTorch 1.13, an intrusive_ptr in 2.x: held here by
  // type-erased owners, which take the hook off when dropped).
  std::vector<std::shared_ptr<void>> accumulators_;
  std::mutex mu_;                 // guards the per-step state below
  std::vector<bool> ready_;       // parameter's gradient is in its bucket this step
  size_t next_launch_ = 0;        // buckets are launched in order, on every rank alike
  bool iteration_open_ = false;   // a hook fired since the last finalize
  bool finalized_ = false;        // finalize ran and no new iteration started
  // The first hook of this backward (0: not recorded), and its step.
  int64_t backward_begin_ns_ = 0;
  int64_t backward_step_ = 0;
  std::unique_ptr<SerialWorker> worker_;  // the communication thread (CPU, with overlap)
  bool overlap_ = true;                    // buckets start during backward (DdpOptions::overlap)
  // kFlat: one buffer per dtype and device, kept between steps (a fresh
  // allocation of tens of MB each step is fresh pages, faulted in each step).
  std::map<std::string, at::Tensor> flat_buffers_;
  // DdpOptions::verify_every: forward passes with gradients so far, and
  // what the comparisons found, for the agent (verify/replica_report.h).
  int64_t forwards_ = 0;
  bool told_by_design_ = false;
  std::string hardware_kind_;
  std::shared_ptr<ReplicaReporter> reporter_;
};

}  // namespace ddp
