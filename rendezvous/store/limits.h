// What one rendezvous service lets its clients hold, so that no client (a
// buggy worker, a stranger who reaches the port) can exhaust its memory,
// threads or file descriptors. Each limit names the setting that raises it
// (--rdzv-conf KEY=VALUE on the hosting node, or on `ddprun rendezvous`).
#pragma once

#include <chrono>
#include <cstddef>

namespace ddprun {

struct ServiceLimits {
  size_t max_key_bytes = 4096;                // fixed
  size_t max_value_bytes = size_t{1} << 20;   // max_value_bytes
  size_t max_job_keys = 100000;               // max_job_keys
  size_t max_job_bytes = size_t{64} << 20;    // max_job_bytes
  size_t max_jobs = 256;                      // max_jobs
  size_t max_waits_per_client = 1024;         // max_waits_per_client (pending Get/Wait per host)
  size_t max_waits = 16384;                   // fixed
  // Connections with no call in flight are closed after this (clients
  // reconnect when they next call); TCP connections that never complete
  // the gRPC handshake after handshake_timeout.
  std::chrono::milliseconds idle_timeout{std::chrono::minutes(5)};  // idle_timeout (seconds)
  std::chrono::milliseconds handshake_timeout{std::chrono::seconds(10)};
};

}  // namespace ddprun
