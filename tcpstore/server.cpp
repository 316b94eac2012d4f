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

#include <algorithm>
#include <cstdio>
#include <future>
#include <tuple>
#include <unordered_map>

#include "tcpstore/peer_text.h"
#include "tcpstore/server_parts.h"

namespace ddprun::tcpstore {

struct Server::Conn {
  ConnId id = 0;
  int fd = -1;
  std::string peer;     // address:port
  std::string host;     // address
  std::optional<Version> version;
  std::string in;       // bytes received and not yet handled, from in_pos
  size_t in_pos = 0;
  ParseState parse;     // how far the request at in_pos is decoded
  std::string out;      // bytes to send, from out_pos
  size_t out_pos = 0;
  bool polling_out = false;
  bool doomed = false;
  std::string doom_reason;
  size_t ServerStats::*doom_counter = nullptr;
  std::chrono::steady_clock::time_point opened;      // accepted
  std::chrono::steady_clock::time_point last_input;  // bytes last arrived
  size_t received = 0;                                // bytes it ever sent
  bool served = false;                                // a request of it was carried out
  // Silent, kept as the callback connection (see server.h) of a served v1
  // connection (kServed, which vouches while it lives) or of one the store
  // cut off (kCut, whose voucher was spent on it).
  enum class Pair { kNo, kServed, kCut } paired = Pair::kNo;
};

namespace {

// Gives back what a buffer holds allocated once it holds much less (a
// drained burst must not keep its peak for the connection's life).
void shrink(std::string& s) {
  if (s.capacity() > (size_t{1} << 20) && s.capacity() > 4 * s.size()) s.shrink_to_fit();
}

// accept() errors that mean "no file descriptor or memory for it now": the
// connection stays queued, and calling again at once fails the same way.
bool out_of_resources(int err) { return err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM; }

// The most bytes one request may take on the wire under the limits: a
// single-key one, a key and two values; a multi-key one, max_job_bytes of
// keys and values (the codec's max_request_bytes) and 16 bytes of lengths
// for each of its keys. Pending input past it (plus a read's worth) cannot
// be a request the store would carry out.
size_t request_cap(const ServiceLimits& l) {
  const size_t single = l.max_key_bytes + 2 * l.max_value_bytes + 64;
  const size_t multi = l.max_job_bytes + 16 * l.max_job_keys + 16;
  return std::max(single, multi) + 65536;
}

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
  wire_.max_request_bytes = opts_.limits.max_job_bytes;
  Quota q;
  q.max_key_bytes = opts_.limits.max_key_bytes;
  q.max_value_bytes = opts_.limits.max_value_bytes;
  q.max_keys = opts_.limits.max_job_keys;
  q.max_bytes = opts_.limits.max_job_bytes;
  q.max_parked = opts_.limits.max_waits;
  q.max_parked_per_conn = opts_.limits.max_waits_per_client;
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

size_t Server::max_buffered() const {
  return opts_.max_buffered_bytes ? opts_.max_buffered_bytes : 2 * opts_.limits.max_job_bytes + (size_t{16} << 20);
}

ServerStats Server::stats() {
  std::promise<ServerStats> done;
  post([&] {
    ServerStats s = stats_;
    s.connections = conns_.size();
    s.buffered_bytes = buffered_;
    for (const auto& [id, c] : conns_) s.held_bytes += c->in.capacity() + c->out.capacity();
    done.set_value(s);
  });
  return done.get_future().get();
}

int Server::wait_ms(SteadyClock::time_point now) const {
  // Wake for the accept pause's end, for the next sweep while there are
  // connections, and for the log window's end while it left lines out.
  std::optional<SteadyClock::time_point> at = accept_paused_until_;
  auto earliest = [&](SteadyClock::time_point t) {
    if (!at || t < *at) at = t;
  };
  if (!conns_.empty()) earliest(next_sweep_);
  if (log_left_out_ > 0) earliest(log_window_start_ + opts_.log_window);
  if (!at) return -1;
  return static_cast<int>(std::max<int64_t>(
      0, std::chrono::duration_cast<std::chrono::milliseconds>(*at - now).count() + 1));
}

std::chrono::milliseconds Server::sweep_interval() const {
  // Often enough for the shorter timeout (tests make them short), at most
  // once a second for timeouts of seconds.
  const auto shortest = std::min(opts_.first_request_timeout, opts_.stall_timeout);
  return std::clamp<std::chrono::milliseconds>(shortest / 4, std::chrono::milliseconds(10),
                                               std::chrono::seconds(1));
}

void Server::sweep(SteadyClock::time_point now) {
  if (now < next_sweep_) return;
  next_sweep_ = now + sweep_interval();
  // Each served v1 connection vouches for one silent connection of its
  // host (PyTorch <= 2.1's callback connection, see server.h) while it
  // lives; pairs made earlier keep theirs. A v1 connection the store cut
  // off vouches once (its client, and its callback connection, may live on).
  std::unordered_map<std::string, size_t> vouchers;
  std::vector<Conn*> oldest_first;
  for (const auto& [id, c] : conns_) {
    if (c->served && c->version == Version::kV1) ++vouchers[c->host];
    oldest_first.push_back(c.get());
  }
  for (const Conn* c : oldest_first) {
    if (c->paired == Conn::Pair::kServed && vouchers[c->host] > 0) --vouchers[c->host];
  }
  std::sort(oldest_first.begin(), oldest_first.end(), [](const Conn* a, const Conn* b) { return a->id < b->id; });
  std::vector<std::pair<ConnId, bool>> late;  // true: stalled, false: silent
  for (Conn* c : oldest_first) {
    if (c->in.size() > c->in_pos && now - c->last_input >= opts_.stall_timeout) {
      late.emplace_back(c->id, true);
    } else if (!c->served && c->paired == Conn::Pair::kNo && now - c->opened >= opts_.first_request_timeout) {
      auto& v = vouchers[c->host];
      auto cut = c->received == 0 ? cut_v1_.find(c->host) : cut_v1_.end();
      if (c->received == 0 && v > 0) {
        --v;
        c->paired = Conn::Pair::kServed;
      } else if (cut != cut_v1_.end()) {
        if (--cut->second == 0) cut_v1_.erase(cut);
        c->paired = Conn::Pair::kCut;
      } else {
        late.emplace_back(c->id, false);
      }
    }
  }
  for (const auto& [id, stalled] : late) {
    if (stalled) {
      close_conn(id, "sent part of a request and nothing more for " + duration_text(opts_.stall_timeout),
                 &ServerStats::closed_stalled);
    } else {
      close_conn(id, "completed no request in " + duration_text(opts_.first_request_timeout),
                 &ServerStats::closed_silent);
    }
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
    const int n = epoll_wait(epoll_fd_, events.data(), static_cast<int>(events.size()),
                             wait_ms(SteadyClock::now()));
    if (n < 0) {
      if (errno == EINTR) continue;
      log(std::string("epoll_wait failed: ") + strerror(errno) + "; the store stops serving");
      return;
    }
    ++stats_.loop_wakeups;
    const auto now = SteadyClock::now();
    roll_log_window(now);
    if (accept_paused_until_ && now >= *accept_paused_until_) {
      accept_paused_until_.reset();
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.u64 = 0;
      epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, listen_fd_, &ev);
    }
    sweep(now);
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
        if (it != conns_.end()) close_conn(id, it->second->doom_reason, it->second->doom_counter);
      }
    }
  }
}

void Server::accept_all() {
  while (!accept_paused_until_) {
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (out_of_resources(errno)) {
        pause_accepting(errno);
      } else if (errno != EAGAIN && errno != EWOULDBLOCK) {
        log(std::string("accept failed: ") + strerror(errno));
      }
      return;
    }
    resume_accepting();
    if (conns_.size() >= opts_.max_connections) {
      turn_away(fd);
      continue;
    }
    if (turned_away_in_episode_ > 0) {
      log("admitting connections again; " + std::to_string(turned_away_in_episode_) +
          " were turned away (max_connections " + std::to_string(opts_.max_connections) + ")");
      turned_away_in_episode_ = 0;
    }
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    auto c = std::make_unique<Conn>();
    c->id = next_id_++;
    c->fd = fd;
    std::tie(c->peer, c->host) = peer_of(fd);
    c->opened = c->last_input = SteadyClock::now();
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = c->id;
    epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
    conns_.emplace(c->id, std::move(c));
  }
}

void Server::on_readable(Conn& c) {
  // Each read is handled before the next, so what stays buffered is at most
  // one request in the making (checked against the limits as it grows).
  const ConnId id = c.id;
  char buf[65536];
  while (!c.doomed) {
    const ssize_t n = recv(c.fd, buf, sizeof(buf), 0);
    if (n > 0) {
      c.in.append(buf, static_cast<size_t>(n));
      buffered_ += static_cast<size_t>(n);
      c.received += static_cast<size_t>(n);
      c.last_input = SteadyClock::now();
      handle_input(c);
      if (!conns_.count(id)) return;
      const size_t pending = c.in.size() - c.in_pos;
      if (pending > request_cap(opts_.limits)) {
        close_conn(id,
                   "sent " + std::to_string(pending) + " bytes of a request, more than any request within the limits (" +
                       std::to_string(request_cap(opts_.limits)) + " bytes: --rdzv-conf max_job_bytes, max_job_keys, max_value_bytes)",
                   &ServerStats::closed_big_request);
        return;
      }
      if (buffered_ > max_buffered()) {
        close_conn(id, "the store would buffer " + std::to_string(buffered_) +
                           " bytes for all its connections, more than its " + std::to_string(max_buffered()) +
                           " (max_buffered_bytes)",
                   &ServerStats::closed_over_total);
        return;
      }
      if (static_cast<size_t>(n) < sizeof(buf)) return;
      continue;
    }
    if (n == 0) {
      // The client closed (normal at its exit); what it sent is handled.
      close_conn(id, "");
      return;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) close_conn(id, "");
    return;
  }
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
    ParseResult p = parse_request(*c.version, pending, wire_, r, &c.parse);
    stats_.decode_steps += p.steps;
    if (p.status == Parse::kNeedMore) break;
    if (p.status == Parse::kBad) {
      close_conn(id, p.error, &ServerStats::refused_requests);
      return;
    }
    c.in_pos += p.used;
    buffered_ -= p.used;
    if (auto refused = keys_->apply(id, *c.version, r)) {
      close_conn(id, *refused, &ServerStats::refused_requests);
      return;
    }
    c.served = true;
  }
  // Keep the buffer from growing: drop what has been handled, and give back
  // the room a big request took once it is done.
  if (c.in_pos > 0 && conns_.count(id)) {
    c.in.erase(0, c.in_pos);
    c.in_pos = 0;
    shrink(c.in);
  }
}

void Server::doom(Conn& c, std::string why, size_t ServerStats::*counter) {
  if (c.doomed) return;
  c.doomed = true;
  c.doom_reason = std::move(why);
  c.doom_counter = counter;
  doomed_.push_back(c.id);
}

void Server::send(ConnId id, std::string bytes) {
  auto it = conns_.find(id);
  if (it == conns_.end() || it->second->doomed) return;
  Conn& c = *it->second;
  const size_t unread = c.out.size() - c.out_pos;
  if (unread > opts_.max_unread_reply_bytes) {
    doom(c,
         "does not read its replies (" + std::to_string(unread) + " bytes unread, at most " +
             std::to_string(opts_.max_unread_reply_bytes) + " beyond one reply: max_unread_reply_bytes)",
         &ServerStats::closed_unread);
    return;
  }
  if (buffered_ + bytes.size() > max_buffered()) {
    doom(c,
         "a reply of " + std::to_string(bytes.size()) + " bytes would make the store buffer more than its " +
             std::to_string(max_buffered()) + " bytes for all connections (max_buffered_bytes)",
         &ServerStats::closed_over_total);
    return;
  }
  c.out.append(bytes);
  buffered_ += bytes.size();
  flush(c);
}

void Server::flush(Conn& c) {
  while (c.out_pos < c.out.size()) {
    const ssize_t n = ::send(c.fd, c.out.data() + c.out_pos, c.out.size() - c.out_pos, MSG_NOSIGNAL);
    if (n > 0) {
      c.out_pos += static_cast<size_t>(n);
      buffered_ -= static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    // The peer is gone; close it after the request being handled.
    doom(c, "", nullptr);
    return;
  }
  if (c.out_pos == c.out.size()) {
    c.out.clear();
    c.out_pos = 0;
  } else if (c.out_pos >= (size_t{64} << 10) && 2 * c.out_pos >= c.out.size()) {
    // A slow reader: drop what it has taken as it goes, not only once it
    // has taken everything (the buffer grew without bound before).
    c.out.erase(0, c.out_pos);
    c.out_pos = 0;
  }
  shrink(c.out);
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

void Server::close_conn(ConnId id, const std::string& why, size_t ServerStats::*counter) {
  auto it = conns_.find(id);
  if (it == conns_.end()) return;
  Conn& c = *it->second;
  if (counter) ++(stats_.*counter);
  if (!why.empty()) log("closing the connection from " + c.peer + ": " + why);
  // Vouches for one silent connection of its host (see sweep). Bounded: an
  // entry per host while there are few hosts, at most max_connections each.
  if (!why.empty() && c.version == Version::kV1 && (cut_v1_.size() < 4096 || cut_v1_.count(c.host))) {
    auto& n = cut_v1_[c.host];
    n = std::min(n + 1, opts_.max_connections);
  }
  buffered_ -= (c.in.size() - c.in_pos) + (c.out.size() - c.out_pos);
  keys_->drop_connection(id);
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c.fd, nullptr);
  close(c.fd);
  conns_.erase(it);
}

}  // namespace ddprun::tcpstore
