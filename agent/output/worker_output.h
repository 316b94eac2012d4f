// Where one worker's stdout and stderr go: the console with a "[rankN]:"
// prefix, per-rank log files, or both; and the last lines of stderr, kept
// for the failure summary.
//
// The console is never waited for: lines it does not take at once wait in
// a bounded buffer per stream (kConsoleBacklog), and lines beyond it are
// dropped and counted; once the console takes lines again, a line says how
// many were lost. Log files get every line; a write to one that fails (a
// full disk) is said once per file, and what it lost is counted.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "agent/output/console.h"
#include "agent/output/failure_report.h"
#include "agent/output/line_splitter.h"

namespace ddprun {

// Which of a worker's streams a setting applies to (torchrun's Std).
enum StdMask : int { kNone = 0, kStdout = 1, kStderr = 2, kBoth = 3 };

struct OutputOptions {
  int console_mask = kBoth;  // streams shown on the console
  int file_mask = kNone;     // streams written to files
  std::string stdout_path;   // used when file_mask has kStdout
  std::string stderr_path;   // used when file_mask has kStderr
  Console* console_out = nullptr;  // needed when console_mask has kStdout
  Console* console_err = nullptr;  // needed when console_mask has kStderr
  size_t tail_lines = 10;
  // The console line prefix; empty: "[rankN]:".
  std::string console_prefix;
  // Lines of stdout [0] / stderr [1] holding any of these words are also
  // written (prefixed) to duplicate_fd[i] (shared by the ranks, O_APPEND).
  std::vector<std::string> duplicate_filters[2];
  int duplicate_fd[2] = {-1, -1};
};

// A console prefix from torchrun's template: ${role_name}, ${rank},
// ${local_rank} and ${hostname} replaced, anything else kept as it is.
std::string expand_line_prefix(const std::string& tmpl, const std::string& role, int rank,
                               int local_rank, const std::string& hostname);

class WorkerOutput {
 public:
  // Console lines one stream may have waiting for the console, in bytes.
  static constexpr size_t kConsoleBacklog = 1 << 20;

  // Throws std::runtime_error naming the file when a log file cannot be opened.
  // append: log files keep what they hold (a replacement's output follows
  // the failed worker's) instead of starting empty.
  WorkerOutput(int global_rank, OutputOptions options, bool append = false);
  ~WorkerOutput();
  WorkerOutput(const WorkerOutput&) = delete;
  WorkerOutput& operator=(const WorkerOutput&) = delete;

  // The worker's global rank changed (the round shrank): messages and the
  // default "[rankN]:" prefix say the new one; a --log-line-prefix-template
  // prefix and the log files stay as they were.
  void set_rank(int global_rank);

  // stream: kStdout or kStderr.
  void write(int stream, std::string_view bytes);
  // End of both streams: pass on unterminated last lines.
  void finish();

  // Offers the console what waits for it (call when it may take more).
  void flush_console();
  // The consoles this output waits for (to poll for POLLOUT); empty when
  // nothing waits.
  std::vector<Console*> waiting_consoles() const;
  // Bytes of lines waiting for the console.
  size_t console_backlog() const;
  // Gives up on what still waits for the console (the workers are done and
  // it still does not read). Returns how many lines that drops, with those
  // dropped before and not announced yet.
  uint64_t abandon_console();

  const std::deque<std::string>& stderr_tail() const { return tail_; }
  // The log files that could not be written in full.
  std::vector<LogLoss> log_losses() const;

 private:
  struct Stream {
    LineSplitter splitter;
    Console* console = nullptr;  // null: not shown
    int file_fd = -1;            // -1: no file
    std::string pending_console;  // whole prefixed lines the console has not taken
    size_t console_sent = 0;      // bytes of pending_console it took already
    uint64_t dropped = 0;         // lines dropped since the console last took one
    std::string pending_file;
    std::string file_path;
    std::string file_error;  // why the first failed write failed; "" if none did
    uint64_t lost_lines = 0, lost_bytes = 0;
  };
  void write_file(Stream& s);
  void on_line(int stream, std::string_view line);
  void flush_pending(Stream& s);
  void flush_console(Stream& s);

  int rank_;
  std::string prefix_;
  OutputOptions options_;
  Stream streams_[2];
  std::deque<std::string> tail_;
};

// Writes all of data to fd, retrying short writes; gives up silently on
// errors (a closed console must not stop the job).
void write_all(int fd, std::string_view data);

}  // namespace ddprun
