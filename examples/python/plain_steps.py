"""plain_loop.py's training bounded by steps instead of epochs, as many
scripts are: a counter of the script's own (`while step < N`, `step += 1`),
and a DataLoader with worker processes. plain_steps_healed.py is this file
with 5 lines changed so that it heals (`diff plain_steps.py
plain_steps_healed.py`).

    ddprun --nproc 4 examples/python/plain_steps_healed.py --print-steps
    kill -9 <a worker's pid>

Each prints the final loss and a checksum of the parameters.
"""
import argparse

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

from plain_loop import Net, finish, make_data


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=120)
    ap.add_argument("--samples", type=int, default=1024)
    ap.add_argument("--num-workers", type=int, default=2, help="the DataLoader's worker processes (persistent)")
    ap.add_argument("--print-steps", action="store_true", help="rank 0 prints a line after every step")
    args = ap.parse_args()

    dist.init_process_group("gloo")
    torch.manual_seed(0)
    data = make_data(args.samples)
    loader = DataLoader(data, batch_size=16, sampler=DistributedSampler(data, shuffle=True, seed=0),
                        num_workers=args.num_workers, persistent_workers=args.num_workers > 0)
    model = DDP(Net())
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)

    step = 0
    while step < args.steps:
        for tokens, labels in loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(tokens), labels)
            loss.backward()
            optimizer.step()
            step += 1
            if args.print_steps and dist.get_rank() == 0:
                print(f"step {step} done", flush=True)
            if step == args.steps:
                break

    finish(model, loss)


if __name__ == "__main__":
    main()
