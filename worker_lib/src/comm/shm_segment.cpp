#include "comm/shm_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "ddp/collective_error.h"

namespace ddp {
namespace {

std::string mib(size_t bytes) {
  return std::to_string((bytes + (1 << 20) - 1) >> 20) + " MiB";
}

[[noreturn]] void fail(const std::string& what, const std::string& name, int err) {
  throw CollectiveError("ddp: shared memory segment " + name + ": " + what + ": " + std::strerror(err));
}

void* map(int fd, size_t bytes, const std::string& name) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) fail("mmap of " + mib(bytes), name, errno);
  return p;
}

}  // namespace

ShmSegment ShmSegment::create(const std::string& name, size_t bytes) {
  const int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) fail("cannot create it", name, errno);
  // From here on the name exists: remove it again on any failure.
  auto undo = [&](const std::string& what, int err) {
    close(fd);
    shm_unlink(name.c_str());
    fail(what, name, err);
  };
  // fchmod: the umask may have taken bits we did not ask for, never added;
  // set it anyway so the mode is exactly 0600.
  if (fchmod(fd, 0600) != 0) undo("fchmod", errno);
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) undo("ftruncate to " + mib(bytes), errno);
  // Reserve the pages now: on a tmpfs without room, the first write to an
  // unreserved page kills the process with SIGBUS instead of an error.
  if (int err = posix_fallocate(fd, 0, static_cast<off_t>(bytes)); err != 0) {
    undo("no room for " + mib(bytes) + " in " + std::string("/dev/shm") +
             " (enlarge it, e.g. docker --shm-size, or set DDPRUN_CPU_COMM=gloo)",
         err);
  }
  void* p = nullptr;
  try {
    p = map(fd, bytes, name);
  } catch (...) {
    close(fd);
    shm_unlink(name.c_str());
    throw;
  }
  close(fd);
  return ShmSegment(name, p, bytes, /*owner=*/true);
}

ShmSegment ShmSegment::open(const std::string& name, size_t bytes) {
  const int fd = shm_open(name.c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC, 0);
  if (fd < 0) fail("cannot open it", name, errno);
  struct stat st{};
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    close(fd);
    fail("fstat", name, err);
  }
  // Someone else's segment under the expected name, or one others can
  // write: not ours to trust.
  if (st.st_uid != geteuid() || (st.st_mode & 077) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    throw CollectiveError("ddp: shared memory segment " + name + " belongs to uid " + std::to_string(st.st_uid) +
                          " with mode " + std::to_string(st.st_mode & 0777) + "; expected this user's (uid " +
                          std::to_string(geteuid()) + ") with mode 600");
  }
  if (static_cast<size_t>(st.st_size) != bytes) {
    close(fd);
    throw CollectiveError("ddp: shared memory segment " + name + " has " + std::to_string(st.st_size) +
                          " bytes, expected " + std::to_string(bytes));
  }
  void* p = nullptr;
  try {
    p = map(fd, bytes, name);
  } catch (...) {
    close(fd);
    throw;
  }
  close(fd);
  return ShmSegment(name, p, bytes, /*owner=*/false);
}

ShmSegment::ShmSegment(ShmSegment&& o) noexcept
    : name_(std::move(o.name_)),
      map_(std::exchange(o.map_, nullptr)),
      bytes_(std::exchange(o.bytes_, 0)),
      owner_(std::exchange(o.owner_, false)) {}

ShmSegment& ShmSegment::operator=(ShmSegment&& o) noexcept {
  if (this != &o) {
    release();
    name_ = std::move(o.name_);
    map_ = std::exchange(o.map_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
    owner_ = std::exchange(o.owner_, false);
  }
  return *this;
}

ShmSegment::~ShmSegment() { release(); }

void ShmSegment::unlink() {
  if (owner_) shm_unlink(name_.c_str());
  owner_ = false;
}

void ShmSegment::release() {
  unlink();
  if (map_) munmap(map_, bytes_);
  map_ = nullptr;
  bytes_ = 0;
}

}  // namespace ddp
