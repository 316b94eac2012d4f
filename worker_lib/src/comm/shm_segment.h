// A POSIX shared-memory segment mapped into this process: made by one rank
// (create), opened by the others (open), unlinked by its maker once every
// rank holds it, so that nothing is left under /dev/shm however the job
// ends. Only this user can open it (mode 0600, owner checked on open).
// No LibTorch here.
#pragma once

#include <cstddef>
#include <string>
#include <utility>

namespace ddp {

class ShmSegment {
 public:
  // Makes a new segment of `bytes` (O_EXCL: never an existing one) with its
  // memory reserved up front (posix_fallocate), so a full /dev/shm is an
  // error here rather than a SIGBUS on first touch. Throws CollectiveError
  // naming the segment, the size and what to change.
  static ShmSegment create(const std::string& name, size_t bytes);
  // Opens a segment another rank made: it must belong to this user, be
  // private to it and have exactly `bytes`. Throws CollectiveError.
  static ShmSegment open(const std::string& name, size_t bytes);

  ShmSegment() = default;
  ShmSegment(ShmSegment&& other) noexcept;
  ShmSegment& operator=(ShmSegment&& other) noexcept;
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;
  ~ShmSegment();  // unmaps (and unlinks, if this process made it and has not yet)

  // Removes the name; the mapping stays valid. Idempotent.
  void unlink();

  char* data() const { return static_cast<char*>(map_); }
  size_t size() const { return bytes_; }
  const std::string& name() const { return name_; }

 private:
  ShmSegment(std::string name, void* map, size_t bytes, bool owner)
      : name_(std::move(name)), map_(map), bytes_(bytes), owner_(owner) {}
  void release();

  std::string name_;
  void* map_ = nullptr;
  size_t bytes_ = 0;
  bool owner_ = false;  // made here and not yet unlinked
};

}  // namespace ddp
