#include "rendezvous/store/types.h"

#include <random>

#include "rendezvous/store/hex.h"

namespace ddprun {

std::string random_lease_key() {
  std::random_device rd;  // getrandom(2) on Linux
  std::string bytes(16, '\0');
  for (size_t i = 0; i < bytes.size(); i += 4) {
    const uint32_t v = rd();
    for (size_t j = 0; j < 4; ++j) bytes[i + j] = static_cast<char>(v >> (8 * j));
  }
  return to_hex(bytes);
}

const char* to_string(RoundReason r) {
  switch (r) {
    case RoundReason::kFirst: return "first round";
    case RoundReason::kWorkerFailure: return "workers failed";
    case RoundReason::kNodeLost: return "node lost";
    case RoundReason::kNodeLeft: return "node left";
    case RoundReason::kAdmit: return "admitting a node";
  }
  return "?";
}

}  // namespace ddprun
