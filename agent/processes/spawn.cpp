#include "agent/processes/spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <memory>

#include <spdlog/spdlog.h>

namespace ddprun {
namespace {

// Everything the child needs, prepared before clone so that the child does
// not allocate.
struct ChildArgs {
  const char* path;
  char* const* argv;
  char* const* envp;
  int stdin_fd;
  int out_w;
  int err_w;
  int fd3;
  int cgroup_procs;  // cgroup.procs of the child's cgroup folder, or -1
  pid_t parent;
  int child_errno;   // written by the child when exec fails (shared memory)
  int cgroup_errno;  // written by the child when it could not join its cgroup
  cpu_set_t* cpus;   // affinity to set, or null
  size_t cpus_size;
  const unsigned long* nodemask;  // MPOL_BIND nodes, or null
  unsigned long maxnode;
  int numa_errno;    // written by the child when binding failed
};

constexpr int kMpolBind = 2;  // MPOL_BIND in <linux/mempolicy.h>

std::vector<char*> c_strings(const std::vector<std::string>& v) {
  std::vector<char*> out;
  out.reserve(v.size() + 1);
  for (const auto& s : v) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

// Runs in the child, which shares the parent's memory until exec
// (CLONE_VM | CLONE_VFORK): async-signal-safe system calls only.
int child_main(void* arg) {
  auto* a = static_cast<ChildArgs*>(arg);
  // Die with the agent. Then check that it has not died already.
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != a->parent) _exit(127);
  setpgid(0, 0);
  // "0" moves the writing process; from here on all it starts is contained.
  if (a->cgroup_procs >= 0 && write(a->cgroup_procs, "0", 1) != 1) a->cgroup_errno = errno;
  if (a->cpus && sched_setaffinity(0, a->cpus_size, a->cpus) != 0) a->numa_errno = errno;
  if (a->nodemask && syscall(SYS_set_mempolicy, kMpolBind, a->nodemask, a->maxnode) != 0) {
    a->numa_errno = errno;
  }
  if (dup2(a->stdin_fd, 0) < 0 || dup2(a->out_w, 1) < 0 || dup2(a->err_w, 2) < 0) {
    a->child_errno = errno;
    _exit(127);
  }
  // dup2 onto itself keeps close-on-exec: clear it by hand then.
  if (a->fd3 >= 0 && (a->fd3 == 3 ? fcntl(3, F_SETFD, 0) : dup2(a->fd3, 3)) < 0) {
    a->child_errno = errno;
    _exit(127);
  }
  // Default dispositions (the launcher ignores SIGPIPE) and an empty mask.
  struct sigaction dfl;
  memset(&dfl, 0, sizeof(dfl));
  dfl.sa_handler = SIG_DFL;
  for (int s = 1; s < NSIG; ++s) {
    if (s != SIGKILL && s != SIGSTOP) sigaction(s, &dfl, nullptr);
  }
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  execve(a->path, a->argv, a->envp);
  a->child_errno = errno;
  _exit(127);
}

struct Pipe {
  int r = -1, w = -1;
};

Pipe make_pipe() {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) throw SpawnError(std::string("pipe: ") + strerror(errno));
  return {fds[0], fds[1]};
}

}  // namespace

SpawnedProcess spawn_process(const SpawnRequest& req) {
  auto argv = c_strings(req.argv);
  auto envp = c_strings(req.env);
  int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (devnull < 0) throw SpawnError(std::string("open /dev/null: ") + strerror(errno));
  Pipe out = make_pipe();
  Pipe err = make_pipe();

  int cgroup_procs = -1;
  if (!req.cgroup.empty()) {
    if (mkdir(req.cgroup.c_str(), 0755) == 0 || errno == EEXIST) {
      cgroup_procs = open((req.cgroup + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC);
    }
    if (cgroup_procs < 0) {
      spdlog::warn("cannot use cgroup {} ({}): the worker runs outside it", req.cgroup, strerror(errno));
    }
  }
  // CPU and memory binding, made here: the child must not allocate.
  std::unique_ptr<cpu_set_t, void (*)(cpu_set_t*)> cpus(nullptr, [](cpu_set_t* p) { CPU_FREE(p); });
  size_t cpus_size = 0;
  if (!req.cpus.empty()) {
    const int max_cpu = *std::max_element(req.cpus.begin(), req.cpus.end());
    cpus.reset(CPU_ALLOC(max_cpu + 1));
    cpus_size = CPU_ALLOC_SIZE(max_cpu + 1);
    CPU_ZERO_S(cpus_size, cpus.get());
    for (int c : req.cpus) CPU_SET_S(c, cpus_size, cpus.get());
  }
  std::vector<unsigned long> nodemask;
  unsigned long maxnode = 0;
  if (!req.mem_nodes.empty()) {
    constexpr int kBits = 8 * sizeof(unsigned long);
    const int max_node = *std::max_element(req.mem_nodes.begin(), req.mem_nodes.end());
    nodemask.assign(static_cast<size_t>(max_node / kBits + 1), 0);
    for (int n : req.mem_nodes) nodemask[static_cast<size_t>(n / kBits)] |= 1UL << (n % kBits);
    maxnode = nodemask.size() * kBits + 1;  // the kernel reads maxnode - 1 bits
  }
  ChildArgs args{req.path.c_str(), argv.data(), envp.data(), devnull, out.w, err.w, req.fd3,
                 cgroup_procs,     getpid(),    0,           0,
                 cpus.get(),       cpus_size,   nodemask.empty() ? nullptr : nodemask.data(),
                 maxnode,          0};
  constexpr size_t kStack = 64 * 1024;
  auto stack = std::make_unique<char[]>(kStack);
  // CLONE_VFORK: we resume once the child has exec'd or exited.
  pid_t pid = clone(child_main, stack.get() + kStack, CLONE_VM | CLONE_VFORK | SIGCHLD, &args);
  const int clone_errno = errno;
  close(devnull);
  if (cgroup_procs >= 0) close(cgroup_procs);
  close(out.w);
  close(err.w);
  if (pid < 0 || args.child_errno != 0) {
    close(out.r);
    close(err.r);
    if (pid < 0) throw SpawnError(std::string("clone: ") + strerror(clone_errno));
    // The child exited with 127; reap it so it leaves no zombie.
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    std::string why = strerror(args.child_errno);
    if (args.child_errno == ENOEXEC) why += " (a script needs a #! line)";
    throw SpawnError("cannot run " + req.path + ": " + why);
  }
  if (args.numa_errno != 0) {
    spdlog::warn("worker {} could not bind its CPUs and memory (--numa-binding): {}", pid,
                 strerror(args.numa_errno));
  }
  setpgid(pid, pid);  // also from here, in case the child has not yet (harmless if it has)
  fcntl(out.r, F_SETFL, O_NONBLOCK);
  fcntl(err.r, F_SETFL, O_NONBLOCK);
  std::string cgroup;
  if (cgroup_procs >= 0 && args.cgroup_errno == 0) {
    cgroup = req.cgroup;
  } else if (cgroup_procs >= 0) {
    spdlog::warn("worker {} could not join cgroup {} ({}): it runs outside it", pid, req.cgroup,
                 strerror(args.cgroup_errno));
  }
  return SpawnedProcess{pid, out.r, err.r, cgroup};
}

std::string resolve_program(const std::string& name, const std::string& path_var,
                            const std::vector<std::string>& extra_dirs) {
  auto executable = [](const std::string& p) {
    struct stat st;
    return stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(p.c_str(), X_OK) == 0;
  };
  if (name.empty()) return "";
  if (name.find('/') != std::string::npos) return executable(name) ? name : "";
  std::vector<std::string> dirs;
  size_t start = 0;
  while (start <= path_var.size()) {
    size_t end = path_var.find(':', start);
    if (end == std::string::npos) end = path_var.size();
    std::string dir = path_var.substr(start, end - start);
    dirs.push_back(dir.empty() ? "." : dir);
    start = end + 1;
  }
  dirs.insert(dirs.end(), extra_dirs.begin(), extra_dirs.end());
  for (const auto& d : dirs) {
    std::string candidate = d + "/" + name;
    if (executable(candidate)) return candidate;
  }
  return "";
}

std::string executable_dir() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return ".";
  std::string p(buf, static_cast<size_t>(n));
  auto slash = p.rfind('/');
  return slash == std::string::npos ? "." : p.substr(0, slash);
}

}  // namespace ddprun
