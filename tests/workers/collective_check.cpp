// A worker that checks every collective of ddp::World on real processes
// under ddprun (on shared memory, or Gloo with DDPRUN_CPU_COMM=gloo). Prints "collectives ok ..." and exits 0 when all hold; an
// uncaught exception (non-zero exit, error file) names the first mismatch.
#include <signal.h>

#include <cstdio>
#include <string>

#include "ddp/ddp.h"
#include "support/collective_checks.h"

// --compare-gloo: also runs shared memory and Gloo side by side on the same
// inputs (check_shm_matches_gloo). --then-sigkill: dies of SIGKILL right
// after its line (which must not be lost in a stdio buffer).
int main(int argc, char** argv) {
  auto world = ddp::init();
  ddptest::check_collectives(*world);
  std::printf("collectives ok on rank %d of %d (%s)\n", ddp::get("rank"), ddp::get("ws"),
              world->cpu().backend().c_str());
  if (argc > 1 && std::string(argv[1]) == "--then-sigkill") raise(SIGKILL);
  if (argc > 1 && std::string(argv[1]) == "--compare-gloo") {
    ddptest::check_shm_matches_gloo(*world);
    std::printf("shm matches gloo on rank %d\n", world->rank());
  }
  return 0;
}
