// A small tmpfs mounted for one test: a disk that fills up at a chosen size,
// and that can be remounted read-only. Mounting needs CAP_SYS_ADMIN (root
// on these machines; not in most containers): check ok() and skip otherwise.
#pragma once

#include <sys/mount.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>

namespace ddptest {

class Tmpfs {
 public:
  // Creates the folder `at` and mounts a tmpfs of size_kb KiB on it.
  Tmpfs(const std::filesystem::path& at, int size_kb) : at_(at) {
    std::filesystem::create_directories(at_);
    const std::string opts = "size=" + std::to_string(size_kb) + "k,mode=0755";  // ours alone, like a folder ddprun accepts
    if (::mount("ddprun-test", at_.c_str(), "tmpfs", 0, opts.c_str()) == 0) {
      mounted_ = true;
    } else {
      why_ = "cannot mount a tmpfs on " + at_.string() + " (" + std::strerror(errno) +
             "): this test needs CAP_SYS_ADMIN";
    }
  }
  ~Tmpfs() {
    if (mounted_) ::umount2(at_.c_str(), MNT_DETACH);
    std::error_code ec;
    std::filesystem::remove_all(at_, ec);
  }
  Tmpfs(const Tmpfs&) = delete;
  Tmpfs& operator=(const Tmpfs&) = delete;

  bool ok() const { return mounted_; }
  const std::string& why_not() const { return why_; }
  const std::filesystem::path& path() const { return at_; }

  // Remounts read-only (true) or read-write (false); false on failure.
  bool set_read_only(bool ro) {
    const unsigned long flags = MS_REMOUNT | (ro ? MS_RDONLY : 0);
    return ::mount("ddprun-test", at_.c_str(), "tmpfs", flags, nullptr) == 0;
  }

 private:
  std::filesystem::path at_;
  bool mounted_ = false;
  std::string why_;
};

}  // namespace ddptest
