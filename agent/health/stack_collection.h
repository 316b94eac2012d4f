// Asks workers for their stacks and reads them back (the protocol is in
// channel/stack_dump.h). Never blocks: the constructor sends the signals,
// done() looks at /proc whether each worker has handled its signal, and
// reports() reads and symbolizes the files once every worker answered or
// the time limit passed. A worker that cannot answer is named with why:
// stopped, stuck in the kernel, or not handling the signal at all (then it
// is not sent: the signal's default action would kill it).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

namespace ddprun {

struct StackTarget {
  int rank = 0;
  pid_t pid = 0;
  std::string file;  // its stack file (HeartbeatTable::stack_file)
};

struct StackReport {
  // kAnswered: the text is its stacks. The others say why there are none.
  // kRemote: a rank of another node (its agent has its stacks).
  enum State { kAnswered, kStopped, kInKernel, kNoHandler, kNoAnswer, kGone, kRemote };
  int rank = 0;
  pid_t pid = 0;
  State state = kNoAnswer;
  std::string text;       // every thread's stack, symbolized
  std::string where;      // one line: where its main thread is (empty: unknown)
};

// "stopped (SIGSTOP or a debugger)", ...: why a worker gave no stack.
std::string describe_state(StackReport::State s);

// Where a main thread is, from a dump's text: the innermost frame of the
// main thread that is the program's own (not the dump's machinery nor libc).
std::string main_thread_frame(const std::string& text, pid_t pid);

class StackCollection {
 public:
  using Clock = std::chrono::steady_clock;
  StackCollection(std::vector<StackTarget> targets, Clock::time_point now,
                  std::chrono::milliseconds limit = std::chrono::seconds(3));
  // Whether every worker answered, or the limit passed.
  bool done(Clock::time_point now);
  // What each worker gave, in the targets' order (call once done()).
  std::vector<StackReport> reports() const;

 private:
  struct Pending {
    StackTarget target;
    bool sent = false;
    bool answered = false;
    StackReport::State why = StackReport::kNoAnswer;
  };
  std::vector<Pending> pending_;
  Clock::time_point deadline_;
};

}  // namespace ddprun
