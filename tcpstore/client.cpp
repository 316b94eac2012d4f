#include "tcpstore/client.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <random>
#include <thread>

#include "tcpstore/codec.h"

namespace ddprun::tcpstore {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr milliseconds kReplyTimeout = std::chrono::minutes(5);

int poll_ms(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
  return left < 0 ? 0 : static_cast<int>(std::min<int64_t>(left, 1 << 30));
}

// One non-blocking connect to host:port, bounded by deadline. Returns the
// socket (blocking again) or -1 with errno set.
int connect_once(const std::string& host, int port, Clock::time_point deadline) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0 || !res) {
    errno = EHOSTUNREACH;
    return -1;
  }
  int err = ECONNREFUSED;
  for (addrinfo* ai = res; ai; ai = ai->ai_next) {
    const int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
      err = errno;
      continue;
    }
    int rc = ::connect(fd, ai->ai_addr, ai->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      if (poll(&p, 1, poll_ms(deadline)) == 1) {
        socklen_t len = sizeof(err);
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
        rc = err == 0 ? 0 : -1;
      } else {
        err = ETIMEDOUT;
      }
    } else if (rc != 0) {
      err = errno;
    }
    if (rc == 0) {
      freeaddrinfo(res);
      fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
      const int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      return fd;
    }
    close(fd);
  }
  freeaddrinfo(res);
  errno = err;
  return -1;
}

std::string local_address_of(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "";
  char host[INET6_ADDRSTRLEN] = "";
  if (ss.ss_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&ss)->sin_addr, host, sizeof(host));
  } else if (ss.ss_family == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&ss)->sin6_addr, host, sizeof(host));
  }
  return host;
}

std::string encode(Version v, Op op, std::vector<std::string> keys = {},
                   std::vector<std::string> values = {}, int64_t delta = 0, uint32_t number = 0) {
  return encode_request(v, Request{op, std::move(keys), std::move(values), delta, number});
}

int64_t as_i64(const std::string& b) {
  Reader r(b);
  int64_t v = 0;
  r.i64(v);
  return v;
}

}  // namespace

Client::Client(ClientOptions options) : opts_(std::move(options)) {
  std::lock_guard lock(mu_);
  connect_locked();
}

Client::~Client() {
  if (fd_ >= 0) close(fd_);
}

std::string Client::where() const {
  return "TCPStore at " + opts_.host + ":" + std::to_string(opts_.port);
}

void Client::drop_locked() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

void Client::connect_locked() {
  const auto deadline = Clock::now() + opts_.connect_timeout;
  auto dial = [&] {
    // The server may not listen yet (rank 0 is still starting): retry
    // refused connections after 10 ms, doubling up to 100 ms, with jitter
    // so that many ranks do not knock in step.
    std::minstd_rand rng(static_cast<unsigned>(getpid()));
    milliseconds pause{10};
    while (true) {
      const int fd = connect_once(opts_.host, opts_.port, deadline);
      if (fd >= 0) return fd;
      const int err = errno;
      if (Clock::now() + pause >= deadline) {
        throw StoreError("cannot connect to the " + where() + " within " +
                         std::to_string(opts_.connect_timeout.count()) + " ms (" + strerror(err) +
                         "); is MASTER_ADDR:MASTER_PORT right and its server up?");
      }
      std::this_thread::sleep_for(pause + milliseconds(rng() % (pause.count() / 2 + 1)));
      pause = std::min(pause * 2, milliseconds(100));
    }
  };
  fd_ = dial();
  if (!opts_.version) {
    // Probe: a v1 server answers CHECK of no keys with READY at once.
    send_locked(encode(Version::kV1, Op::kCheck));
    pollfd p{fd_, POLLIN, 0};
    char b = 1;
    const bool v1 = poll(&p, 1, static_cast<int>(opts_.probe_timeout.count())) == 1 &&
                    recv(fd_, &b, 1, 0) == 1 && b == static_cast<char>(kCheckReady);
    opts_.version = v1 ? Version::kV1 : Version::kV2;
    if (!v1) {
      drop_locked();
      fd_ = dial();
    }
  }
  version_ = *opts_.version;
  local_address_ = local_address_of(fd_);
  if (version_ == Version::kV2) {
    // The handshake of v2: VALIDATE with the magic, then PING to check the server.
    send_locked(encode(Version::kV2, Op::kValidate, {}, {}, 0, kValidationMagic));
    const uint32_t nonce = static_cast<uint32_t>(getpid());
    send_locked(encode(Version::kV2, Op::kPing, {}, {}, 0, nonce));
    Reader r(recv_locked(4, kReplyTimeout));
    uint32_t echo = 0;
    r.u32(echo);
    if (echo != nonce) {
      drop_locked();
      throw StoreError(where() + " answered PING " + std::to_string(nonce) + " with " +
                       std::to_string(echo));
    }
  }
}

void Client::send_locked(const std::string& bytes) {
  if (fd_ < 0) connect_locked();
  size_t off = 0;
  while (off < bytes.size()) {
    const ssize_t n = ::send(fd_, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      drop_locked();
      throw StoreError("cannot send to the " + where() + ": " + strerror(err));
    }
    off += static_cast<size_t>(n);
  }
}

std::string Client::recv_locked(size_t n, milliseconds timeout) {
  std::string out(n, '\0');
  size_t got = 0;
  const auto deadline = Clock::now() + timeout;
  while (got < n) {
    pollfd p{fd_, POLLIN, 0};
    const int rc = poll(&p, 1, timeout.count() < 0 ? -1 : poll_ms(deadline));
    if (rc < 0 && errno == EINTR) continue;
    if (rc == 0) throw StoreTimeout("(reply)", timeout);
    const ssize_t k = recv(fd_, out.data() + got, n - got, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) {
      const int err = k == 0 ? 0 : errno;
      drop_locked();
      throw StoreError("the " + where() + " closed the connection" +
                       (err ? std::string(" (") + strerror(err) + ")" : std::string()) +
                       " (it refuses a request that breaks its limits)");
    }
    got += static_cast<size_t>(k);
  }
  return out;
}

std::string Client::recv_bytes_locked() {
  Reader r(recv_locked(8, kReplyTimeout));
  uint64_t n = 0;
  r.u64(n);
  if (n > (uint64_t{1} << 32)) {
    drop_locked();
    throw StoreError("the " + where() + " sent a value of " + std::to_string(n) + " bytes");
  }
  return recv_locked(static_cast<size_t>(n), kReplyTimeout);
}

void Client::wait_locked(const std::vector<std::string>& keys, milliseconds timeout) {
  send_locked(encode(version_, Op::kWait, keys));
  std::string reply;
  try {
    reply = recv_locked(1, timeout);
  } catch (const StoreTimeout&) {
    if (version_ == Version::kV2) {
      // Cancel the parked wait; the server may have answered just before.
      send_locked(encode(version_, Op::kCancelWait));
      if (recv_locked(1, kReplyTimeout)[0] == static_cast<char>(kStopWaiting)) {
        recv_locked(1, kReplyTimeout);  // then WAIT_CANCELED
      }
    } else {
      // v1 servers of PyTorch < 2.0 know no CANCEL_WAIT: a fresh connection
      // leaves the parked wait behind (the server forgets it when we close).
      drop_locked();
    }
    throw StoreTimeout(keys.empty() ? std::string() : keys.front(), timeout);
  }
  if (reply[0] != static_cast<char>(kStopWaiting)) {
    drop_locked();
    throw StoreError("the " + where() + " answered WAIT with " +
                     std::to_string(static_cast<uint8_t>(reply[0])));
  }
}

void Client::set(const std::string& key, std::string_view value) {
  std::lock_guard lock(mu_);
  send_locked(encode(version_, Op::kSet, {key}, {std::string(value)}));
}

std::string Client::get(const std::string& key, milliseconds timeout) {
  std::lock_guard lock(mu_);
  wait_locked({key}, timeout);
  send_locked(encode(version_, Op::kGet, {key}));
  return recv_bytes_locked();
}

void Client::wait(const std::vector<std::string>& keys, milliseconds timeout) {
  std::lock_guard lock(mu_);
  wait_locked(keys, timeout);
}

int64_t Client::add(const std::string& key, int64_t delta) {
  std::lock_guard lock(mu_);
  send_locked(encode(version_, Op::kAdd, {key}, {}, delta));
  return as_i64(recv_locked(8, kReplyTimeout));
}

std::string Client::compare_set(const std::string& key, std::string_view expected,
                                std::string_view desired) {
  std::lock_guard lock(mu_);
  send_locked(encode(version_, Op::kCompareSet, {key}, {std::string(expected), std::string(desired)}));
  return recv_bytes_locked();
}

bool Client::check(const std::vector<std::string>& keys) {
  std::lock_guard lock(mu_);
  send_locked(encode(version_, Op::kCheck, keys));
  return recv_locked(1, kReplyTimeout)[0] == static_cast<char>(kCheckReady);
}

int64_t Client::num_keys() {
  std::lock_guard lock(mu_);
  send_locked(encode(version_, Op::kNumKeys));
  return as_i64(recv_locked(8, kReplyTimeout));
}

bool Client::delete_key(const std::string& key) {
  std::lock_guard lock(mu_);
  send_locked(encode(version_, Op::kDeleteKey, {key}));
  return as_i64(recv_locked(8, kReplyTimeout)) == 1;
}

void Client::append(const std::string& key, std::string_view value) {
  std::lock_guard lock(mu_);
  send_locked(encode(version_, Op::kAppend, {key}, {std::string(value)}));
}

std::vector<std::string> Client::multi_get(const std::vector<std::string>& keys,
                                           milliseconds timeout) {
  std::lock_guard lock(mu_);
  wait_locked(keys, timeout);
  send_locked(encode(version_, Op::kMultiGet, keys));
  std::vector<std::string> out;
  for (size_t i = 0; i < keys.size(); ++i) out.push_back(recv_bytes_locked());
  return out;
}

void Client::multi_set(const std::vector<std::string>& keys, const std::vector<std::string>& values) {
  std::lock_guard lock(mu_);
  send_locked(encode(version_, Op::kMultiSet, keys, values));
}

void Client::ping() {
  std::lock_guard lock(mu_);
  const uint32_t nonce = 0x5eed;
  send_locked(encode(version_, Op::kPing, {}, {}, 0, nonce));
  Reader r(recv_locked(4, kReplyTimeout));
  uint32_t echo = 0;
  r.u32(echo);
  if (echo != nonce) throw StoreError(where() + " answered PING with a wrong nonce");
}

}  // namespace ddprun::tcpstore
