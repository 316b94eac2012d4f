// Collectives on tensors across the ranks of a group. Implementations: Gloo
// (CPU tensors) and NCCL (CUDA tensors). Every call blocks until done or
// until its timeout passes; a timeout or a lost peer throws CollectiveError,
// so survivors of a dead rank fail fast instead of hanging. A communicator
// runs one call at a time: threads that share one must take turns.
//
// all_reduce_async is the exception: on a communicator that works on device
// streams (enqueues_on_device(), NCCL) it returns once the all_reduce is
// enqueued, and Work::wait() orders the caller's later device work after it
// without the host waiting. DDP's buckets go this way on the GPU.
//
//   ddp::Communicator& comm = world->cpu();  // or world->for_tensor(t)
//   comm.all_reduce(t, ddp::ReduceOp::kAvg, comm.default_timeout());
#pragma once

#include <ATen/ATen.h>

#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>

#include "ddp/collective_error.h"
#include "ddp/reduce_op.h"

namespace ddp {

// A tensor of a model's state with its name ("fc.weight"): what DDP's
// reducer, the Healer and the ranks' comparison of their replicas take.
struct NamedTensor {
  std::string name;
  at::Tensor tensor;
};

// A collective started by Communicator::all_reduce_async. Must not outlive
// its communicator.
class Work {
 public:
  virtual ~Work() = default;
  // Orders what the caller does next after the collective. On a communicator
  // that enqueues on device streams, kernels the caller enqueues on its
  // current stream from now on wait for it on the device, and wait() returns
  // at once; elsewhere the collective is already done. Throws
  // CollectiveError if the collective (or the communicator) failed or timed
  // out, as far as is known when it is called.
  virtual void wait() = 0;
};

class Communicator {
 public:
  using Timeout = std::chrono::milliseconds;
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // The timeout used when a call passes none.
  virtual Timeout default_timeout() const = 0;
  // "gloo" or "nccl".
  virtual std::string backend() const = 0;

  // In place: every rank ends with the reduction of all ranks' tensors.
  // kAvg needs a floating-point tensor.
  virtual void all_reduce(at::Tensor& tensor, ReduceOp op, Timeout timeout) = 0;
  void all_reduce(at::Tensor& tensor, ReduceOp op = ReduceOp::kSum) {
    all_reduce(tensor, op, default_timeout());
  }

  // Starts an in-place all_reduce; `tensor` must not be read or written
  // until the returned Work's wait(). This default runs the blocking
  // all_reduce before it returns.
  virtual std::unique_ptr<Work> all_reduce_async(at::Tensor tensor, ReduceOp op, Timeout timeout);
  // Whether all_reduce_async returns as soon as the collective is enqueued
  // on a device stream (NCCL), so that its caller needs no thread of its own
  // to overlap communication with computation.
  virtual bool enqueues_on_device() const { return false; }
  // Whether running collectives alongside computation (DDP's buckets during
  // backward) makes a step faster. False where the collectives are CPU work
  // of this process and the node has no core to spare for them (shared
  // memory with every core busy): overlapping then only time-slices the
  // same cores and thrashes their caches.
  virtual bool overlap_pays() const { return true; }
  // Watches what the caller's current device stream has enqueued so far (a
  // replayed CUDA graph's collectives, ddp/captured_step.h) as a collective
  // is watched: past `timeout`, or on the communicator's error, the
  // communicator is aborted and the returned Work's wait() throws
  // CollectiveError. nullptr where collectives do not run on device streams.
  virtual std::unique_ptr<Work> watch_stream(const char* what, Timeout timeout) {
    (void)what;
    (void)timeout;
    return nullptr;
  }

  // In place: every rank ends with root's tensor.
  virtual void broadcast(at::Tensor& tensor, int root, Timeout timeout) = 0;
  void broadcast(at::Tensor& tensor, int root = 0) { broadcast(tensor, root, default_timeout()); }

  // Returns a tensor of shape [size(), *input.sizes()] whose row r is rank r's input.
  virtual at::Tensor all_gather(const at::Tensor& input, Timeout timeout) = 0;
  at::Tensor all_gather(const at::Tensor& input) { return all_gather(input, default_timeout()); }

  // Returns once every rank has called it.
  virtual void barrier(Timeout timeout) = 0;
  void barrier() { barrier(default_timeout()); }

  // Makes a collective blocked in another thread, and every later one, fail
  // now with CollectiveError: a peer will never answer (the group heals
  // without it). Safe from any thread, more than once. The default does
  // nothing: the collective fails at its timeout.
  virtual void abort(const std::string& why) { (void)why; }
};

}  // namespace ddp
