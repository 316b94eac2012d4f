// Benchmark worker: joins the job and completes one all_reduce, the least a
// training program does before its first step.
#include <ATen/ATen.h>

#include <stdexcept>

#include "ddp/ddp.h"

int main() {
  auto world = ddp::init();
  at::Tensor t = at::ones({1});
  world->all_reduce(t, ddp::ReduceOp::kSum);
  if (t.item<float>() != world->size()) throw std::runtime_error("wrong all_reduce result");
  return 0;
}
