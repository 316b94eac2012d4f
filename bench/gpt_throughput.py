#!/usr/bin/env python3
"""Issue 10's benchmark: tokens/s and MFU of examples/gpt (C++, LibTorch,
worker_lib's DDP at world size 1) against the same model, batch, optimizer
and precision in PyTorch eager (bench/gpt_eager.py), in the same call, on the
same device. Prints a markdown table with the device named, the ratio
C++/PyTorch and the commands run. Each side runs --repeats times
(alternating); the table shows the median.

    bench/gpt_throughput.py --model tiny --steps 20                     # CPU smoke test
    bench/gpt_throughput.py --model small --device cuda --dtype bf16 \\
        --batch-size 16 --steps 30 --peak h100 --cpp-optimizers plain,fused,fused-graph \\
        --eager-variants default,fused,compile --breakdown             # the GPU table

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
    """The run's figures, or the reason it failed (printed loudly in the table)."""
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        print("FAILED (%d): %s\n%s%s" % (p.returncode, " ".join(cmd), p.stdout[-2000:], p.stderr[-2000:]),
              file=sys.stderr)
        lines = [l for l in (p.stderr + p.stdout).strip().splitlines() if l.strip()]
        return {"error": "exit %d: %s" % (p.returncode, lines[-1][:160] if lines else "no output")}
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
    ap.add_argument("--cpp-optimizers", default="auto",
                    help="comma-separated gpt --optimizer values, one C++ row each (auto, plain, foreach, fused; "
                         "fused-graph: fused with the step captured as a CUDA graph)")
    ap.add_argument("--eager-variants", default="default",
                    help="comma-separated eager rows: default (foreach AdamW), fused (AdamW(fused=True)), "
                         "compile (torch.compile'd model); the first is the anchor of the ratios")
    ap.add_argument("--breakdown", action="store_true",
                    help="one more run of each row with the device waited for after each phase: "
                         "ms per step of data, forward, backward, clip, optimizer")
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
    out_json = os.path.join(tmp, "run.json")
    rows = []  # (name, command)
    for o in [v for v in args.cpp_optimizers.split(",") if v]:
        # "fused-graph": the fused AdamW and the whole step captured as a
        # CUDA graph (ddp::CapturedStep); the others run kernel by kernel.
        graph = o.endswith("-graph")
        name = "C++ examples/gpt, %s AdamW%s" % (o[:-len("-graph")] if graph else o,
                                                 ("" if not graph else ", step as a CUDA graph" if args.device == "cuda"
                                                  else ", through ddp::CapturedStep (eager off the GPU)"))
        rows.append((name, [os.path.join(args.build, "bin", "gpt")] + common +
                     ["--optimizer", o[:-len("-graph")] if graph else o,
                      "--capture", ("on" if args.device == "cuda" else "auto") if graph else "off",
                      "--log-every", "1000000", "--summary-json", out_json]))
    eager_flags = {"default": [], "fused": ["--fused"], "compile": ["--compile"]}
    for v in [v for v in args.eager_variants.split(",") if v]:
        if v not in eager_flags:
            sys.exit("--eager-variants: unknown variant %r (expected %s)" % (v, ", ".join(eager_flags)))
        rows.append(("PyTorch eager, %s" % {"default": "foreach AdamW", "fused": "fused AdamW",
                                            "compile": "torch.compile'd model"}[v],
                     [args.python, os.path.join(ROOT, "bench", "gpt_eager.py")] + common + eager_flags[v] +
                     ["--json", out_json]))
    anchor = next(i for i, (n, _) in enumerate(rows) if n.startswith("PyTorch")) if any(
        n.startswith("PyTorch") for n, _ in rows) else None

    results = [[] for _ in rows]
    for rep in range(args.repeats):  # alternating, so drift hits every row alike
        for i, (_, cmd) in enumerate(rows):
            if rep > 0 and "--compile" in cmd:
                continue  # its compile costs a minute: one run
            results[i].append(run_json(cmd, out_json))
    breakdowns = []
    if args.breakdown:
        for _, cmd in rows:  # a compiled model's breakdown would cost its compile again: not run
            if "--compile" in cmd:
                breakdowns.append({"error": "not measured (torch.compile)"})
            elif "--capture" in cmd and cmd[cmd.index("--capture") + 1] != "off":
                breakdowns.append({"error": "not measured (the step runs as one through ddp::CapturedStep: see the profile)"})
            else:
                breakdowns.append(run_json(cmd + ["--breakdown"], out_json))

    def med(rs, key):
        ok = [r[key] for r in rs if "error" not in r]
        return statistics.median(ok) if ok else None

    ok_rows = [r for rs in results for r in rs if "error" not in r]
    torch_version = next((r["torch"] for rs in results for r in rs if "torch" in r), "?")
    device = (next((r["device"] for r in ok_rows if "torch" in r), "cuda") if args.device == "cuda"
              else cpu_name())
    params = next((r["params"] for r in ok_rows), 0)
    fpt = next((r["flops_per_token"] for r in ok_rows), 0)
    has_peak = bool(args.peak or args.peak_tflops)
    print("device: %s; PyTorch %s; model %s (%.1fM parameters, %.3g FLOPs/token), batch %d x seq %s, %s, "
          "%d steps (first untimed; 3 with torch.compile), median of %d (torch.compile: 1)" %
          (device, torch_version, args.model, params / 1e6, fpt, args.batch_size, args.seq_len or "context",
           args.dtype, args.steps, args.repeats))
    print()
    anchor_tps = med(results[anchor], "tokens_per_s") if anchor is not None else None
    print("| trainer | tokens/s | MFU | final loss | ratio to %s |" % (rows[anchor][0] if anchor is not None else "-"))
    print("|---|---|---|---|---|")
    for (name, _), rs in zip(rows, results):
        tps = med(rs, "tokens_per_s")
        if tps is None:
            print("| %s | NOT RUN: %s | | | |" % (name, rs[0]["error"]))
            continue
        mfu = "%.1f%%" % (100 * med(rs, "mfu")) if has_peak else "n/a"
        ratio = "%.2fx" % (tps / anchor_tps) if anchor_tps else "n/a"
        print("| %s | %.0f | %s | %.3f | %s |" % (name, tps, mfu, med(rs, "final_loss"), ratio))
    if breakdowns:
        phases = ["data", "forward", "backward", "clip", "optimizer"]
        print()
        print("Per step, ms, the device waited for after each phase (one run each):")
        print()
        print("| trainer | " + " | ".join(phases) + " | sum |")
        print("|---|" + "---|" * (len(phases) + 1))
        for (name, _), b in zip(rows, breakdowns):
            if "error" in b or not b.get("breakdown_ms"):
                print("| %s | NOT RUN: %s |" % (name, b.get("error", "no breakdown in its figures")))
                continue
            ms = b["breakdown_ms"]
            print("| %s | %s | %.2f |" % (name, " | ".join("%.2f" % ms.get(k, 0) for k in phases),
                                          sum(ms.get(k, 0) for k in phases)))
    print()
    print("commands:\n  " + "\n  ".join(" ".join(c[:-2]) for _, c in rows))
    if any("error" in r for rs in results for r in rs) or any(
            "error" in b and "not measured" not in b["error"] for b in breakdowns):
        sys.exit(1)


if __name__ == "__main__":
    main()
