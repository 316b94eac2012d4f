// How long a worker has been busy: its processes ran on a CPU, or were
// runnable and waited for one. Hang detection asks before it calls a
// silent worker hung: a worker that computes, or would if a loaded machine
// gave it the CPU, is slow (GroupPolicy, Beats events). A hung one is asleep
// (a lock, a pipe, a dead peer) or stopped, and is busy for nothing.
// Straggler detection asks how much of a slow rank's time went waiting for
// a CPU: a rank slowed by the machine's load is no straggler.
//
// From the worker's cgroup (job_cgroup.h) where it has one: cpu.stat's
// usage_usec (every thread of every process it started, data-loader
// children included) and cpu.pressure's "some" total (the time some of
// them were runnable and not running; absent without PSI). Without a
// cgroup, from /proc: the process's and its reaped children's CPU time
// (stat) and its main thread's run-queue wait (schedstat).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>

namespace ddprun {

struct CpuTimes {
  std::chrono::microseconds used{0};    // on a CPU
  std::chrono::microseconds waited{0};  // runnable, waiting for one
  std::chrono::milliseconds busy() const {
    return std::chrono::duration_cast<std::chrono::milliseconds>(used + waited);
  }
};

// Cumulative times of the worker in `cgroup` ("" when none) whose process
// is `pid`; nullopt when neither can be read (it is gone).
std::optional<CpuTimes> cpu_times(const std::string& cgroup, pid_t pid);

// Whether a process state (/proc's State letter) is stopped: T (SIGSTOP)
// or t (a debugger holds it).
inline bool stopped_state(char state) { return state == 'T' || state == 't'; }
// Whether process `pid` is stopped now. False when it cannot be read.
bool process_stopped(pid_t pid);

// The parts, for tests: from the cgroup's files, and from /proc.
std::optional<CpuTimes> cgroup_cpu_times(const std::string& cgroup);
std::optional<CpuTimes> proc_cpu_times(pid_t pid);

}  // namespace ddprun
