// One of ddprun's console streams (its stdout or stderr) as the workers'
// output reaches it: written without ever blocking, so that a reader that
// stops reading (`ddprun ... | less` left paused, a stalled pipe) never
// stops supervision. What the console does not take stays with each
// worker's output (bounded, see WorkerOutput) until it does.
#pragma once

#include <mutex>
#include <string>
#include <string_view>

namespace ddprun {

class Console {
 public:
  // Room in a pipe the workers' lines leave free for ddprun's own (its
  // warnings and the failure summary, written the ordinary way): with
  // `2>&1 | less` they share the pipe, and a pipe the workers filled would
  // block them.
  static constexpr int kReserve = 16 * 1024;

  // Writes to fd through a non-blocking open file description of its own
  // where fd is a pipe or a terminal (the shell shares fd's description:
  // making that one non-blocking would be felt by the shell too); sockets
  // are written with MSG_DONTWAIT; other files as they are (writes to them
  // do not wait on a reader).
  explicit Console(int fd);
  ~Console();
  Console(const Console&) = delete;
  Console& operator=(const Console&) = delete;

  // The descriptor to poll for POLLOUT.
  int fd() const { return fd_; }

  // Writes what the console takes now of data (whole lines) for writer;
  // returns how many bytes. Once a writer has had part of a line taken, it
  // alone may write until the line is out, so that lines never interleave
  // mid-line.
  size_t write_some(const void* writer, std::string_view data);
  // The writer gives up the rest of its line (it is going away).
  void forget(const void* writer) {
    if (mid_line_ == writer) mid_line_ = nullptr;
  }

  // A status line kept under the output (a terminal only): show_status
  // draws it (or redraws a changed one); anything written after wipes it
  // first ("\r\033[K"), and the next show_status draws it again. For
  // ddprun's own lines, written past this class, hide_status wipes it
  // (safe from any thread). clear_status wipes it for good.
  void show_status(const std::string& line);
  void hide_status();
  void clear_status();

 private:
  int fd_ = -1;
  bool owned_ = false;   // fd_ is our own description (closed by us)
  bool socket_ = false;  // written with send(MSG_DONTWAIT)
  int pipe_size_ = 0;    // a pipe's capacity (F_GETPIPE_SZ), 0 for others
  const void* mid_line_ = nullptr;  // the writer whose line is half out
  // The status line: written and wiped under status_mu_ (spdlog may wipe
  // it from another thread).
  void wipe_status_locked();
  std::mutex status_mu_;
  std::string status_;
  bool status_shown_ = false;
};

}  // namespace ddprun
