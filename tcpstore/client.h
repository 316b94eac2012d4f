// A client of a TCPStore server (PyTorch's, of either protocol version, or
// ours) behind ddprun's Store interface, so worker_lib can meet its peers
// under any launcher that sets MASTER_ADDR/MASTER_PORT.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "rendezvous/store/store.h"
#include "tcpstore/protocol.h"

namespace ddprun::tcpstore {

struct ClientOptions {
  std::string host = "127.0.0.1";
  int port = 0;
  // Connection refused (the server is not up yet) is retried with a short
  // backoff (10 ms doubling to 100 ms) until this has passed.
  std::chrono::milliseconds connect_timeout{std::chrono::seconds(60)};
  // nullopt: ask the server. A v1 CHECK of no keys is answered at once by
  // v1 servers and ignored by v2 servers (their first request must be
  // VALIDATE); no answer within probe_timeout means v2.
  std::optional<Version> version;
  std::chrono::milliseconds probe_timeout{300};
};

class Client final : public Store {
 public:
  // Connects (and settles the version). Throws StoreError naming host:port.
  explicit Client(ClientOptions options);
  ~Client() override;
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  void set(const std::string& key, std::string_view value) override;
  // Waits up to timeout for key, then GETs it.
  std::string get(const std::string& key, std::chrono::milliseconds timeout) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;

  std::string compare_set(const std::string& key, std::string_view expected,
                          std::string_view desired);
  bool check(const std::vector<std::string>& keys);
  int64_t num_keys();
  bool delete_key(const std::string& key);
  void append(const std::string& key, std::string_view value);  // v2 and v1 of PyTorch >= 2.0
  std::vector<std::string> multi_get(const std::vector<std::string>& keys,
                                     std::chrono::milliseconds timeout);
  void multi_set(const std::vector<std::string>& keys, const std::vector<std::string>& values);
  // v2 only: sends PING and checks the echo.
  void ping();

  Version version() const { return version_; }
  // The address this client's connection leaves from (for Gloo to bind).
  const std::string& local_address() const { return local_address_; }

 private:
  void connect_locked();
  void send_locked(const std::string& bytes);
  // Reads exactly n bytes; throws StoreError when the server closes or
  // nothing comes within timeout (a negative timeout waits forever).
  std::string recv_locked(size_t n, std::chrono::milliseconds timeout);
  std::string recv_bytes_locked();
  void wait_locked(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
  void drop_locked();
  std::string where() const;

  ClientOptions opts_;
  Version version_ = Version::kV1;
  std::mutex mu_;
  int fd_ = -1;
  std::string local_address_;
};

}  // namespace ddprun::tcpstore
