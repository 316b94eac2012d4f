"""The anchor of `bench/ddprun-bench allreduce`: PyTorch's gloo all_reduce
(python3-torch) timed exactly as allreduce_worker.cpp times ours: warm-up,
an iteration count rank 0 picks from one timed call, the slowest rank's
time. Rank 0 prints one JSON line per size.

    ddprun --nproc N bench/allreduce_torch.py [--seconds S] SIZE_BYTES...
"""
import argparse
import json
import os
import time

import torch
import torch.distributed as dist


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--seconds", type=float, default=1.0)
    p.add_argument("sizes", type=int, nargs="+")
    a = p.parse_args()
    dist.init_process_group("gloo")
    rank, ws = dist.get_rank(), dist.get_world_size()
    for size in a.sizes:
        t = torch.zeros(size // 4, dtype=torch.float32)
        for _ in range(2):
            dist.all_reduce(t)
        dist.barrier()
        t0 = time.perf_counter()
        dist.all_reduce(t)
        one = time.perf_counter() - t0
        iters = torch.tensor([int(max(3, min(1000, a.seconds / max(one, 1e-6))))], dtype=torch.int64)
        dist.broadcast(iters, 0)
        n = int(iters.item())
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(n):
            dist.all_reduce(t)
        per_op = torch.tensor([(time.perf_counter() - t0) / n], dtype=torch.float64)
        dist.all_reduce(per_op, op=dist.ReduceOp.MAX)
        if rank == 0:
            s = per_op.item()
            algbw = size / s / 1e9
            print(json.dumps({"backend": "torch-gloo", "ranks": ws, "bytes": size, "iters": n,
                              "us": round(s * 1e6, 2), "algbw": round(algbw, 4),
                              "busbw": round(algbw * 2 * (ws - 1) / ws, 4)}), flush=True)
    dist.barrier()
    os._exit(0)  # torch 1.13's gloo teardown can deadlock (see ddp_step_torch.py)


if __name__ == "__main__":
    main()
