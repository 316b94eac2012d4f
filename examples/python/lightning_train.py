"""A Lightning script as people write it: a LightningModule (a small
transformer with dropout), AdamW with a warm-up schedule stepped every
batch, Trainer.fit with Lightning's DDPStrategy on 4 processes, a
checkpoint every 25 steps, the learning rate logged, a progress bar.
lightning_train_healed.py is this file with 1 line changed so that it heals
(`diff lightning_train.py lightning_train_healed.py`): kill any of its
ranks under ddprun and the others go on, a replacement takes the dead
rank's place, and the run ends with the parameters of one nothing
interrupted.

    ddprun --nproc 4 examples/python/lightning_train_healed.py --print-steps
    kill -9 <a worker's pid>

With --resume, a restarted run goes on from the newest checkpoint in --out
(what a script restarted by torchrun needs: bench/recovery.py --frameworks
measures both ways back). Rank 0 prints the final loss and a checksum of
the parameters. Needs
`pip install lightning` (the 2.x lane installs it:
scripts/frameworks-requirements.txt).
"""
import argparse
import glob
import hashlib
import os
import re

import lightning as L
import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import LearningRateMonitor, ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.strategies import DDPStrategy
from torch.utils.data import DataLoader, TensorDataset


class Net(L.LightningModule):
    def __init__(self, vocab=64, width=64, classes=4):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, width)
        self.block = torch.nn.TransformerEncoderLayer(width, nhead=4, dim_feedforward=128, dropout=0.1,
                                                      batch_first=True)
        self.head = torch.nn.Linear(width, classes)

    def forward(self, tokens):
        return self.head(self.block(self.embed(tokens)).mean(dim=1))

    def training_step(self, batch, batch_idx):
        tokens, labels = batch
        loss = F.cross_entropy(self(tokens), labels)
        self.log("loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        tokens, labels = batch
        self.log("val_loss", F.cross_entropy(self(tokens), labels))

    def configure_optimizers(self):
        optimizer = torch.optim.AdamW(self.parameters(), lr=1e-3)
        warm_up = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / 20))
        return [optimizer], [{"scheduler": warm_up, "interval": "step"}]


class PrintSteps(L.Callback):
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_rank == 0:
            print(f"step {trainer.global_step} done", flush=True)

    def on_validation_start(self, trainer, pl_module):
        if trainer.global_rank == 0 and not trainer.sanity_checking:
            print(f"validation after step {trainer.global_step} began", flush=True)


def make_data(samples, length=16, vocab=64, seed=1):
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, vocab, (samples, length), generator=g)
    return TensorDataset(tokens, tokens[:, :4].sum(dim=1) % 4)


def newest_checkpoint(out):
    """The checkpoint of the most steps under out (each run's logger
    version has its own folder), or None."""
    found = glob.glob(os.path.join(out, "**", "*step=*.ckpt"), recursive=True)
    return max(found, key=lambda p: int(re.search(r"step=(\d+)", p).group(1)), default=None)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--devices", type=int, default=4, help="processes per node (ddprun --nproc)")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--samples", type=int, default=4096)
    ap.add_argument("--out", default="lightning_out", help="checkpoints and logs go here")
    ap.add_argument("--print-steps", action="store_true", help="rank 0 prints a line after every step")
    ap.add_argument("--resume", action="store_true", help="go on from the newest checkpoint in --out, if any")
    ap.add_argument("--val-every", type=int, default=0, help="validate on --val-batches batches every N steps (0: never)")
    ap.add_argument("--val-batches", type=int, default=8)
    ap.add_argument("--accumulate", type=int, default=1, help="batches per optimizer step (accumulate_grad_batches)")
    args = ap.parse_args()

    torch.manual_seed(0)
    model = Net()
    trainer = L.Trainer(
        accelerator="cpu", devices=args.devices, strategy=DDPStrategy(), max_epochs=args.epochs,
        default_root_dir=args.out, logger=CSVLogger(args.out), log_every_n_steps=10,
        callbacks=[ModelCheckpoint(every_n_train_steps=25, save_top_k=-1), LearningRateMonitor("step")]
        + ([PrintSteps()] if args.print_steps else []),
        val_check_interval=args.val_every or None, limit_val_batches=args.val_batches if args.val_every else 0,
        num_sanity_val_steps=0, accumulate_grad_batches=args.accumulate)
    validation = DataLoader(make_data(args.val_batches * 16 * args.devices, seed=2), batch_size=16)
    trainer.fit(model, DataLoader(make_data(args.samples), batch_size=16, shuffle=True),
                validation if args.val_every else None,
                ckpt_path=newest_checkpoint(args.out) if args.resume else None)

    if trainer.global_rank == 0:
        h = hashlib.sha256()
        for p in model.parameters():
            h.update(p.detach().contiguous().numpy().tobytes())
        loss = trainer.callback_metrics["loss"]
        print(f"final loss {loss.item():.6f}; checksum {h.hexdigest()[:16]}", flush=True)


if __name__ == "__main__":
    main()
