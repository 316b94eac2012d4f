#include "trace/step_window.h"

#include <charconv>

namespace ddprun::trace {
namespace {

// A whole non-negative decimal number, or nullopt.
std::optional<int64_t> parse_step(const std::string& s) {
  int64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || v < 0) return std::nullopt;
  return v;
}

}  // namespace

std::optional<StepWindow> parse_step_window(const std::string& text) {
  size_t colon = text.find(':');
  if (colon == std::string::npos || text.find(':', colon + 1) != std::string::npos) return std::nullopt;
  StepWindow w;
  std::string a = text.substr(0, colon), b = text.substr(colon + 1);
  if (!a.empty()) {
    auto v = parse_step(a);
    if (!v) return std::nullopt;
    w.begin = *v;
  }
  if (!b.empty()) {
    auto v = parse_step(b);
    if (!v) return std::nullopt;
    w.end = *v;
  }
  if (w.end <= w.begin) return std::nullopt;
  return w;
}

}  // namespace ddprun::trace
