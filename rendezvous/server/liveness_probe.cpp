#include "rendezvous/server/liveness_probe.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iterator>

#include "rendezvous/store/host_port.h"

namespace ddprun {

Liveness probe_address(const std::string& address, std::chrono::milliseconds timeout) {
  HostPort hp;
  if (split_host_port(address, hp) != HostPortError::kNone) return Liveness::kNoAnswer;
  const std::optional<int> parsed = parse_port(hp.port);
  if (!parsed) return Liveness::kNoAnswer;
  const std::string& host = hp.host;
  const int port = *parsed;
  sockaddr_storage ss{};
  socklen_t len = 0;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&ss);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&ss);
  if (inet_pton(AF_INET, host.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(static_cast<uint16_t>(port));
    len = sizeof(sockaddr_in);
  } else if (inet_pton(AF_INET6, host.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(static_cast<uint16_t>(port));
    len = sizeof(sockaddr_in6);
  } else {
    return Liveness::kNoAnswer;  // not an address this probe resolves
  }
  const int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return Liveness::kNoAnswer;
  Liveness verdict = Liveness::kNoAnswer;
  if (connect(fd, reinterpret_cast<sockaddr*>(&ss), len) == 0) {
    verdict = Liveness::kAccepted;
  } else if (errno == ECONNREFUSED) {
    verdict = Liveness::kRefused;
  } else if (errno == EINPROGRESS) {
    pollfd p{fd, POLLOUT, 0};
    if (poll(&p, 1, static_cast<int>(timeout.count())) == 1) {
      int err = 0;
      socklen_t el = sizeof(err);
      getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el);
      verdict = err == 0 ? Liveness::kAccepted : err == ECONNREFUSED ? Liveness::kRefused : Liveness::kNoAnswer;
    }
  }
  close(fd);
  return verdict;
}

LivenessProbe::LivenessProbe(OnRefused on_refused, StillSilent still_silent, std::chrono::milliseconds timeout)
    : on_refused_(std::move(on_refused)),
      still_silent_(std::move(still_silent)),
      timeout_(timeout),
      thread_([this] { loop(); }) {}

LivenessProbe::~LivenessProbe() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void LivenessProbe::ask(const std::string& job_id, const std::string& node_id, const std::string& address) {
  if (address.empty()) return;
  {
    std::lock_guard lock(mu_);
    if (stop_ || !pending_.insert({job_id, node_id}).second) return;
    queue_.push_back(Ask{job_id, node_id, address, Clock::now(), 0});
  }
  cv_.notify_all();
}

void LivenessProbe::loop() {
  std::unique_lock lock(mu_);
  while (true) {
    cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
    if (stop_) return;
    // The one due first (asks again wait their turn).
    auto next = std::min_element(queue_.begin(), queue_.end(),
                                 [](const Ask& x, const Ask& y) { return x.not_before < y.not_before; });
    if (next->not_before > Clock::now()) {
      cv_.wait_until(lock, next->not_before);
      continue;
    }
    Ask a = std::move(*next);
    queue_.erase(next);
    lock.unlock();
    const Liveness l = probe_address(a.address, timeout_);
    if (l == Liveness::kRefused) on_refused_(a.job, a.node, a.address);
    const bool again = l == Liveness::kAccepted && still_silent_(a.job, a.node);
    lock.lock();
    if (again && !stop_) {
      // 50 ms, 0.25 s, then every second until the node speaks or is dropped.
      a.not_before = Clock::now() + kRetries[std::min(a.tries++, std::size(kRetries) - 1)];
      queue_.push_back(std::move(a));
    } else {
      pending_.erase({a.job, a.node});
    }
  }
}

}  // namespace ddprun
