// Keeps everything a job starts inside one cgroup v2 folder, so that no
// process is left behind when the job ends, however deep it is and whatever
// process group or session it made (setsid, double fork): the kernel kills
// a folder's whole subtree on a write of "1" to its cgroup.kill.
//
//   <cgroup2 mount><ddprun's cgroup>/ddprun-<pid>/     the job
//       w0/ w1/ ...                                     one per worker process
//
// Each worker moves itself into its folder before exec (spawn.cpp), so
// nothing it starts can escape. When the agent reaps a worker it kills the
// worker's folder (what it left behind goes with it); when the job ends the
// job's folder is killed and removed. A watchdog process (forked, detached,
// not in the job's folder) holds the read end of a pipe whose write end only
// the agent has: when ddprun dies in any way, even by SIGKILL, the kernel
// closes it and the watchdog kills the job's folder.
#pragma once

#include <memory>
#include <string>

namespace ddprun {

class JobCgroup {
 public:
  // Makes the job's folder, checks that a process can be moved into it, and
  // starts the watchdog. Returns nullptr, with why_not filled, where the
  // kernel or the permissions do not allow it (no cgroup2 mount, no
  // cgroup.kill before Linux 5.14, not root, a read-only cgroupfs).
  static std::unique_ptr<JobCgroup> create(std::string& why_not);
  ~JobCgroup();  // kills what is left in the job's folder, removes it, ends the watchdog
  JobCgroup(const JobCgroup&) = delete;
  JobCgroup& operator=(const JobCgroup&) = delete;

  // The folder for the next worker process (spawn_process makes it).
  std::string next_worker_dir();
  const std::string& dir() const { return dir_; }

  struct Handles;  // the open files ending the job needs (job_cgroup.cpp)

 private:
  JobCgroup(std::string dir, int watchdog_fd, const Handles& handles);
  std::string dir_;
  std::unique_ptr<Handles> handles_;
  int watchdog_fd_ = -1;  // write end of the watchdog's pipe
  int next_ = 0;
};

// Kills every process in a cgroup folder and its subfolders (nothing for an
// empty path). Does not wait.
void kill_cgroup(const std::string& dir);

}  // namespace ddprun
