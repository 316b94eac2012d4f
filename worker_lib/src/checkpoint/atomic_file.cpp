#include "ddp/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>

namespace ddp {
namespace {

std::runtime_error os_error(const std::string& what, const std::string& path, int err) {
  return std::runtime_error(what + " " + path + ": " + std::strerror(err));
}

void fsync_dir(const std::string& dir) {
  int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);  // best effort: the rename itself has happened
    ::close(fd);
  }
}

}  // namespace

void write_file_atomically(const std::string& final_path, const std::string& temp_path, const void* data,
                           size_t n) {
  int fd = ::open(temp_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw os_error("cannot create", temp_path, errno);
  const char* p = static_cast<const char*>(data);
  int err = 0;
  const char* step = "";
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {  // 0 would loop forever; treat it as a full disk
      err = w < 0 ? errno : ENOSPC;
      step = "cannot write";
      break;
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  // A full disk may show only here: delayed allocation reports at fsync/close.
  if (err == 0 && ::fsync(fd) != 0) {
    err = errno;
    step = "cannot fsync";
  }
  if (::close(fd) != 0 && err == 0) {
    err = errno;
    step = "cannot close";
  }
  if (err == 0 && std::rename(temp_path.c_str(), final_path.c_str()) != 0) {
    err = errno;
    ::unlink(temp_path.c_str());
    throw os_error("cannot rename " + temp_path + " to", final_path, err);
  }
  if (err != 0) {
    ::unlink(temp_path.c_str());
    throw os_error(step, temp_path, err);
  }
  fsync_dir(std::filesystem::path(final_path).parent_path().string());
}

}  // namespace ddp
