"""The anchor for bench/recovery.py: examples/train's job written as an
ordinary PyTorch DDP script (python3-torch, gloo), with the same checkpoint
period. Rank 0 checkpoints every --checkpoint-every steps (torch.save to a
temporary file, then rename), every rank resumes from the newest checkpoint
at start, and rank 0 prints "step N done at T" after every step. With --heal
its steps run through ddprun.Healer (python/ddprun): a killed rank heals
from its peers instead of restarting from the checkpoint.

It reads Fashion-MNIST from the same decompressed cache as examples/train
(falling back to the .gz files), so both sides load data alike."""
import argparse
import glob
import gzip
import os
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DistributedSampler

from torch_models import Cnn

DATA = "/usr/share/datasets/fashion-mnist"


def cache_dir():
    if os.environ.get("DDPRUN_CACHE_DIR"):
        return os.environ["DDPRUN_CACHE_DIR"]
    if os.environ.get("XDG_CACHE_HOME"):
        return os.path.join(os.environ["XDG_CACHE_HOME"], "ddprun")
    return os.path.join(os.path.expanduser("~"), ".cache", "ddprun")


def idx_bytes(name):
    gz = os.path.join(DATA, name + ".gz")
    st = os.stat(gz)
    cached = os.path.join(cache_dir(), "%s-%d-%d.idx" % (name, st.st_size, int(st.st_mtime)))
    if os.path.exists(cached):
        return np.memmap(cached, dtype=np.uint8, mode="r")
    with gzip.open(gz, "rb") as f:
        return np.frombuffer(f.read(), dtype=np.uint8)


def load(split):
    img = idx_bytes(split + "-images-idx3-ubyte")
    lbl = idx_bytes(split + "-labels-idx1-ubyte")
    images = torch.from_numpy(np.array(img[16:]).reshape(-1, 1, 28, 28))
    labels = torch.from_numpy(np.array(lbl[8:]).astype(np.int64))
    return images, labels


def normalise(batch):
    return (batch.float() / 255.0 - 0.2860) / 0.3530


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--checkpoint-dir", required=True)
    p.add_argument("--checkpoint-every", type=int, default=10)
    p.add_argument("--heal", action="store_true", help="steps through ddprun.Healer (python/ddprun)")
    a = p.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    images, labels = load("train")
    torch.manual_seed(0)
    model = DDP(Cnn())
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9)
    sampler = DistributedSampler(range(len(labels)), num_replicas=world, rank=rank, shuffle=True, seed=0)
    steps_per_epoch = (len(sampler) + a.batch_size - 1) // a.batch_size

    step, epoch, position = 0, 0, 0
    os.makedirs(a.checkpoint_dir, exist_ok=True)
    files = sorted(glob.glob(os.path.join(a.checkpoint_dir, "ckpt-*.pt")))
    if a.heal:
        import ddprun
        if ddprun.joining():
            files = []  # a heal's replacement: its state comes from a peer, not the disk
    if files:
        ck = torch.load(files[-1])  # every rank reads it
        model.module.load_state_dict(ck["model"])
        opt.load_state_dict(ck["optimizer"])
        step, epoch, position = ck["step"], ck["epoch"], ck["position"]
        if rank == 0:
            print("resumed from %s at step %d" % (files[-1], step), flush=True)

    # Where the loop stands (with --heal: put back when a step is abandoned,
    # sent to a replacement).
    at = {"step": step, "epoch": epoch, "position": position}
    healer = ddprun.Healer(model, opt, state=at) if a.heal else None
    run = healer.step if healer else (lambda fn, *args: fn(*args))

    def train_step(idx):
        opt.zero_grad()
        F.cross_entropy(model(normalise(images[idx])), labels[idx]).backward()
        for g in opt.param_groups:
            g["lr"] = a.lr * (1 - at["step"] / (steps_per_epoch * a.epochs))
        opt.step()
        at["step"] += 1
        at["position"] += len(idx)

    while at["epoch"] < a.epochs:
        sampler.set_epoch(at["epoch"])
        order = list(sampler)
        while at["position"] < len(order):
            run(train_step, torch.tensor(order[at["position"]:at["position"] + a.batch_size]))
            step, position = at["step"], at["position"]
            if rank == 0:
                print("step %d done at %.3f" % (step, time.time()), flush=True)
                if step % a.checkpoint_every == 0:
                    done = position >= len(order)
                    state = {"model": model.module.state_dict(), "optimizer": opt.state_dict(), "step": step,
                             "epoch": at["epoch"] + 1 if done else at["epoch"], "position": 0 if done else position}
                    path = os.path.join(a.checkpoint_dir, "ckpt-%012d.pt" % step)
                    torch.save(state, path + ".tmp")
                    os.replace(path + ".tmp", path)
        at["epoch"], at["position"] = at["epoch"] + 1, 0
    if healer:
        healer.close()
    dist.barrier()
    os._exit(0)  # skip teardown (torch 1.13 can deadlock in ~ProcessGroupGloo)


if __name__ == "__main__":
    main()
