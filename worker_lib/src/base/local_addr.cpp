#include "base/local_addr.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "ddp/launch_info.h"

namespace ddp {

void check_local_addr(const std::string& addr, const std::string& setting) {
  const std::string what = "ddp: " + setting + "='" + addr + "'";
  const std::string fix = "; give ddprun --local-addr an address of this node";
  if (addr.empty()) throw ConfigError(what + " is empty" + fix);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (int rc = ::getaddrinfo(addr.c_str(), nullptr, &hints, &found); rc != 0) {
    throw ConfigError(what + " does not resolve (" + ::gai_strerror(rc) + ")" + fix);
  }
  // Like Gloo: the first resolved address this machine can bind to wins.
  int bind_errno = 0;
  for (addrinfo* a = found; a; a = a->ai_next) {
    int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      bind_errno = errno;
      continue;
    }
    const bool bound = ::bind(fd, a->ai_addr, a->ai_addrlen) == 0;  // port 0: any free one
    if (!bound) bind_errno = errno;
    ::close(fd);
    if (bound) {
      ::freeaddrinfo(found);
      return;
    }
  }
  ::freeaddrinfo(found);
  throw ConfigError(what + " is not an address of this node (bind: " + std::strerror(bind_errno) + ")" + fix);
}

}  // namespace ddp
