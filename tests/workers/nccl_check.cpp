// A worker for the GPU machine (scripts/gpu-test.sh): NCCL end to end under
// ddprun at world size 1 (NCCL refuses two ranks on one GPU), with the id
// rank 0 makes itself. Checks all_reduce, broadcast, all_gather and barrier
// on CUDA tensors, that a collective sees what kernels on the caller's
// current stream wrote just before it (also on a side stream where LibTorch
// has CUDA), and prints how much CPU waiting costs (a busy-wait would burn
// about as much CPU time as wall time). Exits 2 without a CUDA device.
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <string>

#include <torch/torch.h>

#if DDPRUN_TORCH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include "ddp/ddp.h"

namespace {

void expect(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error("nccl check failed: " + what);
}

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

// Many kernels on the current stream, so that a collective not ordered
// after them would read stale values.
at::Tensor slow_fill(const at::TensorOptions& o, double value) {
  at::Tensor t = at::zeros({1 << 22}, o);
  for (int i = 0; i < 200; ++i) t.add_(value / 200);
  return t;
}

}  // namespace

int main() {
  if (!torch::cuda::is_available()) {
    std::fprintf(stderr, "nccl_check: no CUDA device\n");
    return 2;
  }
  auto world = ddp::init();
  const int ws = world->size();
  const auto o = at::TensorOptions().dtype(at::kFloat).device(at::kCUDA, world->local_rank());
  expect(world->cuda().backend() == "nccl", "the CUDA communicator is NCCL");

  at::Tensor t = slow_fill(o, 3.0);
  world->all_reduce(t);
  expect(at::allclose(t.cpu(), at::full({1 << 22}, 3.0 * ws)), "all_reduce after kernels on the default stream");

#if DDPRUN_TORCH_CUDA
  {
    c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool(false, world->local_rank());
    c10::cuda::CUDAStreamGuard guard(side);
    at::Tensor s = slow_fill(o, 5.0);
    world->all_reduce(s);
    s.mul_(2);  // after the collective, on the side stream
    expect(at::allclose(s.cpu(), at::full({1 << 22}, 10.0 * ws)), "all_reduce on a side stream");
  }
#endif

  // The asynchronous path DDP's buckets take: enqueued, then wait() orders
  // the caller's later kernels after it on the device.
  expect(world->cuda().enqueues_on_device(), "the NCCL communicator enqueues on the device");
  {
    at::Tensor a = slow_fill(o, 2.0);
    auto work = world->cuda().all_reduce_async(a, ddp::ReduceOp::kSum, world->cuda().default_timeout());
    work->wait();
    a.mul_(3);
    expect(at::allclose(a.cpu(), at::full({1 << 22}, 6.0 * ws)), "all_reduce_async, wait(), then a kernel");
  }
  // DDP on CUDA through NCCL: backward alone (the reducer finalizes itself
  // in the engine's final callback) leaves the average in .grad. d(sum of
  // x W^T)/dW has every row equal to the batch's column sums; every rank
  // uses the same x, so the average is that too.
  {
    torch::manual_seed(0);
    auto net = torch::nn::Linear(512, 512);
    net->to(o.device());
    ddp::DistributedDataParallel<torch::nn::Linear> model(net, *world);
    at::Tensor x = at::randn({64, 512}, o);
    for (int step = 0; step < 3; ++step) {
      net->zero_grad();
      model(x).sum().backward();
      expect(at::allclose(net->weight.grad(), x.sum(0).expand({512, 512}), 1e-3, 1e-3),
             "DDP gradients on CUDA at step " + std::to_string(step));
    }
  }

  at::Tensor b = at::full({1000}, world->rank() == 0 ? 7.0 : 0.0, o);
  world->cuda().broadcast(b, 0, world->cuda().default_timeout());
  expect(at::allclose(b.cpu(), at::full({1000}, 7.0)), "broadcast");
  at::Tensor g = world->cuda().all_gather(at::full({4}, 1.0, o), world->cuda().default_timeout());
  expect(g.size(0) == ws, "all_gather shape");
  world->cuda().barrier(world->cuda().default_timeout());

  // Waiting costs: many small all_reduces.
  at::Tensor one = at::ones({1}, o);
  const int n = 2000;
  const double cpu0 = cpu_seconds();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) world->all_reduce(one);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double cpu = cpu_seconds() - cpu0;
  std::printf("nccl ok on rank %d of %d: %d small all_reduces, %.1f us each, CPU %.0f%% of wall\n",
              world->rank(), ws, n, wall / n * 1e6, 100 * cpu / wall);
  return 0;
}
