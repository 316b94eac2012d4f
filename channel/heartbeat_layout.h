// The agent ↔ worker contract, part 2: the heartbeat file. One 64-byte
// line per local rank (no false sharing between workers); the first 8 bytes
// are a counter the worker increments and the agent reads, both with
// relaxed atomics. The agent creates the file; workers map their slot.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ddprun::channel {

inline constexpr size_t kHeartbeatSlotBytes = 64;

inline size_t heartbeat_file_bytes(int slots) {
  return static_cast<size_t>(slots) * kHeartbeatSlotBytes;
}

// The counter of `slot` in a mapping of the file.
inline uint64_t* heartbeat_counter(void* map, int slot) {
  return reinterpret_cast<uint64_t*>(static_cast<char*>(map) +
                                     static_cast<size_t>(slot) * kHeartbeatSlotBytes);
}

}  // namespace ddprun::channel
