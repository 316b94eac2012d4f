#!/usr/bin/env python3
"""Per-step time of ddprun's DistributedDataParallel against PyTorch's (the
anchor: python3-torch 1.13, gloo, bucket_cap_mb=25) on the same model,
batch and ranks, in the same run; then seed 003's table: naive / flat /
overlap / bucketed with bucket caps of 1, 10, 100 and 1000 MB.

Each figure is the median over --repeats launches; each launch times
--steps steps (after warm-up) on the slowest rank. Both sides run under
ddprun (the launcher does not affect the step time).

    bench/ddp_step.py [--repeats 3] [--steps 10] [--ranks 2 4] [--sweep-ranks 2]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def launch(args, ranks, worker, python=None):
    env = dict(os.environ)
    if python:
        env["DDPRUN_PYTHON"] = python
    cmd = [os.path.join(args.build, "ddprun"), "--nproc", str(ranks)] + worker
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    for line in out.splitlines():
        if line.startswith("[rank0]:{"):
            return json.loads(line[len("[rank0]:"):])["ms_per_step"]
    raise RuntimeError("no result from: " + " ".join(cmd) + "\n" + out)


def median_ms(args, ranks, worker, python=None):
    return statistics.median(launch(args, ranks, worker, python) for _ in range(args.repeats))


def ours(args, model, sync="bucketed", bucket_mb=25):
    return [os.path.join(args.build, "ddp_step_bench"), "--model", model, "--steps", str(args.steps),
            "--batch", str(args.batch), "--sync", sync, "--bucket-mb", str(bucket_mb)]


def theirs(args, model, bucket_mb=25):
    return [os.path.join(ROOT, "bench", "ddp_step_torch.py"), "--model", model, "--steps", str(args.steps),
            "--batch", str(args.batch), "--bucket-mb", str(bucket_mb)]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    p.add_argument("--models", nargs="+", default=["cnn", "wide-mlp"])
    p.add_argument("--sweep-ranks", type=int, default=2)
    p.add_argument("--build", default=os.path.join(ROOT, "build", "bin"))
    p.add_argument("--python", default="/usr/bin/python3", help="the Python with torch 1.13 (python3-torch)")
    args = p.parse_args()

    print("## DDP step time: ddprun vs PyTorch DDP (gloo, CPU), batch %d per rank, median of %d launches x %d steps\n"
          % (args.batch, args.repeats, args.steps))
    print("| model | ranks | ddprun ms/step | PyTorch DDP ms/step | ratio |")
    print("|---|---:|---:|---:|---:|")
    for model in args.models:
        for ranks in args.ranks:
            a = median_ms(args, ranks, ours(args, model))
            b = median_ms(args, ranks, theirs(args, model), args.python)
            print("| %s | %d | %.1f | %.1f | %.2f |" % (model, ranks, a, b, a / b), flush=True)

    print("\n## Sync strategies (seed 003), wide-mlp (10M parameters, 40 MB of gradients), %d ranks\n"
          % args.sweep_ranks)
    print("| strategy | bucket cap | ms/step | vs PyTorch DDP |")
    print("|---|---:|---:|---:|")
    anchor = median_ms(args, args.sweep_ranks, theirs(args, "wide-mlp"), args.python)
    rows = [("naive", 25), ("flat", 25), ("overlap", 25)] + [("bucketed", mb) for mb in (1, 10, 100, 1000)]
    for sync, mb in rows:
        ms = median_ms(args, args.sweep_ranks, ours(args, "wide-mlp", sync, mb))
        cap = "%d MB" % mb if sync == "bucketed" else "-"
        print("| %s | %s | %.1f | %.2f |" % (sync, cap, ms, ms / anchor), flush=True)
    print("| PyTorch DDP (anchor) | 25 MB | %.1f | 1.00 |" % anchor)


if __name__ == "__main__":
    sys.exit(main())
