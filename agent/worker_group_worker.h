// WorkerGroup's view of one worker process, shared by the files that
// carry WorkerGroup out (worker_group.cpp: start, reap, heal;
// worker_group_hangs.cpp: stacks and hang verdicts;
// worker_group_stragglers.cpp: straggler scores). Not for other code.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>

#include "agent/worker_group.h"

namespace ddprun {

struct WorkerGroup::Worker {
  const WorkerLaunch* launch = nullptr;
  pid_t pid = -1;
  int fds[2] = {-1, -1};  // stdout, stderr read ends
  std::string cgroup;     // its cgroup folder, "" when not contained
  std::unique_ptr<WorkerOutput> output;
  // It had exited (not yet reaped) when the group was asked to stop.
  bool exited_before_stop = false;
  // The replica verdicts its slot held when last read (check_replicas),
  // and whether it asked to be replaced (apart twice) and waits for it.
  uint32_t replica_verdicts = 0;
  bool apart_to_replace = false;
  // Whether it runs (started, not reaped) is the policy's to say: alive(i).
};

}  // namespace ddprun
