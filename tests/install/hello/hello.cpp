// Joins the job ddprun started, sums each rank's number, prints the sum.
#include <ddp/ddp.h>
#include <torch/torch.h>

#include <cstdio>

int main() {
  auto world = ddp::init();
  at::Tensor t = torch::full({1}, ddp::get("rank") + 1.0f);
  world->all_reduce(t);
  std::printf("hello from rank %d of %d: sum %g\n", ddp::get("rank"), ddp::get("ws"), t.item<float>());
  return 0;
}
