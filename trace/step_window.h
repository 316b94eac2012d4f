// The step window of --trace-steps: "A:B" keeps steps A..B-1; either side
// may be empty ("5:", ":20", ":").
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>

namespace ddprun::trace {

struct StepWindow {
  int64_t begin = 0;
  int64_t end = std::numeric_limits<int64_t>::max();  // exclusive

  bool limited() const { return begin != 0 || end != std::numeric_limits<int64_t>::max(); }
  bool contains(int64_t step) const { return step >= begin && step < end; }
};

// nullopt when `text` is not "A:B" with 0 <= A < B (when both are given).
std::optional<StepWindow> parse_step_window(const std::string& text);

}  // namespace ddprun::trace
