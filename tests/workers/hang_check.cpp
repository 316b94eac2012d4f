// A worker_lib program for hang and straggler diagnosis: every rank
// all-reduces a small tensor each step and beats; at step --at, rank
// --stuck stops in stuck_outside_any_collective() (it reads a pipe nobody
// writes) while its peers wait for it in the next all_reduce. With
// --stop-self the stuck rank stops itself with SIGSTOP instead (a rank that
// cannot answer). With --work-ms W each step first sleeps W ms ("compute"),
// rank --slow F times as long (--slow-factor), and --steps N ends the run.
// At step --evaluate-at every rank announces an evaluation and spends
// --evaluate-ms in it without collectives; with --stuck-in-evaluation rank
// --stuck gets stuck there, inside the announced phase. With --busy-ms B
// rank --stuck is not stuck at step --at but computes for B ms without a
// beat (a long step: slow, not hung) and goes on; --busy-ms 1e12 spins
// for ever. With --also-stopped R rank R stops itself with SIGSTOP at step
// --at too (a stopped rank beside a busy one).
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <cstdlib>
#include <string>
#include <thread>

#include "ddp/ddp.h"

// Not inlined, so that its name is on the stack.
__attribute__((noinline)) void stuck_outside_any_collective() {
  int fds[2];
  if (pipe(fds) != 0) std::abort();
  char c;
  while (read(fds[0], &c, 1) != 0) {
  }
  std::abort();  // never reached: nobody writes
}

int main(int argc, char** argv) {
  int stuck = 1, at = 5, slow = -1, evaluate_at = -1, also_stopped = -1;
  double evaluate_ms = 0;
  long steps = -1;
  double work_ms = 0, slow_factor = 1.5, busy_ms = 0;
  bool stop_self = false, stuck_in_evaluation = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--stuck" && i + 1 < argc) stuck = std::atoi(argv[++i]);
    else if (a == "--at" && i + 1 < argc) at = std::atoi(argv[++i]);
    else if (a == "--stop-self") stop_self = true;
    else if (a == "--stuck-in-evaluation") stuck_in_evaluation = true;
    else if (a == "--work-ms" && i + 1 < argc) work_ms = std::atof(argv[++i]);
    else if (a == "--slow" && i + 1 < argc) slow = std::atoi(argv[++i]);
    else if (a == "--slow-factor" && i + 1 < argc) slow_factor = std::atof(argv[++i]);
    else if (a == "--steps" && i + 1 < argc) steps = std::atol(argv[++i]);
    else if (a == "--evaluate-at" && i + 1 < argc) evaluate_at = std::atoi(argv[++i]);
    else if (a == "--evaluate-ms" && i + 1 < argc) evaluate_ms = std::atof(argv[++i]);
    else if (a == "--busy-ms" && i + 1 < argc) busy_ms = std::atof(argv[++i]);
    else if (a == "--also-stopped" && i + 1 < argc) also_stopped = std::atoi(argv[++i]);
  }
  auto world = ddp::init();
  at::Tensor t = at::ones({1024});
  const auto work = std::chrono::microseconds(static_cast<int64_t>(
      1000 * work_ms * (world->rank() == slow ? slow_factor : 1.0)));
  for (long step = 0; step != steps; ++step) {
    if (work.count() > 0) std::this_thread::sleep_for(work);
    if (step == at && world->rank() == also_stopped) {
      std::printf("rank %d stops itself at step %ld\n", world->rank(), step);
      std::fflush(stdout);
      raise(SIGSTOP);
    }
    if (step == at && world->rank() == stuck && busy_ms > 0) {
      std::printf("rank %d computes for %.0f ms at step %ld\n", world->rank(), busy_ms, step);
      std::fflush(stdout);
      // CPU time, not wall time: on a loaded machine it takes longer, and
      // is still a computation, never a wait.
      const clock_t until = clock() + static_cast<clock_t>(busy_ms / 1000.0 * CLOCKS_PER_SEC);
      volatile double x = 0;
      while (clock() < until) x = x + 1;
    } else if (step == at && world->rank() == stuck && !stuck_in_evaluation) {
      std::printf("rank %d gets stuck at step %ld\n", world->rank(), step);
      std::fflush(stdout);
      if (stop_self) raise(SIGSTOP);
      stuck_outside_any_collective();
    }
    if (step == evaluate_at) {
      // A long evaluation without collectives, announced: no hang.
      const ddp::PhaseScope evaluating = world->announce(ddp::Phase::kEvaluation);
      std::this_thread::sleep_for(std::chrono::microseconds(static_cast<int64_t>(1000 * evaluate_ms)));
      if (stuck_in_evaluation && world->rank() == stuck) {
        std::printf("rank %d gets stuck in its evaluation at step %ld\n", world->rank(), step);
        std::fflush(stdout);
        stuck_outside_any_collective();
      }
    }
    world->cpu().all_reduce(t);
    world->heartbeat();
    ddp::ProgressReport progress;
    progress.step = step;
    world->report_progress(progress);
  }
  return 0;
}
