#!/usr/bin/env python3
"""Time to first collective: wall time from launching a 4-worker job to all
workers having completed one all_reduce and exited. Three rows, same run:

  torchrun + a PyTorch script (the anchor)
  ddprun   + the same PyTorch script (the launcher's share)
  ddprun   + a C++ worker linking worker_lib

    bench/first_allreduce.py [--runs 5] [--nproc 4]
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from launch_overhead import ROOT, time_runs  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--nproc", type=int, default=4)
    p.add_argument("--build", default=os.path.join(ROOT, "build", "bin"))
    p.add_argument("--torchrun", default=os.path.join(ROOT, "..", "shared", "anchors", "torchrun-compat.py"))
    p.add_argument("--python", default="/usr/bin/python3", help="the Python with torch 1.13 (python3-torch)")
    args = p.parse_args()

    script = os.path.join(ROOT, "bench", "first_allreduce_worker.py")
    ddprun = os.path.join(args.build, "ddprun")
    n = str(args.nproc)
    rows = []
    if os.path.exists(args.torchrun):
        rows.append(("torchrun + PyTorch script (anchor)",
                     [args.python, args.torchrun, "--monitor_interval", "0.1", "--nproc_per_node", n, script]))
    else:
        print("anchor not found at %s: torchrun not measured" % args.torchrun, file=sys.stderr)
    os.environ["DDPRUN_PYTHON"] = args.python
    rows.append(("ddprun + PyTorch script", [ddprun, "--nproc", n, script]))
    rows.append(("ddprun + C++ worker_lib", [ddprun, "--nproc", n, os.path.join(args.build, "first_allreduce_worker")]))

    results = [(name, time_runs(cmd, args.runs)) for name, cmd in rows]
    anchor = results[0][1][0] if os.path.exists(args.torchrun) else None
    print("time to first all_reduce, %d workers (gloo, CPU), %d runs each\n" % (args.nproc, args.runs))
    print("| launcher + worker | median s | min..max s | vs anchor |")
    print("|---|---:|---:|---:|")
    for name, (med, lo, hi) in results:
        ratio = "%.3f" % (med / anchor) if anchor else "-"
        print("| %s | %.3f | %.3f..%.3f | %s |" % (name, med, lo, hi, ratio))


if __name__ == "__main__":
    main()
