// How a rendezvous service that does not serve a job (its control plane's
// leader is another agent: serving_gate.h) tells a client where it is:
// UNAVAILABLE with a message starting kNotServedPrefix and, once a leader
// is known, its address in the kLeaderMetadataKey trailer. Both sides'.
#pragma once

namespace ddprun {

inline constexpr const char* kLeaderMetadataKey = "ddprun-leader";
inline constexpr const char* kNotServedPrefix = "control plane: ";

}  // namespace ddprun
