#!/usr/bin/env python3
"""What comparing the replicas costs (ddprun --verify-every, issue 59): the
time one comparison takes (a fingerprint of every parameter, one all_gather
of 40 bytes a rank; measured inside the workers, rank 0's, with a
comparison every step) against the step time of the same job with the
comparisons off, for the default job (train), `gpt --model tiny` and the
PyTorch example (examples/python/ddp_heal.py). From them: the fewest steps
between comparisons whose cost stays within 0.5% of a step (what
--verify-every's default must be at least), and the cost at the default.
Then the time from a flipped bit to its repair at the default interval
(the worst case: the bit flips right after a comparison).

    bench/verify_cost.py [--build build] [--nproc 4] [--repeats 3]

The anchor is each job itself with --verify-every 0, in the same run:
torchrun, torchft and NVRx compare no replicas (said below, loudly).
"""
import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from anchors import missing, torch2_python  # noqa: E402


def default_verify_every(build):
    """--verify-every's default, as ddprun --help says it."""
    out = subprocess.run([os.path.join(build, "bin", "ddprun"), "--help"], capture_output=True, text=True).stdout
    m = re.search(r"--verify-every[^\[]*\[default: (\d+)\]", out, re.S)
    if not m:
        raise SystemExit("verify_cost.py: ddprun --help names no --verify-every default")
    return int(m.group(1))


def run(argv, env=None):
    full = dict(os.environ, **(env or {}))
    p = subprocess.run(argv, capture_output=True, text=True, env=full)
    if p.returncode != 0:
        raise RuntimeError("failed (%d): %s\n%s" % (p.returncode, " ".join(argv), p.stderr[-3000:]))
    return p


def step_seconds_from_lines(out):
    """The median time between train's "step N done at T" lines."""
    times = [float(t) for t in re.findall(r"step \d+ done at ([0-9.]+)", out)]
    gaps = [b - a for a, b in zip(times, times[1:])]
    return statistics.median(gaps) if gaps else float("nan")


class Job:
    def __init__(self, name, measure):
        self.name = name
        self.measure = measure  # (verify_every) -> (step_s, checks, check_s)


def train_job(args):
    def measure(every):
        with tempfile.TemporaryDirectory() as d:
            summary = os.path.join(d, "s.json")
            p = run([args.ddprun, "--nproc", str(args.nproc), "--verify-every", str(every),
                     os.path.join(args.build, "bin", "train"), "--limit", "16000", "--epochs", "1", "--print-steps",
                     "--summary-json", summary])
            j = json.load(open(summary))
            return step_seconds_from_lines(p.stdout), j["replica_checks"], j["replica_check_s"]
    return Job("train (cnn, %d ranks, shared memory)" % args.nproc, measure)


def gpt_job(args):
    def measure(every):
        with tempfile.TemporaryDirectory() as d:
            summary = os.path.join(d, "s.json")
            run([args.ddprun, "--nproc", str(args.nproc), "--verify-every", str(every),
                 os.path.join(args.build, "bin", "gpt"), "--model", "tiny", "--steps", "60", "--summary-json", summary])
            j = json.load(open(summary))
            return j["step_s"], j["replica_checks"], j["replica_check_s"]
    return Job("gpt --model tiny (%d ranks, Gloo)" % args.nproc, measure)


def python_job(args, python):
    def measure(every):
        p = run([args.ddprun, "--nproc", str(args.nproc), "--verify-every", str(every),
                 os.path.join(ROOT, "examples", "python", "ddp_heal.py"), "--samples", "16000", "--epochs", "1"],
                env={"PYTHON_EXEC": python})
        steps, seconds = re.search(r"(\d+) steps in ([0-9.]+) s", p.stdout).groups()
        checks = re.search(r"replicas compared (\d+) times, ([0-9.]+) ms in all", p.stdout)
        n, ms = (int(checks.group(1)), float(checks.group(2))) if checks else (0, 0.0)
        return float(seconds) / int(steps), n, ms / 1000
    return Job("examples/python/ddp_heal.py (%d ranks, Gloo)" % args.nproc, measure)


def flip_to_repair(args, every):
    """train with a bit flipped right after a comparison: steps and seconds
    until the agent names it (its line's time against rank 0's step lines)."""
    flip = every + 1
    p = run([args.ddprun, "--nproc", str(args.nproc), "--verify-every", str(every),
             os.path.join(args.build, "bin", "train"), "--limit", "32000", "--epochs", "1", "--print-steps",
             "--flip-bit", "2:%d" % flip])
    step_at = {int(s): float(t) for s, t in re.findall(r"step (\d+) done at ([0-9.]+)", p.stdout)}
    found = re.search(r"\[ddprun (\d\d):(\d\d):(\d\d\.\d+)\] warning: replicas: rank 2's parameters differ [^\n]* at step "
                      r"(\d+)", p.stderr)
    if not found or flip not in step_at:
        return None
    h, m, s, at_step = found.groups()
    # The agent's clock of day against the step lines' epoch seconds: the
    # same day (the run takes seconds).
    t = time.localtime(step_at[flip])
    said = time.mktime(t[:3] + (int(h), int(m), 0) + t[6:]) + float(s)
    return int(at_step) - flip, said - step_at[flip]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--nproc", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--python", help="the Python for the PyTorch example [build/torch2-venv's]")
    args = ap.parse_args()
    args.ddprun = os.path.join(args.build, "bin", "ddprun")
    default = default_verify_every(args.build)
    python = torch2_python(args.python)
    jobs = [train_job(args), gpt_job(args)]
    if python:
        jobs.append(python_job(args, python))
    else:
        missing("examples/python/ddp_heal.py", "no PyTorch 2.x venv (scripts/setup-torch2.sh)")
    missing("torchrun 2.x, torchft, NVRx", "none compares replicas; each job's anchor is itself with --verify-every 0")

    print("\nddprun --verify-every: one comparison's cost against a step (%d ranks, median of %d runs each)\n"
          % (args.nproc, args.repeats))
    print("| job | step, --verify-every 0 (ms) | one comparison (ms) | fewest steps apart for <= 0.5%% | "
          "cost at the default (%d) | step, --verify-every 1 (ms) |" % default)
    print("|---|---|---|---|---|---|")
    needed = []
    for job in jobs:
        off, each, on = [], [], []
        for _ in range(args.repeats):  # alternating, so that a drift of the machine hits both alike
            step, _, _ = job.measure(0)
            off.append(step)
            step1, checks, check_s = job.measure(1)
            on.append(step1)
            each.append(check_s / checks if checks else float("nan"))
        step, check = statistics.median(off), statistics.median(each)
        fewest = math.ceil(check / (0.005 * step))
        needed.append(fewest)
        print("| %s | %.2f | %.3f | %d | %.3f%% | %.2f |" % (job.name, 1000 * step, 1000 * check, fewest,
                                                           100 * check / (default * step), 1000 * statistics.median(on)))
    print("\nthe default (%d) %s the largest of those (%d)" % (default, ">=" if default >= max(needed) else "< !",
                                                               max(needed)))
    found = flip_to_repair(args, default)
    if found:
        print("a bit flipped right after a comparison (train, --verify-every %d): named and repaired %d steps, "
              "%.2f s later" % (default, found[0], found[1]))
    else:
        print("*** the flip-to-repair run named no verdict ***")


if __name__ == "__main__":
    main()
