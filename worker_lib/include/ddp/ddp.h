// worker_lib: what a training program links to take part in a ddprun job.
//
//   auto world = ddp::init();                 // from the launch environment
//   int ws = ddp::get("ws"), rank = ddp::get("rank");
//   world->all_reduce(grad, ddp::ReduceOp::kAvg);
//   ddp::DistributedDataParallel<Net> model(Net(), *world);
#pragma once

#include "ddp/bucket_plan.h"
#include "ddp/checkpointer.h"
#include "ddp/communicator.h"
#include "ddp/ddp_options.h"
#include "ddp/distributed_data_parallel.h"
#include "ddp/error_file.h"
#include "ddp/get.h"
#include "ddp/gloo_communicator.h"
#include "ddp/healer.h"
#include "ddp/heartbeat.h"
#include "ddp/launch_info.h"
#include "ddp/mesh.h"
#include "ddp/nccl_communicator.h"
#include "ddp/reducer.h"
#include "ddp/sampler.h"
#include "ddp/shm_communicator.h"
#include "ddp/standby.h"
#include "ddp/stop_flag.h"
#include "ddp/training_state.h"
#include "ddp/two_level_communicator.h"
#include "ddp/world.h"
