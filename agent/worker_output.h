// Where one worker's stdout and stderr go: the console with a "[rankN]:"
// prefix, per-rank log files, or both; and the last lines of stderr, kept
// for the failure summary.
#pragma once

#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "agent/line_splitter.h"

namespace ddprun {

// Which of a worker's streams a setting applies to (torchrun's Std).
enum StdMask : int { kNone = 0, kStdout = 1, kStderr = 2, kBoth = 3 };

struct OutputOptions {
  int console_mask = kBoth;  // streams shown on the console
  int file_mask = kNone;     // streams written to files
  std::string stdout_path;   // used when file_mask has kStdout
  std::string stderr_path;   // used when file_mask has kStderr
  int console_out_fd = 1;
  int console_err_fd = 2;
  size_t tail_lines = 10;
};

class WorkerOutput {
 public:
  // Throws std::runtime_error naming the file when a log file cannot be opened.
  WorkerOutput(int global_rank, OutputOptions options);
  ~WorkerOutput();
  WorkerOutput(const WorkerOutput&) = delete;
  WorkerOutput& operator=(const WorkerOutput&) = delete;

  // stream: kStdout or kStderr.
  void write(int stream, std::string_view bytes);
  // End of both streams: pass on unterminated last lines.
  void finish();

  const std::deque<std::string>& stderr_tail() const { return tail_; }

 private:
  struct Stream {
    LineSplitter splitter;
    int console_fd = -1;  // -1: not shown
    int file_fd = -1;     // -1: no file
    std::string pending_console;
    std::string pending_file;
  };
  void on_line(int stream, std::string_view line);
  void flush_pending(Stream& s);

  std::string prefix_;
  OutputOptions options_;
  Stream streams_[2];
  std::deque<std::string> tail_;
};

// Writes all of data to fd, retrying short writes; gives up silently on
// errors (a closed console must not stop the job).
void write_all(int fd, std::string_view data);

}  // namespace ddprun
