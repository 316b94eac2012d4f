// A TCPStore-compatible server: PyTorch clients of either protocol version
// (and ours) connect to it as to the store rank 0 or torchrun's agent hosts.
// One thread runs an epoll loop over every connection; waits are parked in
// the KeySpace, so a thousand waiting clients cost no thread.
//
// A client that breaks a limit (key over 4 KiB, value over max_value_bytes,
// the key or byte quota, its own share of parked waits, an unknown command)
// has its connection closed and a line logged; nothing it sent in that
// request is stored.
//
// Anyone who reaches the port can connect, so what connections cost is
// bounded: at most max_connections at once (more are accepted and closed at
// once); a connection that completes no request within first_request_timeout,
// or leaves a request half-sent for stall_timeout, is closed (a client that
// has been served may stay idle forever: PyTorch's keeps one connection for
// the whole job); replies a client does not read may pile up to
// kMaxUnreadReplyBytes beyond the one being sent, and everything buffered for
// all connections together to max_buffered_bytes. When the process runs out
// of file descriptors, accepting pauses for 100 ms instead of spinning. Log
// lines carry no raw peer bytes (control characters are escaped) and come at
// most kLogBurst per kLogWindow, then one line says how many were left out.
#pragma once

#include <atomic>
#include <chrono>
#include <optional>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "rendezvous/limits.h"
#include "tcpstore/key_space.h"

namespace ddprun::tcpstore {

// The port could not be bound (in use, no permission); the message names it.
class ListenError : public std::runtime_error {
 public:
  ListenError(const std::string& what, int err) : std::runtime_error(what), err_(err) {}
  int error_number() const { return err_; }

 private:
  int err_;
};

struct ServerOptions {
  std::string host = "0.0.0.0";  // numeric IPv4 address to bind
  int port = 0;                  // 0: the kernel picks a free one
  ServiceLimits limits;  // keys and values; max_waits_per_client is each connection's share of parked keys
  size_t max_connections = 4096;
  std::chrono::milliseconds first_request_timeout{std::chrono::seconds(60)};
  std::chrono::milliseconds stall_timeout{std::chrono::seconds(30)};
  size_t max_buffered_bytes = 0;  // 0: twice limits.max_job_bytes plus 16 MiB
  // Where refusals and errors are told (one line each); stderr when empty.
  std::function<void(const std::string&)> log;
};

// Beyond the reply being sent, what a client may leave unread.
inline constexpr size_t kMaxUnreadReplyBytes = size_t{4} << 20;
inline constexpr int kLogBurst = 20;
inline constexpr std::chrono::seconds kLogWindow{10};

// What the server holds now (for tests and `inspect`-like checks).
struct ServerStats {
  size_t connections = 0;
  size_t buffered_bytes = 0;   // requests not yet handled plus replies not yet sent
  size_t held_bytes = 0;       // what the connections' buffers hold allocated
  size_t turned_away = 0;      // connections closed at accept: max_connections reached
  size_t accept_pauses = 0;    // times accepting paused (out of file descriptors)
  size_t log_lines = 0;        // lines logged
  size_t log_lines_left_out = 0;
};

class Server {
 public:
  // Binds and listens at once (so the port is taken when this returns),
  // then serves on a thread of its own. Throws ListenError.
  explicit Server(ServerOptions options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  int port() const { return port_; }

  // Drops the keys PyTorch's env:// rendezvous wrote for attempts before
  // `attempt` (".../worker/attempt_<n>/..." with n < attempt), so that a
  // restarted job starts from a fresh key space and memory does not grow.
  // Runs on the server's thread; returns once done.
  void drop_attempts_before(int attempt);

  // Drops every key (the job's workers are gone; the next ones start from
  // an empty store). Connections and their parked waits stay. Returns at
  // once; requests sent after it returns find the store empty.
  void clear();

  // Runs fn on the server's thread with its key space and waits for it.
  void inspect(const std::function<void(const KeySpace&)>& fn);
  ServerStats stats();

 private:
  struct Conn;
  void run();
  void post(std::function<void()> fn);
  void accept_all();
  void on_readable(Conn& c);
  void on_writable(Conn& c);
  void handle_input(Conn& c);
  void send(ConnId id, std::string bytes);
  void flush(Conn& c);
  void close_conn(ConnId id, const std::string& why);
  void log(const std::string& line);  // escaped and rate-limited
  void pause_accepting(int err);
  void sweep(std::chrono::steady_clock::time_point now);  // closes connections past their timeouts
  int wait_ms(std::chrono::steady_clock::time_point now) const;  // epoll_wait's timeout
  size_t max_buffered() const;

  ServerOptions opts_;
  WireLimits wire_;
  int listen_fd_ = -1;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  int port_ = 0;
  std::unique_ptr<KeySpace> keys_;
  std::unordered_map<ConnId, std::unique_ptr<Conn>> conns_;
  std::vector<ConnId> doomed_;  // closed while a request was being handled
  ConnId next_id_ = 1;
  std::chrono::steady_clock::time_point next_sweep_{};
  size_t buffered_ = 0;  // over every connection: pending input plus unsent output
  ServerStats stats_;
  std::optional<std::chrono::steady_clock::time_point> accept_paused_until_;
  std::chrono::steady_clock::time_point log_window_start_{};
  int log_window_lines_ = 0;
  size_t log_left_out_ = 0;  // lines not shown in the current window

  std::mutex tasks_mu_;
  std::vector<std::function<void()>> tasks_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// "<anything>/worker/attempt_<n>/<rest>": n, else -1.
int attempt_of_key(const std::string& key);

}  // namespace ddprun::tcpstore
