#include "profile.h"

#include <torch/version.h>

#include <stdexcept>

#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/autograd/profiler_kineto.h>
#endif

namespace gpt {

StepProfiler::StepProfiler(std::string path, long long first, int count)
    : path_(std::move(path)), first_(first), count_(count) {
#if TORCH_VERSION_MAJOR < 2
  if (!path_.empty()) throw std::invalid_argument("--profile needs LibTorch 2.x (this is " TORCH_VERSION ")");
#endif
}

StepProfiler::~StepProfiler() {
  // A run that ended inside the window still writes what it has.
  try {
    finish();
  } catch (...) {
  }
}

void StepProfiler::finish() {
  if (on_) at_step(first_ + count_);
}

void StepProfiler::at_step(long long step) {
#if TORCH_VERSION_MAJOR >= 2
  namespace impl = torch::profiler::impl;
  if (path_.empty() || done_) return;
  const impl::ProfilerConfig config(impl::ProfilerState::KINETO);
  const std::set<impl::ActivityType> activities{impl::ActivityType::CPU, impl::ActivityType::CUDA};
  if (!on_ && step >= first_) {
    torch::autograd::profiler::prepareProfiler(config, activities);
    torch::autograd::profiler::enableProfiler(config, activities);
    on_ = true;
  } else if (on_ && step >= first_ + count_) {
    on_ = false;
    done_ = true;
    torch::autograd::profiler::disableProfiler()->save(path_);
  }
#else
  (void)step;
#endif
}

}  // namespace gpt
