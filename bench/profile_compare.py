#!/usr/bin/env python3
"""Where two trainers' GPU time goes: reads two Chrome traces (examples/gpt
--profile and bench/gpt_eager.py --profile, the same steps of the same model)
and prints, per step, each side's GPU kernel time and launches, and the
kernels whose time differs most between them.

    bench/profile_compare.py cpp.json eager.json --steps 3 [--top 20]
"""
import argparse
import collections
import json
import sys


def kernels(path, cats):
    with open(path) as f:
        d = json.load(f)
    events = d["traceEvents"] if isinstance(d, dict) else d
    by_name = collections.defaultdict(lambda: [0.0, 0])  # name -> [us, count]
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in cats:
            k = by_name[e.get("name", "?")]
            k[0] += float(e.get("dur", 0))
            k[1] += 1
    return by_name


def short(name, width=110):
    return name if len(name) <= width else name[:width - 3] + "..."


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--names", default="C++,eager", help="the two sides' names [C++,eager]")
    ap.add_argument("--steps", type=int, default=3, help="steps in each trace [3]")
    ap.add_argument("--top", type=int, default=20)
    ap.add_argument("--categories", default="kernel,gpu_memcpy,gpu_memset",
                    help="trace event categories counted [GPU kernels, copies, sets]; cpu_op reads a CPU run")
    args = ap.parse_args()
    na, nb = args.names.split(",")
    cats = set(args.categories.split(","))
    ka, kb = kernels(args.a, cats), kernels(args.b, cats)
    if not ka or not kb:
        sys.exit("no events of %s in %s (a CPU-only trace? --categories cpu_op)" % (args.categories, args.a if not ka else args.b))
    n = args.steps
    print("| per step | %s | %s |" % (na, nb))
    print("|---|---|---|")
    print("| time in those events (ms) | %.2f | %.2f |" % (
        sum(v[0] for v in ka.values()) / n / 1e3, sum(v[0] for v in kb.values()) / n / 1e3))
    print("| launches | %d | %d |" % (sum(v[1] for v in ka.values()) / n, sum(v[1] for v in kb.values()) / n))
    print("| distinct kernels | %d | %d |" % (len(ka), len(kb)))
    print()
    print("Kernels whose time differs most (ms per step; launches per step):")
    print()
    print("| kernel | %s ms | %s ms | difference | %s launches | %s launches |" % (na, nb, na, nb))
    print("|---|---|---|---|---|---|")
    names = set(ka) | set(kb)
    rows = sorted(names, key=lambda k: -abs(ka.get(k, [0, 0])[0] - kb.get(k, [0, 0])[0]))
    for k in rows[:args.top]:
        a, b = ka.get(k, [0.0, 0]), kb.get(k, [0.0, 0])
        print("| `%s` | %.3f | %.3f | %+.3f | %d | %d |" % (short(k), a[0] / n / 1e3, b[0] / n / 1e3,
                                                         (a[0] - b[0]) / n / 1e3, a[1] / n, b[1] / n))


if __name__ == "__main__":
    main()
