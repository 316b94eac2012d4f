#include "launch/standby.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <stdexcept>
#include <string>

#include "channel/env_names.h"
#include "channel/standby_message.h"

namespace ddp {

bool wait_if_standby() {
  const char* fd_text = getenv(ddprun::channel::kStandbyFd);
  if (!fd_text || !*fd_text) return false;
  const int fd = atoi(fd_text);
  std::string msg;
  char buf[4096];
  while (!ddprun::channel::standby_message_complete(msg)) {
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      close(fd);
      throw std::runtime_error("ddp: standby worker: the agent closed DDPRUN_STANDBY_FD without an assignment");
    }
    msg.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  unsetenv(ddprun::channel::kStandbyFd);
  for (const auto& [key, value] : ddprun::channel::decode_standby_message(msg)) {
    if (!value) {
      unsetenv(key.c_str());
      continue;
    }
    setenv(key.c_str(), value->c_str(), 1);
  }
  return true;
}

}  // namespace ddp
