"""An unmodified PyTorch DDP script for GPUs, as users write it: one GPU per
process (LOCAL_RANK), init_process_group("nccl") from the launcher's
variables (torchrun's), nothing from ddprun. scripts/gpu-test.sh runs it
under `ddprun --nproc 1` and under torchrun on the GPU machine.

    python3 tests/interop/torch_nccl.py [--device-id]

--device-id passes device_id= to init_process_group (NCCL's eager init,
which newer PyTorch versions ask for); without it NCCL connects lazily at
the first collective. Where CUDA is missing it runs on Gloo and CPU, so the
script can be rehearsed on a machine without a GPU.

It prints what PyTorch warned about (the log says what a launcher must set)
and a line starting "interop ok: backend nccl" when every check held.
"""
import argparse
import hashlib
import os
import struct
import sys
import time
import warnings

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device-id", action="store_true", help="pass device_id to init_process_group")
    ap.add_argument("--steps", type=int, default=5)
    args = ap.parse_args()

    local_rank = int(os.environ["LOCAL_RANK"])
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    seen = {k: v for k, v in sorted(os.environ.items())
            if k.startswith(("NCCL_", "TORCH_NCCL_", "CUDA_VISIBLE", "MASTER_", "TORCHELASTIC_USE"))}
    print("environment: " + " ".join(f"{k}={v}" for k, v in seen.items()), flush=True)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t0 = time.perf_counter()
        kwargs = {"device_id": device} if args.device_id and cuda else {}
        dist.init_process_group("nccl" if cuda else "gloo", **kwargs)
        t_init = time.perf_counter() - t0
        rank, world = dist.get_rank(), dist.get_world_size()
        assert rank == int(os.environ["RANK"]) and world == int(os.environ["WORLD_SIZE"])

        t = torch.full((1 << 20,), float(rank + 1), device=device)
        t0 = time.perf_counter()
        dist.all_reduce(t)
        if cuda:
            torch.cuda.synchronize()
        t_first = time.perf_counter() - t0
        expected = world * (world + 1) / 2
        assert torch.all(t == expected).item(), f"all_reduce gave {t[0].item()}, expected {expected}"

        b = torch.full((1000,), 7.0 if rank == 0 else 0.0, device=device)
        dist.broadcast(b, 0)
        assert torch.all(b == 7.0).item(), "broadcast"

        torch.manual_seed(0)
        net = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1)).to(device)
        model = DDP(net, device_ids=[local_rank] if cuda else None)
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        gen = torch.Generator(device=device).manual_seed(100 + rank)
        for _ in range(args.steps):
            x = torch.randn(128, 64, generator=gen, device=device)
            loss = model(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        dist.barrier()

        flat = torch.cat([p.detach().flatten() for p in model.parameters()])
        gathered = [torch.empty_like(flat) for _ in range(world)]
        dist.all_gather(gathered, flat)
        for r, other in enumerate(gathered):
            assert torch.equal(other, flat), f"rank {rank} and rank {r} disagree after DDP steps"
        cpu = flat.cpu()
        checksum = hashlib.sha256(struct.pack(f"{cpu.numel()}f", *cpu.tolist())).hexdigest()[:16]
        backend = dist.get_backend()
        try:  # which implementation serves the device (PyTorch 2.x)
            impl = type(dist.group.WORLD._get_backend(device)).__name__
        except Exception as e:  # older versions have no _get_backend
            impl = f"unknown ({type(e).__name__})"
        dist.destroy_process_group()

    for w in caught:
        print(f"pytorch warned: {w.category.__name__}: {str(w.message).splitlines()[0]}", flush=True)
    print(f"interop ok: backend {backend} ({impl}) on {device}, rank {rank} of {world}, torch {torch.__version__}, "
          f"device_id {'given' if kwargs else 'not given'}, init {t_init * 1e3:.0f} ms, "
          f"first all_reduce {t_first * 1e3:.0f} ms, {len(caught)} warnings, checksum {checksum}", flush=True)


if __name__ == "__main__":
    main()
    sys.stdout.flush()
    os._exit(0)  # see torch_ddp.py: PyTorch 2.15's Gloo can abort at interpreter shutdown
