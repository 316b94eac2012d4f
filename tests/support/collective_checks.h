// Checks of every collective against values each rank can compute itself.
// Used by the thread-per-rank unit test and by the worker run under ddprun.
#pragma once

#include <ATen/ATen.h>

#include <stdexcept>
#include <string>

#include "ddp/world.h"

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

}  // namespace ddptest
