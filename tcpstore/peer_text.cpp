#include "tcpstore/peer_text.h"

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

}  // namespace ddprun::tcpstore
