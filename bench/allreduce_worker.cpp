// One worker of `bench/ddprun-bench allreduce`, started by ddprun: times
// all_reduce (sum) of float32 tensors of each size on this world's CPU
// communicator (shared memory or Gloo, as DDPRUN_CPU_COMM says) or on NCCL,
// like nccl-tests: warm-up, then a number of iterations rank 0 picks from
// the warm-up and every rank uses, between barriers; the time of an
// iteration is the slowest rank's. Rank 0 prints one JSON line per size.
//
//   allreduce_worker [--device cpu|cuda] [--seconds S] SIZE_BYTES...
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "ddp/ddp.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Done on the device too, not only enqueued.
void settle(const at::Tensor& t) {
  if (t.is_cuda()) (void)t.sum().item<float>();
}

}  // namespace

int main(int argc, char** argv) {
  std::string device = "cpu";
  double budget = 1.0;  // seconds of timed iterations per size, about
  std::vector<long long> sizes;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--device" && i + 1 < argc) {
      device = argv[++i];
    } else if (a == "--seconds" && i + 1 < argc) {
      budget = std::atof(argv[++i]);
    } else {
      sizes.push_back(std::atoll(a.c_str()));
    }
  }
  auto world = ddp::init();
  ddp::Communicator& comm = device == "cuda" ? world->cuda() : world->cpu();
  const auto options = at::TensorOptions().dtype(at::kFloat).device(
      device == "cuda" ? at::Device(at::kCUDA, world->local_rank()) : at::Device(at::kCPU));
  const int ws = world->size();
  for (long long bytes : sizes) {
    at::Tensor t = at::zeros({bytes / 4}, options);  // zeros stay zeros: no overflow, no denormals
    // Warm-up: first touches, buffers, connections.
    for (int i = 0; i < 2; ++i) comm.all_reduce(t, ddp::ReduceOp::kSum);
    settle(t);
    // One more, timed, to pick the count: rank 0's pick for everyone.
    world->cpu().barrier();
    auto t0 = Clock::now();
    comm.all_reduce(t, ddp::ReduceOp::kSum);
    settle(t);
    const double one = seconds_since(t0);
    at::Tensor iters = at::full({1}, static_cast<int64_t>(std::max(3.0, std::min(1000.0, budget / std::max(one, 1e-6)))),
                                at::kLong);
    world->cpu().broadcast(iters, 0);
    const int64_t n = iters.item<int64_t>();
    world->cpu().barrier();
    t0 = Clock::now();
    for (int64_t i = 0; i < n; ++i) comm.all_reduce(t, ddp::ReduceOp::kSum);
    settle(t);
    at::Tensor per_op = at::full({1}, seconds_since(t0) / static_cast<double>(n), at::kDouble);
    world->cpu().all_reduce(per_op, ddp::ReduceOp::kMax);  // the slowest rank's
    if (world->rank() == 0) {
      const double s = per_op.item<double>();
      const double algbw = static_cast<double>(bytes) / s / 1e9;
      std::printf("{\"backend\": \"%s\", \"ranks\": %d, \"bytes\": %lld, \"iters\": %lld, \"us\": %.2f, "
                  "\"algbw\": %.4f, \"busbw\": %.4f}\n",
                  comm.backend().c_str(), ws, bytes, static_cast<long long>(n), s * 1e6, algbw,
                  algbw * 2.0 * (ws - 1) / ws);
      std::fflush(stdout);
    }
  }
  return 0;
}
