// Cuts a byte stream into lines. Bytes arrive in arbitrary chunks (pipe
// reads); a line is only passed on once it is complete, so output of
// different workers never interleaves mid-line.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

namespace ddprun {

class LineSplitter {
 public:
  // A line longer than this is passed on in pieces of this size.
  static constexpr size_t kMaxLine = 64 * 1024;
  using Sink = std::function<void(std::string_view line)>;  // without '\n'

  // Calls sink once per complete line in bytes (and any earlier remainder).
  void feed(std::string_view bytes, const Sink& sink);
  // Passes on an unterminated last line, if any (at end of stream).
  void flush(const Sink& sink);

 private:
  std::string partial_;
};

}  // namespace ddprun
