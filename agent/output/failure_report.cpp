#include "agent/output/failure_report.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <ctime>
#include <set>
#include <sstream>

#include "agent/base/signals.h"
#include "channel/error_file.h"
#include "rendezvous/store/printable.h"

namespace ddprun {
namespace {

std::string format_time(std::chrono::system_clock::time_point t) {
  const auto secs = std::chrono::system_clock::to_time_t(t);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()) % 1000;
  std::tm tm{};
  localtime_r(&secs, &tm);
  char buf[64];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S", &tm);
  char out[80];
  std::snprintf(out, sizeof(out), "%s.%03d", buf, static_cast<int>(ms.count()));
  return out;
}

std::string trimmed(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}

// A stderr line as an error file holds it: without the "[rank1]: " that
// PyTorch 2.x puts before each line of an uncaught exception.
std::string without_rank_prefix(const std::string& line) {
  if (line.rfind("[rank", 0) != 0) return line;
  size_t i = 5;
  while (i < line.size() && std::isdigit(static_cast<unsigned char>(line[i]))) ++i;
  if (i == 5 || line.compare(i, 2, "]:") != 0) return line;
  return line.substr(i + 2);
}

void describe_worker(std::ostringstream& os, const WorkerExit& e, const char* indent) {
  os << "rank " << e.rank << " (local rank " << e.local_rank << ", pid " << e.pid << ", host "
     << e.host << "): " << describe_exit(e) << " at " << format_time(e.time) << "\n";
  if (!e.error_message.empty()) {
    // The first line of the message on the same line, the rest indented.
    std::istringstream lines(printable(e.error_message));
    std::string line;
    bool first = true;
    while (std::getline(lines, line)) {
      os << indent << (first ? "error: " : "       ") << line << "\n";
      first = false;
    }
  }
  // A traceback in the error file is often on stderr too: show it once.
  std::set<std::string> in_message;
  {
    std::istringstream lines(e.error_message);
    std::string line;
    while (std::getline(lines, line)) {
      if (!trimmed(line).empty()) in_message.insert(trimmed(line));
    }
  }
  // (worker_lib prints its uncaught error as "error: " and the message.)
  static constexpr std::string_view kErrorPrefix = "error: ";
  auto said = [&](const std::string& line) {
    std::string t = trimmed(without_rank_prefix(line));
    if (t.rfind(kErrorPrefix, 0) == 0) t = trimmed(t.substr(kErrorPrefix.size()));
    return in_message.count(t) > 0;
  };
  std::vector<std::string> tail;
  for (const auto& l : e.stderr_tail) {
    if (!said(l)) tail.push_back(l);
  }
  if (!tail.empty()) {
    os << indent << "last " << tail.size() << " line(s) of stderr"
       << (tail.size() < e.stderr_tail.size() ? " (not in the error above)" : "") << ":\n";
    for (const auto& l : tail) os << indent << "  " << printable(l, false) << "\n";
  }
}

// What a failed worker said (its error and its stderr's last lines, without
// PyTorch's rank prefixes): ranks that failed alike (replicas apart with no
// majority stop every rank with one message) are told once.
std::string what_it_said(const WorkerExit& e) {
  std::string said = e.error_message + "\n";
  for (const auto& l : e.stderr_tail) {
    std::string line = trimmed(l);
    for (std::string bare = trimmed(without_rank_prefix(line)); bare != line; bare = trimmed(without_rank_prefix(line))) {
      line = bare;  // "[rank0]: [rank0]: ..." (the script's and PyTorch's)
    }
    said += line + "\n";
  }
  return said;
}

bool lacks_torch(const WorkerExit& e) {
  const std::string what = "No module named 'torch";
  if (e.error_message.find(what) != std::string::npos) return true;
  for (const auto& l : e.stderr_tail) {
    if (l.find(what) != std::string::npos) return true;
  }
  return false;
}

// Whether a failure's own account says a peer went first: its error, or
// the last line of its stderr (a Python exception's), is a collective that
// failed because another rank's process or link went. Such a rank may be
// reaped first (the rank that failed on its own can take longer to exit
// after its sockets closed), but it is a consequence, not the cause. A
// rank killed by a signal lost no peer, unless its error file, written
// before the signal, says so: a loaded machine's teardown can outlast the
// group's stop, whose SIGTERM then ends a rank that failed long before.
bool lost_a_peer(const WorkerExit& e) {
  if (!e.reason.empty() || (e.signal != 0 && e.error_message.empty())) return false;
  std::string account = e.error_message;
  for (auto l = e.stderr_tail.rbegin(); l != e.stderr_tail.rend(); ++l) {
    const std::string line = trimmed(without_rank_prefix(*l));
    if (line.empty()) continue;
    account += "\n" + line;
    break;
  }
  for (const char* sign : {"Connection closed by peer", "Connection reset by peer", "Broken pipe",
                           "DistNetworkError", "NCCL communicator was aborted", "remote process exited"}) {
    if (account.find(sign) != std::string::npos) return true;
  }
  return false;
}

// The order of failures: root cause first (blamed by a hang's verdict, then
// the earliest that did not lose a peer, then earliest).
bool earlier(const WorkerExit& a, const WorkerExit& b) {
  if (a.blamed != b.blamed) return a.blamed;
  const bool a_lost = lost_a_peer(a), b_lost = lost_a_peer(b);
  if (a_lost != b_lost) return b_lost;
  return a.time < b.time;
}

}  // namespace

const WorkerExit& root_cause(const std::vector<WorkerExit>& failures) {
  return *std::min_element(failures.begin(), failures.end(), earlier);
}

std::string describe_exit(const WorkerExit& e) {
  if (!e.reason.empty()) return e.reason;
  if (e.signal != 0) return "killed by " + signal_name(e.signal);
  return "exit code " + std::to_string(e.exit_code);
}

// The worker chose what is at `path`: it may be a FIFO (opening it for
// reading would wait for a writer for ever), a link to /dev/zero (endless),
// or huge. Only a regular file is read, without following links, without
// waiting, and at most kMaxErrorFile bytes of it.
std::string read_error_file(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    if (errno == ENOENT) return "";
    if (errno == ELOOP) return "(error file " + path + " is a symbolic link: not read)";
    return "(error file " + path + " cannot be read: " + strerror(errno) + ")";
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return "(error file " + path + " is not a regular file: not read)";
  }
  std::string text(kMaxErrorFile, '\0');
  size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = read(fd, text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  close(fd);
  text.resize(got);
  const bool truncated = static_cast<size_t>(st.st_size) > kMaxErrorFile;
  try {
    return channel::error_file_message(text);
  } catch (const std::exception& e) {
    if (truncated) {
      return "(error file " + path + " is " + std::to_string(st.st_size) + " bytes, truncated to the " +
             std::to_string(kMaxErrorFile / 1024) + " KiB ddprun reads; its start: " +
             printable(text.substr(0, 200), false) + "...)";
    }
    // JSON that ends early (an object never closed): the writer was
    // stopped (or killed) while it wrote, not a file of another format.
    const size_t first = text.find_first_not_of(" \t\r\n");
    const size_t last = text.find_last_not_of(" \t\r\n");
    if (first != std::string::npos && text[first] == '{' && text[last] != '}') {
      return "(error file " + path + " was cut short, most likely by the stop while it was written; its start: " +
             printable(text.substr(first, 200), false) + (text.size() - first > 200 ? "..." : "") + ")";
    }
    return "(error file " + path + " is not torchrun's JSON format: " + e.what() + ")";
  }
}

std::string format_log_losses(const std::vector<LogLoss>& losses) {
  if (losses.empty()) return "";
  uint64_t lines = 0, bytes = 0;
  for (const auto& l : losses) {
    lines += l.lines;
    bytes += l.bytes;
  }
  std::ostringstream os;
  os << "ddprun: the worker logs are incomplete: " << lines << " line(s), " << bytes
     << " byte(s) could not be written to " << losses.size() << " file(s)\n";
  for (const auto& l : losses) {
    os << "  rank " << l.rank << ": " << l.path << ": " << l.lines << " line(s), " << l.bytes
       << " byte(s) lost (" << l.error << ")\n";
  }
  return os.str();
}

std::string format_failure_summary(std::vector<WorkerExit> failures, const SummaryContext& ctx) {
  std::stable_sort(failures.begin(), failures.end(), earlier);
  std::ostringstream os;
  os << "ddprun: job " << ctx.run_id << (failures.empty() ? "" : " failed");
  if (!ctx.stop_reason.empty()) os << (failures.empty() ? " " : " (") << ctx.stop_reason
                                   << (failures.empty() ? "" : ")");
  os << " on attempt " << (ctx.attempt + 1) << " of " << (ctx.max_restarts + 1) << "\n";
  if (failures.empty()) {
    os << "  no worker failed on its own\n";
  } else {
    // A rank that lost a peer failed before the root cause: say why it follows.
    const bool before = std::any_of(failures.begin() + 1, failures.end(),
                                    [&](const WorkerExit& e) { return e.time < failures.front().time; });
    os << (failures.front().blamed ? "  root cause (the rank the hang's verdict names): "
           : before                ? "  root cause (the earliest failure of its own; the ranks before it lost a peer): "
                                   : "  root cause (earliest failure): ");
    describe_worker(os, failures.front(), "    ");
    for (size_t i = 1; i < failures.size(); ++i) {
      os << "  also failed: ";
      const std::string said = what_it_said(failures[i]);
      const auto same = std::find_if(failures.begin(), failures.begin() + static_cast<long>(i),
                                     [&](const WorkerExit& before) { return what_it_said(before) == said; });
      if (same == failures.begin() + static_cast<long>(i) || said == "\n") {
        describe_worker(os, failures[i], "    ");
        continue;
      }
      os << "rank " << failures[i].rank << " (local rank " << failures[i].local_rank << ", pid " << failures[i].pid
         << ", host " << failures[i].host << "): " << describe_exit(failures[i]) << " at "
         << format_time(failures[i].time) << "\n    the same error as rank " << same->rank << "'s above\n";
    }
  }
  if (!ctx.control_plane.empty()) os << "  control plane: " << ctx.control_plane << "\n";
  if (ctx.stopped_count > 0) {
    os << "  " << ctx.stopped_count << (failures.empty() ? "" : " other") << " worker(s) stopped by ddprun\n";
  }
  if (!ctx.python.empty() && std::any_of(failures.begin(), failures.end(), lacks_torch)) {
    os << "  hint: the workers ran under " << ctx.python
       << ", which cannot import torch; choose another interpreter with PYTHON_EXEC or "
          "DDPRUN_PYTHON (e.g. PYTHON_EXEC=/usr/bin/python3)\n";
  }
  return os.str();
}

}  // namespace ddprun
