#include "agent/output/line_splitter.h"

namespace ddprun {

void LineSplitter::feed(std::string_view bytes, const Sink& sink) {
  while (!bytes.empty()) {
    const size_t nl = bytes.find('\n');
    if (nl == std::string_view::npos) {
      partial_.append(bytes);
      // Keep memory bounded for output that never ends a line.
      while (partial_.size() >= kMaxLine) {
        sink(std::string_view(partial_).substr(0, kMaxLine));
        partial_.erase(0, kMaxLine);
      }
      return;
    }
    if (partial_.empty()) {
      sink(bytes.substr(0, nl));
    } else {
      partial_.append(bytes.substr(0, nl));
      sink(partial_);
      partial_.clear();
    }
    bytes.remove_prefix(nl + 1);
  }
}

void LineSplitter::flush(const Sink& sink) {
  if (partial_.empty()) return;
  sink(partial_);
  partial_.clear();
}

}  // namespace ddprun
