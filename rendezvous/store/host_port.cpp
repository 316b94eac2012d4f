#include "rendezvous/store/host_port.h"

namespace ddprun {

std::string HostPort::text(int fallback_port) const {
  const std::string h = bracketed ? "[" + host + "]" : host;
  return h + ":" + (port.empty() ? std::to_string(fallback_port) : port);
}

HostPortError split_host_port(std::string_view text, HostPort& out) {
  HostPort hp;
  if (!text.empty() && text.front() == '[') {
    const size_t close = text.find(']');
    if (close == std::string_view::npos) return HostPortError::kUnclosedBracket;
    hp.host = std::string(text.substr(1, close - 1));
    hp.bracketed = true;
    if (close + 1 < text.size()) {
      if (text[close + 1] != ':') return HostPortError::kNotHostPort;
      hp.port = std::string(text.substr(close + 2));
    }
  } else if (const size_t colon = text.rfind(':'); colon != std::string_view::npos) {
    hp.host = std::string(text.substr(0, colon));
    hp.port = std::string(text.substr(colon + 1));
  } else {
    hp.host = std::string(text);
  }
  if (hp.host.empty()) return HostPortError::kNotHostPort;
  out = std::move(hp);
  return HostPortError::kNone;
}

std::optional<int> parse_port(std::string_view text, int min_port) {
  if (text.empty() || text.size() > 5) return std::nullopt;
  int port = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    port = port * 10 + (c - '0');
  }
  if (port < min_port || port > 65535) return std::nullopt;
  return port;
}

}  // namespace ddprun
