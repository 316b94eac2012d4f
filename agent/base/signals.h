// The signals the agent reacts to, read from a signalfd in its event loop.
//
// Construct SignalChannel first thing in main(), before any thread starts
// (gRPC starts threads): it blocks the signals in the calling thread, every
// later thread inherits that mask, and so the signals reach only the signalfd.
// Workers get an empty mask back before exec (see spawn.cpp).
#pragma once

#include <signal.h>

#include <optional>
#include <string>

namespace ddprun {

class SignalChannel {
 public:
  SignalChannel();
  ~SignalChannel();
  SignalChannel(const SignalChannel&) = delete;
  SignalChannel& operator=(const SignalChannel&) = delete;

  int fd() const { return fd_; }
  // The next pending signal, or nullopt when none is pending.
  std::optional<int> next();

  // SIGCHLD, and the signals forwarded to workers: SIGINT, SIGTERM, SIGHUP,
  // SIGQUIT, SIGUSR1, SIGUSR2; SIGTSTP and SIGCONT (Ctrl-Z and fg: ddprun
  // stops its workers before itself, see group_event::Signal).
  static sigset_t handled();

 private:
  int fd_ = -1;
};

// Stops ddprun (all its threads) until SIGCONT: what SIGTSTP's default
// action would have done, had ddprun not caught it.
void suspend_self();

// Whether receiving this signal stops the job (SIGINT, SIGTERM, SIGHUP, SIGQUIT)
// rather than only being passed on (SIGUSR1, SIGUSR2).
bool is_stop_signal(int sig);

// "SIGTERM" for 15, "signal 99" for unknown numbers.
std::string signal_name(int sig);

}  // namespace ddprun
