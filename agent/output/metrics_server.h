// Serves Metrics over HTTP for Prometheus: GET /metrics answers the text
// exposition, anything else 404. A thread of its own, apart from the agent's
// loop: a scrape never waits on supervision, and supervision waits on a
// scrape for one render at most. Bounded: one connection at a time, a
// request read within `read_timeout` and at most 8 KiB of it, the rendered
// text reused for `render_every`, and at most `max_per_second` answers a
// second (past them nothing is accepted until the second ends: a storm's
// connections wait in the backlog), so a scrape storm costs the node no
// more than that many renders and answers a second.
//
// With a token, a scrape must send "Authorization: Bearer TOKEN" (401
// otherwise), as Prometheus does with `authorization: {credentials: ...}`.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "agent/output/metrics.h"

namespace ddprun {

struct MetricsServerOptions {
  std::string host = "0.0.0.0";  // where to listen
  int port = 0;                  // 0: a free port (port() says which)
  std::string token;             // empty: none asked
  std::chrono::milliseconds read_timeout{2000};
  std::chrono::milliseconds render_every{250};
  int max_per_second = 20;
};

class MetricsServer {
 public:
  // Listens at once. Throws std::runtime_error saying why the port cannot
  // be bound (the caller names its flag).
  MetricsServer(std::shared_ptr<const Metrics> metrics, MetricsServerOptions options);
  ~MetricsServer();  // stops the thread (after the answer in progress)
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  int port() const { return port_; }
  // Answers served so far (200s).
  uint64_t served() const;

 private:
  void loop();
  void answer(int fd);

  std::shared_ptr<const Metrics> metrics_;
  MetricsServerOptions options_;
  int listen_fd_ = -1;
  int stop_fd_ = -1;
  int port_ = 0;
  std::string cached_;
  std::chrono::steady_clock::time_point cached_at_{};
  std::chrono::steady_clock::time_point second_start_{};
  int in_second_ = 0;
  std::atomic<uint64_t> served_{0};
  std::thread thread_;
};

}  // namespace ddprun
