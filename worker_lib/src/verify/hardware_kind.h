// This node's hardware kind, for the comparison of replicas: ranks on
// hardware of different kinds may round differently, so they are compared
// within their kind. DDPRUN_HARDWARE_KIND when the user names it, else the
// CPU's model name and, for a model on a GPU, the GPU's.
#pragma once

#include <ATen/ATen.h>

#include <string>

#include "ddp/launch_info.h"

namespace ddp {

// `device`: where the model's parameters are.
std::string hardware_kind(const LaunchInfo& info, const at::Device& device);

}  // namespace ddp
