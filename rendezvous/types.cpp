#include "rendezvous/types.h"

namespace ddprun {

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
