// What went wrong in a Gloo collective, in words a user can act on. Gloo's
// messages name a socket address ("Connection closed by peer [10.0.0.2]:5123")
// and, through the message of a timeout, nothing of the operation; these
// helpers turn them into "all_reduce on rank 1 of 4: peer rank 2 closed the
// connection ...". No LibTorch or Gloo here (unit-tested on strings).
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace ddp {

enum class GlooFailureKind {
  kPeerClosed,  // the peer's end of the socket was closed (it exited or dropped its communicator)
  kPeerReset,   // connection reset or broken pipe (the peer died with data in flight)
  kTimeout,     // the operation's timeout passed
  kOther,       // anything else, including Gloo's failed checks (EnforceNotMet)
};

GlooFailureKind classify_gloo_failure(const std::string& gloo_message);

// The one-line message of a failed collective. peer_endpoints[r] is the
// address Gloo would name for rank r ("[127.0.0.1]:4660"; "" when unknown),
// so that the peer is named by its rank.
std::string gloo_failure_message(const std::string& op, int rank, int size, std::chrono::milliseconds timeout,
                                 const std::string& gloo_message, const std::vector<std::string>& peer_endpoints);

}  // namespace ddp
