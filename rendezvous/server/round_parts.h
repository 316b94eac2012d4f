// What round.cpp and round_heals.cpp (RoundState's two halves) share.
#pragma once

#include <string>

namespace ddprun {

// A node id as the rendezvous' messages quote it: 'id'.
inline std::string quote_id(const std::string& id) { return "'" + id + "'"; }

}  // namespace ddprun
