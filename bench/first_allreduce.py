#!/usr/bin/env python3
"""Time to first collective: wall time from launching a job of 2 and of 4
workers to all workers having completed one all_reduce and exited. Three
rows per size, same run:

  torchrun + a PyTorch script (the anchor)
  ddprun   + the same PyTorch script (the launcher's share)
  ddprun   + a C++ worker linking worker_lib

    bench/first_allreduce.py [--runs 7] [--nproc 2 4]
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from launch_overhead import ROOT, time_runs  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=7)
    p.add_argument("--nproc", type=int, nargs="+", default=[2, 4])
    p.add_argument("--build", default=os.path.join(ROOT, "build", "bin"))
    p.add_argument("--torchrun", default=os.path.join(ROOT, "..", "shared", "anchors", "torchrun-compat.py"))
    p.add_argument("--python", default="/usr/bin/python3", help="the Python with torch 1.13 (python3-torch)")
    args = p.parse_args()

    script = os.path.join(ROOT, "bench", "first_allreduce_worker.py")
    ddprun = os.path.join(args.build, "ddprun")
    have_anchor = os.path.exists(args.torchrun)
    if not have_anchor:
        print("\n*** ANCHOR MISSING: torchrun not found at %s; no ratios can be given ***\n" % args.torchrun,
              file=sys.stderr)
    os.environ["DDPRUN_PYTHON"] = args.python
    print("time to first all_reduce (gloo, CPU), median of %d runs each\n" % args.runs)
    print("| workers | launcher + worker | median s | min..max s | vs torchrun |")
    print("|---:|---|---:|---:|---:|")
    for nproc in args.nproc:
        n = str(nproc)
        rows = []
        if have_anchor:
            rows.append(("torchrun + PyTorch script (anchor)",
                         [args.python, args.torchrun, "--monitor_interval", "0.1", "--nproc_per_node", n, script]))
        rows.append(("ddprun + the same PyTorch script", [ddprun, "--nproc", n, script]))
        rows.append(("ddprun + C++ worker_lib", [ddprun, "--nproc", n, os.path.join(args.build, "first_allreduce_worker")]))
        results = [(name, time_runs(cmd, args.runs)) for name, cmd in rows]
        anchor = results[0][1][0] if have_anchor else None
        for name, (med, lo, hi) in results:
            ratio = "%.3f" % (med / anchor) if anchor else "ANCHOR MISSING"
            print("| %d | %s | %.3f | %.3f..%.3f | %s |" % (nproc, name, med, lo, hi, ratio), flush=True)
        if anchor:
            r = results[1][1][0] / anchor
            print("| %d | PyTorch script: ddprun / torchrun = %.3f, goal <= 0.7: %s | | | |" %
                  (nproc, r, "met" if r <= 0.7 else "NOT met"), flush=True)


if __name__ == "__main__":
    main()
