// Memory a replacement prepares, while it starts, for the state a heal will
// bring it. Its optimizer state is new to it: received into fresh memory,
// the kernel would zero and map each page inside the heal (on a VM about
// as long as the copy itself). Rank 0's Healer tells the job how many bytes
// that is (World::tell_receive_bytes, after its first step); a replacement's
// World reads the number as it connects and makes a pool of that many
// bytes, its pages populated on a thread of its own, while the program
// builds its model. The heal then carves the optimizer's tensors out of the
// pool (take) and gives back what it did not use (release_rest).
//
// The number is a hint: a tensor that does not fit (the state grew since)
// is made afresh as before, and a pool that could not be made gives none.
#pragma once

#include <ATen/ATen.h>

#include <cstddef>
#include <cstdint>
#include <future>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace ddp {

class ReceivePool {
 public:
  // Starts making `bytes` of memory (none when bytes is 0, or more than
  // the memory the machine has free: a hint past that is not believed).
  static std::shared_ptr<ReceivePool> start(size_t bytes);
  ~ReceivePool();
  ReceivePool(const ReceivePool&) = delete;
  ReceivePool& operator=(const ReceivePool&) = delete;

  // A contiguous tensor carved out of the pool, once it is made; undefined
  // when it does not fit (or there is no pool). Thread-safe.
  at::Tensor take(const std::vector<int64_t>& sizes, at::ScalarType dtype);
  // Unmaps the pages no tensor took; take() gives nothing after it.
  void release_rest();
  // Bytes taken so far (each tensor's, rounded up as bytes_for says).
  size_t taken() const;
  size_t size() const { return bytes_; }

  // The room one tensor of `nbytes` takes in a pool: what rank 0 adds up.
  static size_t bytes_for(size_t nbytes) { return (nbytes + kAlign - 1) / kAlign * kAlign; }

 private:
  struct Mapping;  // the pages; munmapped when the pool and every tensor of it are gone
  static constexpr size_t kAlign = 64;
  explicit ReceivePool(size_t bytes) : bytes_(bytes) {}
  std::shared_ptr<Mapping> mapping();  // waits for the maker

  size_t bytes_;
  std::shared_future<std::shared_ptr<Mapping>> made_;
  mutable std::mutex mu_;
  size_t used_ = 0;
  bool closed_ = false;
  std::jthread maker_;  // last: joined first
};

}  // namespace ddp
