#!/usr/bin/env python3
"""Issue 10's benchmark: tokens/s and MFU of examples/gpt (C++, LibTorch,
worker_lib's DDP at world size 1) against the same model, batch, optimizer
and precision in PyTorch eager (bench/gpt_eager.py), in the same call, on the
same device. Prints a markdown table with the device named, the ratio
C++/PyTorch and the commands run. Each side runs --repeats times
(alternating); the table shows the median.

    bench/gpt_throughput.py --model tiny --steps 20                     # CPU smoke test
    bench/gpt_throughput.py --model small --device cuda --dtype bf16 \\
        --batch-size 16 --steps 30 --peak h100                          # the GPU table

--python picks the interpreter with torch (default /usr/bin/python3);
--build the build folder whose bin/gpt runs.
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cpu_name():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip() + " x%d" % os.cpu_count()
    except OSError:
        pass
    return platform.processor() or "cpu"


def run_json(cmd, out_json, env=None):
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.exit("failed (%d): %s\n%s%s" % (p.returncode, " ".join(cmd), p.stdout[-2000:], p.stderr[-2000:]))
    with open(out_json) as f:
        return json.load(f)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--python", default="/usr/bin/python3")
    ap.add_argument("--model", choices=["tiny", "small"], default="tiny")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=0)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--data", default="", help="a text file (default: the Debian corpus)")
    ap.add_argument("--peak-tflops", type=float, default=0)
    ap.add_argument("--peak", choices=["h100", "h200"], default=None)
    ap.add_argument("--repeats", type=int, default=1)
    args = ap.parse_args()

    common = ["--model", args.model, "--batch-size", str(args.batch_size), "--steps", str(args.steps),
              "--device", args.device, "--dtype", args.dtype]
    if args.seq_len:
        common += ["--seq-len", str(args.seq_len)]
    if args.data:
        common += ["--data", args.data]
    if args.peak:
        common += ["--peak", args.peak]
    elif args.peak_tflops:
        common += ["--peak-tflops", str(args.peak_tflops)]

    tmp = tempfile.mkdtemp(prefix="gpt-bench-")
    cpp_json, py_json = os.path.join(tmp, "cpp.json"), os.path.join(tmp, "py.json")
    cpp_cmd = [os.path.join(args.build, "bin", "gpt")] + common + ["--log-every", "1000000", "--summary-json", cpp_json]
    py_cmd = [args.python, os.path.join(ROOT, "bench", "gpt_eager.py")] + common + ["--json", py_json]
    cpp, py = [], []
    for _ in range(args.repeats):
        cpp.append(run_json(cpp_cmd, cpp_json))
        py.append(run_json(py_cmd, py_json))

    def med(rows, key):
        return statistics.median(r[key] for r in rows)

    device = py[0]["device"] if args.device == "cuda" else cpu_name()
    c_tps, p_tps = med(cpp, "tokens_per_s"), med(py, "tokens_per_s")
    has_peak = bool(args.peak or args.peak_tflops)
    mfu = lambda rows: "%.1f%%" % (100 * med(rows, "mfu")) if has_peak else "n/a"
    print("device: %s; model %s (%.1fM parameters, %.3g FLOPs/token), batch %d x seq %s, %s, %d steps "
          "(first untimed), median of %d" % (device, args.model, cpp[0]["params"] / 1e6, cpp[0]["flops_per_token"],
                                             args.batch_size, args.seq_len or "context", args.dtype, args.steps,
                                             args.repeats))
    print()
    print("| trainer | tokens/s | MFU | final loss |")
    print("|---|---|---|---|")
    print("| C++ examples/gpt (LibTorch, DDP ws=1) | %.0f | %s | %.3f |" % (c_tps, mfu(cpp), med(cpp, "final_loss")))
    print("| PyTorch eager %s (bench/gpt_eager.py) | %.0f | %s | %.3f |" % (py[0]["torch"], p_tps, mfu(py),
                                                                         med(py, "final_loss")))
    print("| ratio C++ / PyTorch | %.2fx | | |" % (c_tps / p_tps if p_tps else float("nan")))
    print()
    print("commands:\n  " + " ".join(cpp_cmd[:-2]) + "\n  " + " ".join(py_cmd[:-2]))


if __name__ == "__main__":
    main()
