#include "ddp/stop_flag.h"

#include <signal.h>

#include <atomic>
#include <stdexcept>

namespace ddp {
namespace {

// Written by the signal handler: lock-free atomics only.
std::atomic<int> received{0};
std::atomic<bool> alive{false};
struct sigaction previous_term, previous_int;

void on_signal(int sig) { received.store(sig, std::memory_order_relaxed); }

}  // namespace

StopFlag::StopFlag() {
  bool expected = false;
  if (!alive.compare_exchange_strong(expected, true)) {
    throw std::logic_error("ddp::StopFlag: only one may exist at a time");
  }
  received = 0;
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &sa, &previous_term);
  sigaction(SIGINT, &sa, &previous_int);
}

StopFlag::~StopFlag() {
  sigaction(SIGTERM, &previous_term, nullptr);
  sigaction(SIGINT, &previous_int, nullptr);
  alive = false;
}

bool StopFlag::requested() const { return received.load(std::memory_order_relaxed) != 0; }
int StopFlag::signal() const { return received.load(std::memory_order_relaxed); }

}  // namespace ddp
