// A training step captured once as a CUDA graph and replayed: forward,
// backward with DDP's bucketed all-reduce, the clip and the optimizer step
// launch as one graph instead of thousands of kernels from the host.
//
//   ddp::AdamW opt(groups, options);                       // kAuto: fused
//   ddp::CapturedStep step(*world, opt, [&](const std::vector<torch::Tensor>& in) {
//     opt.zero_grad(/*set_to_none=*/false);                 // in place: the graph keeps the tensors
//     torch::Tensor loss = criterion(model(in[0]), in[1]);
//     loss.backward();                                      // DDP averages the gradients
//     torch::Tensor norm = ddp::clip_grad_norm_(params, 1.0);
//     opt.step();
//     return std::vector<torch::Tensor>{loss.detach(), norm};
//   });
//   while (...) {
//     set_lr(opt, schedule(step_no));                       // options as usual: read at each replay
//     healer.step([&] {
//       auto out = step.run({x, y});                        // the outputs: valid until the next run
//       ++step_no;
//     });
//   }
//
// On CUDA (LibTorch with CUDA, inputs on a GPU) the first warmup_steps runs
// are eager, on a side stream (DDP's gradients become views of its
// buckets, the allocator settles); the next one captures the body and
// replays it; every later run copies the inputs into the graph's and
// replays. Nothing of the body's host code runs in a replay: the optimizer
// is made capturable (ddp/optim.h: learning rate and step counts on the
// device, the host's counts kept by after_replay), and DDP's collectives
// are recorded into the graph (the NCCL runner's capture path).
// The step is captured as two graphs, cut where the optimizer's step
// begins. A run replays the first (forward, backward, all-reduce, clip)
// and waits for it, watched as a collective is (its timeout, NCCL's
// errors); only then the second (the optimizer's step). A failed peer thus
// throws CollectiveError from run(), inside the Healer's step, with this
// rank's parameters and optimizer state as they were before the step, as
// an eager step leaves them: the Healer's retry steps once, on complete
// gradients. A heal (a new communicator, perhaps state received into new
// memory) drops the graphs: the step warms up and captures again.
// Elsewhere (CPU, or capture = false) every run is the body, eager, with
// the optimizer capturable all the same: the same arithmetic a replay does
// (on CPU bit for bit the plain fused step).
//
// Static shapes: run() takes inputs of the shapes, dtypes and devices of
// its first call, and throws std::invalid_argument naming the input
// otherwise, on CPU too. What cannot be captured (a host sync such as
// .item() in the body, a blocking collective, an optimizer whose step
// reads the host) throws std::runtime_error from the capturing run()
// naming why and the option that turns capture off.
// Call reset() after replacing the model's or the optimizer's tensors
// (loading a checkpoint into new tensors) or their hyperparameters other
// than the learning rate.
#pragma once

#include <torch/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ddp/optim.h"
#include "ddp/world.h"

namespace ddp {

struct CapturedStepOptions {
  // Eager runs before the capture, on a GPU. At least 1.
  int warmup_steps = 3;
  // False: never capture; every run is the body, eager.
  bool capture = true;
  // How long a replay may take before its communicator is aborted and the
  // next run() throws; zero: the CUDA communicator's timeout.
  std::chrono::milliseconds timeout{0};
};

class CapturedStep {
 public:
  using Body = std::function<std::vector<torch::Tensor>(const std::vector<torch::Tensor>& inputs)>;
  // Makes `optimizer` capturable. Throws std::invalid_argument for
  // warmup_steps < 1 or an empty body.
  CapturedStep(World& world, CapturableOptimizer& optimizer, Body body, CapturedStepOptions options = {});
  ~CapturedStep();
  CapturedStep(const CapturedStep&) = delete;
  CapturedStep& operator=(const CapturedStep&) = delete;

  // One training step on `inputs` (see above). Returns the body's outputs;
  // after a replay they are the graph's tensors, overwritten by the next
  // run: clone what must outlive it.
  std::vector<torch::Tensor> run(const std::vector<torch::Tensor>& inputs);
  // Drops the graph: the next runs warm up and capture again.
  void reset();

  // Whether the next run replays a graph.
  bool captured() const;
  // Graphs captured so far (a heal or a reset makes another).
  int64_t captures() const { return captures_; }
  // Runs that were the body, eager (warm-ups, and every run off the GPU).
  int64_t eager_runs() const { return eager_runs_; }
  // Times the step was prepared afresh because the world changed (a heal).
  int64_t heals_seen() const { return heals_seen_; }
  // Where it stands, for a log line: "captured (3 eager runs, 1 graph)",
  // "eager on cpu (...)".
  std::string describe() const;

 private:
  struct Graph;  // the CUDA graph and its static tensors (CUDA builds)
  void check_inputs(const std::vector<torch::Tensor>& inputs);
  void capture(Graph& g, const std::vector<torch::Tensor>& inputs);
  void wait_for_replay(Graph& g, const char* what);
  bool on_gpu(const std::vector<torch::Tensor>& inputs) const;

  World& world_;
  CapturableOptimizer& optimizer_;
  Body body_;
  CapturedStepOptions options_;
  uint32_t generation_;
  struct Shape {
    std::vector<int64_t> sizes;
    c10::ScalarType dtype;
    c10::Device device;
  };
  std::vector<Shape> shapes_;  // of the first run's inputs
  std::unique_ptr<Graph> graph_;
  int warm_ = 0;  // eager runs since the last reset
  int64_t captures_ = 0, eager_runs_ = 0, heals_seen_ = 0;
};

}  // namespace ddp
