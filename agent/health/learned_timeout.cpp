#include "agent/health/learned_timeout.h"

#include <algorithm>

namespace ddprun {

void LearnedTimeout::on_gap(int w, std::chrono::milliseconds gap) {
  // The start-up gaps go by unlearned: the first collective comes after the
  // model is built and the data opened, which may take minutes once.
  if (gaps_[w]++ < options_.startup_gaps) return;
  longest_ = std::max(longest_, gap);
}

std::chrono::milliseconds LearnedTimeout::limit() const {
  return std::max(options_.floor, longest_ * options_.multiple);
}

}  // namespace ddprun
