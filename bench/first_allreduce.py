#!/usr/bin/env python3
"""Time to first collective: wall time from launching a job of 2 and of 4
workers to all workers having completed one all_reduce and exited. Three
rows per size, same run:

  torchrun 2.x + a PyTorch script (the anchor, bench/anchors.py)
  ddprun   + the same PyTorch script (the launcher's share)
  ddprun   + a C++ worker linking worker_lib

    bench/first_allreduce.py [--runs 7] [--nproc 2 4]
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import anchors  # noqa: E402
from launch_overhead import ROOT, time_runs  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=7)
    p.add_argument("--nproc", type=int, nargs="+", default=[2, 4])
    p.add_argument("--build", default=os.path.join(ROOT, "build", "bin"))
    p.add_argument("--python", default=None,
                   help="the Python with PyTorch 2.x (build/torch2-venv's): the anchor's and the script's")
    args = p.parse_args()

    script = os.path.join(ROOT, "bench", "first_allreduce_worker.py")
    ddprun = os.path.join(args.build, "ddprun")
    python = anchors.torch2_python(args.python)
    have_anchor = python is not None
    if not have_anchor:
        anchors.missing("torchrun 2.x", "build/torch2-venv is missing (scripts/setup-torch2.sh); no ratios")
        python = "/usr/bin/python3"
    os.environ["DDPRUN_PYTHON"] = python
    ft_python, why = anchors.anchors_python() if have_anchor else (None, "no PyTorch 2.x")
    if not ft_python:
        anchors.missing("NVRx ft_launcher", why)
    os.environ["PYTHONWARNINGS"] = "ignore"  # NVRx's pynvml import warns on every start
    anchors.missing("torchft", "not a launcher for this unmodified script: its job is a Lighthouse plus a "
                    "Manager in every replica (bench/recovery.py measures a torchft job)")
    print("PyTorch %s; anchor: %s\n" % (anchors.torch_version(python), anchors.torchrun_label(python)
                                        if have_anchor else "none"))
    print("time to first all_reduce (gloo, CPU), median of %d runs each\n" % args.runs)
    print("| workers | launcher + worker | median s | min..max s | vs torchrun |")
    print("|---:|---|---:|---:|---:|")
    for nproc in args.nproc:
        n = str(nproc)
        rows = []
        if have_anchor:
            rows.append(("torchrun + PyTorch script (anchor)",
                         anchors.torchrun(python) + ["--monitor_interval", "0.1", "--nproc_per_node", n, script]))
        if ft_python:
            rows.append(("NVRx ft_launcher + the same PyTorch script",
                         [os.path.join(os.path.dirname(ft_python), "ft_launcher"), "--monitor-interval", "0.1",
                          "--nproc-per-node", n, script]))
        rows.append(("ddprun + the same PyTorch script", [ddprun, "--nproc", n, script]))
        rows.append(("ddprun + C++ worker_lib", [ddprun, "--nproc", n, os.path.join(args.build, "first_allreduce_worker")]))
        results = [(name, time_runs(cmd, args.runs)) for name, cmd in rows]
        anchor = results[0][1][0] if have_anchor else None
        for name, (med, lo, hi) in results:
            ratio = "%.3f" % (med / anchor) if anchor else "ANCHOR MISSING"
            print("| %d | %s | %.3f | %.3f..%.3f | %s |" % (nproc, name, med, lo, hi, ratio), flush=True)
        if anchor:
            r = [t for name, t in results if name.startswith("ddprun + the same")][0][0] / anchor
            print("| %d | PyTorch script: ddprun / torchrun = %.3f, goal <= 0.7: %s | | | |" %
                  (nproc, r, "met" if r <= 0.7 else "NOT met"), flush=True)


if __name__ == "__main__":
    main()
