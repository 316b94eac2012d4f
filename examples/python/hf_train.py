"""A Hugging Face Trainer script as people write it: a model (a small
transformer with dropout) that returns its loss, a torch Dataset of dicts,
TrainingArguments with AdamW, a linear schedule with warm-up, gradient
clipping, a checkpoint every 25 steps and the loss logged every 10, and
Trainer.train() on 4 processes. hf_train_healed.py is this file with 1 line
changed so that it heals (`diff hf_train.py hf_train_healed.py`): kill any
of its ranks under ddprun and the others go on, a replacement takes the
dead rank's place, and the run ends with the parameters of one nothing
interrupted.

    ddprun --nproc 4 examples/python/hf_train_healed.py --print-steps
    kill -9 <a worker's pid>

With --resume, a restarted run goes on from the newest checkpoint in --out
(what a script restarted by torchrun needs: bench/recovery.py --frameworks
measures both ways back). Rank 0 prints the loss on the first 256 samples
and a checksum of the parameters. Needs
`pip install transformers accelerate` (the 2.x lane installs them:
scripts/frameworks-requirements.txt).
"""
import argparse
import hashlib
import json
import os
import re

import torch
import torch.nn.functional as F
from transformers import Trainer, TrainerCallback, TrainingArguments


class Net(torch.nn.Module):
    def __init__(self, vocab=64, width=64, classes=4):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, width)
        self.block = torch.nn.TransformerEncoderLayer(width, nhead=4, dim_feedforward=128, dropout=0.1,
                                                      batch_first=True)
        self.head = torch.nn.Linear(width, classes)

    # As transformers' own models: the loss's keyword arguments taken, the
    # loss divided by the Trainer's count of the batch's labels over every
    # rank (average_tokens_across_devices, its default).
    def forward(self, tokens, labels=None, num_items_in_batch=None, **kwargs):
        logits = self.head(self.block(self.embed(tokens)).mean(dim=1))
        if num_items_in_batch is None:
            return {"loss": F.cross_entropy(logits, labels), "logits": logits}
        return {"loss": F.cross_entropy(logits, labels, reduction="sum") / num_items_in_batch, "logits": logits}


class Tokens(torch.utils.data.Dataset):
    def __init__(self, samples, length=16, vocab=64, seed=1):
        g = torch.Generator().manual_seed(seed)
        self.tokens = torch.randint(0, vocab, (samples, length), generator=g)
        self.labels = self.tokens[:, :4].sum(dim=1) % 4

    def __len__(self):
        return len(self.tokens)

    def __getitem__(self, i):
        return {"tokens": self.tokens[i], "labels": self.labels[i]}


def newest_whole_checkpoint(out):
    """The newest checkpoint in `out` that was written whole: the Trainer
    writes trainer_state.json last, so one whose file is missing or does
    not parse was cut short (a kill during the save) and the one before it
    is taken."""
    steps = [int(m.group(1)) for m in map(re.compile(r"checkpoint-(\d+)$").match, os.listdir(out)) if m]
    for step in sorted(steps, reverse=True):
        folder = os.path.join(out, f"checkpoint-{step}")
        try:
            with open(os.path.join(folder, "trainer_state.json")) as f:
                json.load(f)
            return folder
        except (OSError, ValueError):
            continue
    return None


class PrintSteps(TrainerCallback):
    def on_step_end(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            print(f"step {state.global_step} done", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--samples", type=int, default=4096)
    ap.add_argument("--out", default="hf_out", help="checkpoints go here")
    ap.add_argument("--print-steps", action="store_true", help="rank 0 prints a line after every step")
    ap.add_argument("--resume", action="store_true", help="go on from the newest checkpoint in --out, if any")
    args = ap.parse_args()

    torch.manual_seed(0)
    model = Net()
    training = TrainingArguments(
        output_dir=args.out, per_device_train_batch_size=16, num_train_epochs=args.epochs, learning_rate=1e-3,
        optim="adamw_torch", lr_scheduler_type="linear", warmup_steps=20, max_grad_norm=1.0, seed=0,
        save_steps=25, logging_steps=10, report_to="none", use_cpu=True, disable_tqdm=True)
    trainer = Trainer(model=model, args=training, train_dataset=Tokens(args.samples),
                      callbacks=[PrintSteps()] if args.print_steps else [])
    last = newest_whole_checkpoint(args.out) if args.resume and os.path.isdir(args.out) else None
    trainer.train(resume_from_checkpoint=last)

    if trainer.is_world_process_zero():
        h = hashlib.sha256()
        for p in model.parameters():
            h.update(p.detach().contiguous().numpy().tobytes())
        model.eval()
        with torch.no_grad():
            first = Tokens(args.samples)[:256]
            loss = model(first["tokens"], first["labels"])["loss"].item()
        print(f"final loss {loss:.6f}; checksum {h.hexdigest()[:16]}", flush=True)


if __name__ == "__main__":
    main()
