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

// Pieces below this are gathered; a tensor's bytes go straight to write().
constexpr size_t kBufferBytes = size_t{1} << 20;

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

AtomicFileWriter::AtomicFileWriter(std::string temp_path) : temp_path_(std::move(temp_path)) {
  fd_ = ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) throw os_error("cannot create", temp_path_, errno);
  buffer_.reserve(kBufferBytes);
}

AtomicFileWriter::~AtomicFileWriter() {
  if (committed_) return;
  if (fd_ >= 0) ::close(fd_);
  ::unlink(temp_path_.c_str());
}

void AtomicFileWriter::fail(const char* step, int err) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  ::unlink(temp_path_.c_str());
  throw os_error(step, temp_path_, err);
}

void AtomicFileWriter::write_out(const char* p, size_t n) {
  if (fd_ < 0) throw std::logic_error("ddp: AtomicFileWriter used after it failed or committed: " + temp_path_);
  while (n > 0) {
    ssize_t w = ::write(fd_, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) fail("cannot write", w < 0 ? errno : ENOSPC);  // 0 would loop forever: a full disk
    p += w;
    n -= static_cast<size_t>(w);
  }
}

void AtomicFileWriter::flush() {
  if (buffer_.empty()) return;
  write_out(buffer_.data(), buffer_.size());
  buffer_.clear();
}

void AtomicFileWriter::write(const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  if (buffer_.size() + n <= kBufferBytes) {
    buffer_.insert(buffer_.end(), p, p + n);
    return;
  }
  flush();
  write_out(p, n);
}

void AtomicFileWriter::commit(const std::string& final_path) {
  flush();
  // A full disk may show only here: delayed allocation reports at fsync/close.
  if (::fsync(fd_) != 0) fail("cannot fsync", errno);
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail("cannot close", errno);
  if (std::rename(temp_path_.c_str(), final_path.c_str()) != 0) {
    const int err = errno;
    ::unlink(temp_path_.c_str());
    throw os_error("cannot rename " + temp_path_ + " to", final_path, err);
  }
  committed_ = true;
  fsync_dir(std::filesystem::path(final_path).parent_path().string());
}

void write_file_atomically(const std::string& final_path, const std::string& temp_path, const void* data,
                           size_t n) {
  AtomicFileWriter out(temp_path);
  out.write(data, n);
  out.commit(final_path);
}

}  // namespace ddp
