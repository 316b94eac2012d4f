#!/usr/bin/env python3
"""Recovery time: from SIGKILL of one of 4 workers to the first training step
completed after the restart restored the checkpoint, for ddprun running
examples/train and the same job as a PyTorch DDP script
(bench/recovery_torch.py), each with its default standbys and with
--no-standby, and for torchrun (the anchor, --monitor_interval 0.1,
--max_restarts 1) running that script; all checkpoint every 10 steps. Then the
stall that checkpointing adds to a step (bench worker ddp_step_bench).

    bench/recovery.py [--repeats 3]
"""
import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
STEP = re.compile(r"step (\d+) done at ([0-9.]+)")


def children(pid):
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry) as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        if int(fields[1]) == pid and fields[0] != "Z":
            out.append(int(entry))
    return sorted(out)


def fd_targets(pid):
    """What pid's file descriptors point at ("pipe:[123]", paths...)."""
    out = {}
    try:
        for fd in os.listdir("/proc/%d/fd" % pid):
            try:
                out[int(fd)] = os.readlink("/proc/%d/fd/%s" % (pid, fd))
            except OSError:
                pass
    except OSError:
        pass
    return out


def working_children(pid):
    """ddprun's children that are workers, not standbys still waiting for a
    restart: a waiting standby's fd 3 is a pipe whose other end ddprun holds
    (the control pipe, closed once the standby is released)."""
    held = set(t for t in fd_targets(pid).values() if t.startswith("pipe:"))
    return [c for c in children(pid) if fd_targets(c).get(3) not in held]


def recovery_once(cmd, kill_at_step=40):
    """Seconds from the SIGKILL to the first step done after 'resumed from'."""
    job = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, bufsize=1)
    killed_at = None
    resumed = False
    try:
        for line in job.stdout:
            if killed_at is None:
                m = STEP.search(line)
                if m and int(m.group(1)) >= kill_at_step:
                    victim = working_children(job.pid)[-1]
                    killed_at = time.time()
                    os.kill(victim, signal.SIGKILL)
            elif "resumed from" in line:
                resumed = True
            elif resumed:
                m = STEP.search(line)
                if m:
                    return float(m.group(2)) - killed_at
        raise RuntimeError("the job ended before recovering: " + " ".join(cmd))
    finally:
        job.send_signal(signal.SIGTERM)
        try:
            job.wait(timeout=30)
        except subprocess.TimeoutExpired:
            job.kill()
            job.wait()


def median_recovery(make_cmd, repeats, kill_at_step):
    times = []
    for _ in range(repeats):
        ckpt = tempfile.mkdtemp(prefix="ddprun-recovery-")
        try:
            times.append(recovery_once(make_cmd(ckpt), kill_at_step))
        finally:
            shutil.rmtree(ckpt, ignore_errors=True)
    return statistics.median(times), min(times), max(times)


def stall(args, model, every, ckpt):
    cmd = [os.path.join(args.build, "ddprun"), "--nproc", "4", os.path.join(args.build, "ddp_step_bench"),
           "--model", model, "--steps", str(args.stall_steps), "--checkpoint-dir", ckpt,
           "--checkpoint-every", str(every)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    for line in out.splitlines():
        if line.startswith("[rank0]:{"):
            return json.loads(line[len("[rank0]:"):])
    raise RuntimeError(out)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--stall-steps", type=int, default=30)
    p.add_argument("--kill-at-step", type=int, default=150,
                   help="late enough that Python standbys (3 s after the start) are warm")
    p.add_argument("--no-stall", action="store_true", help="skip the checkpoint-stall table")
    p.add_argument("--build", default=os.path.join(ROOT, "build", "bin"))
    p.add_argument("--torchrun", default=os.path.join(ROOT, "..", "shared", "anchors", "torchrun-compat.py"))
    p.add_argument("--python", default="/usr/bin/python3", help="the Python with torch 1.13 (python3-torch)")
    args = p.parse_args()

    train = lambda ckpt: [os.path.join(args.build, "train"), "--epochs", "3", "--checkpoint-dir", ckpt,
                          "--checkpoint-every", "10", "--print-steps"]
    script = lambda ckpt: [os.path.join(HERE, "recovery_torch.py"), "--checkpoint-dir", ckpt,
                           "--checkpoint-every", "10"]
    ddprun = lambda flags, job: lambda ckpt: [os.path.join(args.build, "ddprun"), "--nproc", "4",
                                              "--max-restarts", "1"] + flags + job(ckpt)
    theirs = lambda ckpt: [args.python, args.torchrun, "--monitor_interval", "0.1", "--max_restarts", "1",
                           "--nproc_per_node", "4"] + script(ckpt)
    os.environ["DDPRUN_PYTHON"] = args.python
    # Standbys are on by default with --max-restarts; --no-standby rows show
    # what they save.
    rows = [("ddprun + train (C++), default (standby)", ddprun([], train)),
            ("ddprun --no-standby + train (C++)", ddprun(["--no-standby"], train)),
            ("ddprun + PyTorch DDP script, default (standby)", ddprun([], script)),
            ("ddprun --no-standby + PyTorch DDP script", ddprun(["--no-standby"], script))]
    if os.path.exists(args.torchrun):
        rows.append(("torchrun + PyTorch DDP script (anchor)", theirs))
    else:
        print("\n*** ANCHOR MISSING: torchrun not found at %s; no ratios ***\n" % args.torchrun, file=sys.stderr)
    print("## Recovery: SIGKILL of 1 of 4 workers at step %d -> first step after restore (checkpoint every 10 "
          "steps), median of %d\n" % (args.kill_at_step, args.repeats))
    print("| launcher + job | median s | min..max s | vs torchrun |")
    print("|---|---:|---:|---:|")
    results = []
    anchor = None
    for name, make in reversed(rows):  # the anchor first, so each row can show its ratio
        med, lo, hi = median_recovery(make, args.repeats, args.kill_at_step)
        results.append((name, med, lo, hi))
        if name.startswith("torchrun"):
            anchor = med
    for name, med, lo, hi in reversed(results):
        ratio = "1/%.1f" % (anchor / med) if anchor else "ANCHOR MISSING"
        print("| %s | %.2f | %.2f..%.2f | %s |" % (name, med, lo, hi, ratio))
    if anchor:
        cpp, py = results[-1][1], results[-3][1]
        print("\nC++ default / torchrun = 1/%.1f (goal <= 1/10: %s); PyTorch script default / torchrun = 1/%.1f "
              "(goal <= 1/3: %s)" % (anchor / cpp, "met" if cpp <= anchor / 10 else "NOT met", anchor / py,
                                    "met" if py <= anchor / 3 else "NOT met"))

    if args.no_stall:
        return 0
    print("\n## Checkpoint stall, 4 ranks, %d steps\n" % args.stall_steps)
    print("| model | checkpoint every | ms/step | stall per checkpoint ms | stall / step | step time vs none |")
    print("|---|---:|---:|---:|---:|---:|")
    for model in ("cnn", "wide-mlp"):
        ckpt = tempfile.mkdtemp(prefix="ddprun-stall-")
        try:
            base = stall(args, model, 0, ckpt)["ms_per_step"]
            print("| %s | never | %.1f | - | - | 1.00 |" % (model, base))
            for every in (10, 1):
                r = stall(args, model, every, ckpt)
                print("| %s | %d | %.1f | %.1f | %.1f%% | %.2f |" % (
                    model, every, r["ms_per_step"], r["checkpoint_stall_ms"],
                    100 * r["checkpoint_stall_ms"] / base, r["ms_per_step"] / base), flush=True)
        finally:
            shutil.rmtree(ckpt, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
