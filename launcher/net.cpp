#include "launcher/net.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <stdexcept>

#include "rendezvous/store/host_port.h"

namespace ddprun {

std::string with_port(const std::string& host, int port) {
  const bool ipv6 = host.find(':') != std::string::npos;
  return (ipv6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

namespace {

std::string numeric(const sockaddr* sa) {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (sa->sa_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(sa)->sin_addr, buf, sizeof(buf));
  } else if (sa->sa_family == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr, buf, sizeof(buf));
  }
  return buf;
}

}  // namespace

std::string resolve_address(const std::string& host) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(host.c_str(), nullptr, &hints, &res);
  if (rc != 0 || !res) {
    throw std::runtime_error("cannot resolve '" + host + "': " + gai_strerror(rc));
  }
  std::string v4, v6;
  for (addrinfo* p = res; p; p = p->ai_next) {
    if (p->ai_family == AF_INET && v4.empty()) v4 = numeric(p->ai_addr);
    if (p->ai_family == AF_INET6 && v6.empty()) v6 = numeric(p->ai_addr);
  }
  freeaddrinfo(res);
  return v4.empty() ? v6 : v4;
}

bool is_local_address(const std::string& address) {
  in_addr a4{};
  in6_addr a6{};
  if (inet_pton(AF_INET, address.c_str(), &a4) == 1 && (ntohl(a4.s_addr) >> 24) == 127) return true;
  if (inet_pton(AF_INET6, address.c_str(), &a6) == 1 && IN6_IS_ADDR_LOOPBACK(&a6)) return true;
  ifaddrs* ifs = nullptr;
  if (getifaddrs(&ifs) != 0) return false;
  bool found = false;
  for (ifaddrs* i = ifs; i && !found; i = i->ifa_next) {
    if (i->ifa_addr && numeric(i->ifa_addr) == address) found = true;
  }
  freeifaddrs(ifs);
  return found;
}

std::string interface_of(const std::string& address) {
  ifaddrs* ifs = nullptr;
  if (getifaddrs(&ifs) != 0) return "";
  std::string name;
  for (ifaddrs* i = ifs; i && name.empty(); i = i->ifa_next) {
    if (i->ifa_addr && numeric(i->ifa_addr) == address) name = i->ifa_name;
  }
  freeifaddrs(ifs);
  return name;
}

std::string address_of_interface(const std::string& name) {
  ifaddrs* ifs = nullptr;
  if (getifaddrs(&ifs) != 0) return "";
  std::string v4, v6;
  for (ifaddrs* i = ifs; i; i = i->ifa_next) {
    if (!i->ifa_addr || name != i->ifa_name) continue;
    if (i->ifa_addr->sa_family == AF_INET && v4.empty()) v4 = numeric(i->ifa_addr);
    if (i->ifa_addr->sa_family == AF_INET6 && v6.empty()) v6 = numeric(i->ifa_addr);
  }
  freeifaddrs(ifs);
  return v4.empty() ? v6 : v4;
}

std::string source_address_towards(const std::string& address) {
  // A UDP "connect" sends nothing: it only asks the kernel for the route.
  sockaddr_storage peer{};
  socklen_t len = 0;
  auto* p4 = reinterpret_cast<sockaddr_in*>(&peer);
  auto* p6 = reinterpret_cast<sockaddr_in6*>(&peer);
  if (inet_pton(AF_INET, address.c_str(), &p4->sin_addr) == 1) {
    p4->sin_family = AF_INET;
    p4->sin_port = htons(9);
    len = sizeof(sockaddr_in);
  } else if (inet_pton(AF_INET6, address.c_str(), &p6->sin6_addr) == 1) {
    p6->sin6_family = AF_INET6;
    p6->sin6_port = htons(9);
    len = sizeof(sockaddr_in6);
  } else {
    throw std::runtime_error("not a numeric address: '" + address + "'");
  }
  int fd = socket(peer.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error("socket() failed looking for a route to " + address);
  sockaddr_storage local{};
  socklen_t local_len = sizeof(local);
  const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&peer), len) == 0 &&
                  getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len) == 0;
  const int err = errno;
  close(fd);
  if (!ok) {
    throw std::runtime_error("no route to " + address + " (" + strerror(err) +
                             "); pass --local-addr");
  }
  return numeric(reinterpret_cast<sockaddr*>(&local));
}

std::unique_ptr<ProbeSocket> ProbeSocket::listen_on(const std::string& address) {
  sockaddr_storage ss{};
  socklen_t len = 0;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&ss);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&ss);
  if (inet_pton(AF_INET, address.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    len = sizeof(sockaddr_in);
  } else if (inet_pton(AF_INET6, address.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    len = sizeof(sockaddr_in6);
  } else {
    return nullptr;
  }
  const int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return nullptr;
  // A backlog for the probes' handshakes, which nothing accepts: the
  // rendezvous probes only when a node's connection closes.
  if (bind(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0 || listen(fd, 128) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) {
    close(fd);
    return nullptr;
  }
  const int port = ss.ss_family == AF_INET ? ntohs(v4->sin_port) : ntohs(v6->sin6_port);
  return std::unique_ptr<ProbeSocket>(new ProbeSocket(fd, with_port(address, port)));
}

ProbeSocket::~ProbeSocket() { close(fd_); }

std::string probe_address_of(const std::string& service, const std::string& local_addr) {
  HostPort hp;
  if (local_addr.empty() || split_host_port(service, hp) != HostPortError::kNone || hp.port.empty()) return "";
  return hp.host == local_addr ? service : "";
}

}  // namespace ddprun
