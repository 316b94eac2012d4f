// A worker that checks DistributedDataParallel on real processes under
// ddprun: every sync strategy, with and without accumulation, matches
// single-process training and leaves every rank with bitwise identical
// parameters; on 4 ranks, a 2x2 mesh's sub-groups sum correctly. Prints
// "ddp ok ..." and exits 0, or throws naming the first failure.
#include <cstdio>

#include "ddp/ddp.h"
#include "support/ddp_checks.h"

namespace {

void expect(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error("ddp check failed: " + what);
}

}  // namespace

int main() {
  auto world = ddp::init();
  int cases = 0;
  for (const auto& c : ddptest::all_train_cases()) {
    ddptest::TrainResult r = ddptest::train_both(world->cpu(), c);
    const double dev = (r.distributed - r.reference).abs().max().item<double>();
    expect(torch::allclose(r.distributed, r.reference, 1e-4, 1e-5),
           ddptest::describe(c) + " deviates from single-process training by " + std::to_string(dev));
    expect(ddptest::identical_on_all_ranks(world->cpu(), r.distributed),
           ddptest::describe(c) + " left ranks with different parameters");
    ++cases;
  }
  if (world->size() == 4) {
    ddp::DeviceMesh mesh(*world, {2, 2}, {"dp", "tp"});
    const int r = world->rank();
    at::Tensor t = at::full({2}, static_cast<float>(r));
    mesh.communicator("dp").all_reduce(t, ddp::ReduceOp::kSum);
    expect(t[0].item<float>() == r + (r ^ 2), "mesh dp sum");
    at::Tensor u = at::full({2}, static_cast<float>(r));
    mesh.communicator("tp").all_reduce(u, ddp::ReduceOp::kSum);
    expect(u[0].item<float>() == r + (r ^ 1), "mesh tp sum");
  }
  std::printf("ddp ok on rank %d of %d: %d cases\n", world->rank(), world->size(), cases);
  return 0;
}
