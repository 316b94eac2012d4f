# An unmodified PyTorch script that hangs: rank 1 stops in a Python
# function of its own while the other ranks wait for it in all_reduce.
import time

import torch
import torch.distributed as dist


def stuck_in_python():
    print(f"rank {dist.get_rank()} is stuck", flush=True)
    while True:
        time.sleep(0.05)


dist.init_process_group("gloo")
if dist.get_rank() == 1:
    stuck_in_python()
t = torch.ones(4)
print(f"rank {dist.get_rank()} enters all_reduce", flush=True)
dist.all_reduce(t)
