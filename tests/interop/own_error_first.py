"""Rank 1 raises an error of its own in step 5. Its interpreter then takes
long to end, as a loaded machine's teardown can: an exit handler lets the
process group go (the peers' collectives fail: "Connection closed by
peer") and waits for the agent's stop, so that the peers are reaped first
and rank 1 ends by the stop's SIGTERM. ddprun must still name rank 1 and
its error as the root cause."""
import atexit
import signal

import torch
import torch.distributed as dist


def linger():
    dist.destroy_process_group()
    signal.pause()  # until the agent stops this process


dist.init_process_group("gloo")
rank = dist.get_rank()
t = torch.ones(8)
for step in range(1, 100):
    if rank == 1 and step == 5:
        atexit.register(linger)
        raise RuntimeError("an error of rank 1's own at step 5")
    dist.all_reduce(t)
dist.destroy_process_group()
