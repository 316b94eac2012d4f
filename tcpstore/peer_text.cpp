#include "tcpstore/peer_text.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdio>

namespace ddprun::tcpstore {
namespace {

void append_escaped(std::string& out, unsigned char ch) {
  char esc[8];
  std::snprintf(esc, sizeof(esc), "\\x%02x", ch);
  out += esc;
}

}  // namespace

std::string peer_text(std::string_view bytes, size_t max_chars) {
  std::string out;
  for (size_t i = 0; i < bytes.size(); ++i) {
    const auto ch = static_cast<unsigned char>(bytes[i]);
    const bool plain = ch >= 0x20 && ch < 0x7f && ch != '\\';
    if (out.size() + (plain ? 1 : 4) > max_chars) {
      return out + "...(" + std::to_string(bytes.size()) + " bytes)";
    }
    if (plain) {
      out += static_cast<char>(ch);
    } else {
      append_escaped(out, ch);
    }
  }
  return out;
}

std::string log_safe(std::string_view line, size_t max_chars) {
  std::string out;
  for (const char c : line) {
    const auto ch = static_cast<unsigned char>(c);
    if (out.size() >= max_chars) return out + "...";
    if (ch >= 0x20 && ch < 0x7f) {
      out += c;
    } else {
      append_escaped(out, ch);
    }
  }
  return out;
}

std::pair<std::string, std::string> peer_of(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return {"?", "?"};
  char host[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (ss.ss_family == AF_INET) {
    auto* a = reinterpret_cast<sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
    port = ntohs(a->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
    port = ntohs(a->sin6_port);
  }
  return {std::string(host) + ":" + std::to_string(port), host};
}

}  // namespace ddprun::tcpstore
