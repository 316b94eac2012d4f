#include "channel/output_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace ddprun::channel {

int open_output_file(const std::string& path, int flags, mode_t mode) {
  const int access = (flags & O_RDWR) ? O_RDWR : O_WRONLY;
  const int rest = flags & ~(O_RDWR | O_WRONLY | O_RDONLY);
  return ::open(path.c_str(), access | rest | O_CREAT | O_CLOEXEC | O_NOFOLLOW, mode);
}

std::string open_error_text(int err) {
  if (err == ELOOP) return "it is a symbolic link (output files are never written through one)";
  return std::strerror(err);
}

std::string write_output_file(const std::string& path, const std::string& text) {
  const int fd = open_output_file(path, O_TRUNC);
  if (fd < 0) return path + ": " + open_error_text(errno);
  return write_and_close(fd, path, text);
}

std::string write_and_close(int fd, const std::string& path, const std::string& text) {
  const char* p = text.data();
  size_t left = text.size();
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : EIO;
      ::close(fd);
      return path + ": " + std::strerror(err);
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  if (::close(fd) != 0 && errno != EINTR) return path + ": " + std::strerror(errno);
  return "";
}

int allocate_file(int fd, size_t len) {
  // posix_fallocate returns the error instead of setting errno. Where the
  // file system cannot allocate (EOPNOTSUPP is emulated by glibc with
  // writes), the answer is still whether every block is there.
  int err;
  do {
    err = ::posix_fallocate(fd, 0, static_cast<off_t>(len));
  } while (err == EINTR);
  return err;
}

}  // namespace ddprun::channel
