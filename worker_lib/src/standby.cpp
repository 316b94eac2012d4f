#include "ddp/standby.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <stdexcept>
#include <string>

namespace ddp {

bool wait_if_standby() {
  const char* fd_text = getenv("DDPRUN_STANDBY_FD");
  if (!fd_text || !*fd_text) return false;
  const int fd = atoi(fd_text);
  // The message: "KEY=VALUE\0" entries, then one more "\0".
  std::string msg;
  char buf[4096];
  while (msg.size() < 2 || msg.compare(msg.size() - 2, 2, std::string("\0\0", 2)) != 0) {
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      close(fd);
      throw std::runtime_error("ddp: standby worker: the agent closed DDPRUN_STANDBY_FD without an assignment");
    }
    msg.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  unsetenv("DDPRUN_STANDBY_FD");
  size_t start = 0;
  while (start < msg.size() && msg[start] != '\0') {
    const size_t end = msg.find('\0', start);
    const std::string entry = msg.substr(start, end - start);
    const size_t eq = entry.find('=');
    if (eq != std::string::npos) setenv(entry.substr(0, eq).c_str(), entry.substr(eq + 1).c_str(), 1);
    start = end + 1;
  }
  return true;
}

}  // namespace ddp
