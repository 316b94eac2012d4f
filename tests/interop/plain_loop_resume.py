"""examples/python/plain_loop_healed.py's loop with a checkpoint of its own:
--stop-at N saves the model, the optimizer, the scheduler and the Healer's
state_dict() to --checkpoint after step N and exits; --resume loads them
and goes on. The final checksum equals an uninterrupted run's."""
import argparse
import gc
import hashlib
import os
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "python"))
from plain_loop import Net, make_data  # noqa: E402

import ddprun  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stop-at", type=int, default=0)
    ap.add_argument("--checkpoint", default="")
    ap.add_argument("--resume", action="store_true")
    args = ap.parse_args()
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    data = make_data(2048)
    sampler = DistributedSampler(data, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=16, sampler=sampler)
    model = DDP(Net())
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / 20))
    healer = ddprun.Healer(model, optimizer, extra=[scheduler])
    if args.resume:
        ckpt = torch.load(args.checkpoint)
        model.module.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        scheduler.load_state_dict(ckpt["scheduler"])
        healer.load_state_dict(ckpt["healer"][dist.get_rank()])
        if dist.get_rank() == 0:
            print(f"resumed at step {scheduler.last_epoch}", flush=True)
    for epoch in healer.epochs(2):
        sampler.set_epoch(epoch)
        for tokens, labels in healer.batches(loader):
            optimizer.zero_grad()
            loss = F.cross_entropy(model(tokens), labels)
            loss.backward()
            optimizer.step()
            scheduler.step()
            if args.stop_at and scheduler.last_epoch == args.stop_at:
                states = [None] * dist.get_world_size()  # each rank's generators are its own
                dist.all_gather_object(states, healer.state_dict())
                if dist.get_rank() == 0:
                    torch.save({"model": model.module.state_dict(), "optimizer": optimizer.state_dict(),
                                "scheduler": scheduler.state_dict(), "healer": states}, args.checkpoint)
                    print(f"saved at step {args.stop_at}", flush=True)
                dist.barrier()
                break
        else:
            continue
        break
    else:
        if dist.get_rank() == 0:
            h = hashlib.sha256()
            for p in model.parameters():
                h.update(p.detach().contiguous().numpy().tobytes())
            print(f"final loss {loss.item():.6f}; checksum {h.hexdigest()[:16]}", flush=True)
    # Let the process groups go while Python still runs (see ddp_heal.py):
    # left to the interpreter's exit, a Gloo thread can abort the process.
    del model, optimizer, scheduler, healer
    gc.collect()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
