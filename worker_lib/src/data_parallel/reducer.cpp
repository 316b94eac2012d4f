#include "ddp/reducer.h"

#include "ddp/state_fence.h"

#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <functional>
#include <utility>
#include <map>
#include <sstream>
#include <stdexcept>

#include "base/serial_worker.h"
#include "data_parallel/bucket_plan.h"

namespace ddp {
namespace {

// Runs after a parameter's AccumulateGrad node, i.e. once backward has added
// this step's gradient into .grad.
class GradReadyHook final : public torch::autograd::FunctionPostHook {
 public:
  explicit GradReadyHook(std::function<void()> fn) : fn_(std::move(fn)) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list&) override {
    fn_();
    return outputs;
  }

 private:
  std::function<void()> fn_;
};

// Tensors share a bucket or a flat buffer only with the same dtype and device.
std::string dtype_device_key(const at::Tensor& t) {
  return std::string(c10::toString(t.scalar_type())) + "@" + t.device().str();
}

// Whether a gradient already lives in its bucket slot.
bool is_slot_view(const at::Tensor& grad, const at::Tensor& slot) {
  return grad.defined() && grad.data_ptr() == slot.data_ptr() && grad.numel() == slot.numel();
}

// A tensor shaped like `param` on the memory of `slot`. Not an autograd view
// (set_ on a fresh tensor): LibTorch 1.13's Optimizer::zero_grad() calls
// detach_() on every gradient, which autograd refuses for views.
at::Tensor slot_alias(const at::Tensor& slot, const at::Tensor& param) {
  at::NoGradGuard no_grad;
  return at::empty({0}, slot.options()).set_(slot.storage(), slot.storage_offset(), param.sizes());
}

std::string names_of(const std::vector<NamedTensor>& params, const std::vector<size_t>& which) {
  std::string out;
  const size_t shown = std::min<size_t>(which.size(), 5);
  for (size_t k = 0; k < shown; ++k) out += (k ? ", " : "") + params[which[k]].name;
  if (which.size() > shown) out += " and " + std::to_string(which.size() - shown) + " more";
  return out;
}

}  // namespace

Reducer::Reducer(std::vector<NamedTensor> params, std::vector<NamedTensor> buffers,
                 Communicator& comm, DdpOptions options)
    : params_(std::move(params)),
      buffers_(std::move(buffers)),
      comm_(comm),
      options_(options),
      tracer_(options_.tracer ? options_.tracer : &no_tracer_) {
  for (const auto& p : params_) {
    if (!p.tensor.defined() || !p.tensor.requires_grad()) {
      throw std::invalid_argument("ddp: parameter '" + p.name +
                                  "' is undefined or does not require grad; pass only trainable "
                                  "parameters");
    }
  }
  if (options_.init_sync != InitSync::kNone) {
    check_same_model();
    if (options_.init_sync == InitSync::kVerify) {
      verify_params();
    } else {
      broadcast_state(params_);
    }
    broadcast_state(buffers_);
  }
  if (hook_driven()) {
    build_buckets();
  }
}

Reducer::~Reducer() {
  accumulators_.clear();  // unhooks every accumulator
  // Let in-flight work finish before the buckets it writes go away.
  for (auto& b : buckets_) {
    if (b.work.valid()) b.work.wait();
    if (b.device_work) {
      try {
        b.device_work->wait();
      } catch (...) {  // a failed communicator: nothing is in flight any more
      }
    }
  }
  worker_.reset();
}

void Reducer::build_buckets() {
  std::vector<BucketParam> sizes;
  for (const auto& p : params_) {
    sizes.push_back({static_cast<size_t>(p.tensor.numel() * p.tensor.element_size()),
                     dtype_device_key(p.tensor)});
  }
  const bool per_param = options_.strategy == SyncStrategy::kOverlap;
  layout_ = assign_buckets(sizes, per_param ? 0 : options_.first_bucket_cap_bytes,
                           per_param ? 0 : options_.bucket_cap_bytes);

  bucket_of_.assign(params_.size(), 0);
  slot_of_.assign(params_.size(), 0);
  buckets_.resize(layout_.size());
  for (size_t b = 0; b < layout_.size(); ++b) {
    Bucket& bucket = buckets_[b];
    bucket.params = layout_[b];
    int64_t total = 0;
    for (size_t i : bucket.params) total += params_[i].tensor.numel();
    const at::Tensor& first = params_[bucket.params.front()].tensor;
    bucket.buffer = at::zeros({total}, first.options().requires_grad(false));
    int64_t offset = 0;
    for (size_t k = 0; k < bucket.params.size(); ++k) {
      const size_t i = bucket.params[k];
      const int64_t n = params_[i].tensor.numel();
      bucket.slots.push_back(bucket.buffer.narrow(0, offset, n));
      offset += n;
      bucket_of_[i] = b;
      slot_of_[i] = k;
    }
    bucket.pending = bucket.params.size();
  }
  ready_.assign(params_.size(), false);

  // Overlap: on the device (NCCL) the hooks enqueue buckets themselves; on
  // CPU a communication thread runs them, where it pays.
  overlap_ = options_.overlap == Overlap::kOn ||
             (options_.overlap == Overlap::kAuto && (comm_.enqueues_on_device() || comm_.overlap_pays()));
  if (overlap_ && !comm_.enqueues_on_device()) worker_ = std::make_unique<SerialWorker>();
  for (size_t i = 0; i < params_.size(); ++i) {
    // The accumulator must stay alive: the variable holds it weakly, and a
    // new one (without our hook) would be made for the next backward.
    auto acc = torch::autograd::impl::grad_accumulator(params_[i].tensor);
    const uintptr_t hook = acc->add_post_hook(std::make_unique<GradReadyHook>([this, i] { on_grad_ready(i); }));
    // Dropping the owner takes the hook off again.
    accumulators_.push_back(std::shared_ptr<void>(acc.get(), [acc, hook](void*) { acc->del_post_hook(hook); }));
  }
}

// Called by autograd (possibly on one of its threads) once parameter
// `index` has its gradient for this step.
void Reducer::on_grad_ready(size_t index) {
  if (!sync_enabled_) return;  // accumulating: .grad keeps the sum
  Bucket& b = buckets_[bucket_of_[index]];
  bool first_of_iteration = false;
  {
    std::lock_guard lock(mu_);
    if (ready_[index]) {
      throw std::runtime_error("ddp: parameter '" + params_[index].name +
                               "' got a gradient twice before finalize(); call finalize() after "
                               "every synchronised backward (use no_sync() to accumulate)");
    }
    ready_[index] = true;
    if (!iteration_open_) {
      iteration_open_ = true;
      finalized_ = false;
      first_of_iteration = true;
      // kBackward runs from here to the final callback below.
      if (tracer_->recording()) {
        backward_begin_ns_ = Tracer::now_ns();
        backward_step_ = tracer_->current_step();
      }
    }
  }
  if (first_of_iteration) {
    // The first hook of this backward: have the engine finalize once the
    // whole backward is done (hooks run inside the graph task, which is
    // what queue_callback attaches to). The callback runs on the thread that
    // finishes the backward; what it throws comes out of backward().
    torch::autograd::Engine::get_default_engine().queue_callback([this] {
      int64_t begin = 0, step = 0;
      {
        std::lock_guard lock(mu_);
        begin = std::exchange(backward_begin_ns_, 0);
        step = backward_step_;
        if (finalized_) return;  // finalized by hand from another thread meanwhile
      }
      if (begin != 0) {
        tracer_->record(TracePhase::kBackward, TraceTrack::kMain, begin, Tracer::now_ns(), step);
      }
      run_finalize();
    });
  }
  // Outside the lock: every parameter has its own slot. Once .grad is a
  // view of its slot, backward accumulates straight into the bucket and
  // nothing needs copying; until then (first step, or after .grad was
  // reset) copy it in and make it that view.
  at::Tensor& param = params_[index].tensor;
  at::Tensor& slot = b.slots[slot_of_[index]];
  if (!is_slot_view(param.grad(), slot)) {
    slot.copy_(param.grad().reshape(-1));
    param.mutable_grad() = slot_alias(slot, param);
  }
  std::lock_guard lock(mu_);
  mark_ready_locked(b);
}

void Reducer::mark_ready_locked(Bucket& b) {
  if (--b.pending == 0) {
    b.ready = true;
    launch_ready_buckets_locked();
  }
}

// Launches buckets strictly in layout order, so that every rank issues the
// same sequence of all_reduces even when gradients arrive in another order.
void Reducer::launch_ready_buckets_locked() {
  if (!overlap_) return;  // finalize runs them, once backward is done
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].ready) {
    Bucket& b = buckets_[next_launch_];
    const auto index = static_cast<int64_t>(next_launch_);
    if (!worker_) {
      // On the device: the span covers only the enqueue.
      TraceSpan span(*tracer_, TracePhase::kAllReduce, TraceTrack::kComm, index, b.buffer.nbytes());
      start_bucket(b);
    } else {
      b.work = worker_->submit([this, &b, index] {
        TraceSpan span(*tracer_, TracePhase::kAllReduce, TraceTrack::kComm, index, b.buffer.nbytes());
        average_bucket(b);
      });
    }
    ++next_launch_;
  }
}

// Without overlap, in finalize: every bucket, in layout order, on this
// thread (enqueued, on the device). A failure is kept for the waits below,
// as one on the communication thread would be.
void Reducer::run_buckets_after_backward() {
  for (; next_launch_ < buckets_.size() && buckets_[next_launch_].ready; ++next_launch_) {
    Bucket& b = buckets_[next_launch_];
    TraceSpan span(*tracer_, TracePhase::kAllReduce, TraceTrack::kMain, static_cast<int64_t>(next_launch_),
                   b.buffer.nbytes());
    // Asking the communicator fails too once its connection was aborted (a
    // peer died, the group heals): kept like the collective's own failure.
    try {
      if (comm_.enqueues_on_device()) {
        start_bucket(b);
      } else {
        average_bucket(b);
      }
    } catch (...) {
      b.error = std::current_exception();
    }
  }
}

// On the communication thread: the average over the ranks, in place.
// Gradients that are views of the bucket are then averaged; finalize()
// deals with the few that are not.
void Reducer::average_bucket(Bucket& b) { average(b.buffer); }

// On the thread of the hook (inside backward), with the lock held so that
// buckets are enqueued in layout order on every rank. What enqueueing throws
// is kept for finalize(), like an error on the communication thread.
void Reducer::start_bucket(Bucket& b) {
  try {
    at::NoGradGuard no_grad;
    if (options_.comm_dtype == CommDtype::kBFloat16 && b.buffer.scalar_type() != at::kBFloat16) {
      // Divided first in full precision, as average() does.
      b.wire = b.buffer.div(static_cast<double>(comm_.size())).to(at::kBFloat16);
      b.device_work = comm_.all_reduce_async(b.wire, ReduceOp::kSum, comm_.default_timeout());
    } else {
      b.device_work = comm_.all_reduce_async(b.buffer, ReduceOp::kAvg, comm_.default_timeout());
    }
  } catch (...) {
    b.error = std::current_exception();
  }
}

// In finalize(): the caller's stream (the one optimizer.step() runs on)
// waits for the bucket's all_reduce on the device.
void Reducer::finish_bucket(Bucket& b) {
  std::unique_ptr<Work> work = std::move(b.device_work);
  at::Tensor wire = std::move(b.wire);
  if (std::exception_ptr e = std::exchange(b.error, nullptr)) std::rethrow_exception(e);
  if (!work) return;
  work->wait();
  if (wire.defined()) {
    at::NoGradGuard no_grad;
    b.buffer.copy_(wire);
  }
}

void Reducer::average(at::Tensor& flat) {
  const double ws = comm_.size();
  const auto type = flat.scalar_type();
  if (options_.comm_dtype == CommDtype::kBFloat16 && at::isFloatingType(type) && type != at::kBFloat16) {
    // Divide first, in full precision, so that the bf16 sum cannot overflow
    // where the fp32 one would not; then sum in bf16 and widen back.
    at::NoGradGuard no_grad;
    at::Tensor wire = flat.div(ws).to(at::kBFloat16);
    comm_.all_reduce(wire, ReduceOp::kSum);
    flat.copy_(wire);
    return;
  }
  // The communicator averages: shared memory divides inside its reduce
  // step (each rank its own share, no second pass over the bucket); Gloo
  // and the two-level communicator sum, then divide once.
  comm_.all_reduce(flat, ReduceOp::kAvg);
}

void Reducer::finalize() {
  if (!sync_enabled_) return;
  if (hook_driven()) {
    std::lock_guard lock(mu_);
    if (finalized_) return;
  }
  run_finalize();
}

void Reducer::prepare_for_backward() {
  if (!sync_enabled_ || !hook_driven()) return;
  {
    std::lock_guard lock(mu_);
    finalized_ = false;
    if (!iteration_open_) return;
  }
  // A backward that never reached its end (it threw: a collective failed
  // inside it, and the step is being done again after a heal) left its
  // iteration open: wait for what it launched, forget its errors, and
  // start clean, or its flags would read as gradients given twice.
  for (auto& b : buckets_) {
    try {
      if (b.work.valid()) b.work.get();
      finish_bucket(b);
    } catch (...) {
    }
  }
  std::lock_guard lock(mu_);
  reset_iteration_locked();
  iteration_open_ = false;
  backward_begin_ns_ = 0;
}

void Reducer::run_finalize() {
  // Whatever happens, this iteration counts as finalized: an error is thrown
  // once (from backward or from finalize), and a later finalize() by hand
  // must not run a second, unmatched round of collectives.
  struct MarkFinalized {
    Reducer* r;
    ~MarkFinalized() {
      std::lock_guard lock(r->mu_);
      r->finalized_ = true;
      r->iteration_open_ = false;
    }
  } mark{this};
  if (hook_driven()) {
    finalize_hooked();
  } else {
    finalize_after_backward();
  }
  if (options_.broadcast_buffers) broadcast_state(buffers_);
  // The optimizer step comes next: a checkpoint's copy of the parameters
  // still running in the background ends first.
  if (options_.state_fence) options_.state_fence->wait();
}

void Reducer::throw_unused(const std::vector<size_t>& missing) {
  throw std::runtime_error(
      "ddp: parameter(s) " + names_of(params_, missing) +
      " got no gradient in this step; if the model has parameters that some steps do not use, "
      "construct DistributedDataParallel with DdpOptions::find_unused_parameters = true");
}

std::vector<bool> Reducer::used_anywhere(const std::vector<bool>& used_here) {
  // Runs every step with find_unused_parameters: fill and read the flags
  // through their memory, not one tensor op per parameter.
  at::Tensor flags = at::empty({static_cast<int64_t>(used_here.size())}, at::kInt);
  int32_t* f = flags.data_ptr<int32_t>();
  for (size_t i = 0; i < used_here.size(); ++i) f[i] = used_here[i] ? 1 : 0;
  comm_.all_reduce(flags, ReduceOp::kSum);
  std::vector<bool> used(used_here.size());
  for (size_t i = 0; i < used.size(); ++i) used[i] = f[i] > 0;
  return used;
}

void Reducer::reset_iteration_locked() {
  std::fill(ready_.begin(), ready_.end(), false);
  for (auto& b : buckets_) {
    b.pending = b.params.size();
    b.ready = false;
  }
  next_launch_ = 0;
}

void Reducer::finalize_hooked() {
  // Parameters whose hook did not fire in this backward: a gradient kept
  // from earlier accumulation steps still counts, otherwise zero.
  std::vector<size_t> missing;
  {
    std::lock_guard lock(mu_);
    for (size_t i = 0; i < params_.size(); ++i) {
      if (!ready_[i]) missing.push_back(i);
    }
    if (!missing.empty() && options_.find_unused_parameters) {
      for (size_t i : missing) {
        Bucket& b = buckets_[bucket_of_[i]];
        at::Tensor& param = params_[i].tensor;
        at::Tensor& slot = b.slots[slot_of_[i]];
        if (!param.grad().defined()) {
          slot.zero_();
        } else if (!is_slot_view(param.grad(), slot)) {
          slot.copy_(param.grad().reshape(-1));
          param.mutable_grad() = slot_alias(slot, param);
        }
        ready_[i] = true;
        mark_ready_locked(b);
      }
    }
  }
  // Wait for everything launched, in order, before anything else touches the
  // communicator; keep the first error. Whatever fails, the iteration's
  // flags are reset below: a step done again after a heal starts clean.
  std::exception_ptr error;
  try {
    if (!overlap_) run_buckets_after_backward();
  } catch (...) {
    error = std::current_exception();
  }
  {
    TraceSpan wait(*tracer_, TracePhase::kFinalizeWait);
    for (auto& b : buckets_) {
      try {
        if (b.work.valid()) b.work.get();
        finish_bucket(b);
      } catch (...) {
        if (!error) error = std::current_exception();
      }
    }
  }
  {
    std::lock_guard lock(mu_);
    reset_iteration_locked();
  }
  if (error) std::rethrow_exception(error);
  if (!options_.find_unused_parameters) {
    if (!missing.empty()) throw_unused(missing);
    return;
  }
  // Every rank takes part in this exchange every step, missing or not. A
  // parameter some rank used gets its average as gradient (the ones with a
  // gradient already got it on the communication thread); one no rank used
  // keeps none.
  std::vector<bool> used_here(params_.size(), true);
  for (size_t i : missing) used_here[i] = params_[i].tensor.grad().defined();
  const std::vector<bool> used = used_anywhere(used_here);
  at::NoGradGuard no_grad;
  for (size_t i : missing) {
    at::Tensor& p = params_[i].tensor;
    if (!p.grad().defined() && used[i]) {
      p.mutable_grad() = buckets_[bucket_of_[i]].slots[slot_of_[i]].view_as(p).clone();
    }
  }
}

void Reducer::finalize_after_backward() {
  std::vector<size_t> missing;
  std::vector<bool> used_here(params_.size(), true);
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!params_[i].tensor.grad().defined()) {
      missing.push_back(i);
      used_here[i] = false;
    }
  }
  if (!missing.empty() && !options_.find_unused_parameters) throw_unused(missing);
  // Only what some rank used travels; every rank agrees on that list.
  std::vector<size_t> to_sync;
  if (options_.find_unused_parameters) {
    const std::vector<bool> used = used_anywhere(used_here);
    for (size_t i = 0; i < params_.size(); ++i) {
      if (used[i]) to_sync.push_back(i);
    }
  } else {
    for (size_t i = 0; i < params_.size(); ++i) to_sync.push_back(i);
  }
  at::NoGradGuard no_grad;
  for (size_t i : to_sync) {
    at::Tensor& p = params_[i].tensor;
    if (!p.grad().defined()) p.mutable_grad() = at::zeros_like(p);
  }
  if (options_.strategy == SyncStrategy::kNaive) {
    for (size_t i : to_sync) {
      // On this thread, after backward: arg is the parameter's index.
      at::Tensor grad = params_[i].tensor.grad();
      TraceSpan span(*tracer_, TracePhase::kAllReduce, TraceTrack::kMain, static_cast<int64_t>(i), grad.nbytes());
      if (grad.is_contiguous()) {
        average(grad);
      } else {
        at::Tensor tmp = grad.contiguous();
        average(tmp);
        grad.copy_(tmp);
      }
    }
    return;
  }
  // kFlat: one flat buffer per dtype and device, one all_reduce each.
  std::map<std::string, std::vector<size_t>> groups;
  for (size_t i : to_sync) {
    groups[dtype_device_key(params_[i].tensor.grad())].push_back(i);
  }
  int64_t group_index = 0;
  for (const auto& [key, members] : groups) {
    TraceSpan span(*tracer_, TracePhase::kAllReduce, TraceTrack::kMain, group_index++);
    std::vector<at::Tensor> pieces;
    int64_t numel = 0;
    for (size_t i : members) {
      pieces.push_back(params_[i].tensor.grad().reshape(-1));
      numel += pieces.back().numel();
    }
    // The buffer outlives the step; with find_unused_parameters the set of
    // members (and so its length) may change, and then it is made again.
    at::Tensor& flat = flat_buffers_[key];
    if (!flat.defined() || flat.numel() != numel) flat = at::empty({numel}, pieces.front().options());
    at::cat_out(flat, pieces);
    average(flat);
    int64_t offset = 0;
    for (size_t i : members) {
      at::Tensor grad = params_[i].tensor.grad();
      grad.copy_(flat.narrow(0, offset, grad.numel()).view_as(grad));
      offset += grad.numel();
    }
  }
}

}  // namespace ddp
