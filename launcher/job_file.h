// How `ddprun status` finds the jobs this user runs on this machine: each
// running ddprun writes a small job file (run id, rendezvous endpoint,
// token, pid) and removes it when it ends. One-node jobs host a private
// rendezvous on an ephemeral loopback port with a generated token, so this
// is the only way to reach them.
//
// The files live in a folder of the user's own, $XDG_RUNTIME_DIR/ddprun or
// else /tmp/ddprun-<uid>, mode 0700, each file 0600. The token must stay
// the user's, and a file another user planted must never be trusted: the
// folder and every file are opened without following symbolic links and
// used only when this user owns them and nobody else can read or write them.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "rendezvous/wire/security.h"

namespace ddprun {

struct JobFileEntry {
  std::string run_id;
  std::string endpoint;  // host:port of the job's rendezvous
  RendezvousAuth auth;   // its token and TLS files
  long pid = 0;          // of the ddprun that wrote it
  std::string start_time;  // the process's start (/proc/PID/stat), against pid reuse
  std::string netns;     // its network namespace ("net:[4026531840]"; "" in older files)
};

// This process's network namespace, as /proc/self/ns/net names it.
std::string own_netns();

// Why `ddprun status` must not send the job's token to its endpoint ("":
// it may): the job runs in another network namespace (its loopback is not
// ours: another process may listen at the same address here), its ddprun
// is not this user's, or no listening socket of that ddprun serves the
// endpoint's port (the rendezvous is another host's, or another process
// holds the port now). Each proven from /proc.
std::string why_not_contacted(const JobFileEntry& e);

// This user's job folder (not created).
std::string job_dir();

// The folder, made if missing and checked (a directory, not a link, owned by
// this user, mode 0700); throws std::runtime_error saying what is wrong.
// Returns an open descriptor of it (O_DIRECTORY, close-on-exec).
int open_job_dir(const std::string& dir, bool create);

// This process's job file, written at construction and removed at
// destruction. Throws std::runtime_error when it cannot be written (the
// caller warns and runs on: only `ddprun status` needs it).
class JobFile {
 public:
  explicit JobFile(const JobFileEntry& entry, const std::string& dir = job_dir());
  ~JobFile();
  JobFile(const JobFile&) = delete;
  JobFile& operator=(const JobFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  int dir_fd_ = -1;
  std::string name_;
  std::string path_;
};

// The jobs of running ddprun processes of this user, oldest pid first.
// Files of processes that are gone are removed; files that are not this
// user's own, private, well-formed ones are skipped (each adds a line to
// warnings). Throws std::runtime_error when the folder is unsafe; an
// absent folder means no jobs.
std::vector<JobFileEntry> running_jobs(std::vector<std::string>& warnings,
                                       const std::string& dir = job_dir());

// Where the ddprun of pid `pid` copies the stacks asked of it
// (`ddprun status --stacks`): in the job folder, beside its job file.
std::string asked_stacks_path(const std::string& dir, long pid);

// The start time of process pid (field 22 of /proc/PID/stat), "" if gone.
std::string process_start_time(long pid);

}  // namespace ddprun
