// Runs a test's ranks as threads of one process. No LibTorch here.
#pragma once

#include <exception>
#include <future>
#include <vector>

namespace ddptest {

// Runs body(r) for r in [0, n) on n threads; once all end, rethrows the
// first failure.
template <typename Body>
void run_threads(int n, Body body) {
  std::vector<std::future<void>> ranks;
  for (int r = 0; r < n; ++r) ranks.push_back(std::async(std::launch::async, [&body, r] { body(r); }));
  std::exception_ptr first;
  for (auto& f : ranks) {
    try {
      f.get();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

}  // namespace ddptest
