"""A plain PyTorch DDP training loop, as people write it: a DataLoader over
a DistributedSampler, a small transformer with dropout, AdamW, a warm-up
schedule. plain_loop_healed.py is this file with 4 lines changed so that
it heals (`diff plain_loop.py plain_loop_healed.py`): kill any of its ranks
under ddprun and the others go on, a replacement takes the dead rank's
place, and the run ends with the parameters of one nothing interrupted.

    ddprun --nproc 4 examples/python/plain_loop_healed.py --print-steps
    kill -9 <a worker's pid>

Each prints the final loss and a checksum of the parameters.
"""
import argparse
import hashlib

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


class Net(torch.nn.Module):
    def __init__(self, vocab=64, width=64, classes=4):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, width)
        self.block = torch.nn.TransformerEncoderLayer(width, nhead=4, dim_feedforward=128, dropout=0.1,
                                                      batch_first=True)
        self.head = torch.nn.Linear(width, classes)

    def forward(self, tokens):
        return self.head(self.block(self.embed(tokens)).mean(dim=1))


def make_data(samples, length=16, vocab=64, seed=1):
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, vocab, (samples, length), generator=g)
    return TensorDataset(tokens, tokens[:, :4].sum(dim=1) % 4)


def finish(model, loss):
    """Rank 0 prints the last loss and a checksum of the parameters; the
    group ends."""
    if dist.get_rank() == 0:
        h = hashlib.sha256()
        for p in model.parameters():
            h.update(p.detach().contiguous().numpy().tobytes())
        print(f"final loss {loss.item():.6f}; checksum {h.hexdigest()[:16]}", flush=True)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--samples", type=int, default=4096)
    ap.add_argument("--print-steps", action="store_true", help="rank 0 prints a line after every step")
    ap.add_argument("--num-workers", type=int, default=0, help="the DataLoader's worker processes (persistent)")
    args = ap.parse_args()

    dist.init_process_group("gloo")
    torch.manual_seed(0)
    data = make_data(args.samples)
    sampler = DistributedSampler(data, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=16, sampler=sampler, num_workers=args.num_workers,
                        persistent_workers=args.num_workers > 0)
    model = DDP(Net())
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / 20))

    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for tokens, labels in loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(tokens), labels)
            loss.backward()
            optimizer.step()
            scheduler.step()
            if args.print_steps and dist.get_rank() == 0:
                print(f"step {scheduler.last_epoch} done", flush=True)

    finish(model, loss)


if __name__ == "__main__":
    main()
