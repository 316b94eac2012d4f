// WorkerGroup's view of one worker process, shared by the files that
// carry WorkerGroup out (worker_group.cpp: start, reap, the loop;
// worker_group_heals.cpp: replacements and heal generations;
// worker_group_hangs.cpp: beats, stacks and hang verdicts;
// worker_group_replicas.cpp: the replicas' verdicts;
// worker_group_stragglers.cpp: straggler scores). Not for other code.
#pragma once

#include <sys/types.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "agent/supervision/worker_group.h"

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

// Whether the policy's commands start a replacement for worker i.
inline bool replaces(const std::vector<GroupCommand>& commands, int i) {
  return std::any_of(commands.begin(), commands.end(),
                     [i](const GroupCommand& c) { return c.kind == GroupCommand::kReplaceWorker && c.worker == i; });
}

}  // namespace ddprun
