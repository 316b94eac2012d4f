#!/usr/bin/env python3
"""The anchor of issue 10's benchmark: examples/gpt's model, data, batch,
optimizer and precision in PyTorch eager, one process, printing tokens/s and
(given a peak) MFU. Written to match examples/gpt/{model,data,main}.cpp:
GPT-2 shape (pre-LayerNorm blocks, causal attention, tanh-GELU MLP, tied LM
head), GPT-2 init, AdamW (0.9, 0.95) with decay on matrices only, linear
warmup + cosine to a tenth, clip 1.0, bf16 autocast for forward and loss.
Timing: the steps after the first, each ending with loss.item() (as the C++
trainer does).

    bench/gpt_eager.py --model tiny --steps 20                 # CPU
    bench/gpt_eager.py --model small --device cuda --dtype bf16 --batch-size 16 --peak h100
    ... --json out.json   (the figures, for bench/gpt_throughput.py)
"""
import argparse
import glob
import json
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

PRESETS = {
    "tiny": dict(vocab=256, context=64, layers=2, heads=2, dim=64),
    "small": dict(vocab=50304, context=1024, layers=12, heads=12, dim=768),
}
PEAK_TFLOPS = {"h100": 989.4, "h200": 989.4}  # dense bf16, SXM


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.heads = c["heads"]
        self.qkv = nn.Linear(c["dim"], 3 * c["dim"])
        self.proj = nn.Linear(c["dim"], c["dim"])

    def forward(self, x):
        B, T, C = x.shape
        hd = C // self.heads
        q, k, v = self.qkv(x).view(B, T, 3, self.heads, hd).permute(2, 0, 3, 1, 4).unbind(0)
        if hasattr(F, "scaled_dot_product_attention"):  # torch 2.x, as LibTorch 2.x in the C++
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            s = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
            future = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
            y = torch.softmax(s.masked_fill(future, float("-inf")), -1) @ v
        return self.proj(y.transpose(1, 2).contiguous().view(B, T, C))


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.ln1 = nn.LayerNorm(c["dim"])
        self.ln2 = nn.LayerNorm(c["dim"])
        self.attn = Attention(c)
        self.fc = nn.Linear(c["dim"], 4 * c["dim"])
        self.fc_proj = nn.Linear(4 * c["dim"], c["dim"])

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.fc_proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class Gpt(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.wte = nn.Embedding(c["vocab"], c["dim"])
        self.wpe = nn.Embedding(c["context"], c["dim"])
        self.blocks = nn.ModuleList(Block(c) for _ in range(c["layers"]))
        self.ln_f = nn.LayerNorm(c["dim"])
        resid = 0.02 / math.sqrt(2 * c["layers"])
        with torch.no_grad():
            for name, p in self.named_parameters():
                if "ln" in name:
                    continue
                if name.endswith(".bias"):
                    p.zero_()
                elif "proj.weight" in name:
                    p.normal_(0, resid)
                else:
                    p.normal_(0, 0.02)

    def forward(self, tokens):
        T = tokens.shape[1]
        x = self.wte(tokens) + self.wpe(torch.arange(T, device=tokens.device))
        for b in self.blocks:
            x = b(x)
        return F.linear(self.ln_f(x), self.wte.weight)

    def flops_per_token(self, T):
        n = sum(p.numel() for p in self.parameters()) - self.wpe.weight.numel()
        c = self.c
        return 6 * n + 12 * c["layers"] * c["heads"] * (c["dim"] // c["heads"]) * T


def corpus_bytes(args):
    if args.data:
        return open(args.data, "rb").read()
    cache = args.data_cache or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.environ.get("HOME", "/tmp"), ".cache"),
        "ddprun", "gpt-debian-corpus-v1.bin")
    if os.path.exists(cache):
        return open(cache, "rb").read()
    files = sorted([p for p in glob.glob("/usr/share/common-licenses/**", recursive=True) if os.path.isfile(p)]
                   + [p for p in glob.glob("/usr/share/doc/*/copyright") if os.path.isfile(p)])
    out = bytearray()
    for f in files:
        try:
            out += open(f, "rb").read() + b"\n"
        except OSError:
            pass
    return bytes(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=PRESETS, default="tiny")
    for k in ("layers", "heads", "dim", "context", "vocab", "seq-len"):
        ap.add_argument("--" + k, type=int, default=0)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--warmup", type=int, default=0)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--fused", action="store_true", help="AdamW(fused=True) (torch 2.x, CUDA)")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model (torch 2.x)")
    ap.add_argument("--profile", default="", help="write a Chrome trace (CPU ops, CUDA kernels) of steps 3.. here")
    ap.add_argument("--profile-steps", type=int, default=3)
    ap.add_argument("--breakdown", action="store_true",
                    help="time data, forward, backward, clip and optimizer apart (waits for the device after each)")
    ap.add_argument("--data", default="")
    ap.add_argument("--data-cache", default="")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--peak-tflops", type=float, default=0)
    ap.add_argument("--peak", choices=PEAK_TFLOPS, default=None)
    ap.add_argument("--json", default="", help="write the figures here")
    args = ap.parse_args()

    c = dict(PRESETS[args.model])
    for k in ("layers", "heads", "dim", "context", "vocab"):
        if getattr(args, k):
            c[k] = getattr(args, k)
    T = args.seq_len or c["context"]
    peak = PEAK_TFLOPS[args.peak] if args.peak else args.peak_tflops
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if args.device == "cuda" else torch.device("cpu")

    data = torch.frombuffer(bytearray(corpus_bytes(args)), dtype=torch.uint8)
    windows = (data.numel() - 1) // T
    torch.manual_seed(args.seed)
    model = Gpt(c).to(device)
    run_model = torch.compile(model) if args.compile else model
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    extra = {"fused": True} if args.fused else {}
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8, **extra)
    warmup = args.warmup or max(1, args.steps // 10)

    def lr_at(step):
        if step < warmup:
            return args.lr * (step + 1) / warmup
        progress = min(1.0, (step - warmup) / max(1, args.steps - warmup))
        lo = 0.1 * args.lr
        return lo + 0.5 * (args.lr - lo) * (1 + math.cos(math.pi * progress))

    gen = torch.Generator().manual_seed(args.seed)
    order = torch.randperm(windows, generator=gen)
    cursor = 0
    fpt = model.flops_per_token(T)
    tokens_per_step = args.batch_size * T
    timed, timed_steps, first, last = 0.0, 0, None, None
    # The first step warms caches and allocators; a compiled model also
    # compiles in its first steps.
    skip = 3 if args.compile else 1
    phases = dict.fromkeys(("data", "forward", "backward", "clip", "optimizer"), 0.0)
    step_phases = dict(phases)
    mark_t = [0.0]

    def mark(name):
        if not args.breakdown:
            return
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        now = time.perf_counter()
        step_phases[name] += now - mark_t[0]
        mark_t[0] = now

    prof = None
    for step in range(args.steps):
        if args.profile and step == 3:  # as examples/gpt --profile
            prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                      torch.profiler.ProfilerActivity.CUDA])
            prof.__enter__()
        if prof is not None and step == 3 + args.profile_steps:
            prof.__exit__(None, None, None)
            prof.export_chrome_trace(args.profile)
            prof = None
        t0 = time.perf_counter()
        mark_t[0] = t0
        step_phases = dict.fromkeys(phases, 0.0)
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        opt.zero_grad(set_to_none=True)
        if cursor + args.batch_size > windows:
            order, cursor = torch.randperm(windows, generator=gen), 0
        idx = order[cursor:cursor + args.batch_size]
        cursor += args.batch_size
        win = torch.stack([data[i * T:i * T + T + 1] for i in idx.tolist()]).long()
        x = win[:, :-1].to(device, non_blocking=True)
        y = win[:, 1:].to(device, non_blocking=True)
        mark("data")
        with torch.autocast(device_type=args.device, dtype=torch.bfloat16, enabled=args.dtype == "bf16"):
            loss = F.cross_entropy(run_model(x).view(-1, c["vocab"]), y.reshape(-1))
        mark("forward")
        loss.backward()
        mark("backward")
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        mark("clip")
        opt.step()
        mark("optimizer")
        value = loss.item()
        secs = time.perf_counter() - t0
        first = value if first is None else first
        last = value
        if step >= skip:
            timed += secs
            timed_steps += 1
            for k in phases:
                phases[k] += step_phases[k]
    if prof is not None:
        prof.__exit__(None, None, None)
        prof.export_chrome_trace(args.profile)
    tps = tokens_per_step * timed_steps / timed if timed_steps else 0.0
    mfu = tps * fpt / (peak * 1e12) if peak else 0.0
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    result = dict(tokens_per_s=tps, mfu=mfu, first_loss=first, final_loss=last, steps=args.steps,
                  params=sum(p.numel() for p in model.parameters()), flops_per_token=fpt,
                  device=name, torch=torch.__version__, dtype=args.dtype, fused=args.fused, compiled=args.compile,
                  breakdown_ms={k: 1e3 * v / timed_steps for k, v in phases.items()}
                  if args.breakdown and timed_steps else {})
    print("pytorch eager %s on %s: loss %.4f -> %.4f, %.0f tokens/s, MFU %s" %
          (torch.__version__, name, first, last, tps, "%.1f%%" % (100 * mfu) if peak else "n/a"))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    sys.exit(main())
