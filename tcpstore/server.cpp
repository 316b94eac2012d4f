#include "tcpstore/server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <future>

namespace ddprun::tcpstore {

struct Server::Conn {
  ConnId id = 0;
  int fd = -1;
  std::string peer;
  std::optional<Version> version;
  std::string in;       // bytes received and not yet handled, from in_pos
  size_t in_pos = 0;
  std::string out;      // bytes to send, from out_pos
  size_t out_pos = 0;
  bool polling_out = false;
  bool doomed = false;
  std::string doom_reason;
};

namespace {

std::string peer_of(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "?";
  char host[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (ss.ss_family == AF_INET) {
    auto* a = reinterpret_cast<sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
    port = ntohs(a->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
    port = ntohs(a->sin6_port);
  }
  return std::string(host) + ":" + std::to_string(port);
}

// Pending bytes a connection may leave with us, in and out: a request is at
// most a few values, so this bounds what one client can make us buffer.
size_t buffer_cap(const ServiceLimits& l) { return l.max_job_bytes + (size_t{1} << 20); }

}  // namespace

int attempt_of_key(const std::string& key) {
  static const std::string marker = "/worker/attempt_";
  const auto at = key.find(marker);
  if (at == std::string::npos) return -1;
  size_t i = at + marker.size();
  int n = 0;
  const size_t start = i;
  while (i < key.size() && key[i] >= '0' && key[i] <= '9' && i - start < 9) {
    n = n * 10 + (key[i] - '0');
    ++i;
  }
  if (i == start || i >= key.size() || key[i] != '/') return -1;
  return n;
}

Server::Server(ServerOptions options) : opts_(std::move(options)) {
  wire_.max_key_bytes = opts_.limits.max_key_bytes;
  wire_.max_value_bytes = opts_.limits.max_value_bytes;
  wire_.max_keys_per_request = opts_.limits.max_job_keys;
  Quota q;
  q.max_key_bytes = opts_.limits.max_key_bytes;
  q.max_value_bytes = opts_.limits.max_value_bytes;
  q.max_keys = opts_.limits.max_job_keys;
  q.max_bytes = opts_.limits.max_job_bytes;
  q.max_parked = opts_.limits.max_waits;
  keys_ = std::make_unique<KeySpace>(q, [this](ConnId id, std::string b) { send(id, std::move(b)); });

  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(opts_.port));
  if (inet_pton(AF_INET, opts_.host.c_str(), &addr.sin_addr) != 1) {
    throw ListenError("cannot serve the TCPStore on '" + opts_.host + "': not an IPv4 address",
                      EINVAL);
  }
  listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (listen_fd_ < 0) throw ListenError(std::string("socket(): ") + strerror(errno), errno);
  const int one = 1;
  setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(listen_fd_, SOMAXCONN) != 0) {
    const int err = errno;
    close(listen_fd_);
    throw ListenError("cannot listen on " + opts_.host + ":" + std::to_string(opts_.port) + " (" +
                          strerror(err) + ")",
                      err);
  }
  socklen_t len = sizeof(addr);
  getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = ntohs(addr.sin_port);

  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (epoll_fd_ < 0 || wake_fd_ < 0) {
    const int err = errno;
    if (epoll_fd_ >= 0) close(epoll_fd_);
    if (wake_fd_ >= 0) close(wake_fd_);
    close(listen_fd_);
    throw ListenError(std::string("epoll/eventfd: ") + strerror(err), err);
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = 0;  // 0: the listening socket
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &ev);
  ev.data.u64 = ~uint64_t{0};  // all ones: the wake-up eventfd
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);
  thread_ = std::thread([this] { run(); });
}

Server::~Server() {
  stop_ = true;
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = write(wake_fd_, &one, sizeof(one));
  thread_.join();
  for (auto& [id, c] : conns_) close(c->fd);
  conns_.clear();
  close(listen_fd_);
  close(epoll_fd_);
  close(wake_fd_);
}

void Server::log(const std::string& line) {
  if (opts_.log) {
    opts_.log(line);
  } else {
    std::fprintf(stderr, "ddprun: tcpstore: %s\n", line.c_str());
  }
}

void Server::post(std::function<void()> fn) {
  {
    std::lock_guard lock(tasks_mu_);
    tasks_.push_back(std::move(fn));
  }
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = write(wake_fd_, &one, sizeof(one));
}

void Server::drop_attempts_before(int attempt) {
  std::promise<void> done;
  post([&] {
    keys_->erase_if([attempt](const std::string& k) {
      const int a = attempt_of_key(k);
      return a >= 0 && a < attempt;
    });
    done.set_value();
  });
  done.get_future().wait();
}

void Server::clear() {
  // Not waited for: the loop runs posted tasks before any socket event of
  // the same wake-up, so requests sent after this call see the empty store.
  post([this] { keys_->erase_if([](const std::string&) { return true; }); });
}

void Server::inspect(const std::function<void(const KeySpace&)>& fn) {
  std::promise<void> done;
  post([&] {
    fn(*keys_);
    done.set_value();
  });
  done.get_future().wait();
}

void Server::run() {
  std::vector<epoll_event> events(64);
  while (!stop_) {
    const int n = epoll_wait(epoll_fd_, events.data(), static_cast<int>(events.size()), -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      log(std::string("epoll_wait failed: ") + strerror(errno) + "; the store stops serving");
      return;
    }
    // Posted tasks first: whatever a client sent after a task was posted
    // is handled after the task (clear() relies on it).
    for (int i = 0; i < n; ++i) {
      if (events[i].data.u64 != ~uint64_t{0}) continue;
      uint64_t v;
      [[maybe_unused]] ssize_t r = read(wake_fd_, &v, sizeof(v));
      std::vector<std::function<void()>> tasks;
      {
        std::lock_guard lock(tasks_mu_);
        tasks.swap(tasks_);
      }
      for (auto& t : tasks) t();
    }
    for (int i = 0; i < n; ++i) {
      const uint64_t tag = events[i].data.u64;
      if (tag == 0) {
        accept_all();
      } else if (tag == ~uint64_t{0}) {
        continue;
      } else {
        auto it = conns_.find(tag);
        if (it == conns_.end()) continue;
        Conn& c = *it->second;
        if (events[i].events & EPOLLOUT) on_writable(c);
        if (!c.doomed && (events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR))) on_readable(c);
      }
      // Connections that failed while others' requests were handled.
      while (!doomed_.empty()) {
        const ConnId id = doomed_.back();
        doomed_.pop_back();
        auto it = conns_.find(id);
        if (it != conns_.end()) close_conn(id, it->second->doom_reason);
      }
    }
  }
}

void Server::accept_all() {
  while (true) {
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != ECONNABORTED) {
        log(std::string("accept failed: ") + strerror(errno));
      }
      return;
    }
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    auto c = std::make_unique<Conn>();
    c->id = next_id_++;
    c->fd = fd;
    c->peer = peer_of(fd);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = c->id;
    epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
    conns_.emplace(c->id, std::move(c));
  }
}

void Server::on_readable(Conn& c) {
  char buf[65536];
  while (true) {
    const ssize_t n = recv(c.fd, buf, sizeof(buf), 0);
    if (n > 0) {
      c.in.append(buf, static_cast<size_t>(n));
      if (c.in.size() - c.in_pos > buffer_cap(opts_.limits)) {
        close_conn(c.id, "sent a request of more than " +
                             std::to_string(buffer_cap(opts_.limits)) + " bytes");
        return;
      }
      if (static_cast<size_t>(n) < sizeof(buf)) break;
      continue;
    }
    if (n == 0) {
      // The client closed (normal at its exit): handle what it sent first.
      handle_input(c);
      if (conns_.count(c.id)) close_conn(c.id, "");
      return;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) break;
    close_conn(c.id, "");
    return;
  }
  handle_input(c);
}

void Server::handle_input(Conn& c) {
  const ConnId id = c.id;
  while (!c.doomed) {
    std::string_view pending(c.in.data() + c.in_pos, c.in.size() - c.in_pos);
    if (pending.empty()) break;
    // The first bytes of a connection tell its protocol version.
    if (!c.version) {
      c.version = detect_version(pending);
      if (!c.version) break;
    }
    Request r;
    ParseResult p = parse_request(*c.version, pending, wire_, r);
    if (p.status == Parse::kNeedMore) break;
    if (p.status == Parse::kBad) {
      close_conn(id, p.error);
      return;
    }
    c.in_pos += p.used;
    if (auto refused = keys_->apply(id, *c.version, r)) {
      close_conn(id, *refused);
      return;
    }
  }
  // Keep the buffer from growing: drop what has been handled.
  if (c.in_pos > 0 && conns_.count(id)) {
    c.in.erase(0, c.in_pos);
    c.in_pos = 0;
  }
}

void Server::send(ConnId id, std::string bytes) {
  auto it = conns_.find(id);
  if (it == conns_.end() || it->second->doomed) return;
  Conn& c = *it->second;
  c.out.append(bytes);
  if (c.out.size() - c.out_pos > buffer_cap(opts_.limits)) {
    c.doomed = true;
    c.doom_reason = "does not read its replies";
    doomed_.push_back(id);
    return;
  }
  flush(c);
}

void Server::flush(Conn& c) {
  while (c.out_pos < c.out.size()) {
    const ssize_t n = ::send(c.fd, c.out.data() + c.out_pos, c.out.size() - c.out_pos, MSG_NOSIGNAL);
    if (n > 0) {
      c.out_pos += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    // The peer is gone; close it after the request being handled.
    c.doomed = true;
    c.doom_reason = "";
    doomed_.push_back(c.id);
    return;
  }
  if (c.out_pos == c.out.size()) {
    c.out.clear();
    c.out_pos = 0;
  }
  const bool want_out = !c.out.empty();
  if (want_out != c.polling_out) {
    epoll_event ev{};
    ev.events = EPOLLIN | (want_out ? EPOLLOUT : 0u);
    ev.data.u64 = c.id;
    epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, c.fd, &ev);
    c.polling_out = want_out;
  }
}

void Server::on_writable(Conn& c) { flush(c); }

void Server::close_conn(ConnId id, const std::string& why) {
  auto it = conns_.find(id);
  if (it == conns_.end()) return;
  Conn& c = *it->second;
  if (!why.empty()) log("closing the connection from " + c.peer + ": " + why);
  keys_->drop_connection(id);
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c.fd, nullptr);
  close(c.fd);
  conns_.erase(it);
}

}  // namespace ddprun::tcpstore
