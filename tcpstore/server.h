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
// bounded (each limit is an option below, named in the line that reports it):
//  * at most max_connections at once: more are accepted and closed at once;
//  * a connection that completes no request within first_request_timeout is
//    closed, and one that leaves a request half-sent for stall_timeout. A
//    connection that was served may then stay idle forever: PyTorch keeps
//    one for the whole job. And PyTorch <= 2.1 (protocol v1) opens a second
//    one, for watchKey callbacks, that never sends anything: a silent
//    connection is kept past the timeout when its host has a served v1
//    connection not yet paired with another silent one, or had a v1
//    connection the store closed (its client's callback connection lives
//    on); closing it makes the client's callback thread spin on the closed
//    socket for the rest of the job;
//  * a request may be as big as the limits let it be (a multi-key request:
//    max_job_bytes of keys and values), replies a client leaves unread
//    max_unread_reply_bytes beyond the one being sent, and everything
//    buffered for all connections together max_buffered_bytes: the
//    connection that would pass a limit is closed;
//  * a request that arrives a few bytes at a time is decoded where it
//    stopped, not from its start each time (linear, not quadratic);
//  * out of file descriptors (or memory), accepting pauses for accept_pause
//    instead of spinning on accept(), with one line per episode.
// Log lines carry no raw peer bytes (keys are escaped and cut short, the
// whole line is escaped again) and come at most log_burst per log_window;
// at the window's end one line says how many were left out.
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
#include <unordered_map>
#include <vector>

#include "rendezvous/store/limits.h"
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
  std::chrono::milliseconds first_request_timeout{std::chrono::seconds(10)};  // v1 callback connections excepted (above)
  std::chrono::milliseconds stall_timeout{std::chrono::seconds(30)};
  size_t max_unread_reply_bytes = size_t{4} << 20;  // beyond the reply being sent
  size_t max_buffered_bytes = 0;  // 0: twice limits.max_job_bytes plus 16 MiB
  std::chrono::milliseconds accept_pause{100};  // out of descriptors: how long accepting rests
  int log_burst = 20;                            // lines per log_window, then one line saying how many more
  std::chrono::milliseconds log_window{std::chrono::seconds(10)};
  // Where refusals and errors are told (one line each); stderr when empty.
  std::function<void(const std::string&)> log;
};

// What the server holds and did (for tests and `inspect`-like checks).
struct ServerStats {
  size_t connections = 0;
  size_t buffered_bytes = 0;  // requests not yet handled plus replies not yet sent
  size_t held_bytes = 0;      // what the connections' buffers hold allocated
  size_t loop_wakeups = 0;    // returns of epoll_wait (a spinning loop shows here)
  size_t decode_steps = 0;    // request fields decoded, counting resumed partial requests
  size_t accept_pauses = 0;   // times accepting paused (out of file descriptors)
  size_t log_lines = 0;       // lines logged (not counting "left out" summaries)
  size_t log_lines_left_out = 0;
  // Connections closed, by the limit they hit.
  size_t turned_away = 0;         // max_connections (closed at accept)
  size_t closed_silent = 0;       // first_request_timeout
  size_t closed_stalled = 0;      // stall_timeout
  size_t closed_big_request = 0;  // a request bigger than the limits allow
  size_t closed_unread = 0;       // max_unread_reply_bytes
  size_t closed_over_total = 0;   // max_buffered_bytes
  size_t refused_requests = 0;    // broke a key-space or wire limit (keys, values, quotas, parked waits)
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
  // Closes at once; why (empty: the peer left) is logged, counter counted.
  void close_conn(ConnId id, const std::string& why, size_t ServerStats::*counter = nullptr);
  void doom(Conn& c, std::string why, size_t ServerStats::*counter);  // close after the request being handled
  void log(const std::string& line);  // escaped and rate-limited
  void emit(const std::string& line);
  void roll_log_window(std::chrono::steady_clock::time_point now);
  void pause_accepting(int err);
  void resume_accepting();
  void turn_away(int fd);
  void sweep(std::chrono::steady_clock::time_point now);  // closes connections past their timeouts
  std::chrono::milliseconds sweep_interval() const;
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
  size_t pauses_in_episode_ = 0;       // accept pauses since accepting last worked
  size_t turned_away_in_episode_ = 0;  // connections turned away since one was last admitted
  std::unordered_map<std::string, size_t> cut_v1_;  // host → v1 connections the store closed, unspent (see sweep)
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
