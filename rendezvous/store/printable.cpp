#include "rendezvous/store/printable.h"

namespace ddprun {

namespace {

constexpr char kEsc = '\x1b';
constexpr char kBel = '\x07';

// Where the escape sequence starting at text[i] (an ESC) ends: one past it.
size_t skip_escape(std::string_view text, size_t i) {
  ++i;  // the ESC
  if (i >= text.size()) return i;
  const char kind = text[i++];
  if (kind == '[') {
    // CSI: parameter and intermediate bytes, then one final byte @..~.
    while (i < text.size() && !(text[i] >= 0x40 && text[i] <= 0x7e)) ++i;
    return i < text.size() ? i + 1 : i;
  }
  if (kind == ']' || kind == 'P' || kind == '_' || kind == '^') {
    // OSC and other strings: up to BEL or ESC backslash.
    while (i < text.size()) {
      if (text[i] == kBel) return i + 1;
      if (text[i] == kEsc && i + 1 < text.size() && text[i + 1] == '\\') return i + 2;
      ++i;
    }
    return i;
  }
  return i;  // a two-character sequence (ESC c, ESC 7, ...)
}

}  // namespace

std::string printable(std::string_view text, bool keep_newlines) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c == static_cast<unsigned char>(kEsc)) {
      i = skip_escape(text, i);
      continue;
    }
    // C1 controls encoded in UTF-8 (U+0080..U+009F: 0xC2 0x80..0x9F); some
    // terminals take U+009B as CSI.
    if (c == 0xc2 && i + 1 < text.size() && static_cast<unsigned char>(text[i + 1]) >= 0x80 &&
        static_cast<unsigned char>(text[i + 1]) <= 0x9f) {
      i += 2;
      continue;
    }
    const bool control = c < 0x20 || c == 0x7f;
    if (!control || c == '\t' || (c == '\n' && keep_newlines)) out.push_back(static_cast<char>(c));
    ++i;
  }
  return out;
}

}  // namespace ddprun
