// HOST:PORT, one parser for every place that reads one: --rdzv-endpoint,
// the etcd members, `ddprun status --rdzv-endpoint`, the job files' and
// the nodes' probe addresses. Callers word their own errors (each names its
// flag); the splitting and the port's range are decided here only.
//
//   HostPort hp;
//   if (split_host_port("[fe80::1]:29400", hp) == HostPortError::kNone)  // hp.host "fe80::1", hp.port "29400"
//     std::optional<int> port = parse_port(hp.port);                     // 29400
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace ddprun {

struct HostPort {
  std::string host;        // without the brackets of "[v6addr]"
  std::string port;        // as written; empty when none was given
  bool bracketed = false;  // written as "[v6addr]": put them back when printing
  // "host:port" (brackets kept for a bracketed host); with no port, `fallback`.
  std::string text(int fallback_port) const;
};

enum class HostPortError {
  kNone,
  kUnclosedBracket,  // "[fe80::1" with no "]"
  kNotHostPort,      // text after "]" that is not ":port", or no host at all
};

// "host", "host:port", "[v6addr]" or "[v6addr]:port" (an unbracketed text
// splits at its last ':'). Fills `out` only when it returns kNone.
HostPortError split_host_port(std::string_view text, HostPort& out);

// The port in `text` if it is all digits and in [min_port, 65535].
std::optional<int> parse_port(std::string_view text, int min_port = 1);

}  // namespace ddprun
