#!/usr/bin/env python3
"""Launch overhead: wall time of `ddprun --nproc 4 /bin/true` against
torchrun 2.x (the anchor, build/torch2-venv's, --monitor_interval 0.1: see
bench/anchors.py) in the same run. Prints a table of medians and the ratio.
Goal (issue 2): ddprun at most 1/20 of torchrun's time.

    bench/launch_overhead.py [--runs 7] [--nproc 4] [--ddprun build/bin/ddprun]
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

import anchors

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def time_runs(cmd, runs, warmup=1, env=None):
    """Median, min and max wall seconds of `runs` runs after `warmup` unmeasured ones."""
    samples = []
    for i in range(warmup + runs):
        start = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        elapsed = time.perf_counter() - start
        if i >= warmup:
            samples.append(elapsed)
    return statistics.median(samples), min(samples), max(samples)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=7)
    p.add_argument("--nproc", type=int, default=4)
    p.add_argument("--ddprun", default=os.path.join(ROOT, "build", "bin", "ddprun"))
    p.add_argument("--python", default=None, help="the Python whose torchrun is the anchor (build/torch2-venv's)")
    args = p.parse_args()

    rows = []
    ddprun_cmd = [args.ddprun, "--nproc", str(args.nproc), "/bin/true"]
    rows.append(("ddprun", " ".join(["ddprun"] + ddprun_cmd[1:]), time_runs(ddprun_cmd, args.runs)))
    python = anchors.torch2_python(args.python)
    if python:
        torch_cmd = anchors.torchrun(python) + ["--monitor_interval", "0.1", "--nproc_per_node", str(args.nproc),
                                                "--no_python", "/bin/true"]
        rows.append(("%s (anchor)" % anchors.torchrun_label(python),
                     "torchrun --monitor_interval 0.1 --nproc_per_node %d --no_python /bin/true" % args.nproc,
                     time_runs(torch_cmd, args.runs)))
    else:
        anchors.missing("torchrun 2.x", "build/torch2-venv is missing (scripts/setup-torch2.sh)")
    ft_python, why = anchors.anchors_python() if python else (None, "no PyTorch 2.x")
    if ft_python:
        ft_cmd = [os.path.join(os.path.dirname(ft_python), "ft_launcher"), "--monitor-interval", "0.1",
                  "--nproc-per-node", str(args.nproc), "--no-python", "/bin/true"]
        rows.append(("NVRx %s ft_launcher" % anchors.package_version(ft_python, "nvidia-resiliency-ext"),
                     "ft_launcher --monitor-interval 0.1 --nproc-per-node %d --no-python /bin/true" % args.nproc,
                     time_runs(ft_cmd, args.runs, env=dict(os.environ, PYTHONWARNINGS="ignore"))))
    else:
        anchors.missing("NVRx ft_launcher", why)

    print("launch overhead, %d workers running /bin/true, %d runs each (median, min..max)\n" % (args.nproc, args.runs))
    print("| launcher | command | median ms | min..max ms |")
    print("|---|---|---:|---:|")
    for name, cmd, (med, lo, hi) in rows:
        print("| %s | `%s` | %.1f | %.1f..%.1f |" % (name, cmd, med * 1e3, lo * 1e3, hi * 1e3))
    if len(rows) >= 2 and "torchrun" in rows[1][0]:
        ratio = rows[0][2][0] / rows[1][2][0]
        print("\nddprun / torchrun = %.4f (1/%.0f); goal <= 1/20: %s" % (ratio, 1 / ratio, "met" if ratio <= 1 / 20 else "NOT met"))


if __name__ == "__main__":
    main()
