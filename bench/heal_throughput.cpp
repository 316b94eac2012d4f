// Heal throughput: how fast a replacement gets the training state from a
// peer, through the real path (ddp::Healer under ddprun). Run under
// `ddprun --nproc 2`: an MLP of --width (square layers, --layers of them)
// with Adam takes steps; at --kill-at, the last rank SIGKILLs itself; ddprun
// starts a replacement, which joins with the survivors' state and prints
//   heal: <bytes> bytes of state in <s> s (<GB/s>), <params> parameters
// (bytes over the replacement's time from connecting to holding the state:
// agreeing on the newest step, the sender encoding it, the broadcast,
// decoding and applying it), and how much of it came into memory the
// replacement prepared while it started (heal/receive_pool.h). Both ranks
// then check their parameters agree, and the replacement measures the
// limit, the fastest copy of as many bytes this machine makes between
// buffers already touched: one core's memcpy, and every core copying a
// share at once (one core alone does not reach the memory's bandwidth):
//   limit: copy of <bytes> bytes: <GB/s> on 1 core, <GB/s> on N cores, ...
//
//   build/bin/ddprun --nproc 2 build/bin/heal_throughput --width 2236 --layers 2   # 10M
#include <CLI/CLI.hpp>
#include <signal.h>
#include <torch/torch.h>

#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "ddp/ddp.h"

namespace {

struct Options {
  int width = 2236;
  int layers = 2;
  int steps = 6;
  int kill_at = 3;
};

struct Limit {
  double one_core_gbps = 0;
  double all_cores_gbps = 0;
  unsigned cores = 1;
  double fresh_gbps = 0;
  double fastest() const { return std::max(one_core_gbps, all_cores_gbps); }
};

// Copies n bytes from src to dst, each of `threads` threads a share.
void copy_on(unsigned threads, char* dst, const char* src, size_t n) {
  std::vector<std::jthread> others;
  const size_t share = n / threads;
  for (unsigned i = 1; i < threads; ++i) {
    const size_t first = i * share, count = i + 1 == threads ? n - first : share;
    others.emplace_back([=] { std::memcpy(dst + first, src + first, count); });
  }
  std::memcpy(dst, src, share);
}

Limit memcpy_limit(size_t n) {
  auto gbps = [n](auto&& copy) {
    const auto t0 = std::chrono::steady_clock::now();
    copy();
    return n / std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 1e9;
  };
  std::vector<char> src(n, 1), dst(n, 2);  // both written: mapped
  Limit l;
  l.cores = std::max(1u, std::thread::hardware_concurrency());
  for (int i = 0; i < 3; ++i) {
    l.one_core_gbps = std::max(l.one_core_gbps, gbps([&] { std::memcpy(dst.data(), src.data(), n); }));
    l.all_cores_gbps = std::max(l.all_cores_gbps, gbps([&] { copy_on(l.cores, dst.data(), src.data(), n); }));
  }
  dst = {};
  void* fresh = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (fresh != MAP_FAILED) {
    l.fresh_gbps = gbps([&] { std::memcpy(fresh, src.data(), n); });
    munmap(fresh, n);
  }
  return l;
}

torch::nn::Sequential mlp(const Options& o) {
  torch::nn::Sequential net;
  for (int i = 0; i < o.layers; ++i) net->push_back(torch::nn::Linear(o.width, o.width));
  return net;
}

int run(const Options& o) {
  auto world = ddp::init();
  torch::manual_seed(0);
  ddp::DistributedDataParallel<torch::nn::Sequential> model(mlp(o), *world);
  torch::optim::Adam optimizer(model.module()->parameters(), torch::optim::AdamOptions(1e-3));
  int64_t params = 0;
  for (const auto& p : model.module()->parameters()) params += p.numel();
  int64_t step = 0;
  double heal_gbps = 0;
  ddp::Healer healer(*world, {.module = model.module().get(), .optimizer = &optimizer, .sampler = nullptr, .step = &step, .counters = {}});
  if (healer.joined()) {
    const ddp::HealReport& r = healer.report();
    std::printf("heal: %lld bytes of state in %.3f s (%.2f GB/s), %lld parameters, joined at step %lld; %lld bytes "
                "into memory prepared while it started\n",
                static_cast<long long>(r.bytes), r.transfer_seconds, r.bytes / r.transfer_seconds / 1e9,
                static_cast<long long>(params), static_cast<long long>(step), static_cast<long long>(r.prepared_bytes));
    std::fflush(stdout);
    heal_gbps = r.bytes / r.transfer_seconds / 1e9;
  }
  torch::Tensor x = torch::randn({8, o.width});
  while (step < o.steps) {
    healer.step([&] {
      if (step == o.kill_at && world->rank() == world->size() - 1 && !healer.joined()) raise(SIGKILL);
      optimizer.zero_grad();
      model(x).square().mean().backward();
      optimizer.step();
      ++step;
    });
  }
  std::vector<torch::Tensor> flats;
  for (const auto& p : model.module()->parameters()) flats.push_back(p.detach().reshape({-1}));
  torch::Tensor all = world->all_gather(torch::cat(flats));
  if (!torch::equal(all[0], all[world->size() - 1])) throw std::runtime_error("parameters differ after the heal");
  if (world->rank() == 0) std::printf("parameters agree on all %d ranks\n", world->size());
  world->barrier();
  if (heal_gbps > 0) {
    // The limit, on the replacement once training is over: a copy of the
    // same bytes into memory already mapped (best of 3), by one core and by
    // every core at once, and one memcpy into fresh memory (what the
    // kernel's zeroing of new pages adds).
    const size_t n = static_cast<size_t>(healer.report().bytes);
    const Limit l = memcpy_limit(n);
    std::printf("limit: copy of %zu bytes between touched buffers %.2f GB/s on 1 core, %.2f GB/s on %u cores; "
                "memcpy into fresh memory %.2f GB/s; the heal moved %.2f of the fastest copy\n",
                n, l.one_core_gbps, l.all_cores_gbps, l.cores, l.fresh_gbps, heal_gbps / l.fastest());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Heal throughput: a replacement takes the state from a peer (run under ddprun --nproc 2)"};
  Options o;
  app.add_option("--width", o.width, "Units per layer [2236: 10M parameters with 2 layers]")->check(CLI::PositiveNumber);
  app.add_option("--layers", o.layers, "Square linear layers [2]")->check(CLI::PositiveNumber);
  app.add_option("--steps", o.steps, "Adam steps [6]")->check(CLI::PositiveNumber);
  app.add_option("--kill-at", o.kill_at, "Step at which the last rank kills itself [3]")->check(CLI::NonNegativeNumber);
  CLI11_PARSE(app, argc, argv);
  try {
    return run(o);
  } catch (const std::exception& e) {
    ddp::record_error(e);
    return 1;
  }
}
