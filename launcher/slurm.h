// Inside a Slurm job step (srun, or an sbatch script), ddprun takes its
// node count, node rank, rendezvous endpoint and job id from Slurm's
// environment. They become default flags put before the user's own, so a
// flag the user gives wins (the last value of a repeated flag counts).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "launcher/env_defaults.h"

namespace ddprun {

struct SlurmDefaults {
  std::vector<DefaultArg> args;   // flags to put before the user's arguments
  std::string summary;            // one line for the log; empty when nothing was derived
  std::string warning;            // said once logging is up; empty when none
};

// "node[01-03,7],gpu5" → node01 node02 node03 node7 gpu5, in Slurm's order.
// Throws UsageError naming SLURM_JOB_NODELIST when the list is malformed.
std::vector<std::string> expand_slurm_hostlist(const std::string& list);

// The rendezvous port of a multi-node job: 29400 + (job id mod 1000), so
// two jobs that share a first node rarely share a port. 29400 when the id
// is not a number.
int slurm_rdzv_port(const std::string& job_id);

// What the environment says, given the user's arguments (a --standalone
// there, or PET_STANDALONE, turns Slurm off; a --nnodes there, or
// PET_NNODES, keeps Slurm's node count and rank out). Nothing is derived
// outside a job step, or with DDPRUN_NO_SLURM=1.
// Throws UsageError: more than one task per node, a malformed SLURM_* value.
SlurmDefaults slurm_defaults(const std::map<std::string, std::string>& env,
                             const std::vector<std::string>& user_args);

// This process' environment as a map.
std::map<std::string, std::string> environment_map();

}  // namespace ddprun
