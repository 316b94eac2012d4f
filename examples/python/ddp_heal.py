"""A PyTorch DDP script that heals: kill any of its ranks and the others go
on, a replacement takes the dead rank's place with their state, and the
run ends with the same parameters as one that nothing interrupted.

    ddprun --nproc 4 examples/python/ddp_heal.py            # about a minute on 2 cores
    kill -9 <a worker's pid>                                 # try it: one step redone

Against the plain DDP loop it changes three lines: `import ddprun`, the
Healer that names the model, the optimizer and where the loop stands, and
`healer.step(...)` around each step. Under torchrun, or with --no-heal, it
is that plain loop (a killed rank restarts every rank from the start).

It fits a small MLP (with batch norm: its running statistics are state too)
to a fixed random regression, with Adam, and prints a checksum of its final
parameters.
"""
import argparse
import gc
import hashlib
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import ddprun


def make_data(samples, features, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(samples, features, generator=g)
    w = torch.randn(features, 1, generator=g)
    return x, torch.sin(x @ w) + 0.1 * torch.randn(samples, 1, generator=g)


def make_model(features, hidden, dropout=0.0):
    return torch.nn.Sequential(
        torch.nn.Linear(features, hidden), torch.nn.BatchNorm1d(hidden), torch.nn.ReLU(),
        torch.nn.Linear(hidden, hidden), torch.nn.ReLU(), torch.nn.Dropout(dropout), torch.nn.Linear(hidden, 1))


def batch_at(progress, x, y, batch, rank, world):
    """This rank's share of the global batch at the loop's position: the
    epoch's shuffle from its number, then `batch` samples per rank."""
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(1000 + progress["epoch"]))
    first = progress["sample"] + rank * batch
    idx = order[first:first + batch]
    return x[idx], y[idx]


def flip_bit(module, bit):
    """A test's stand-in for a faulty chip: one bit of the first
    parameter's first element flips (on its integer view), on this rank only."""
    with torch.no_grad():
        first = next(module.parameters()).view(-1)[:1]
        first.view(torch.int32).bitwise_xor_(1 << bit)


def flips_of(specs):
    """--flip-bit RANK:STEP[:BIT] values as (rank, step, bit)."""
    out = []
    for spec in specs:
        parts = spec.split(":")
        try:
            rank, step, bit = (int(p) for p in parts + (["16"] if len(parts) == 2 else []))
        except ValueError:
            rank = step = bit = -1
        if len(parts) not in (2, 3) or rank < 0 or step < 1 or not 0 <= bit <= 30:
            raise SystemExit(f"ddp_heal.py: --flip-bit {spec}: expected RANK:STEP[:BIT] (a rank >= 0, a step >= 1, "
                             "a bit 0-30)")
        out.append((rank, step, bit))
    return out


def checksum(module):
    h = hashlib.sha256()
    for p in module.parameters():
        h.update(p.detach().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--samples", type=int, default=48000)
    ap.add_argument("--batch", type=int, default=32, help="samples per rank per step")
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--print-steps", action="store_true", help="rank 0 prints a line after every step")
    ap.add_argument("--no-heal", action="store_true", help="the plain DDP loop: no Healer")
    ap.add_argument("--evaluate-first", action="store_true",
                    help="evaluate the untrained model before training (a forward without gradients)")
    ap.add_argument("--barrier-before-healer", action="store_true",
                    help="a dist.barrier() before the Healer, as a careless script has (a replacement stops there)")
    ap.add_argument("--flip-bit", action="append", default=[], metavar="RANK:STEP[:BIT]",
                    help="for tests: flips bit BIT (default 16) of the first parameter's first element on that rank "
                         "after that step, in the job's first attempt (a faulty chip's silent corruption; ddprun "
                         "--verify-every finds and repairs it); repeatable")
    ap.add_argument("--dropout", type=float, default=0.0, help="dropout before the last layer (it draws from the "
                    "global generator every step)")
    ap.add_argument("--draw-at-start", action="store_true",
                    help="draw from the global generator once the Healer is made, as a framework's start does "
                         "(a replacement draws at its own start, long after its peers)")
    ap.add_argument("--static-graph", action="store_true", help="DDP(static_graph=True)")
    ap.add_argument("--bucket-view", action="store_true", help="DDP(gradient_as_bucket_view=True)")
    ap.add_argument("--warm-up", action="store_true",
                    help="one forward, backward and zero_grad before the Healer (a common order: build, warm up, "
                         "then wrap)")
    args = ap.parse_args()
    flips = flips_of(args.flip_bit)
    first_attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0"

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)  # every rank starts from the same model
    x, y = make_data(args.samples, 32, seed=1)
    model = DDP(make_model(32, args.hidden, args.dropout), static_graph=args.static_graph,
                gradient_as_bucket_view=args.bucket_view)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    progress = {"epoch": 0, "sample": 0}  # where the loop stands: the global sample position

    def train_step(xb, yb):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(xb), yb)
        loss.backward()  # DDP averages the gradients
        optimizer.step()  # the commit: this step is done
        progress["sample"] += world * args.batch
        done = healer.steps if healer else None
        for flip_rank, flip_step, bit in flips:
            if flip_rank == rank and flip_step == done and first_attempt:
                flip_bit(model.module, bit)
        return loss.item()

    if args.evaluate_first:
        model.eval()
        with torch.no_grad():
            first = torch.nn.functional.mse_loss(model(x[:args.batch]), y[:args.batch]).item()
        model.train()
        if rank == 0:
            print(f"untrained loss {first:.6f}", flush=True)
    if args.barrier_before_healer:
        dist.barrier()
    if args.warm_up:
        torch.nn.functional.mse_loss(model(x[:args.batch]), y[:args.batch]).backward()
        optimizer.zero_grad()
    healer = None if args.no_heal else ddprun.Healer(model, optimizer, state=progress)
    if args.draw_at_start:
        torch.rand(1)
    step = healer.step if healer else (lambda fn, *a: fn(*a))
    if healer is not None and healer.joined:
        print(f"rank {rank} joined at step {healer.steps} (epoch {progress['epoch'] + 1}, sample "
              f"{progress['sample']}) with the state of its peers", flush=True)
    steps = healer.steps if healer else 0
    loss = float("nan")
    began = time.time()
    while progress["epoch"] < args.epochs:
        # A heal may change the world (a lost node, no spare): read it each
        # step. The rest of the epoch goes on from the global sample position.
        was = world
        rank, world = dist.get_rank(), dist.get_world_size()
        if world != was and rank == 0:
            print(f"world size now {world}, going on from step {steps}", flush=True)
        if progress["sample"] + world * args.batch > len(x):
            progress["epoch"] += 1
            progress["sample"] = 0
            continue
        result = step(train_step, *batch_at(progress, x, y, args.batch, rank, world))
        loss = loss if result is None else result
        steps = healer.steps if healer else steps + 1
        if args.print_steps and rank == 0:
            print(f"step {steps} done at {time.time():.3f}", flush=True)
    if healer is not None:
        healer.close()
    if dist.get_rank() == 0:
        if healer is not None and healer.report.checks:
            print(f"replicas compared {healer.report.checks} times, {1000 * healer.report.verify_seconds:.3f} ms in "
                  "all", flush=True)
        print(f"{world} ranks, {steps} steps in {time.time() - began:.1f} s; final loss {loss:.6f}; "
              f"checksum {checksum(model.module)}", flush=True)
    # Let the process group go while Python still runs (see ddp_hello.py).
    del model, optimizer, healer
    gc.collect()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
