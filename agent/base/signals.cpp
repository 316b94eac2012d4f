#include "agent/base/signals.h"

#include <errno.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <stdexcept>

#include "channel/stack_dump.h"

namespace ddprun {

sigset_t SignalChannel::handled() {
  sigset_t set;
  sigemptyset(&set);
  for (int s : {SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGTSTP, SIGCONT}) {
    sigaddset(&set, s);
  }
  // Sent to ddprun: every worker's stacks, the job goes on (WorkerGroup).
  sigaddset(&set, channel::stack_dump_signal());
  return set;
}

SignalChannel::SignalChannel() {
  sigset_t set = handled();
  if (pthread_sigmask(SIG_BLOCK, &set, nullptr) != 0) {
    throw std::runtime_error("cannot block signals");
  }
  fd_ = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
  if (fd_ < 0) throw std::runtime_error(std::string("signalfd: ") + strerror(errno));
  // Writing to a closed console must give EPIPE, not kill the launcher.
  signal(SIGPIPE, SIG_IGN);
}

SignalChannel::~SignalChannel() {
  if (fd_ >= 0) close(fd_);
}

std::optional<int> SignalChannel::next() {
  signalfd_siginfo info;
  ssize_t n = read(fd_, &info, sizeof(info));
  if (n != static_cast<ssize_t>(sizeof(info))) return std::nullopt;
  return static_cast<int>(info.ssi_signo);
}

void suspend_self() { kill(getpid(), SIGSTOP); }

bool is_stop_signal(int sig) {
  return sig == SIGINT || sig == SIGTERM || sig == SIGHUP || sig == SIGQUIT;
}

std::string signal_name(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  if (abbrev) return std::string("SIG") + abbrev;
  if (sig >= SIGRTMIN && sig <= SIGRTMAX) return "SIGRTMIN+" + std::to_string(sig - SIGRTMIN);
  return "signal " + std::to_string(sig);
}

}  // namespace ddprun
