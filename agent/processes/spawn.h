// Starts one worker process. The child only makes async-signal-safe calls
// between clone and exec (the launcher has gRPC threads), and:
//  - dies with SIGKILL when the agent thread that started it dies
//    (PR_SET_PDEATHSIG), so no worker outlives a SIGKILLed launcher;
//  - leads its own process group, so the agent can signal the worker and
//    everything it started in one call;
//  - moves itself into its cgroup folder when given one (see job_cgroup.h),
//    so that nothing it starts can outlive the job;
//  - binds its CPUs and memory when asked (--numa-binding);
//  - gets an empty signal mask and default signal dispositions back.
#pragma once

#include <sys/types.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace ddprun {

struct SpawnRequest {
  std::string path;               // absolute or relative path, no PATH search
  std::vector<std::string> argv;  // argv[0] first
  std::vector<std::string> env;   // KEY=VALUE
  // When >= 0, handed to the child as its file descriptor 3 (a standby
  // worker's control pipe).
  int fd3 = -1;
  // When set, a cgroup v2 folder (made here) the child moves into before exec.
  std::string cgroup{};
  // When not empty, the child binds itself to these CPUs (sched_setaffinity)
  // and its memory to these NUMA nodes (set_mempolicy MPOL_BIND) before exec.
  std::vector<int> cpus{};
  std::vector<int> mem_nodes{};
};

struct SpawnedProcess {
  pid_t pid = -1;
  int stdout_fd = -1;  // read ends, non-blocking, close-on-exec
  int stderr_fd = -1;
  std::string cgroup;  // the folder it runs in, "" when none
};

class SpawnError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

SpawnedProcess spawn_process(const SpawnRequest& req);

// Finds the program to run: names with a '/' are taken as given; other names
// are looked up in `path_var` (a PATH value) and then in `extra_dirs`.
// Returns an empty string when nothing executable is found.
std::string resolve_program(const std::string& name, const std::string& path_var,
                            const std::vector<std::string>& extra_dirs);

// The folder holding the running executable ("/usr/bin" for /usr/bin/ddprun).
std::string executable_dir();

}  // namespace ddprun
