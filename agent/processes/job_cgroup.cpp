#include "agent/processes/job_cgroup.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <vector>

namespace ddprun {

// The job folder's file descriptors, opened before the watchdog is forked:
// what ending the job needs, with system calls only (the watchdog is a fork
// of a process with threads, so it may make async-signal-safe calls only).
struct JobCgroup::Handles {
  int dir = -1;     // the job's folder
  int parent = -1;  // the folder holding it
  int kill = -1;    // its cgroup.kill
  int events = -1;  // its cgroup.events ("populated 0|1")
  char name[64] = {0};
};

namespace {

using Handles = JobCgroup::Handles;

bool populated(int events_fd) {
  char buf[256];
  const ssize_t n = pread(events_fd, buf, sizeof(buf), 0);
  return n > 0 && memmem(buf, static_cast<size_t>(n), "populated 1", 11) != nullptr;
}

// Kills everything in the job's folder, waits (boundedly: a process stuck
// in the kernel must not hold ddprun) until the kernel says it is empty,
// then removes the per-worker folders and the job's own.
void kill_and_remove(const Handles& h) {
  if (write(h.kill, "1", 1) < 0) {
    // Gone already (removed by the agent before the watchdog got here).
  }
  for (int i = 0; i < 100 && populated(h.events); ++i) {
    // cgroup.events wakes poll() with POLLPRI when it changes.
    pollfd p{h.events, POLLPRI, 0};
    poll(&p, 1, 50);
  }
  char buf[4096];
  lseek(h.dir, 0, SEEK_SET);
  ssize_t n;
  while ((n = getdents64(h.dir, buf, sizeof(buf))) > 0) {
    for (ssize_t off = 0; off < n;) {
      auto* d = reinterpret_cast<dirent64*>(buf + off);
      if (d->d_type == DT_DIR && strcmp(d->d_name, ".") != 0 && strcmp(d->d_name, "..") != 0) {
        unlinkat(h.dir, d->d_name, AT_REMOVEDIR);
      }
      off += d->d_reclen;
    }
  }
  unlinkat(h.parent, h.name, AT_REMOVEDIR);
}

struct WatchdogArgs {
  Handles handles;
  int pipe_r = -1;
  char* grandchild_stack = nullptr;  // top of the stack for the watchdog itself
};

// The watchdog: waits until every write end of its pipe is closed (the
// agent is done, or dead), then ends the job's folder.
int watchdog_main(void* arg) {
  auto* a = static_cast<WatchdogArgs*>(arg);
  setsid();  // no terminal signals (a Ctrl-C to ddprun's process group)
  prctl(PR_SET_NAME, "ddprun-watchdog");
  const int keep[] = {a->pipe_r, a->handles.dir, a->handles.parent, a->handles.kill, a->handles.events};
  // Hold nothing of ddprun's open (its console, sockets, workers' pipes).
  for (int fd = 0; fd < 1024; ++fd) {
    bool kept = false;
    for (int k : keep) kept = kept || k == fd;
    if (!kept) close(fd);
  }
  syscall(SYS_close_range, 1024u, ~0u, 0u);
  char c;
  while (true) {
    const ssize_t n = read(a->pipe_r, &c, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
  }
  kill_and_remove(a->handles);
  _exit(0);
}

// Forked from the agent only to fork the watchdog and exit, so that the
// watchdog is nobody's child (it is not mistaken for a worker, and it is not
// killed with the agent).
int watchdog_parent_main(void* arg) {
  auto* a = static_cast<WatchdogArgs*>(arg);
  _exit(clone(watchdog_main, a->grandchild_stack, 0, a) < 0 ? 1 : 0);
}

struct MoveProbe {
  int procs_fd;
  int err;
};

int move_probe_main(void* arg) {
  auto* a = static_cast<MoveProbe*>(arg);
  if (write(a->procs_fd, "0", 1) != 1) a->err = errno;
  _exit(0);
}

// Whether a process can move itself into dir: a child tries it.
std::string check_move(const std::string& dir) {
  const std::string probe = dir + "/probe";
  if (mkdir(probe.c_str(), 0755) != 0) return "cannot make " + probe + ": " + strerror(errno);
  MoveProbe m{open((probe + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC), 0};
  std::string why;
  if (m.procs_fd < 0) {
    why = "cannot open " + probe + "/cgroup.procs: " + strerror(errno);
  } else {
    std::vector<char> stack(16 * 1024);
    const pid_t pid = clone(move_probe_main, stack.data() + stack.size(), CLONE_VM | CLONE_VFORK | SIGCHLD, &m);
    if (pid < 0) {
      why = std::string("clone: ") + strerror(errno);
    } else {
      int status;
      while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      if (m.err != 0) why = "cannot move a process into " + probe + ": " + strerror(m.err);
    }
    close(m.procs_fd);
  }
  rmdir(probe.c_str());
  return why;
}

// The cgroup2 folder ddprun runs in, from /proc/self/mountinfo and
// /proc/self/cgroup; empty (and why) when there is none.
std::string own_cgroup2_dir(std::string& why) {
  std::ifstream mounts("/proc/self/mountinfo");
  std::string line, root, mount_point;
  while (std::getline(mounts, line)) {
    // "id parent maj:min root mount-point options ... - fstype source options"
    const auto dash = line.find(" - ");
    if (dash == std::string::npos || line.compare(dash + 3, 8, "cgroup2 ") != 0) continue;
    std::istringstream f(line);
    std::string id, parent, dev;
    f >> id >> parent >> dev >> root >> mount_point;
    break;
  }
  if (mount_point.empty()) {
    why = "no cgroup2 file system is mounted";
    return "";
  }
  std::ifstream self("/proc/self/cgroup");
  std::string own;
  while (std::getline(self, line)) {
    if (line.rfind("0::", 0) == 0) own = line.substr(3);
  }
  if (own.empty()) {
    why = "ddprun is in no cgroup2 group (/proc/self/cgroup)";
    return "";
  }
  if (root != "/" && own.rfind(root, 0) == 0) own = own.substr(root.size());
  if (own == "/") own.clear();
  return mount_point + own;
}

}  // namespace

void kill_cgroup(const std::string& dir) {
  if (dir.empty()) return;
  const int fd = open((dir + "/cgroup.kill").c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return;
  if (write(fd, "1", 1) < 0) {
    // Removed already: nothing left to kill.
  }
  close(fd);
}

std::unique_ptr<JobCgroup> JobCgroup::create(std::string& why_not) {
  const std::string base = own_cgroup2_dir(why_not);
  if (base.empty()) return nullptr;
  Handles h;
  std::snprintf(h.name, sizeof(h.name), "ddprun-%d", static_cast<int>(getpid()));
  const std::string dir = base + "/" + h.name;
  if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    why_not = "cannot make " + dir + ": " + strerror(errno);
    return nullptr;
  }
  auto give_up = [&](std::string why) -> std::unique_ptr<JobCgroup> {
    for (int fd : {h.dir, h.parent, h.kill, h.events}) {
      if (fd >= 0) close(fd);
    }
    rmdir(dir.c_str());
    why_not = std::move(why);
    return nullptr;
  };
  h.dir = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  h.parent = open(base.empty() ? "/" : base.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  h.kill = open((dir + "/cgroup.kill").c_str(), O_WRONLY | O_CLOEXEC);
  h.events = open((dir + "/cgroup.events").c_str(), O_RDONLY | O_CLOEXEC);
  if (h.kill < 0) return give_up(dir + "/cgroup.kill: " + strerror(errno) + " (needs Linux 5.14 or later)");
  if (h.dir < 0 || h.parent < 0 || h.events < 0) return give_up("cannot open " + dir + ": " + strerror(errno));
  if (std::string why = check_move(dir); !why.empty()) return give_up(why);

  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return give_up(std::string("pipe: ") + strerror(errno));
  // Both stacks are allocated here: the forked processes must not allocate.
  constexpr size_t kStack = 64 * 1024;
  std::vector<char> stacks(2 * kStack);
  WatchdogArgs args{h, fds[0], stacks.data() + 2 * kStack};
  const pid_t middle = clone(watchdog_parent_main, stacks.data() + kStack, SIGCHLD, &args);
  int status = 0;
  if (middle > 0) {
    while (waitpid(middle, &status, 0) < 0 && errno == EINTR) {
    }
  }
  close(fds[0]);
  if (middle < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    close(fds[1]);
    return give_up("cannot start the cgroup watchdog process");
  }
  return std::unique_ptr<JobCgroup>(new JobCgroup(dir, fds[1], h));
}

JobCgroup::JobCgroup(std::string dir, int watchdog_fd, const Handles& handles)
    : dir_(std::move(dir)), handles_(std::make_unique<Handles>(handles)), watchdog_fd_(watchdog_fd) {}

JobCgroup::~JobCgroup() {
  kill_and_remove(*handles_);
  for (int fd : {handles_->dir, handles_->parent, handles_->kill, handles_->events}) close(fd);
  close(watchdog_fd_);  // the watchdog finds the folder gone and exits
}

std::string JobCgroup::next_worker_dir() { return dir_ + "/w" + std::to_string(next_++); }

}  // namespace ddprun
