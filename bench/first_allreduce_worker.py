"""Benchmark worker: init_process_group from the environment and one
all_reduce, as any torchrun-launched script starts."""
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
t = torch.ones(1)
dist.all_reduce(t)
assert t.item() == dist.get_world_size()
dist.destroy_process_group()
# Leave without the interpreter's shutdown: PyTorch 2.15's Gloo can abort in
# it (tests/interop/torch_ddp.py says why), under either launcher.
import os, sys  # noqa: E402
sys.stdout.flush()
os._exit(0)
