// What the tcpstore server's files share (server.cpp: the loop, the
// connections and their requests; server_admission.cpp: the log's window and
// the pacing of accepts). Internal to tcpstore.
#pragma once

#include <chrono>
#include <string>

namespace ddprun::tcpstore {

using SteadyClock = std::chrono::steady_clock;

// "10 s", "300 ms": a timeout as a log line says it.
inline std::string duration_text(std::chrono::milliseconds d) {
  if (d.count() % 1000 == 0) return std::to_string(d.count() / 1000) + " s";
  return std::to_string(d.count()) + " ms";
}

}  // namespace ddprun::tcpstore
