// Collectives on tensors across the ranks of a group. Implementations: Gloo
// (CPU tensors) and NCCL (CUDA tensors). Every call blocks until done or
// until its timeout passes; a timeout or a lost peer throws CollectiveError,
// so survivors of a dead rank fail fast instead of hanging. A communicator
// runs one call at a time: threads that share one must take turns.
#pragma once

#include <ATen/ATen.h>

#include <chrono>
#include <stdexcept>
#include <string>

#include "ddp/collective_error.h"

namespace ddp {

enum class ReduceOp { kSum, kAvg, kMax, kMin };

std::string to_string(ReduceOp op);

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

  // In place: every rank ends with root's tensor.
  virtual void broadcast(at::Tensor& tensor, int root, Timeout timeout) = 0;
  void broadcast(at::Tensor& tensor, int root = 0) { broadcast(tensor, root, default_timeout()); }

  // Returns a tensor of shape [size(), *input.sizes()] whose row r is rank r's input.
  virtual at::Tensor all_gather(const at::Tensor& input, Timeout timeout) = 0;
  at::Tensor all_gather(const at::Tensor& input) { return all_gather(input, default_timeout()); }

  // Returns once every rank has called it.
  virtual void barrier(Timeout timeout) = 0;
  void barrier() { barrier(default_timeout()); }
};

}  // namespace ddp
