#include "launch/stack_dumper.h"

#include <dirent.h>
#include <execinfo.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>

#include "channel/stack_dump.h"

namespace ddp {
namespace {

std::atomic<int> g_fd{-1};
// While the main thread's handler collects: how many peer threads it has
// asked for their stacks and not heard from.
std::atomic<int> g_pending{0};
std::atomic<bool> g_collecting{false};

// A fixed buffer filled with text, nothing allocated.
struct Text {
  char buf[8192];
  size_t len = 0;
  void put(const char* s) {
    while (*s && len < sizeof(buf)) buf[len++] = *s++;
  }
  void put_number(unsigned long v, unsigned base) {
    char digits[32];
    int n = 0;
    do {
      digits[n++] = "0123456789abcdef"[v % base];
      v /= base;
    } while (v && n < 32);
    while (n > 0 && len < sizeof(buf)) buf[len++] = digits[--n];
  }
};

pid_t this_tid() { return static_cast<pid_t>(syscall(SYS_gettid)); }

// The thread's name, from /proc/self/task/TID/comm.
void put_thread_name(Text& t, pid_t tid) {
  Text path;
  path.put("/proc/self/task/");
  path.put_number(static_cast<unsigned long>(tid), 10);
  path.put("/comm");
  path.buf[path.len < sizeof(path.buf) ? path.len : sizeof(path.buf) - 1] = '\0';
  const int fd = open(path.buf, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  char name[32];
  const ssize_t n = read(fd, name, sizeof(name) - 1);
  close(fd);
  if (n <= 0) return;
  name[n] = '\0';
  if (char* nl = std::strchr(name, '\n')) *nl = '\0';
  t.put(name);
}

// This thread's block, in one write (blocks of several threads do not mix).
void write_own_stack(int fd) {
  void* frames[64];
  const int n = backtrace(frames, 64);
  Text t;
  const pid_t tid = this_tid();
  t.put(ddprun::channel::kNativeThreadMark);
  t.put_number(static_cast<unsigned long>(tid), 10);
  t.put(" ");
  put_thread_name(t, tid);
  t.put("\n");
  for (int i = 0; i < n; ++i) {
    t.put("  0x");
    t.put_number(reinterpret_cast<unsigned long>(frames[i]), 16);
    t.put("\n");
  }
  t.put("\n");
  [[maybe_unused]] ssize_t w = write(fd, t.buf, t.len);
}

// Asks every other thread of the process for its stack; returns how many
// were asked.
int ask_peers(int sig) {
  const int dir = open("/proc/self/task", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return 0;
  const pid_t self = this_tid();
  const pid_t pid = getpid();
  int asked = 0;
  alignas(8) char buf[4096];
  while (true) {
    const long got = syscall(SYS_getdents64, dir, buf, sizeof(buf));
    if (got <= 0) break;
    for (long at = 0; at < got;) {
      // struct linux_dirent64: ino (8), off (8), reclen (2), type (1), name.
      unsigned short reclen;
      std::memcpy(&reclen, buf + at + 16, sizeof(reclen));
      const char* name = buf + at + 19;
      at += reclen;
      if (name[0] < '0' || name[0] > '9') continue;
      long tid = 0;
      for (const char* c = name; *c >= '0' && *c <= '9'; ++c) tid = tid * 10 + (*c - '0');
      if (tid == self) continue;
      g_pending.fetch_add(1);
      if (syscall(SYS_tgkill, pid, tid, sig) != 0) g_pending.fetch_sub(1);
      else ++asked;
    }
  }
  close(dir);
  return asked;
}

void on_dump_signal(int sig, siginfo_t* info, void*) {
  const int saved_errno = errno;
  const int fd = g_fd.load();
  if (fd >= 0) {
    const bool from_peer = info && info->si_code == SI_TKILL && info->si_pid == getpid();
    if (from_peer) {
      // The collecting thread asked for this thread's stack.
      write_own_stack(fd);
      g_pending.fetch_sub(1);
    } else if (!g_collecting.exchange(true)) {
      // The agent's request: this thread, then every other one. Peers in
      // the kernel for good, or blocking the signal, never answer: a
      // second at most.
      write_own_stack(fd);
      if (ask_peers(sig) > 0) {
        const timespec ms{0, 1000 * 1000};
        for (int i = 0; i < 1000 && g_pending.load() > 0; ++i) nanosleep(&ms, nullptr);
      }
      const int silent = g_pending.exchange(0);
      if (silent > 0) {
        Text t;
        t.put("(");
        t.put_number(static_cast<unsigned long>(silent), 10);
        t.put(" more thread(s) did not answer: they block the signal or are stuck in the kernel)\n");
        [[maybe_unused]] ssize_t w = write(fd, t.buf, t.len);
      }
      g_collecting.store(false);
    }
  }
  errno = saved_errno;
}

}  // namespace

std::string install_stack_dumper(const std::string& path) {
  const int fd = open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  if (fd < 0) return "cannot open the stack file " + path + ": " + std::strerror(errno);
  // backtrace() loads the unwinder the first time: here, not in the handler.
  void* warm[2];
  backtrace(warm, 2);
  const int old = g_fd.exchange(fd);
  if (old >= 0) close(old);
  static std::once_flag once;
  std::string err;
  std::call_once(once, [&] {
    struct sigaction sa {};
    sa.sa_sigaction = on_dump_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    if (sigaction(ddprun::channel::stack_dump_signal(), &sa, nullptr) != 0) {
      err = std::string("cannot handle the stack dump signal: ") + std::strerror(errno);
    }
  });
  return err;
}

}  // namespace ddp
