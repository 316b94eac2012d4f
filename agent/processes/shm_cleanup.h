// Shared-memory segments a worker left behind. A worker that made a
// segment for its group's CPU collectives unlinks it as soon as every rank
// has it mapped; one that died in between leaves the name under /dev/shm.
// The agent, which reaps it, removes what carries its pid (the naming
// contract is channel/shm_names.h).
#pragma once

#include <sys/types.h>

#include <string>

namespace ddprun {

// Unlinks this user's segments made by worker `pid` under `dir` (the
// tmpfs behind shm_open); returns how many. Never throws.
int remove_worker_segments(pid_t pid, const std::string& dir);

}  // namespace ddprun
