"""The torchft anchor for bench/recovery.py: recovery_torch.py's job (the
same CNN, Fashion-MNIST, batch 32 per worker, SGD with momentum) written the
way torchft's train_ddp.py writes it: every worker is a replica group of one
under its own torchrun, a torchft Manager per replica with a Gloo process
group, torchft's data-parallel wrapper and Optimizer wrapper, and the
Lighthouse (TORCHFT_LIGHTHOUSE) deciding each step's quorum. The wrapper is
torchft's PureDistributedDataParallel (one fault-tolerant all_reduce per
gradient): with torchft 0.2.0 its DistributedDataParallel fails an assert in
its comm hook (ddp.py, `assert fut._fut`) on the survivors as soon as a peer
dies, and they crash instead of going on. When a replica
dies the others go on without it; its torchrun restarts it and it heals from
a peer (no checkpoint is read).

Each replica prints "replica R step N done at T" after every committed step
(N: the Manager's step) and "replica R healed at step N at T" on its first
step after starting late.
"""
import argparse
import os
import sys
import time
from datetime import timedelta

import torch
import torch.nn.functional as F
from torchft import Manager, Optimizer, ProcessGroupGloo
from torchft.ddp import PureDistributedDataParallel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from recovery_torch import load, normalise  # noqa: E402
from torch_models import Cnn  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=0.05)
    a = p.parse_args()
    replica = int(os.environ["REPLICA_GROUP_ID"])
    replicas = int(os.environ["NUM_REPLICA_GROUPS"])

    images, labels = load("train")
    torch.manual_seed(0)
    model = Cnn()
    inner = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9)

    def state_dict():
        return {"model": model.state_dict(), "optim": inner.state_dict()}

    def load_state_dict(s):
        model.load_state_dict(s["model"])
        inner.load_state_dict(s["optim"])

    manager = Manager(pg=ProcessGroupGloo(timeout=timedelta(seconds=5)), min_replica_size=1,
                      load_state_dict=load_state_dict, state_dict=state_dict,
                      replica_id="recovery_%d" % replica, timeout=timedelta(seconds=30))
    ddp = PureDistributedDataParallel(manager, model)
    opt = Optimizer(manager, inner)
    # This replica's share of each global batch, by step (a fixed shard).
    shard = torch.arange(replica, len(labels), replicas)
    first = True
    while manager.current_step() < a.steps:
        step = manager.current_step()
        at = (step * a.batch_size) % (len(shard) - a.batch_size)
        idx = shard[at:at + a.batch_size]
        opt.zero_grad()
        F.cross_entropy(ddp(normalise(images[idx])), labels[idx]).backward()
        opt.step()
        now = manager.current_step()
        if now > step or (first and now > 1):
            if first and now > 1:  # a late start: the first quorum healed it to the others' step
                print("replica %d healed at step %d at %.3f" % (replica, now - 1, time.time()), flush=True)
            first = False
            print("replica %d step %d done at %.3f" % (replica, now, time.time()), flush=True)
    sys.stdout.flush()
    os._exit(0)  # past PyTorch 2.15's abort in interpreter shutdown (tests/interop/torch_ddp.py)


if __name__ == "__main__":
    main()
