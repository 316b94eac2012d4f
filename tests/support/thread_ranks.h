// Runs ranks as threads of one process, each with its own World over one
// shared in-memory store: fast multi-rank tests without processes.
#pragma once

#include <future>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ddp/world.h"
#include "rendezvous/store/memory_store.h"
#include "support/threads.h"

namespace ddptest {

// The launch environment of one rank of a single-node job; cpu_comm, when
// given, is DDPRUN_CPU_COMM (auto, shm or gloo).
inline ddp::EnvLookup env_for(int rank, int ws, const std::string& cpu_comm = "") {
  std::map<std::string, std::string> m{{"RANK", std::to_string(rank)},
                                       {"WORLD_SIZE", std::to_string(ws)},
                                       {"LOCAL_RANK", std::to_string(rank)},
                                       {"LOCAL_WORLD_SIZE", std::to_string(ws)}};
  if (!cpu_comm.empty()) m["DDPRUN_CPU_COMM"] = cpu_comm;
  return [m](const std::string& k) -> std::optional<std::string> {
    auto it = m.find(k);
    if (it == m.end()) return std::nullopt;
    return it->second;
  };
}

// Runs body(world) on ws threads; rethrows the first failure after all end.
template <typename Body>
void run_ranks(int ws, Body body, std::chrono::milliseconds timeout = std::chrono::seconds(30),
               const std::string& cpu_comm = "") {
  auto store = std::make_shared<ddprun::MemoryStore>();
  run_threads(ws, [&](int r) {
    ddp::InitOptions o;
    o.env = env_for(r, ws, cpu_comm);
    o.store = store;
    o.timeout = timeout;
    auto world = ddp::init(o);
    body(*world);
  });
}

}  // namespace ddptest
