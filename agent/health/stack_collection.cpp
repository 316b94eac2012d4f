#include "agent/health/stack_collection.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "agent/health/cpu_busy.h"
#include "agent/health/symbolizer.h"
#include "channel/stack_dump.h"

namespace ddprun {
namespace {

// The fields of /proc/PID/task/TID/status that tell a signal's fate.
struct TaskStatus {
  bool exists = false;
  char state = '?';
  uint64_t pending = 0, blocked = 0, caught = 0;
};

uint64_t hex_field(const std::string& v) {
  try {
    return std::stoull(v, nullptr, 16);
  } catch (const std::exception&) {
    return 0;
  }
}

TaskStatus task_status(pid_t pid) {
  TaskStatus s;
  std::ifstream in("/proc/" + std::to_string(pid) + "/task/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    s.exists = true;
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string key = line.substr(0, colon);
    std::string value = line.substr(colon + 1);
    value.erase(0, value.find_first_not_of(" \t"));
    if (key == "State" && !value.empty()) s.state = value[0];
    else if (key == "SigPnd" || key == "ShdPnd") s.pending |= hex_field(value);
    else if (key == "SigBlk") s.blocked = hex_field(value);
    else if (key == "SigCgt") s.caught = hex_field(value);
  }
  return s;
}

uint64_t signal_bit() { return uint64_t{1} << (channel::stack_dump_signal() - 1); }

bool is_zombie(char state) { return state == 'Z' || state == 'X'; }

// Stopped (SIGSTOP, a debugger): it would answer only once continued,
// which may be never. Not waited for.
bool is_stopped(char state) { return stopped_state(state); }

// A dump's native blocks symbolized in place; other text (a Python
// traceback) stays as it is.
std::string symbolized(const std::string& raw, pid_t pid) {
  std::istringstream in(raw);
  std::vector<std::string> lines;
  std::vector<uint64_t> addresses;
  std::vector<size_t> at;  // which line each address is
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("  0x", 0) == 0) {
      try {
        addresses.push_back(std::stoull(line.substr(4), nullptr, 16));
        at.push_back(lines.size());
      } catch (const std::exception&) {
      }
    }
    lines.push_back(line);
  }
  if (!addresses.empty()) {
    const std::vector<Frame> frames = symbolize(pid, addresses);
    for (size_t i = 0; i < frames.size(); ++i) lines[at[i]] = "  " + describe(frames[i]);
  }
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  return out;
}

// Frames of the dump's own machinery and of the C library, which say
// nothing of where the program is.
bool machinery(const std::string& frame) {
  static const char* const kSkip[] = {"on_dump_signal", "write_own_stack", "backtrace", "__restore_rt",
                                      "[libc.so", "[libstdc++", "[libgcc", "[ld-linux", "libc.so.6+",
                                      "libstdc++.so.6+", "__GI_", "__futex", "__lll_", "___pthread",
                                      "pthread_cond_", "std::condition_variable", "__internal_syscall",
                                      "clock_nanosleep", "__nanosleep", "std::this_thread"};
  for (const char* s : kSkip) {
    if (frame.find(s) != std::string::npos) return true;
  }
  return false;
}

}  // namespace

std::string describe_state(StackReport::State s) {
  switch (s) {
    case StackReport::kAnswered: return "answered";
    case StackReport::kStopped: return "stopped (SIGSTOP, or a debugger holds it): it cannot answer";
    case StackReport::kInKernel: return "stuck in the kernel (uninterruptible sleep): it cannot answer";
    case StackReport::kNoHandler:
      return "has no stack handler (neither a worker_lib program nor a Python script ddprun started)";
    case StackReport::kNoAnswer: return "did not answer (it blocks the signal, or is still writing)";
    case StackReport::kGone: return "is gone";
    case StackReport::kRemote: return "is on another node (that node's agent has its stacks)";
  }
  return "?";
}

std::string main_thread_frame(const std::string& text, pid_t pid) {
  std::istringstream in(text);
  std::string line;
  const std::string native_main = std::string(channel::kNativeThreadMark) + std::to_string(pid) + " ";
  bool in_main = false;
  while (std::getline(in, line)) {
    // A native block of the main thread (its tid is the pid), or the
    // thread faulthandler ran in (the main one: ddprun signals it).
    if (line.rfind(channel::kNativeThreadMark, 0) == 0 || line.rfind("Thread 0x", 0) == 0) {
      in_main = line.rfind(native_main, 0) == 0;
      continue;
    }
    if (line.rfind("Current thread 0x", 0) == 0) {
      in_main = true;
      continue;
    }
    if (!in_main || line.size() < 3 || line.rfind("  ", 0) != 0) continue;
    std::string frame = line.substr(2);
    if (frame.rfind("File \"", 0) == 0) return frame;  // Python: the innermost frame
    if (!machinery(frame)) return frame;
  }
  return "";
}

StackCollection::StackCollection(std::vector<StackTarget> targets, Clock::time_point now,
                                 std::chrono::milliseconds limit)
    : deadline_(now + limit) {
  for (auto& t : targets) {
    Pending p{std::move(t)};
    const TaskStatus s = task_status(p.target.pid);
    if (!s.exists || is_zombie(s.state)) {
      p.why = StackReport::kGone;
    } else if (is_stopped(s.state)) {
      p.why = StackReport::kStopped;
    } else if (!(s.caught & signal_bit())) {
      p.why = StackReport::kNoHandler;
    } else {
      // Emptied first: what is there afterwards is this request's.
      const int fd = ::open(p.target.file.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC | O_NOFOLLOW);
      if (fd >= 0) ::close(fd);
      p.sent = syscall(SYS_tgkill, p.target.pid, p.target.pid, channel::stack_dump_signal()) == 0;
      if (!p.sent) p.why = StackReport::kGone;
    }
    pending_.push_back(std::move(p));
  }
}

bool StackCollection::done(Clock::time_point now) {
  bool all = true;
  for (auto& p : pending_) {
    if (!p.sent || p.answered) continue;
    const TaskStatus s = task_status(p.target.pid);
    if (!s.exists || is_zombie(s.state)) {
      p.sent = false;
      p.why = StackReport::kGone;
      continue;
    }
    // Handled: neither pending (not delivered yet) nor blocked (the
    // handler runs with it blocked).
    if (!(s.pending & signal_bit()) && !(s.blocked & signal_bit())) {
      p.answered = true;
      continue;
    }
    if (is_stopped(s.state)) {
      p.sent = false;
      p.why = StackReport::kStopped;
      continue;
    }
    p.why = s.state == 'D' ? StackReport::kInKernel : StackReport::kNoAnswer;
    all = false;
  }
  return all || now >= deadline_;
}

std::vector<StackReport> StackCollection::reports() const {
  std::vector<StackReport> out;
  for (const auto& p : pending_) {
    StackReport r;
    r.rank = p.target.rank;
    r.pid = p.target.pid;
    r.state = p.answered ? StackReport::kAnswered : p.why;
    if (p.sent) {
      std::ifstream in(p.target.file);
      std::stringstream raw;
      raw << in.rdbuf();
      if (!raw.str().empty()) {
        r.text = symbolized(raw.str(), p.target.pid);
        r.where = main_thread_frame(r.text, p.target.pid);
      } else if (p.answered) {
        r.text = "(it handled the signal but wrote nothing: its stack file was not open)\n";
      }
    }
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace ddprun
