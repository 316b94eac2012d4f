#!/usr/bin/env python3
"""Goodput at scale: the effective training time ratio (ETTR, the share of
wall time that goes to steps that count) by job size, at the failure rate
Meta reported for Llama 3 (419 unexpected interruptions in 54 days on
16,384 GPUs), for each way of recovering from a failed rank:

- restart from a checkpoint (torchrun, or ddprun --max-heals 0): every
  rank restarts; the steps since the last checkpoint are done again (half
  an interval on average) and checkpoints stall training;
- heal (ddprun's default for a ddp::Healer loop): the survivors keep
  running, a replacement takes the state from a peer; one step is done
  again; checkpoints are kept only for the loss of a whole job, so they
  can be rare.

A model, not a measurement: its inputs are measured costs (defaults from
bench/recovery.py on this machine, docs/benchmarks.md) and the
failure rate, which grows with the number of GPUs. For each size it prints
the failures per day, each path's cost per failure and the ETTR.

    bench/goodput.py
    bench/goodput.py --heal-s 0.105 --restart-s 0.25 --torchrun-s 43.9 --step-s 0.04 \\
                     --checkpoint-every 100 --stall-s 0.0004 --chart goodput.png
"""
import argparse
import shutil
import subprocess
import tempfile

# Llama 3 (Dubey et al. 2024, section 3.3.4): 419 unexpected interruptions
# in a 54-day snapshot of pre-training on 16,384 H100s.
LLAMA3_FAILURES, LLAMA3_DAYS, LLAMA3_GPUS = 419, 54, 16384


def failures_per_day(gpus):
    """Failures scale with the hardware: the Llama 3 rate per GPU-day."""
    return LLAMA3_FAILURES / LLAMA3_DAYS / LLAMA3_GPUS * gpus


def ettr(gpus, cost_per_failure_s, steps_redone, step_s, checkpoint_every, stall_s):
    """Share of a day spent on steps that count: a day minus the time lost to
    failures (their recovery and the steps done again) and to checkpoint
    stalls."""
    day = 86400.0
    lost_failures = failures_per_day(gpus) * (cost_per_failure_s + steps_redone * step_s)
    stalls = (day / step_s / checkpoint_every) * stall_s if checkpoint_every else 0.0
    return max(0.0, (day - lost_failures - stalls) / day)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="64,1024,16384,100000", help="job sizes in GPUs")
    p.add_argument("--step-s", type=float, default=0.04, help="seconds per training step (train on 4 ranks here)")
    p.add_argument("--heal-s", type=float, default=0.105,
                   help="kill -> next step when healing (bench/recovery.py, ddprun default row)")
    p.add_argument("--restart-s", type=float, default=0.25,
                   help="kill -> next step restarting from a checkpoint with standbys (ddprun --max-heals 0)")
    p.add_argument("--torchrun-s", type=float, default=43.9,
                   help="kill -> next step under torchrun 2.15 (node loss on namespace hosts, bench/node_loss.py; "
                        "its single-node restarts did not recover in bench/recovery.py)")
    p.add_argument("--checkpoint-every", type=int, default=100, help="steps between checkpoints for the restart paths")
    p.add_argument("--heal-checkpoint-every", type=int, default=1000,
                   help="steps between checkpoints when healing (kept for the loss of the whole job)")
    p.add_argument("--stall-s", type=float, default=0.0004, help="training stall per checkpoint (bench/recovery.py)")
    p.add_argument("--chart", default=None, help="write a PNG chart here (gnuplot)")
    a = p.parse_args()
    sizes = [int(s) for s in a.sizes.split(",")]
    paths = [
        ("torchrun 2.15, restart from checkpoint", a.torchrun_s, a.checkpoint_every / 2, a.checkpoint_every),
        ("ddprun, restart from checkpoint (standby)", a.restart_s, a.checkpoint_every / 2, a.checkpoint_every),
        ("ddprun, heal (survivors go on)", a.heal_s, 1, a.heal_checkpoint_every),
    ]
    print("## Goodput by job size at Llama 3's failure rate (%d failures / %d days / %d GPUs), a model\n"
          % (LLAMA3_FAILURES, LLAMA3_DAYS, LLAMA3_GPUS))
    print("Step %.3f s; checkpoint every %d steps for restarts (%d for heals), %.4f s stall each.\n"
          % (a.step_s, a.checkpoint_every, a.heal_checkpoint_every, a.stall_s))
    print("| GPUs | failures/day | " + " | ".join("%s: s lost/failure, ETTR" % name for name, *_ in paths) + " |")
    print("|---:|---:|" + "---:|" * len(paths))
    rows = []
    for g in sizes:
        cells, values = [], []
        for name, cost, redone, every in paths:
            e = ettr(g, cost, redone, a.step_s, every, a.stall_s)
            cells.append("%.2f, %.4f" % (cost + redone * a.step_s, e))
            values.append(e)
        rows.append((g, values))
        print("| %d | %.1f | %s |" % (g, failures_per_day(g), " | ".join(cells)))
    print("\nEvery failure stops the whole (synchronous) job for the seconds shown. Pass your job's step time, "
          "checkpoint interval and stall (--step-s, --checkpoint-every, --stall-s) for its figures.")
    if a.chart:
        if not shutil.which("gnuplot"):
            print("CHART NOT DRAWN: gnuplot is missing (apt-get install gnuplot-nox)")
            return 0
        with tempfile.NamedTemporaryFile("w", suffix=".dat", delete=False) as f:
            for g, values in rows:
                f.write("%d %s\n" % (g, " ".join("%.6f" % v for v in values)))
        plots = ", ".join("'%s' using 1:%d with linespoints title '%s'" % (f.name, i + 2, name)
                          for i, (name, *_) in enumerate(paths))
        script = ("set terminal png size 900,500; set output '%s'; set logscale x; set xlabel 'GPUs'; "
                  "set ylabel 'ETTR'; set key bottom left; plot %s" % (a.chart, plots))
        subprocess.run(["gnuplot", "-e", script], check=True)
        print("chart: %s" % a.chart)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
