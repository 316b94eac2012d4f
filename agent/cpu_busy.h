// How long a worker has been busy: its processes ran on a CPU, or were
// runnable and waited for one. What hang detection asks before it calls a
// silent worker hung: a worker that computes, or would if a loaded machine
// gave it the CPU, is slow (GroupPolicy::on_beats). A hung one is asleep
// (a lock, a pipe, a dead peer) or stopped, and is busy for nothing.
//
// From the worker's cgroup (job_cgroup.h) where it has one: cpu.stat's
// usage_usec (every thread of every process it started, data-loader
// children included) plus cpu.pressure's "some" total (the time some of
// them were runnable and not running; absent without PSI). Without a
// cgroup, from /proc: the process's and its reaped children's CPU time
// (stat) and its main thread's run-queue wait (schedstat).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>

namespace ddprun {

// Cumulative busy time of the worker in `cgroup` ("" when none) whose
// process is `pid`; nullopt when neither can be read (it is gone).
std::optional<std::chrono::milliseconds> busy_time(const std::string& cgroup, pid_t pid);

// The parts, for tests: the cgroup files' and /proc's readings (µs).
std::optional<int64_t> cgroup_busy_us(const std::string& cgroup);
std::optional<int64_t> proc_busy_us(pid_t pid);

}  // namespace ddprun
