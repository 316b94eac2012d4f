#!/usr/bin/env python3
"""What `ddprun --trace` costs a training step: ddp_step_bench's per-step
time with recording off and on (DDPRUN_TRACE_FILE set for each rank), the
two runs alternating, median over --repeats launches each.

The ranks are started by hand, torchrun-style (RANK, WORLD_SIZE,
MASTER_ADDR/MASTER_PORT on a free port; rank 0 hosts the store), because
ddprun sets DDPRUN_TRACE_FILE itself and never passes one through.

    bench/trace_overhead.py [--build build/bin] [--ranks 2] [--repeats 5] [--steps 30]

Whole launches differ by more than 1% from one to the next on a small
machine, so the table also gives an estimate without that noise: the
records a step writes (counted in rank 0's trace file) times what one span
costs the training thread (trace_span_cost: off and on), over the step time.
"""
import argparse
import json
import os
import socket
import statistics
import struct
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(args, worker, trace_dir):
    port = free_port()
    procs = []
    for r in range(args.ranks):
        env = {k: v for k, v in os.environ.items() if not k.startswith("DDPRUN_")}
        env.update(RANK=str(r), WORLD_SIZE=str(args.ranks), LOCAL_RANK=str(r), LOCAL_WORLD_SIZE=str(args.ranks),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1",
                   DDPRUN_PROGRESS_BY_AGENT="1")
        if trace_dir:
            env["DDPRUN_TRACE_FILE"] = os.path.join(trace_dir, "attempt_0", "rank%d.trace" % r)
        procs.append(subprocess.Popen(worker, env=env, stdout=subprocess.PIPE, text=True))
    outs = [p.communicate()[0] for p in procs]
    if any(p.returncode for p in procs):
        raise RuntimeError("a rank failed: " + " ".join(worker))
    for line in outs[0].splitlines():
        if line.startswith("{"):
            return json.loads(line)["ms_per_step"]
    raise RuntimeError("no result from: " + " ".join(worker) + "\n" + outs[0])


def records_per_step(trace_file):
    """Valid records per recorded step in a trace file (channel/trace_format.h)."""
    with open(trace_file, "rb") as f:
        data = f.read()
    capacity, nxt = struct.unpack_from("<QQ", data, 32)
    records, steps = 0, 0
    for i in range(min(capacity, nxt)):
        phase, track, valid = struct.unpack_from("<HBB", data, 64 + 48 * i + 40)
        if valid:
            records += 1
            steps += phase == 1  # kStep
    return records / max(steps, 1)


def span_cost_ns(build):
    out = subprocess.run([os.path.join(build, "trace_span_cost")], check=True, capture_output=True, text=True)
    off, on = (float(x) for x in out.stdout.split())
    return off, on


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default=os.path.join(ROOT, "build", "bin"), help="folder with ddp_step_bench")
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--models", nargs="+", default=["cnn", "wide-mlp"])
    args = p.parse_args()
    off_ns, on_ns = span_cost_ns(args.build)
    print("one span costs the training thread %.2f ns off, %.1f ns on (trace_span_cost)" % (off_ns, on_ns))
    print("%-10s %-9s %12s %12s %8s %12s %12s %12s" % ("model", "sync", "off ms/step", "on ms/step", "on/off",
                                                     "records/step", "est. on", "est. off"))
    for model in args.models:
        for sync in ["bucketed", "naive"]:
            worker = [os.path.join(args.build, "ddp_step_bench"), "--model", model, "--sync", sync,
                      "--steps", str(args.steps), "--batch", str(args.batch)]
            off, on = [], []
            with tempfile.TemporaryDirectory(prefix="ddprun-trace-bench-") as tmp:
                for _ in range(args.repeats):
                    off.append(launch(args, worker, None))
                    on.append(launch(args, worker, tmp))
                per_step = records_per_step(os.path.join(tmp, "attempt_0", "rank0.trace"))
            a, b = statistics.median(off), statistics.median(on)
            # Estimated share of a step: records x the span's cost (on), or x
            # the disabled branch (off), over the median step time.
            est_on = per_step * on_ns / (a * 1e6)
            est_off = per_step * off_ns / (a * 1e6)
            print("%-10s %-9s %12.3f %12.3f %8.3f %12.1f %11.4f%% %11.5f%%" %
                  (model, sync, a, b, b / a, per_step, 100 * est_on, 100 * est_off))
            sys.stdout.flush()


if __name__ == "__main__":
    main()
