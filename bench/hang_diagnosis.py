#!/usr/bin/env python3
"""What explaining a hang costs: how long ddprun takes, once a worker is
found hung, to take every worker's stacks and name the rank the others wait
for (before it kills anything); and what the flight record costs each
collective, against the cheapest all_reduce measured in the same run.

    bench/hang_diagnosis.py [--build build/bin] [--runs 5] [--hang-timeout 2]

The job: build/bin/hang_check (rank 1 blocks in a function of its own at
step 5 while the others wait in all_reduce). The anchor, torchrun, has no
row of its own: it prints no stack on a hang (pytorch#122694) and kills
only when a collective times out (30 min by default).
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STAMP = re.compile(r"^\[ddprun (\d+):(\d+):(\d+)\.(\d+)\] ")


def seconds(line):
    m = STAMP.match(line)
    if not m:
        return None
    h, mi, s, ms = (int(x) for x in m.groups())
    return h * 3600 + mi * 60 + s + ms / 1000.0


def one_hang(ddprun, worker, ranks, hang_timeout):
    """(silent s, collection ms, verdict ok) of one run."""
    p = subprocess.run([ddprun, "--nproc", str(ranks), "--hang-timeout", str(hang_timeout), worker,
                        "--stuck", "1", "--at", "5"], capture_output=True, text=True, timeout=300)
    asked = said = None
    silent = None
    for line in p.stderr.splitlines():
        if "asking" in line and "for their stacks" in line:
            asked = seconds(line)
        elif "] warning: hang: " in line:
            said = seconds(line)
        m = re.search(r"no heartbeat for ([0-9.]+) s", line)
        if m:
            silent = float(m.group(1))
        m = re.search(r"every rank's stacks, all threads: (\S+)", line)
        if m and os.path.exists(m.group(1)):
            os.remove(m.group(1))
    if asked is None or said is None or silent is None:
        raise RuntimeError("no hang report from ddprun:\n" + p.stderr)
    ok = "rank 1 never entered it" in p.stderr and "rank 1 is in: stuck_outside_any_collective" in p.stderr
    return silent, (said - asked) * 1000.0, ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build", "bin"))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--hang-timeout", type=float, default=2.0)
    args = ap.parse_args()
    ddprun = os.path.join(args.build, "ddprun")
    worker = os.path.join(args.build, "hang_check")

    print("anchor: torchrun prints no stack on a hang and kills only when a collective times out "
          "(30 min by default): NO ROW, nothing to compare with", file=sys.stderr)
    print("| ranks | hang found after (s) | stacks + verdict (ms, median of %d) | max (ms) | verdict right |" % args.runs)
    print("| --- | --- | --- | --- | --- |")
    for ranks in (2, 4):
        runs = [one_hang(ddprun, worker, ranks, args.hang_timeout) for _ in range(args.runs)]
        taken = [r[1] for r in runs]
        print("| %d | %.1f | %.0f | %.0f | %d of %d |" % (
            ranks, statistics.median(r[0] for r in runs), statistics.median(taken), max(taken),
            sum(r[2] for r in runs), len(runs)))

    ns = float(subprocess.run([os.path.join(args.build, "flight_record_cost")], capture_output=True, text=True,
                              check=True).stdout.split()[1])
    out = subprocess.run([ddprun, "--nproc", "2", os.path.join(args.build, "allreduce_worker"), "--seconds", "1",
                          "4096"], capture_output=True, text=True, check=True).stdout
    us = None
    for line in out.splitlines():
        if "{" in line:
            us = json.loads(line[line.index("{"):])["us"]
    print()
    print("| flight record per collective (ns) | 4 KB shared-memory all_reduce, 2 ranks (us) | share |")
    print("| --- | --- | --- |")
    print("| %.0f | %.2f | %.1f%% |" % (ns, us, 100.0 * ns / (us * 1000.0)))


if __name__ == "__main__":
    main()
