#include "support/process.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>

extern char** environ;

namespace ddptest {

Process::Process(const std::vector<std::string>& argv, const EnvChanges& env, Output output) {
  std::map<std::string, std::string> merged;
  for (char** e = environ; *e; ++e) {
    std::string s = *e;
    merged[s.substr(0, s.find('='))] = s;
  }
  for (const auto& s : env) merged[s.substr(0, s.find('='))] = s;
  std::vector<std::string> env_list;
  for (auto& [k, v] : merged) env_list.push_back(v);
  std::vector<char*> cargv, cenv;
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  for (const auto& e : env_list) cenv.push_back(const_cast<char*>(e.c_str()));
  cenv.push_back(nullptr);

  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) || pipe2(err, O_CLOEXEC)) throw std::runtime_error("pipe");
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_adddup2(&fa, output == kStallBoth ? out[1] : err[1], 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
  int rc = posix_spawn(&pid_, cargv[0], &fa, &attr, cargv.data(), cenv.data());
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  close(out[1]);
  close(err[1]);
  if (rc != 0) throw std::runtime_error("cannot start " + argv[0]);
  (output == kRead ? out_fd_ : stalled_out_fd_) = out[0];
  if (output == kStallBoth) {
    close(err[0]);
  } else {
    err_fd_ = err[0];
  }
}

Process::~Process() {
  if (!reaped_ && pid_ > 0) {
    kill(pid_, SIGKILL);
    int status;
    waitpid(pid_, &status, 0);
  }
  for (int fd : {out_fd_, err_fd_, stalled_out_fd_}) {
    if (fd >= 0) close(fd);
  }
}

void Process::signal(int sig) { kill(pid_, sig); }

bool Process::pump(std::chrono::milliseconds timeout) {
  std::vector<pollfd> fds;
  if (out_fd_ >= 0) fds.push_back({out_fd_, POLLIN, 0});
  if (err_fd_ >= 0) fds.push_back({err_fd_, POLLIN, 0});
  if (fds.empty()) return false;
  if (poll(fds.data(), fds.size(), static_cast<int>(timeout.count())) <= 0) return true;
  for (auto& p : fds) {
    if (!p.revents) continue;
    char buf[65536];
    ssize_t n = read(p.fd, buf, sizeof(buf));
    const bool is_out = p.fd == out_fd_;
    if (n > 0) {
      (is_out ? out_ : err_).append(buf, static_cast<size_t>(n));
    } else {
      close(p.fd);
      (is_out ? out_fd_ : err_fd_) = -1;
    }
  }
  return out_fd_ >= 0 || err_fd_ >= 0;
}

std::optional<std::string> Process::wait_for_line(
    const std::function<bool(const std::string&)>& pred, std::chrono::milliseconds timeout) {
  return wait_for(false, pred, timeout);
}

std::optional<std::string> Process::wait_for_err_line(
    const std::function<bool(const std::string&)>& pred, std::chrono::milliseconds timeout) {
  return wait_for(true, pred, timeout);
}

std::optional<std::string> Process::wait_for(bool err, const std::function<bool(const std::string&)>& pred,
                                             std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const std::string& text = err ? err_ : out_;
  size_t& scanned = err ? scanned_err_ : scanned_;
  while (true) {
    size_t nl;
    while ((nl = text.find('\n', scanned)) != std::string::npos) {
      std::string line = text.substr(scanned, nl - scanned);
      scanned = nl + 1;
      if (pred(line)) return line;
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0 || (err ? err_fd_ : out_fd_) < 0) return std::nullopt;
    if (!pump(left)) return std::nullopt;
  }
}

Finished Process::finish(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (out_fd_ >= 0 || err_fd_ >= 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      kill(pid_, SIGKILL);  // the test fails on the exit code; do not hang
      break;
    }
    pump(left);
  }
  // Streams nobody reads give no EOF to wait for: wait for the exit itself.
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  if (!exits_within(pid_, std::max(left, std::chrono::milliseconds(0)))) kill(pid_, SIGKILL);
  Finished f;
  int status = 0;
  waitpid(pid_, &status, 0);
  reaped_ = true;
  if (WIFEXITED(status)) f.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) f.signal = WTERMSIG(status);
  f.out = out_;
  f.err = err_;
  return f;
}

Finished run(const std::vector<std::string>& argv, const EnvChanges& env,
             std::chrono::milliseconds timeout) {
  Process p(argv, env);
  return p.finish(timeout);
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string l;
  while (std::getline(in, l)) out.push_back(l);
  return out;
}

char process_state(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return 0;
  const auto close = line.rfind(')');  // comm may hold spaces and parentheses
  if (close == std::string::npos || close + 2 >= line.size()) return 0;
  return line[close + 2];
}

std::vector<pid_t> children_of(pid_t parent) {
  std::vector<pid_t> out;
  DIR* proc = opendir("/proc");
  if (!proc) return out;
  while (dirent* e = readdir(proc)) {
    const pid_t pid = static_cast<pid_t>(std::atoi(e->d_name));
    if (pid <= 0) continue;
    std::ifstream stat("/proc/" + std::string(e->d_name) + "/stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    // "pid (comm) state ppid ...": comm may hold spaces, so read after the last ')'.
    const auto close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 1));
    char state = 0;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid == parent && state != 'Z') out.push_back(pid);
  }
  closedir(proc);
  return out;
}

bool has_env(pid_t pid, const std::string& name) {
  std::ifstream env("/proc/" + std::to_string(pid) + "/environ", std::ios::binary);
  const std::string all = std::string(1, '\0') + std::string((std::istreambuf_iterator<char>(env)), {});
  return all.find('\0' + name + '=') != std::string::npos;
}

bool started_as_standby(pid_t pid) { return has_env(pid, "DDPRUN_STANDBY_FD"); }

long resident_kb(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  }
  return 0;
}

bool exits_within(pid_t pid, std::chrono::milliseconds timeout) {
  int fd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  if (fd < 0) return errno == ESRCH;  // already gone
  pollfd p{fd, POLLIN, 0};
  // A pidfd becomes readable when the process exits.
  const bool exited = poll(&p, 1, static_cast<int>(timeout.count())) == 1;
  close(fd);
  return exited;
}

}  // namespace ddptest
