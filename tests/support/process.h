// Runs real processes for the integration tests: a command to completion
// with its output, or a live one whose output is read line by line while the
// test signals it.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace ddptest {

struct Finished {
  int exit_code = -1;  // -1 when killed by a signal
  int signal = 0;
  std::string out;
  std::string err;
};

// Environment changes for a child: "KEY=VALUE" entries added or replacing.
using EnvChanges = std::vector<std::string>;

class Process {
 public:
  // What the test reads of the process's output. kStallStdout: nobody reads
  // its stdout, a pipe that fills up and stays full (a stalled reader);
  // kStallBoth: stderr goes into that pipe too (`2>&1 | less`, paused).
  enum Output { kRead, kStallStdout, kStallBoth };
  Process(const std::vector<std::string>& argv, const EnvChanges& env = {}, Output output = kRead);
  ~Process();  // kills the process if it still runs
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  pid_t pid() const { return pid_; }
  void signal(int sig);

  // Reads stdout until a line satisfies pred; returns it, or nullopt at EOF
  // or when the timeout passes. Lines read are kept in out().
  std::optional<std::string> wait_for_line(const std::function<bool(const std::string&)>& pred,
                                           std::chrono::milliseconds timeout);
  // The same on stderr (lines read are kept for finish()).
  std::optional<std::string> wait_for_err_line(const std::function<bool(const std::string&)>& pred,
                                               std::chrono::milliseconds timeout);
  // Reads both streams to EOF (those read) and reaps the process; SIGKILLs
  // it first when that takes longer than timeout.
  Finished finish(std::chrono::milliseconds timeout = std::chrono::minutes(2));

  const std::string& out() const { return out_; }
  const std::string& err() const { return err_; }  // the stderr read so far

 private:
  bool pump(std::chrono::milliseconds timeout);  // one poll round; false at EOF of both
  pid_t pid_ = -1;
  int out_fd_ = -1, err_fd_ = -1;
  int stalled_out_fd_ = -1;  // the unread stdout, when stalled
  std::string out_, err_;
  std::optional<std::string> wait_for(bool err, const std::function<bool(const std::string&)>& pred,
                                      std::chrono::milliseconds timeout);
  size_t scanned_ = 0;      // how much of out_ wait_for_line has looked at
  size_t scanned_err_ = 0;  // the same for err_
  bool reaped_ = false;
};

// Runs argv to completion.
Finished run(const std::vector<std::string>& argv, const EnvChanges& env = {},
             std::chrono::milliseconds timeout = std::chrono::minutes(2));

// The lines of text.
std::vector<std::string> lines(const std::string& text);

// The pids of pid's live child processes (from /proc).
std::vector<pid_t> children_of(pid_t pid);

// The state letter of pid in /proc/PID/stat ('R', 'S', 'T' for stopped...),
// or 0 when there is no such process.
char process_state(pid_t pid);

// Whether pid was started as a --standby worker (its initial environment
// holds DDPRUN_STANDBY_FD).
bool started_as_standby(pid_t pid);

// Whether the process's environment (as it was at its exec) sets `name`.
bool has_env(pid_t pid, const std::string& name);

// The process's resident memory in kB (VmRSS in /proc/PID/status), or 0
// when there is no such process.
long resident_kb(pid_t pid);

// Whether process pid exits within timeout (works for processes that are not
// our children, through a pidfd). True if it is already gone.
bool exits_within(pid_t pid, std::chrono::milliseconds timeout);

}  // namespace ddptest
