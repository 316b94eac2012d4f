// --profile: a kernel-level trace of a few steps (LibTorch 2.x's Kineto
// profiler, CPU ops and CUDA kernels), saved as a Chrome trace that
// bench/profile_compare.py reads beside PyTorch eager's.
#pragma once

#include <memory>
#include <string>

namespace gpt {

class StepProfiler {
 public:
  // Profiles steps [first, first + count) into `path`; an empty path does
  // nothing. Throws std::invalid_argument on a LibTorch without the API.
  StepProfiler(std::string path, long long first, int count);
  ~StepProfiler();
  // Called at the start of each step (before its work).
  void at_step(long long step);
  // Writes the trace if the window is still open (a run shorter than it).
  void finish();

 private:
  std::string path_;
  long long first_;
  int count_;
  bool on_ = false, done_ = false;
};

}  // namespace gpt
