// DistributedDataParallel for LibTorch modules: wraps a module (any
// torch::nn::ModuleHolder, e.g. what TORCH_MODULE makes), calls its
// forward, and averages gradients over the ranks through a Reducer.
//
//   ddp::DistributedDataParallel<Net> model(Net(), *world);
//   auto loss = criterion(model(x), y);
//   loss.backward();         // ends with gradients averaged over the ranks
//   optimizer.step();
//
// (kNaive and kFlat have no hooks: call model.finalize() between the two;
// with the default kBucketed a finalize() by hand is a harmless no-op.)
//
//   { auto guard = model.no_sync(); micro_loss.backward(); }  // accumulate only
#pragma once

#include <torch/nn/module.h>

#include <utility>
#include <vector>

#include "ddp/reducer.h"
#include "ddp/trace.h"
#include "ddp/world.h"

namespace ddp {

// The module's trainable parameters and its buffers, with their dotted names.
std::vector<NamedTensor> trainable_parameters(const torch::nn::Module& module);
std::vector<NamedTensor> named_buffers(const torch::nn::Module& module);

template <typename ModuleHolder>
class DistributedDataParallel {
 public:
  // Collective: every rank of comm constructs it with the same model.
  DistributedDataParallel(ModuleHolder module, Communicator& comm, DdpOptions options = {})
      : module_(std::move(module)),
        reducer_(trainable_parameters(*module_), named_buffers(*module_), comm, options) {}

  // Over the whole world, on the communicator that matches the parameters'
  // device (Gloo for CPU, NCCL for CUDA).
  DistributedDataParallel(ModuleHolder module, World& world, DdpOptions options = {})
      : DistributedDataParallel(module, communicator_for(world, *module), with_tracer(options, world)) {}

  // A forward with grad mode on starts an iteration (see
  // Reducer::prepare_for_backward), as PyTorch's DDP forward does. Recorded
  // as kForward.
  template <typename... Args>
  decltype(auto) operator()(Args&&... args) {
    TraceSpan span(reducer_.tracer(), TracePhase::kForward);
    if (at::GradMode::is_enabled()) {
      reducer_.verify_if_due();  // the replicas compared, when due (DdpOptions::verify_every)
      reducer_.prepare_for_backward();
    }
    return module_->forward(std::forward<Args>(args)...);
  }
  template <typename... Args>
  decltype(auto) forward(Args&&... args) {
    return (*this)(std::forward<Args>(args)...);
  }

  ModuleHolder& module() { return module_; }
  void train(bool on = true) { module_->train(on); }
  void eval() { module_->eval(); }

  void finalize() { reducer_.finalize(); }
  [[nodiscard]] Reducer::NoSync no_sync() { return reducer_.no_sync(); }
  void enable_grad_sync() { reducer_.enable_grad_sync(); }
  void disable_grad_sync() { reducer_.disable_grad_sync(); }
  bool grad_sync_enabled() const { return reducer_.grad_sync_enabled(); }
  Reducer& reducer() { return reducer_; }

 private:
  static DdpOptions with_tracer(DdpOptions o, World& world) {
    if (!o.tracer) o.tracer = &world.tracer();
    if (!o.state_fence) o.state_fence = &world.state_fence();
    if (world.replacement()) o.init_sync = InitSync::kNone;  // the heal brings the state
    // Comparisons: a replacement's forward passes are not its peers' (it
    // heals through a Healer, which compares instead).
    if (o.verify_every < 0) o.verify_every = world.replacement() ? 0 : world.info().verify_every;
    if (!o.verify_comm) o.verify_comm = &world.cpu();
    if (!o.replicas) o.replicas = &world.replicas();
    if (!o.heartbeat) o.heartbeat = world.heartbeat_handle();
    if (!o.launch) o.launch = &world.info();
    return o;
  }
  static Communicator& communicator_for(World& world, const torch::nn::Module& m) {
    for (const auto& p : m.parameters()) {
      if (p.device().is_cuda()) return world.cuda();
    }
    return world.cpu();
  }

  ModuleHolder module_;
  Reducer reducer_;
};

}  // namespace ddp
