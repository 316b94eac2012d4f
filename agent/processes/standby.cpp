#include "agent/processes/standby.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent/processes/job_cgroup.h"
#include "channel/env_names.h"
#include "channel/standby_message.h"

namespace ddprun {

Standby spawn_standby(SpawnRequest req) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) throw SpawnError(std::string("pipe: ") + strerror(errno));
  req.env.push_back(std::string(channel::kStandbyFd) + "=" +
                    std::to_string(channel::kStandbyFdNumber));
  req.fd3 = fds[0];
  Standby s;
  try {
    s.process = spawn_process(req);
  } catch (...) {
    close(fds[0]);
    close(fds[1]);
    throw;
  }
  close(fds[0]);
  s.control = fds[1];
  return s;
}

void release_standby(Standby& s, const std::map<std::string, std::string>& vars) {
  std::vector<std::string> unset;
  for (const auto& [k, v] : s.vars) {
    if (!vars.count(k)) unset.push_back(k);
  }
  const std::string msg = channel::encode_standby_message(vars, unset);
  size_t off = 0;
  while (off < msg.size()) {
    ssize_t n = write(s.control, msg.data() + off, msg.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string why = strerror(errno);
      close(s.control);
      s.control = -1;
      throw SpawnError("standby worker " + std::to_string(s.process.pid) + " is gone (" + why + ")");
    }
    off += static_cast<size_t>(n);
  }
  close(s.control);
  s.control = -1;
}

void dismiss_standby(Standby& s) {
  if (s.process.pid > 0) {
    kill(-s.process.pid, SIGKILL);
    int status;
    while (waitpid(s.process.pid, &status, 0) < 0 && errno == EINTR) {
    }
    s.process.pid = -1;
  }
  kill_cgroup(s.process.cgroup);
  for (int* fd : {&s.control, &s.process.stdout_fd, &s.process.stderr_fd}) {
    if (*fd >= 0) close(*fd);
    *fd = -1;
  }
}

}  // namespace ddprun
