// Checks of every collective against values each rank can compute itself.
// Used by the thread-per-rank unit test and by the worker run under ddprun.
#pragma once

#include <ATen/ATen.h>

#include <stdexcept>
#include <string>

#include "comm/gloo_communicator.h"
#include "comm/shm_communicator.h"
#include "ddp/world.h"
#include "rendezvous/store/store.h"

namespace ddptest {

inline void expect(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error("collective check failed: " + what);
}

// Throws std::runtime_error naming the first check that fails.
inline void check_collectives(ddp::World& world) {
  const int rank = world.rank(), ws = world.size();
  expect(ddp::get("rank", world) == rank && ddp::get("grank", world) == rank, "get rank");
  expect(ddp::get("ws", world) == ws, "get ws");
  expect(ddp::get("lrank", world) == world.local_rank(), "get lrank");
  expect(ddp::get("lws", world) == world.local_size(), "get lws");

  // Rank r contributes r+1 in every element.
  const double tri = ws * (ws + 1) / 2.0;
  for (auto op : {ddp::ReduceOp::kSum, ddp::ReduceOp::kAvg, ddp::ReduceOp::kMax, ddp::ReduceOp::kMin}) {
    at::Tensor t = at::full({1000}, rank + 1.0, at::kFloat);
    world.all_reduce(t, op);
    const double want = op == ddp::ReduceOp::kSum   ? tri
                        : op == ddp::ReduceOp::kAvg ? tri / ws
                        : op == ddp::ReduceOp::kMax ? ws
                                                    : 1.0;
    expect(at::allclose(t, at::full({1000}, want, at::kFloat)), "all_reduce " + ddp::to_string(op));
  }
  // Integers, half precision, a non-contiguous view, and a 3 MB tensor.
  at::Tensor ints = at::full({7}, static_cast<int64_t>(rank), at::kLong);
  world.all_reduce(ints, ddp::ReduceOp::kSum);
  expect(ints[0].item<int64_t>() == ws * (ws - 1) / 2, "all_reduce int64");
  at::Tensor half = at::full({5}, rank + 1.0, at::kHalf);
  world.all_reduce(half, ddp::ReduceOp::kMax);
  expect(half[4].item<float>() == ws, "all_reduce float16");
  at::Tensor base = at::full({8, 8}, rank + 1.0, at::kDouble);
  at::Tensor column = base.select(1, 3);
  world.all_reduce(column, ddp::ReduceOp::kSum);
  expect(base[5][3].item<double>() == tri && base[5][2].item<double>() == rank + 1.0,
         "all_reduce of a non-contiguous view");
  at::Tensor big = at::full({768 * 1024}, 1.0f);
  world.all_reduce(big, ddp::ReduceOp::kSum);
  expect(big.sum().item<double>() == 768.0 * 1024 * ws, "all_reduce 3 MB");

  // Broadcast from the last rank.
  at::Tensor b = at::arange(10, at::kFloat) * (rank + 1);
  world.broadcast(b, ws - 1);
  expect(at::equal(b, at::arange(10, at::kFloat) * ws), "broadcast");

  // All-gather: row r holds rank r's tensor.
  at::Tensor g = world.all_gather(at::full({2, 3}, static_cast<float>(rank)));
  expect(g.sizes() == at::IntArrayRef({ws, 2, 3}), "all_gather shape");
  for (int r = 0; r < ws; ++r) {
    expect(g[r].eq(static_cast<float>(r)).all().item<bool>(), "all_gather row " + std::to_string(r));
  }
  world.barrier();
}

// Shared memory against Gloo on the same inputs, between the same ranks:
// every reduction, odd sizes (0, 1, 7, several chunks), non-contiguous
// views, bf16, integers. Integer results must be bitwise equal (their sums
// wrap the same), floating ones close (they add in another order);
// broadcast and all_gather move bytes and must be equal. Builds one
// communicator of each kind over the world's store (small shm slots, so
// that 300k elements span many chunks). Throws naming the first mismatch.
inline void check_shm_matches_gloo(ddp::World& world) {
  ddprun::PrefixStore gloo_store("cmp-gloo", world.store()), shm_store("cmp-shm", world.store());
  ddp::GlooOptions go;
  go.rank = world.rank();
  go.size = world.size();
  go.local_addr = world.info().local_addr;
  go.timeout = world.timeout();
  ddp::GlooCommunicator gloo(gloo_store, go);
  ddp::ShmGroupOptions so;
  so.rank = world.rank();
  so.size = world.size();
  so.timeout = world.timeout();
  so.slot_bytes = 64 << 10;
  ddp::ShmCommunicator shm(shm_store, so);
  auto gen = at::detail::createCPUGenerator(1000 + world.rank());
  auto describe = [](at::ScalarType t, int64_t n, const std::string& op) {
    return std::string(c10::toString(t)) + " x" + std::to_string(n) + " " + op;
  };
  for (int64_t n : {0, 1, 7, 4099, 300007}) {
    for (auto type : {at::kFloat, at::kDouble, at::kBFloat16, at::kInt, at::kLong, at::kChar}) {
      const bool floating = at::isFloatingType(type);
      at::Tensor base = floating ? at::randn({n}, gen).to(type) : at::randint(-100, 100, {n}, gen).to(type);
      for (auto op : {ddp::ReduceOp::kSum, ddp::ReduceOp::kAvg, ddp::ReduceOp::kMax, ddp::ReduceOp::kMin}) {
        if (op == ddp::ReduceOp::kAvg && !floating) continue;
        at::Tensor a = base.clone(), b = base.clone();
        gloo.all_reduce(a, op);
        shm.all_reduce(b, op);
        const std::string what = "shm all_reduce matches gloo: " + describe(type, n, ddp::to_string(op));
        if (floating) {
          const double tol = type == at::kBFloat16 ? 2e-2 : 1e-5;
          expect(at::allclose(a.to(at::kDouble), b.to(at::kDouble), tol, tol), what);
        } else {
          expect(at::equal(a, b), what + " (bitwise)");
        }
      }
    }
  }
  // A non-contiguous view: every other column of a matrix.
  at::Tensor m = at::randn({301, 40}, gen);
  at::Tensor ga = m.clone(), sa = m.clone();
  at::Tensor gv = ga.slice(1, 0, 40, 2), sv = sa.slice(1, 0, 40, 2);
  gloo.all_reduce(gv, ddp::ReduceOp::kSum);
  shm.all_reduce(sv, ddp::ReduceOp::kSum);
  expect(at::allclose(ga, sa, 1e-5, 1e-5), "shm all_reduce of a non-contiguous view matches gloo");
  expect(at::equal(sa.slice(1, 1, 40, 2), m.slice(1, 1, 40, 2)), "shm all_reduce left the other columns alone");
  // Byte movers: equal.
  for (int64_t n : {0, 3, 100003}) {
    at::Tensor x = at::randn({n}, gen), y = x.clone();
    gloo.broadcast(x, world.size() - 1);
    shm.broadcast(y, world.size() - 1);
    expect(at::equal(x, y), "shm broadcast matches gloo, x" + std::to_string(n));
    at::Tensor in = at::randint(0, 1000, {n, 3}, gen);
    expect(at::equal(gloo.all_gather(in), shm.all_gather(in)), "shm all_gather matches gloo, x" + std::to_string(n));
  }
  shm.barrier();
  gloo.barrier();
}

}  // namespace ddptest
