// The agent's side of hang detection: a small file of one 64-byte counter
// per local worker, mapped by the agent and by each worker (worker_lib's
// ddp::Heartbeat). Workers increment; the agent watches the counters move.
#pragma once

#include <cstdint>
#include <string>

namespace ddprun {

class HeartbeatTable {
 public:
  // Creates (or truncates) path with `slots` zeroed counters and maps it.
  // Throws std::runtime_error naming the file.
  HeartbeatTable(std::string path, int slots);
  ~HeartbeatTable();  // unmaps and removes the file
  HeartbeatTable(const HeartbeatTable&) = delete;
  HeartbeatTable& operator=(const HeartbeatTable&) = delete;

  const std::string& path() const { return path_; }
  uint64_t read(int slot) const;
  void reset();  // every counter back to 0, before a new attempt starts

 private:
  std::string path_;
  int slots_;
  void* map_ = nullptr;
};

}  // namespace ddprun
