// A checkpoint's state taken in two halves, so that training waits for
// almost none of it (ddp::Checkpointer):
//
//   refer_to_state()  on the training thread, at the save: copies what the
//                     next step changes before its optimizer step (the
//                     module's buffers, which forward updates; the RNG; the
//                     counters) and only refers to the rest, the parameters
//                     and the optimizer's tensors;
//   stage_state()     on the writer's thread, while the next step's forward
//                     and backward run: copies what was referred to.
//
// Between the two nothing may change the parameters or the optimizer's
// state: the Checkpointer's fence() waits for stage_state() to end, and
// DDP's backward, a heal and the next save call it.
#pragma once

#include <string>
#include <vector>

#include "ddp/training_state.h"

namespace ddp {

struct StagedState {
  TrainingState state;
  std::vector<std::string> parameters;  // state.model's names that refer to live tensors
};

// `reuse` (a state written earlier, no longer needed) lends its host
// tensors for the buffers' copies here and the rest's in stage_state().
StagedState refer_to_state(const torch::nn::Module& model, torch::optim::Optimizer& optimizer, int64_t step,
                           int64_t epoch, int64_t sampler_position, TrainingState* reuse);
void stage_state(StagedState& staged, TrainingState* reuse);

}  // namespace ddp
