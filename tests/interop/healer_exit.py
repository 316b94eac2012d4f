# A healed script that keeps its DDP model until the interpreter's teardown,
# as the Hugging Face Trainer and a Lightning strategy do. The Healer's exit
# handler must let the process groups go while Python still runs: a Gloo
# group destroyed in the teardown can abort the process after a good run
# ("terminate called without an active exception"; about 1 run in 20 of
# the Trainer under load). This script's own exit handler, registered before
# the Healer's so it runs after it, says whether anything still holds a
# group (the one the script made, which the Healer replaces, and the one it
# ends with) or whether a Gloo thread still runs.
import atexit
import os
import weakref

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import ddprun

dist.init_process_group("gloo")
rank = dist.get_rank()
groups = [weakref.ref(dist.distributed_c10d._get_default_group())]


def gloo_threads():
    names = []
    for task in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{task}/comm") as f:
            names.append(f.read().strip())
    return sorted(n for n in names if "gloo" in n)


def check_released():
    held = [i for i, group in enumerate(groups) if group() is not None]
    if held or gloo_threads():
        print(f"rank {rank}: process groups {held} and threads {gloo_threads()} outlived the Healer's exit handler",
              flush=True)
        os._exit(3)
    print(f"rank {rank}: its process groups were released before the teardown", flush=True)


atexit.register(check_released)
torch.manual_seed(0)
model = DDP(torch.nn.Linear(4, 1))  # module-level: held until the teardown
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
healer = ddprun.Healer(model, optimizer)


def train_step(x):
    optimizer.zero_grad()
    model(x).sum().backward()
    optimizer.step()


for _ in range(3):
    healer.step(train_step, torch.ones(2, 4) * (rank + 1))
healer.close()
groups.append(weakref.ref(dist.distributed_c10d._get_default_group()))
