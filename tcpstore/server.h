// A TCPStore-compatible server: PyTorch clients of either protocol version
// (and ours) connect to it as to the store rank 0 or torchrun's agent hosts.
// One thread runs an epoll loop over every connection; waits are parked in
// the KeySpace, so a thousand waiting clients cost no thread.
//
// A client that breaks a limit (key over 4 KiB, value over max_value_bytes,
// the key or byte quota, an unknown command) has its connection closed and a
// line logged; nothing it sent in that request is stored.
#pragma once

#include <atomic>
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
  ServiceLimits limits;
  // Where refusals and errors are told (one line each); stderr when empty.
  std::function<void(const std::string&)> log;
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
  void log(const std::string& line);

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

  std::mutex tasks_mu_;
  std::vector<std::function<void()>> tasks_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// "<anything>/worker/attempt_<n>/<rest>": n, else -1.
int attempt_of_key(const std::string& key);

}  // namespace ddprun::tcpstore
