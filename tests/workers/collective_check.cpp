// A worker that checks every collective of ddp::World on real processes
// under ddprun. Prints "collectives ok ..." and exits 0 when all hold; an
// uncaught exception (non-zero exit, error file) names the first mismatch.
#include <cstdio>

#include "ddp/ddp.h"
#include "support/collective_checks.h"

int main() {
  auto world = ddp::init();
  ddptest::check_collectives(*world);
  std::printf("collectives ok on rank %d of %d\n", ddp::get("rank"), ddp::get("ws"));
  return 0;
}
