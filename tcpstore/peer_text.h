// Who a peer is and the bytes it sent (keys, command bytes), made safe to
// put in a log line:
// a client must not be able to print escape sequences or newlines on the
// user's terminal (a forged "[ddprun ...] info:" line), nor a line of
// kilobytes. tcpstore does not link agent/, whose printable() keeps UTF-8
// and strips; this one escapes, so what was sent can still be read.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>

namespace ddprun::tcpstore {

// bytes with every byte outside printable ASCII, and the backslash, written
// as \xNN; at most max_chars characters of that, then "..." and the length
// sent ("...(4096 bytes)").
std::string peer_text(std::string_view bytes, size_t max_chars = 64);

// A whole log line made terminal-safe: control characters (C0, DEL) and
// bytes outside ASCII as \xNN, backslashes kept (peer_text has escaped the
// peer's own), at most max_chars characters.
std::string log_safe(std::string_view line, size_t max_chars = 1024);

// The connected peer of socket fd: its address and port ("10.0.0.2:41234"),
// and its address alone; "?" for what cannot be read.
std::pair<std::string, std::string> peer_of(int fd);

}  // namespace ddprun::tcpstore
