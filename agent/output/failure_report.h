// What the agent knows about a worker that failed, and the summary printed
// when a job fails: root cause (earliest failure) first, then the others.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace ddprun {

struct WorkerExit {
  int rank = 0;
  int local_rank = 0;
  pid_t pid = -1;
  std::string host;
  int exit_code = 0;  // when signal == 0
  int signal = 0;     // the signal that killed it, 0 if it exited
  std::chrono::system_clock::time_point time;
  std::string reason;                    // set when ddprun judged it failed (hung), else ""
  // A hung worker the hang's verdict blames (the others waited for it):
  // the root cause before any that were only waiting, whenever they fell silent.
  bool blamed = false;
  std::string error_message;             // from its error file, if it wrote one
  std::vector<std::string> stderr_tail;  // last lines of its stderr

  bool failed() const { return signal != 0 || exit_code != 0 || !reason.empty(); }
};

// "exit code 3", "killed by SIGSEGV", or the reason ddprun gave.
std::string describe_exit(const WorkerExit& e);

// The message a worker wrote to TORCHELASTIC_ERROR_FILE (torchrun's JSON
// format: {"message": {"message": ..., "extraInfo": {...}}} or
// {"message": "..."}). Empty when the file does not exist. Never blocks:
// anything but a regular file (a FIFO, a device, a symbolic link) is not
// read, and a regular file only up to kMaxErrorFile bytes (the message says
// when it was cut).
constexpr size_t kMaxErrorFile = 64 * 1024;
std::string read_error_file(const std::string& path);

// A log file that did not get everything (a full disk): what was lost.
struct LogLoss {
  int rank = 0;
  std::string path;
  std::string error;  // why the first write failed
  uint64_t lines = 0;
  uint64_t bytes = 0;
};

// What the end of a job says about its incomplete logs ("" when none).
std::string format_log_losses(const std::vector<LogLoss>& losses);

struct SummaryContext {
  std::string run_id;
  int attempt = 0;       // 0-based restart count of the failed attempt
  int max_restarts = 0;
  int stopped_count = 0;  // workers the agent stopped after the root cause
  std::string stop_reason;  // e.g. "stopped by SIGTERM"; empty for a worker failure
  // The interpreter .py workers ran under and how it was chosen, e.g.
  // "/usr/local/bin/python3 (python3 from PATH)"; empty for other programs.
  std::string python = "";
  // With a control plane: who serves the rendezvous, its term, and the
  // takeovers this node saw; empty without one.
  std::string control_plane = "";
};

// The root cause among failures (not empty, need not be sorted): the
// earliest one a hang's verdict blames, else the earliest, the first of
// those equally early. The summary names the same.
const WorkerExit& root_cause(const std::vector<WorkerExit>& failures);

// Multi-line summary; failures need not be sorted. Stderr lines that the
// error file's message holds already (a traceback) are not shown twice.
// When a worker said "No module named 'torch'", a hint names the
// interpreter and how to choose another.
std::string format_failure_summary(std::vector<WorkerExit> failures, const SummaryContext& ctx);

}  // namespace ddprun
