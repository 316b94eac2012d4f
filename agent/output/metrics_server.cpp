#include "agent/output/metrics_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace ddprun {
namespace {

constexpr size_t kMaxRequest = 8 * 1024;

void send_all(int fd, const std::string& data) {
  size_t off = 0;
  while (off < data.size()) {
    const ssize_t n = ::send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // the scraper went: nothing to do
    off += static_cast<size_t>(n);
  }
}

std::string response(const char* status, const std::string& type, const std::string& body) {
  return std::string("HTTP/1.1 ") + status + "\r\nContent-Type: " + type +
         "\r\nContent-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

// Equal without a time that tells how much of the token matched.
bool same_secret(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i % std::max<size_t>(1, b.size())]);
  return diff == 0;
}

// The value of header `name` (lower case) in a request's head, or "".
std::string header(const std::string& head, const std::string& name) {
  size_t pos = head.find("\r\n");
  while (pos != std::string::npos && pos + 2 < head.size()) {
    const size_t start = pos + 2;
    const size_t end = head.find("\r\n", start);
    const std::string line = head.substr(start, end == std::string::npos ? std::string::npos : end - start);
    const size_t colon = line.find(':');
    if (colon != std::string::npos && lower(line.substr(0, colon)) == name) {
      size_t v = colon + 1;
      while (v < line.size() && line[v] == ' ') ++v;
      return line.substr(v);
    }
    pos = end;
  }
  return "";
}

}  // namespace

MetricsServer::MetricsServer(std::shared_ptr<const Metrics> metrics, MetricsServerOptions options)
    : metrics_(std::move(metrics)), options_(std::move(options)) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(options_.port);
  if (int rc = ::getaddrinfo(options_.host.c_str(), port.c_str(), &hints, &found); rc != 0) {
    throw std::runtime_error("cannot listen on " + options_.host + ": " + gai_strerror(rc));
  }
  std::string error = "no address";
  for (addrinfo* a = found; a && listen_fd_ < 0; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 16) == 0) {
      listen_fd_ = fd;
      break;
    }
    error = std::strerror(errno);
    ::close(fd);
  }
  ::freeaddrinfo(found);
  if (listen_fd_ < 0) throw std::runtime_error("cannot listen on " + options_.host + ":" + port + ": " + error);
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&bound), &len);
  port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                            : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  stop_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  thread_ = std::thread([this] { loop(); });
}

MetricsServer::~MetricsServer() {
  const uint64_t one = 1;
  (void)!::write(stop_fd_, &one, sizeof one);
  if (thread_.joinable()) thread_.join();
  ::close(stop_fd_);
  ::close(listen_fd_);
}

uint64_t MetricsServer::served() const { return served_.load(); }

void MetricsServer::loop() {
  while (true) {
    // At most max_per_second answers a second: past them, nothing is
    // accepted until the second ends (a storm's connections wait in the
    // backlog, its clients in their connect or read), so a storm costs
    // this thread no more than its budget.
    const auto now = std::chrono::steady_clock::now();
    if (now - second_start_ >= std::chrono::seconds(1)) {
      second_start_ = now;
      in_second_ = 0;
    }
    const bool budget_left = in_second_ < options_.max_per_second;
    const int wait_ms = budget_left ? -1
                                    : static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                                           second_start_ + std::chrono::seconds(1) - now)
                                                           .count()) + 1;
    pollfd fds[2] = {{stop_fd_, POLLIN, 0}, {listen_fd_, POLLIN, 0}};
    const int n = ::poll(fds, budget_left ? 2 : 1, wait_ms);
    if (n < 0 && errno != EINTR) return;
    if (fds[0].revents) return;
    if (!budget_left || n <= 0 || !fds[1].revents) continue;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) continue;
    ++in_second_;
    answer(fd);
    ::close(fd);
  }
}

void MetricsServer::answer(int fd) {
  // 1. Read the request's head, within the read timeout and 8 KiB.
  std::string head;
  const auto deadline = std::chrono::steady_clock::now() + options_.read_timeout;
  // (A bare "\n\n", as some hand-made clients send, ends it too.)
  while (head.find("\r\n\r\n") == std::string::npos && head.find("\n\n") == std::string::npos) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0 || head.size() >= kMaxRequest) return;
    pollfd p{fd, POLLIN, 0};
    pollfd fds[2] = {p, {stop_fd_, POLLIN, 0}};
    if (::poll(fds, 2, static_cast<int>(left.count())) <= 0 || fds[1].revents) return;
    char buf[2048];
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) {
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      return;
    }
    head.append(buf, static_cast<size_t>(n));
  }
  // 2. GET /metrics (a query string is ignored), with the token if one is set.
  const std::string first = head.substr(0, head.find_first_of("\r\n"));
  const size_t sp = first.find(' ');
  const size_t sp2 = first.find(' ', sp + 1);
  const std::string method = first.substr(0, sp);
  std::string path = sp == std::string::npos ? "" : first.substr(sp + 1, sp2 - sp - 1);
  path = path.substr(0, path.find('?'));
  if (method != "GET" && method != "HEAD") {
    send_all(fd, response("405 Method Not Allowed", "text/plain", "only GET\n"));
    return;
  }
  if (path != "/metrics") {
    send_all(fd, response("404 Not Found", "text/plain", "ddprun serves /metrics\n"));
    return;
  }
  if (!options_.token.empty() && !same_secret(header(head, "authorization"), "Bearer " + options_.token)) {
    send_all(fd, response("401 Unauthorized", "text/plain", "a bearer token is needed (the job's token)\n"));
    return;
  }
  // 3. The rendered text, at most render_every old.
  const auto now = std::chrono::steady_clock::now();
  if (cached_.empty() || now - cached_at_ >= options_.render_every) {
    cached_ = metrics_->render();
    cached_at_ = now;
  }
  // A socket that takes the answer slowly must not hold the thread: the
  // answer goes out blocking, each send within the read timeout.
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  timeval tv{};
  tv.tv_sec = options_.read_timeout.count() / 1000;
  tv.tv_usec = (options_.read_timeout.count() % 1000) * 1000;
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  std::string out = response("200 OK", "text/plain; version=0.0.4; charset=utf-8", cached_);
  if (method == "HEAD") out.resize(out.find("\r\n\r\n") + 4);
  send_all(fd, out);
  served_.fetch_add(1);
}

}  // namespace ddprun
