#include "comm/gloo_failure.h"

namespace ddp {
namespace {

bool has(const std::string& text, const char* what) { return text.find(what) != std::string::npos; }

// "peer rank 2" when the address in Gloo's message is one of the peers',
// else "a peer ([10.0.0.2]:5123)" or "a peer". The address is the far end
// of our socket: a peer's published end when we connected to it, but an
// ephemeral port when it connected to us (Gloo picks the direction by
// comparing addresses). In a world of two the peer is known all the same.
std::string peer_named_in(const std::string& msg, int rank, int size,
                          const std::vector<std::string>& peer_endpoints) {
  for (size_t r = 0; r < peer_endpoints.size(); ++r) {
    if (!peer_endpoints[r].empty() && has(msg, peer_endpoints[r].c_str())) return "peer rank " + std::to_string(r);
  }
  if (size == 2) return "peer rank " + std::to_string(1 - rank);
  const size_t open = msg.find(" [");
  const size_t close = open == std::string::npos ? open : msg.find(']', open);
  if (close == std::string::npos) return "a peer";
  size_t end = close + 1;
  if (end < msg.size() && msg[end] == ':') {
    ++end;
    while (end < msg.size() && msg[end] >= '0' && msg[end] <= '9') ++end;
  }
  return "a peer (" + msg.substr(open + 1, end - open - 1) + ")";
}

}  // namespace

GlooFailureKind classify_gloo_failure(const std::string& m) {
  if (has(m, "Connection reset") || has(m, "Broken pipe")) return GlooFailureKind::kPeerReset;
  if (has(m, "closed by peer") || has(m, "Socket closed") || has(m, "Socket unexpectedly closed")) {
    return GlooFailureKind::kPeerClosed;
  }
  // The last one: another operation on this context timed out and closed its pairs.
  if (has(m, "Timed out") || has(m, "Read timeout") || has(m, "Write timeout") ||
      has(m, "Application timeout")) {
    return GlooFailureKind::kTimeout;
  }
  return GlooFailureKind::kOther;
}

std::string gloo_failure_message(const std::string& op, int rank, int size, std::chrono::milliseconds timeout,
                                 const std::string& gloo_message, const std::vector<std::string>& peer_endpoints) {
  const std::string where = "ddp: " + op + " on rank " + std::to_string(rank) + " of " + std::to_string(size);
  const std::string setting = "set by ddp::InitOptions::timeout or DDPRUN_TIMEOUT_S";
  const std::string gloo = "; gloo: " + gloo_message + ")";
  switch (classify_gloo_failure(gloo_message)) {
    case GlooFailureKind::kPeerClosed:
      return where + ": " + peer_named_in(gloo_message, rank, size, peer_endpoints) +
             " closed the connection (it exited, crashed or dropped its communicator" + gloo;
    case GlooFailureKind::kPeerReset:
      return where + ": " + peer_named_in(gloo_message, rank, size, peer_endpoints) +
             " reset the connection (connection reset: it died with data in flight" + gloo;
    case GlooFailureKind::kTimeout:
      return where + " timed out after " + std::to_string(timeout.count()) + " ms (" + setting +
             "; a peer may be hung, stopped or slower than that" + gloo;
    case GlooFailureKind::kOther:
      break;
  }
  return where + " failed (timeout " + std::to_string(timeout.count()) + " ms, " + setting +
         "; do all ranks call the same collectives with tensors of the same size and type?): " + gloo_message;
}

}  // namespace ddp
