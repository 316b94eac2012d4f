// worker_lib: what a training program links to take part in a ddprun job.
//
//   auto world = ddp::init();                 // from the launch environment
//   int ws = ddp::get("ws"), rank = ddp::get("rank");
//   world->all_reduce(grad, ddp::ReduceOp::kAvg);
#pragma once

#include "ddp/communicator.h"
#include "ddp/error_file.h"
#include "ddp/gloo_communicator.h"
#include "ddp/launch_info.h"
#include "ddp/nccl_communicator.h"
#include "ddp/world.h"
