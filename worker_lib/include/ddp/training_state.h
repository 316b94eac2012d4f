// Everything a training run needs to continue exactly where it was: the
// model's parameters and buffers, the optimizer's state, the step, epoch and
// sampler position, and the CPU random generator.
//
// capture_state() makes deep copies in host memory, so training can go on
// while a Checkpointer writes them; apply_state() puts them back. The file
// form (encode_state) is a pickle that Python's torch.load reads as a dict:
//   {"format": "ddprun-checkpoint/1", "step": int, "epoch": int,
//    "sampler_position": int, "model": {name: tensor},
//    "optimizer": {"kind": str, "lr": float64 tensor (one per group),
//                  "state": [{name: tensor}], "archive": uint8 tensor},
//    "rng": uint8 tensor, "fingerprint": int (state_fingerprint; files
//    before 2026-12 have none)}
// It holds only dicts, lists, strings, ints and tensors, so it loads with
// torch.load's safe default, weights_only=True (PyTorch 2.6+; 1.13 too).
#pragma once

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace ddp {

struct OptimizerState {
  // "sgd", "adam" or "adamw": per-parameter state tensors below; any other
  // optimizer is kept as LibTorch's own archive bytes ("archive").
  std::string kind;
  std::vector<double> lr;  // per parameter group
  // Per parameter, in param_groups order: "momentum_buffer" (SGD), or
  // "step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq" (Adam, AdamW).
  std::vector<std::map<std::string, at::Tensor>> params;
  std::string archive;
};

struct TrainingState {
  int64_t step = 0;              // optimizer steps completed
  int64_t epoch = 0;             // the epoch to continue in
  int64_t sampler_position = 0;  // samples of that epoch already read (per rank)
  std::map<std::string, at::Tensor> model;  // parameters and buffers by name
  OptimizerState optimizer;
  at::Tensor rng;  // the default CPU generator's state
};

// How capture_state and apply_state treat tensors already in host memory.
// kCopy: copies (the state lives on while training changes the model).
// kShare: the live tensors themselves (capture) and the state's tensors
// adopted by the optimizer (apply): for handing a state over at once while
// training waits, as a heal does (ddp::Healer), without a copy of gigabytes.
enum class StateTensors { kCopy, kShare };

// With `reuse` (an earlier capture of the same model, no longer needed), its
// host tensors are filled in place instead of allocated: copying into memory
// that is already mapped is about 3x faster than cloning.
TrainingState capture_state(const torch::nn::Module& model, torch::optim::Optimizer& optimizer,
                            int64_t step, int64_t epoch, int64_t sampler_position,
                            TrainingState* reuse = nullptr, StateTensors tensors = StateTensors::kCopy);

// Throws std::runtime_error naming the first parameter that is missing or
// has another shape, or an optimizer of another kind. A model tensor of the
// state that is the module's own (the same memory) is left as it is.
void apply_state(const TrainingState& state, torch::nn::Module& model,
                 torch::optim::Optimizer& optimizer, StateTensors tensors = StateTensors::kCopy);

// The fingerprint of a state's tensors (its model's by name, then its
// optimizer's): what encode_state records in the file ("fingerprint") and
// decode_state checks, so that a file whose tensors are not the ones it
// was written with is refused.
uint64_t state_fingerprint(const TrainingState& state);

std::vector<char> encode_state(const TrainingState& state);
// The same bytes handed to `sink` in pieces as they are made (the tensors'
// from their own memory), instead of gathered: what a Checkpointer writes
// to its file. An exception from the sink ends the writing; it is thrown
// from here.
using ByteSink = std::function<void(const void* data, size_t n)>;
void encode_state_to(const TrainingState& state, const ByteSink& sink);
// Throws std::runtime_error when the bytes are not a ddprun checkpoint, or
// its tensors do not match the fingerprint it records.
TrainingState decode_state(const std::vector<char>& bytes);

}  // namespace ddp
