#include "agent/output/console.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <string>

namespace ddprun {

Console::Console(int fd) : fd_(fd) {
  struct stat st;
  if (fstat(fd, &st) != 0) return;
  if (S_ISSOCK(st.st_mode)) {
    socket_ = true;
  } else if (S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode)) {
    if (S_ISFIFO(st.st_mode)) pipe_size_ = std::max(0, fcntl(fd, F_GETPIPE_SZ));
    const std::string self = "/proc/self/fd/" + std::to_string(fd);
    const int own = open(self.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (own >= 0) {
      fd_ = own;
      owned_ = true;
    }
  }
}

Console::~Console() {
  if (owned_) close(fd_);
}

// Best effort, without waiting: a terminal that takes nothing now shows a
// stale (or no) status line until the next draw.
static void write_control(int fd, std::string_view s) {
  ssize_t n;
  do {
    n = write(fd, s.data(), s.size());
  } while (n < 0 && errno == EINTR);
}

void Console::wipe_status_locked() {
  if (!status_shown_) return;
  write_control(fd_, "\r\033[K");
  status_shown_ = false;
}

void Console::show_status(const std::string& line) {
  std::lock_guard lock(status_mu_);
  if (mid_line_ != nullptr) return;  // a worker's line is half out: not now
  if (status_shown_ && line == status_) return;
  status_ = line;
  write_control(fd_, "\r\033[K" + line);
  status_shown_ = true;
}

void Console::hide_status() {
  std::lock_guard lock(status_mu_);
  wipe_status_locked();
}

void Console::clear_status() {
  std::lock_guard lock(status_mu_);
  wipe_status_locked();
  status_.clear();
}

size_t Console::write_some(const void* writer, std::string_view data) {
  if (data.empty() || (mid_line_ != nullptr && mid_line_ != writer)) return 0;
  {
    std::lock_guard lock(status_mu_);
    wipe_status_locked();
  }
  if (pipe_size_ > kReserve) {
    // What the pipe holds unread (FIONREAD works on either end).
    int unread = 0;
    if (ioctl(fd_, FIONREAD, &unread) == 0) {
      const int room = pipe_size_ - kReserve - unread;
      if (room <= 0) return 0;
      data = data.substr(0, std::min(data.size(), static_cast<size_t>(room)));
    }
  }
  ssize_t n;
  do {
    n = socket_ ? send(fd_, data.data(), data.size(), MSG_DONTWAIT | MSG_NOSIGNAL)
                : write(fd_, data.data(), data.size());
  } while (n < 0 && errno == EINTR);
  if (n < 0) {
    // EAGAIN: not now. Any other error (a closed console) is for good: the
    // output is taken and dropped, as a closed terminal must not stop the job.
    if (errno == EAGAIN) return 0;
    mid_line_ = nullptr;
    return data.size();
  }
  const auto written = static_cast<size_t>(n);
  mid_line_ = written > 0 && data[written - 1] != '\n' ? writer : nullptr;
  return written;
}

}  // namespace ddprun
