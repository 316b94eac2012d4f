"""Benchmark worker: per-step time of PyTorch's DistributedDataParallel (gloo)
on a fixed batch of random data, the twin of ddp_step_bench.cpp. Rank 0
prints one JSON line: {"impl": "torch", "ms_per_step": ..., ...}."""
import argparse
import json
import os
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from torch_models import Cnn, WideMlp


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="cnn", choices=["cnn", "wide-mlp"])
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--bucket-mb", type=float, default=25)
    p.add_argument("--no-comm", action="store_true",
                   help="the module without DDP: forward, backward and step, no communication (the limit)")
    a = p.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    net = Cnn() if a.model == "cnn" else WideMlp()
    model = net if a.no_comm else DDP(net, bucket_cap_mb=a.bucket_mb)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    gen = torch.Generator().manual_seed(100 + rank)
    x = torch.randn(a.batch, 784, generator=gen)
    y = torch.randint(0, 10, (a.batch,), generator=gen)

    def step():
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()

    for _ in range(a.warmup):
        step()
    dist.barrier()
    start = time.perf_counter()
    for _ in range(a.steps):
        step()
    dist.barrier()
    secs = torch.tensor([time.perf_counter() - start], dtype=torch.float64)
    dist.all_reduce(secs, op=dist.ReduceOp.MAX)  # the slowest rank's time is the step time
    if rank == 0:
        params = sum(p.numel() for p in net.parameters())
        print(json.dumps({"impl": "torch-no-comm" if a.no_comm else "torch", "model": a.model, "params": params,
                          "ranks": world, "batch": a.batch, "sync": "none" if a.no_comm else "bucketed", "bucket_mb": a.bucket_mb,
                          "ms_per_step": round(secs.item() * 1000 / a.steps, 3)}), flush=True)
    dist.barrier()
    # Skip teardown: with torch 1.13, destroying DDP's gloo process group
    # while holding the GIL can deadlock (~ProcessGroupGloo joins a thread
    # that waits for the GIL), which hung this benchmark.
    os._exit(0)


if __name__ == "__main__":
    main()
