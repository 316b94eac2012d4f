// Default command-line arguments taken from the environment, placed before
// the user's own so that the command line wins (a repeated flag takes its
// last value). torchrun reads PET_<FLAG> for each of its flags (PET_NNODES,
// PET_NPROC_PER_NODE, PET_RDZV_ENDPOINT, ...); ddprun does the same.
#pragma once

#include <string>
#include <vector>

namespace ddprun {

// One default: "--nnodes" "2", from PET_NNODES. A value that turns out
// wrong is reported under `source` ("PET_NNODES: expected ...").
struct DefaultArg {
  std::string flag;    // canonical name, "--nnodes"
  std::string value;   // empty for a flag without value
  std::string source;  // the variable it came from
};

// The PET_* variables of `environment` (KEY=VALUE entries) as defaults,
// and TORCH_ELASTIC_SHUTDOWN_TIMEOUT (torchrun 2.x) for --shutdown-timeout.
// A boolean flag's variable (PET_STANDALONE, PET_MODULE, ...) takes an
// integer, as torchrun's: non-zero turns the flag on. Throws UsageError
// naming the variable for a boolean that is not an integer.
std::vector<DefaultArg> pet_default_args(const std::vector<std::string>& environment);

}  // namespace ddprun
