// The agent ↔ worker contract, part 5: names of the shared-memory segments
// that the CPU collectives of ranks on one node use (worker_lib's ShmGroup).
//
//   /ddprun-<uid>-<pid>-<nonce>     (under /dev/shm on Linux)
//
// <pid> is the worker that created the segment and <nonce> 16 random hex
// digits, so a restarted group never opens a previous round's segment. The
// creator unlinks it as soon as every rank has it mapped; if the creator
// dies before that, the agent that reaps it unlinks what carries its pid.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

namespace ddprun::channel {

inline constexpr const char* kShmDir = "/dev/shm";

// What every segment of this user's worker `pid` starts with (no leading '/').
inline std::string shm_segment_prefix(uid_t uid, pid_t pid) {
  return "ddprun-" + std::to_string(uid) + "-" + std::to_string(pid) + "-";
}

// The name for shm_open (with its leading '/').
inline std::string shm_segment_name(uid_t uid, pid_t pid, uint64_t nonce) {
  static const char* digits = "0123456789abcdef";
  std::string hex(16, '0');
  for (int i = 15; i >= 0; --i, nonce >>= 4) hex[static_cast<size_t>(i)] = digits[nonce & 0xf];
  return "/" + shm_segment_prefix(uid, pid) + hex;
}

}  // namespace ddprun::channel
