// worker_lib: what a training program links to take part in a ddprun job.
// The one include: every header of the public API (include/ddp/).
//
//   auto world = ddp::init();                 // from the launch environment
//   int ws = ddp::get("ws"), rank = ddp::get("rank");
//   world->all_reduce(grad, ddp::ReduceOp::kAvg);
//   ddp::DistributedDataParallel<Net> model(Net(), *world);
#pragma once

#include "ddp/atomic_file.h"
#include "ddp/captured_step.h"
#include "ddp/checkpoint_files.h"
#include "ddp/checkpointer.h"
#include "ddp/collective_error.h"
#include "ddp/communicator.h"
#include "ddp/ddp_options.h"
#include "ddp/distributed_data_parallel.h"
#include "ddp/error_file.h"
#include "ddp/get.h"
#include "ddp/healer.h"
#include "ddp/launch_info.h"
#include "ddp/mesh.h"
#include "ddp/optim.h"
#include "ddp/progress.h"
#include "ddp/reduce_op.h"
#include "ddp/reducer.h"
#include "ddp/replicas.h"
#include "ddp/sampler.h"
#include "ddp/state_fence.h"
#include "ddp/stop_flag.h"
#include "ddp/trace.h"
#include "ddp/training_state.h"
#include "ddp/world.h"
