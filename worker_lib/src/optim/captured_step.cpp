// ddp::CapturedStep (ddp/captured_step.h): warm-up, capture and replay of a
// whole training step on a GPU; the body, eager, everywhere else.
#include "ddp/captured_step.h"

#include <sstream>
#include <stdexcept>
#include <utility>

#include "ddp/collective_error.h"
#include "ddp/communicator.h"

#if DDPRUN_TORCH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace ddp {

namespace {

std::string shape_string(const std::vector<int64_t>& sizes, c10::ScalarType dtype, c10::Device device) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < sizes.size(); ++i) os << (i ? ", " : "") << sizes[i];
  os << "] " << c10::toString(dtype) << " on " << device.str();
  return os.str();
}

#if DDPRUN_TORCH_CUDA
std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }
#endif

}  // namespace

struct CapturedStep::Graph {
#if DDPRUN_TORCH_CUDA
  explicit Graph(c10::DeviceIndex index)
      : device(index), side(at::cuda::getStreamFromPool(/*isHighPriority=*/false, index)) {}
  c10::DeviceIndex device;
  at::cuda::CUDAStream side;  // warm-ups and the capture run here (a capture needs a stream of its own)
  // The step in two graphs, cut where the optimizer's step begins: `graph`
  // (forward, backward, DDP's all-reduce, clip) and `update` (the
  // optimizer's step and what follows it), in one memory pool. Declared in
  // that order: `update` is destroyed first.
  std::unique_ptr<at::cuda::CUDAGraph> graph, update;
  std::vector<torch::Tensor> inputs, outputs;  // what the graphs read and write
#endif
};

#if DDPRUN_TORCH_CUDA
namespace {

// Runs fn on `side`, ordered after the work `current` has and before what
// `current` gets next.
template <class Fn>
auto on_side(at::cuda::CUDAStream current, at::cuda::CUDAStream side, Fn&& fn) {
  at::cuda::CUDAEvent ready;
  ready.record(current);
  ready.block(side);
  decltype(fn()) out;
  {
    c10::cuda::CUDAStreamGuard guard(side);
    out = fn();
  }
  at::cuda::CUDAEvent done;
  done.record(side);
  done.block(current);
  return out;
}

// Clears the optimizer's update hook however the capture ends.
struct UpdateHook {
  UpdateHook(CapturableOptimizer& opt, std::function<void()> hook) : opt(opt) { opt.set_update_hook(std::move(hook)); }
  ~UpdateHook() { opt.set_update_hook(nullptr); }
  CapturableOptimizer& opt;
};

}  // namespace
#endif

CapturedStep::CapturedStep(World& world, CapturableOptimizer& optimizer, Body body, CapturedStepOptions options)
    : world_(world),
      optimizer_(optimizer),
      body_(std::move(body)),
      options_(options),
      generation_(world.generation()) {
  if (!body_) throw std::invalid_argument("ddp::CapturedStep: the body is empty");
  if (options_.warmup_steps < 1) {
    throw std::invalid_argument("ddp::CapturedStepOptions::warmup_steps " + std::to_string(options_.warmup_steps) +
                                ": at least 1 (DDP's gradients become bucket views in the first step)");
  }
  optimizer_.set_capturable(true);
}

CapturedStep::~CapturedStep() = default;

bool CapturedStep::captured() const {
#if DDPRUN_TORCH_CUDA
  return graph_ && graph_->graph;
#else
  return false;
#endif
}

void CapturedStep::reset() {
  graph_.reset();
  warm_ = 0;
}

bool CapturedStep::on_gpu(const std::vector<torch::Tensor>& inputs) const {
#if DDPRUN_TORCH_CUDA
  return options_.capture && !inputs.empty() && inputs[0].device().is_cuda();
#else
  (void)inputs;
  return false;
#endif
}

// The graph reads its inputs from fixed tensors: every run brings the
// shapes of the first.
void CapturedStep::check_inputs(const std::vector<torch::Tensor>& inputs) {
  if (shapes_.empty()) {
    for (const auto& t : inputs) {
      if (!t.defined()) throw std::invalid_argument("ddp::CapturedStep: an input is an undefined tensor");
      shapes_.push_back({t.sizes().vec(), t.scalar_type(), t.device()});
    }
    return;
  }
  if (inputs.size() != shapes_.size()) {
    throw std::invalid_argument("ddp::CapturedStep: run() got " + std::to_string(inputs.size()) +
                                " inputs; the step was prepared for " + std::to_string(shapes_.size()));
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Shape& want = shapes_[i];
    const torch::Tensor& t = inputs[i];
    if (!t.defined() || t.sizes().vec() != want.sizes || t.scalar_type() != want.dtype || t.device() != want.device) {
      const std::string got = t.defined() ? shape_string(t.sizes().vec(), t.scalar_type(), t.device()) : "undefined";
      throw std::invalid_argument("ddp::CapturedStep: input " + std::to_string(i) + " is " + got +
                                  "; the step was prepared for " + shape_string(want.sizes, want.dtype, want.device) +
                                  " (a captured step takes one shape: drop a short last batch, or pad it)");
    }
  }
}

std::vector<torch::Tensor> CapturedStep::run(const std::vector<torch::Tensor>& inputs) {
  check_inputs(inputs);
  // A heal connected a new communicator (the graph holds the old one's
  // collectives) and may have received state into new tensors.
  if (world_.generation() != generation_) {
    generation_ = world_.generation();
    ++heals_seen_;
    reset();
  }
  if (!on_gpu(inputs)) {
    ++eager_runs_;
    return body_(inputs);
  }
#if DDPRUN_TORCH_CUDA
  const c10::Device device = inputs[0].device();
  if (!graph_) graph_ = std::make_unique<Graph>(device.index());
  Graph& g = *graph_;
  at::cuda::CUDAStream current = at::cuda::getCurrentCUDAStream(device.index());
  if (warm_ < options_.warmup_steps) {
    ++warm_;
    ++eager_runs_;
    return on_side(current, g.side, [&] { return body_(inputs); });
  }
  // A checkpoint still copying the state in the background ends first: the
  // graph's optimizer step changes it, and no DDP finalize waits in a replay.
  world_.state_fence().wait();
  if (!g.graph) {
    capture(g, inputs);
  } else {
    for (size_t i = 0; i < inputs.size(); ++i) g.inputs[i].copy_(inputs[i], /*non_blocking=*/true);
  }
  // 1. The step up to the optimizer (forward, backward, DDP's all-reduce,
  //    clip), and the host waits for it: a failed peer (or a replay past
  //    the timeout) throws here, inside the Healer's step, before anything
  //    the step keeps has changed, so the Healer's retry steps once.
  optimizer_.before_replay();
  g.graph->replay();
  wait_for_replay(g, "captured step");
  // 2. Its collectives completed: the optimizer's step, then the counts the
  //    device took (the state that checkpoints and heals carry).
  if (g.update) {
    g.update->replay();
    wait_for_replay(g, "captured step's update");
    optimizer_.after_replay();
  }
  return g.outputs;
#else
  return body_(inputs);  // unreachable: on_gpu() is false without CUDA
#endif
}

#if DDPRUN_TORCH_CUDA
// Captures the body on the side stream as two graphs: the optimizer's
// update hook, called as its step begins, ends the first and begins the
// second in the first's memory pool (replayed in the order captured, the
// two may share it). Nothing runs while capturing; the caller replays.
void CapturedStep::capture(Graph& g, const std::vector<torch::Tensor>& inputs) {
  const c10::Device device(c10::DeviceType::CUDA, g.device);
  const std::string why = optimizer_.why_not_capturable(device);
  if (!why.empty()) {
    throw std::runtime_error("ddp::CapturedStep: the optimizer's step cannot be captured: " + why +
                             " (or set CapturedStepOptions::capture = false)");
  }
  g.inputs.clear();
  for (const auto& t : inputs) g.inputs.push_back(t.clone());
  optimizer_.before_replay();  // the learning-rate and step tensors the graph reads
  at::cuda::CUDAStream current = at::cuda::getCurrentCUDAStream(g.device);
  auto graph = std::make_unique<at::cuda::CUDAGraph>();
  std::unique_ptr<at::cuda::CUDAGraph> update;
  at::cuda::CUDAGraph* capturing = nullptr;  // the graph a capture is open on
  g.outputs = on_side(current, g.side, [&] {
    UpdateHook hook(optimizer_, [&] {
      if (update) return;  // a second step() in the body: in the update too
      capturing = nullptr;
      graph->capture_end();
      update = std::make_unique<at::cuda::CUDAGraph>();
      update->capture_begin(graph->pool());
      capturing = update.get();
    });
    graph->capture_begin();
    capturing = graph.get();
    std::vector<torch::Tensor> out;
    try {
      out = body_(g.inputs);
      capturing->capture_end();
    } catch (const std::exception& e) {
      try {
        if (capturing) capturing->capture_end();  // leaves capture mode, whatever the body did
      } catch (...) {
      }
      // A peer failed while this rank captured: the Healer heals, and the
      // next generation captures afresh.
      if (dynamic_cast<const CollectiveError*>(&e)) throw;
      throw std::runtime_error("ddp::CapturedStep: the step cannot be captured as a CUDA graph: " +
                               first_line(e.what()) +
                               " (keep the body on the device: no .item() or copies to the host, no blocking "
                               "collective; or set CapturedStepOptions::capture = false)");
    }
    return out;
  });
  g.graph = std::move(graph);
  g.update = std::move(update);
  ++captures_;
  // The body's host code counted the optimizer's steps as it was captured
  // (its step() began the update graph); the replay counts them.
  if (g.update) optimizer_.after_capture();
}

// The replay's collectives, watched as one: past the timeout, or on NCCL's
// error, the communicator is aborted (its kernels then end) and this
// throws CollectiveError. The host waits for the replay here.
void CapturedStep::wait_for_replay(Graph& g, const char* what) {
  Communicator& comm = world_.cuda();
  const auto timeout = options_.timeout.count() > 0 ? options_.timeout : comm.default_timeout();
  std::unique_ptr<Work> watch = comm.watch_stream(what, timeout);
  at::cuda::getCurrentCUDAStream(g.device).synchronize();
  if (watch) watch->wait();
}
#endif

std::string CapturedStep::describe() const {
  std::ostringstream os;
  if (captured()) {
    os << "captured (" << eager_runs_ << " eager runs, " << captures_ << (captures_ == 1 ? " graph" : " graphs");
  } else if (!shapes_.empty() && shapes_[0].device.is_cuda() && options_.capture) {
    os << "warming up (" << eager_runs_ << " eager runs, " << captures_ << " graphs";
  } else {
    const bool gpu = !shapes_.empty() && shapes_[0].device.is_cuda();
    os << "eager on " << (shapes_.empty() ? std::string("cpu") : shapes_[0].device.str()) << " (" << eager_runs_
       << " runs; " << (gpu ? "capture off" : "CUDA graphs need a GPU");
  }
  if (heals_seen_ > 0) os << "; prepared again after " << heals_seen_ << (heals_seen_ == 1 ? " heal" : " heals");
  os << ")";
  return os.str();
}

}  // namespace ddp
