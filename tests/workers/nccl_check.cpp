// A worker for the GPU machine (scripts/gpu-test.sh): NCCL end to end under
// ddprun at world size 1 (NCCL refuses two ranks on one GPU), with the id
// rank 0 makes itself. Checks all_reduce, broadcast, all_gather and barrier
// on CUDA tensors, that a collective sees what kernels on the caller's
// current stream wrote just before it (also on a side stream where LibTorch
// has CUDA), and prints how much CPU waiting costs (a busy-wait would burn
// about as much CPU time as wall time). Exits 2 without a CUDA device.
//
// `nccl_check --heal` checks instead, in one process, the NCCL side of a
// heal (ddp::Healer): an abort with a collective in flight, collectives
// failing at once afterwards, and the reconnect into heal generation 1
// with a fresh id from the generation's store, after which the same
// DistributedDataParallel module goes on.
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstring>
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

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// Backward alone leaves every rank's average in .grad: with the same x on
// every rank, each row of dW is the batch's column sums.
void check_ddp_step(ddp::DistributedDataParallel<torch::nn::Linear>& model, torch::nn::Linear& net,
                    const at::Tensor& x, const std::string& when) {
  net->zero_grad();
  model(x).sum().backward();
  expect(at::allclose(net->weight.grad(), x.sum(0).expand({512, 512}), 1e-3, 1e-3), "DDP gradients " + when);
}

int heal_check(ddp::World& world, const at::TensorOptions& o) {
  const int ws = world.size();
  torch::manual_seed(0);
  auto net = torch::nn::Linear(512, 512);
  net->to(o.device());
  ddp::DistributedDataParallel<torch::nn::Linear> model(net, world);
  const at::Tensor x = at::randn({64, 512}, o);
  check_ddp_step(model, net, x, "before the heal");

  // 1. A collective in flight (queued behind 200 kernels), then the abort a
  //    heal watcher does when the agent names a new generation. Its Work is
  //    dropped first: the step that enqueued it was abandoned.
  at::Tensor big = slow_fill(o, 1.0);
  world.cuda().all_reduce_async(big, ddp::ReduceOp::kSum, world.cuda().default_timeout()).reset();
  auto t0 = std::chrono::steady_clock::now();
  world.cuda().abort("nccl_check: the group heals");
  const double abort_ms = ms_since(t0);
  // 2. Nothing runs on an aborted communicator: the next collective fails
  //    at once with the abort's words, it does not wait for a timeout.
  t0 = std::chrono::steady_clock::now();
  bool failed = false;
  try {
    at::Tensor t = at::ones({16}, o);
    world.all_reduce(t);
  } catch (const ddp::CollectiveError& e) {
    failed = std::strstr(e.what(), "the group heals") != nullptr;
    if (!failed) std::fprintf(stderr, "nccl_check: unexpected error after the abort: %s\n", e.what());
  }
  expect(failed, "a collective after the abort fails with the abort's words");
  const double fail_ms = ms_since(t0);
  // 3. The heal: every communicator of generation 1 (CPU now, NCCL with a
  //    fresh id made by rank 0 and shared through heal1/ at its first use).
  t0 = std::chrono::steady_clock::now();
  world.reconnect(1);
  const double cpu_ms = ms_since(t0);
  t0 = std::chrono::steady_clock::now();
  at::Tensor t = slow_fill(o, 4.0);
  world.all_reduce(t);
  const double nccl_ms = ms_since(t0);
  expect(world.generation() == 1, "generation 1 after the reconnect");
  expect(at::allclose(t.cpu(), at::full({1 << 22}, 4.0 * ws)), "all_reduce in generation 1");
  // 4. The DDP module built before the heal goes on: its Reducer holds the
  //    World's communicator, which now is generation 1's.
  check_ddp_step(model, net, x, "after the heal");
  // 5. A second heal the same way (a job heals more than once).
  world.cuda().abort("nccl_check: the group heals again");
  world.reconnect(2);
  check_ddp_step(model, net, x, "after a second heal");
  std::printf("nccl heal ok on rank %d of %d: abort %.1f ms, next collective failed in %.1f ms, "
              "CPU reconnect %.1f ms, NCCL re-init + first all_reduce %.1f ms, DDP went on twice\n",
              world.rank(), ws, abort_ms, fail_ms, cpu_ms, nccl_ms);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (!torch::cuda::is_available()) {
    std::fprintf(stderr, "nccl_check: no CUDA device\n");
    return 2;
  }
  const bool heal = argc > 1 && std::strcmp(argv[1], "--heal") == 0;
  auto world = ddp::init();
  const int ws = world->size();
  const auto o = at::TensorOptions().dtype(at::kFloat).device(at::kCUDA, world->local_rank());
  expect(world->cuda().backend() == "nccl", "the CUDA communicator is NCCL");
  if (heal) return heal_check(*world, o);

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
    for (int step = 0; step < 3; ++step) check_ddp_step(model, net, x, "on CUDA at step " + std::to_string(step));
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
