#!/usr/bin/env python3
"""Recovery from SIGKILL of one of 4 workers, for ddprun running
examples/train (healing, its default: the survivors keep running and a
replacement takes the state from a peer; and restarting from a checkpoint,
--max-heals 0) and the same job as a PyTorch DDP script
(bench/recovery_torch.py), each with its default standbys and with
--no-standby, and that script healing through ddprun.Healer (--heal:
python/ddprun), and for the anchors users pick instead (bench/anchors.py),
all on PyTorch 2.x:

- torchrun 2.x (--monitor_interval 0.1) running that script, checkpoint
  every 10 steps like the rest (the "vs torchrun" column's reference);
- torchrun at its best: the same job with TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1
  in torchrun's environment, so that each restart's ranks meet in a store of
  their own instead of the rendezvous's shared TCP store, where the previous
  attempt's Gloo addresses still are (a summary line gives the ratios
  against this row too);
- NVRx's ft_launcher (nvidia-resiliency-ext) running it;
- torchft: the job as torchft writes it (bench/recovery_torchft.py): every
  worker a replica group of one under its own torchrun, the Lighthouse
  deciding quorums, survivors going on without the dead replica, which is
  restarted and heals from a peer (no checkpoint).

Measured: seconds from the kill to the first training step completed after
it (restart launchers: after the restart restored the checkpoint; torchft:
by the survivors), seconds to the dead worker's replacement stepping again,
and the steps done twice (the last done before the kill, plus the one in
flight, minus where the job went on from). The kill lands at step 155, mid
way between checkpoints, so restarts redo what an average failure costs.
Every launcher may restart 3 times. A run with no step within --budget
seconds of the kill, or whose launcher gives up, counts as no recovery
(torchrun 2.15's restarts of this job failed in every run here: the
restarted ranks' Gloo connects to the previous attempt's ports; the row with
TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 is the one that recovers). Then the
stall that checkpointing adds to a step (bench worker ddp_step_bench), for
the CNN, the 10M-parameter MLP and a 104M one: the training thread's time in
save() and waiting for the background copy (mean and median per checkpoint),
the copy's own time, and the steps right after a save (their forward and
backward ran beside the copy and the write) against the others. The limit
is zero: nothing changes the state between a save and the next optimizer
step. `--only-stall` runs that table alone.

    bench/recovery.py [--repeats 3] [--no-anchors]
"""
import argparse
import json
import os
import queue
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import anchors

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
STEP = re.compile(r"step (\d+) done at ([0-9.]+)")
RESUMED = re.compile(r"resumed from \S+ at step (\d+)")
FT_STEP = re.compile(r"replica (\d+) step (\d+) done at ([0-9.]+)")
FT_HEALED = re.compile(r"replica (\d+) healed at step (\d+) at ([0-9.]+)")


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


def cmdline(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def victim_of(pid, marker):
    """The last of pid's working children whose command line holds marker
    (a launcher's other children, such as NVRx's rank monitors, are spared)."""
    found = [c for c in working_children(pid) if marker in cmdline(c)]
    if not found:
        raise RuntimeError("no worker running %s under pid %d" % (marker, pid))
    return found[-1]


def stop(proc):
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


class Recovery:
    """One kill's figures: seconds to the job's next completed step, seconds
    to the replacement stepping, steps done twice."""

    def __init__(self, resumed, replaced, redone):
        self.resumed, self.replaced, self.redone = resumed, replaced, redone


def lines_of(proc):
    """A queue of proc's stdout lines, None at its end (read on a thread, so
    that a silent, hung job can be given up on)."""
    q = queue.Queue()

    def pump():
        for line in proc.stdout:
            q.put(line)
        q.put(None)
    threading.Thread(target=pump, daemon=True).start()
    return q


def next_line(lines, killed_at, budget, cmd):
    """The job's next stdout line, or None: no line within budget seconds of
    the kill, or the job ended after it (before it: an error)."""
    try:
        line = lines.get(timeout=None if killed_at is None else max(0.0, killed_at + budget - time.time()))
    except queue.Empty:
        return None
    if line is None and killed_at is None:
        raise RuntimeError("the job ended before the kill: " + " ".join(cmd))
    return line


def restart_once(cmd, marker, kill_at_step, budget, env=None):
    """A launcher that restarts the workers from the newest checkpoint. None
    when the job has no step done after the restore within budget seconds of
    the kill, or ends without one."""
    job = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, bufsize=1,
                           env=env)
    lines = lines_of(job)
    killed_at, last, resumed_step = None, None, None
    try:
        while True:
            line = next_line(lines, killed_at, budget, cmd)
            if line is None:
                return None  # no step after the kill in time, or it gave up (restarts used up)
            m = STEP.search(line)
            if killed_at is None:
                if m:
                    last = int(m.group(1))
                    if last >= kill_at_step:
                        victim = victim_of(job.pid, marker)
                        killed_at = time.time()
                        os.kill(victim, signal.SIGKILL)
            elif resumed_step is None:
                r = RESUMED.search(line)
                if r:
                    resumed_step = int(r.group(1))
            elif m:
                secs = float(m.group(2)) - killed_at
                return Recovery(secs, secs, last + 1 - resumed_step)
    finally:
        stop(job)


def heal_once(cmd, marker, kill_at_step, budget, env=None):
    """ddprun healing a program that can (ddp::Healer): the survivors keep
    their processes and go on once the replacement has the state from a
    peer. Rank 0's step lines go on; the step in flight is done again. The
    replacement steps together with the survivors (every step is a
    collective), so both times are the same. None when no step comes within
    budget seconds of the kill, or the job ends without one."""
    job = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, bufsize=1,
                           env=env)
    lines = lines_of(job)
    killed_at, last = None, None
    try:
        while True:
            line = next_line(lines, killed_at, budget, cmd)
            if line is None:
                return None
            m = STEP.search(line)
            if not m:
                continue
            if killed_at is None:
                last = int(m.group(1))
                if last >= kill_at_step:
                    victim = victim_of(job.pid, marker)
                    killed_at = time.time()
                    os.kill(victim, signal.SIGKILL)
            else:
                first = int(m.group(1))
                secs = float(m.group(2)) - killed_at
                # Went on from step first - 1: the steps after it that were
                # done before the kill are done again, and the one in flight.
                return Recovery(secs, secs, last + 1 - (first - 1))
    finally:
        stop(job)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchft_once(python, kill_at_step, logs, budget, replicas=4, victim=3):
    """torchft: replicas of one worker each; the last one is killed, its
    torchrun restarts it and it heals from a peer. Its and the Lighthouse's
    logs go to the folder logs."""
    bindir = os.path.dirname(python)
    port = free_port()
    lighthouse = subprocess.Popen([os.path.join(bindir, "torchft_lighthouse"), "--bind", "[::]:%d" % port,
                                   "--min_replicas", "1", "--quorum_tick_ms", "100", "--join_timeout_ms", "10000"],
                                  stdout=subprocess.DEVNULL, stderr=open(os.path.join(logs, "lighthouse.log"), "w"))
    env = dict(os.environ, TORCHFT_LIGHTHOUSE="http://localhost:%d" % port, NUM_REPLICA_GROUPS=str(replicas),
               PYTHONWARNINGS="ignore")
    script = os.path.join(HERE, "recovery_torchft.py")
    groups = []
    lines = queue.Queue()

    def pump(r, proc):
        for line in proc.stdout:
            lines.put((r, line, time.time()))
        lines.put((r, None, time.time()))

    try:
        for r in range(replicas):
            proc = subprocess.Popen([python, "-m", "torch.distributed.run", "--nproc_per_node", "1", "--max_restarts",
                                     "3", "--monitor_interval", "0.1", "--master_port", str(free_port()), script,
                                     "--steps", str(kill_at_step + 200)],
                                    stdout=subprocess.PIPE, stderr=open(os.path.join(logs, "replica%d.log" % r), "w"),
                                    text=True, bufsize=1, env=dict(env, REPLICA_GROUP_ID=str(r)))
            groups.append(proc)
            threading.Thread(target=pump, args=(r, proc), daemon=True).start()
        killed_at, last, resumed, replaced, first_after = None, None, None, None, None
        deadline = time.time() + 600
        while time.time() < deadline:
            try:
                r, line, _ = lines.get(timeout=max(0.0, deadline - time.time()))
            except queue.Empty:
                return None
            if line is None:
                if r != victim:
                    raise RuntimeError("torchft replica %d ended before recovering (logs in %s)" % (r, logs))
                continue
            m = FT_STEP.search(line)
            h = FT_HEALED.search(line)
            if killed_at is None:
                if m and int(m.group(1)) == 0:
                    last = int(m.group(2))
                    if last >= kill_at_step:
                        os.kill(victim_of(groups[victim].pid, "recovery_torchft.py"), signal.SIGKILL)
                        killed_at = time.time()
                        deadline = killed_at + budget
                continue
            if m and int(m.group(1)) == 0 and resumed is None:
                resumed, first_after = float(m.group(3)) - killed_at, int(m.group(2))
            if h and int(h.group(1)) == victim:
                replaced = float(h.group(3)) - killed_at
            if resumed is not None and replaced is not None:
                return Recovery(resumed, replaced, last + 1 - (first_after - 1))
        raise RuntimeError("torchft did not reach the kill within 600 s")
    finally:
        for proc in groups:
            stop(proc)
        stop(lighthouse)


def measure(once, repeats):
    runs = []
    for _ in range(repeats):
        ckpt = tempfile.mkdtemp(prefix="ddprun-recovery-")
        try:
            runs.append(once(ckpt))
        finally:
            shutil.rmtree(ckpt, ignore_errors=True)
    return runs


def stall(args, model, every, ckpt, steps):
    cmd = [os.path.join(args.build, "ddprun"), "--nproc", "4", "--no-standby",
           os.path.join(args.build, "ddp_step_bench"), "--model", model, "--steps", str(steps),
           "--checkpoint-dir", ckpt, "--checkpoint-every", str(every)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    for line in out.splitlines():
        if line.startswith("[rank0]:{"):
            return json.loads(line[len("[rank0]:"):])
    raise RuntimeError(out)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--stall-steps", type=int, default=30)
    p.add_argument("--kill-at-step", type=int, default=155,
                   help="mid way between checkpoints, late enough that Python standbys (3 s after the start) are warm")
    p.add_argument("--no-stall", action="store_true", help="skip the checkpoint-stall table")
    p.add_argument("--only-stall", action="store_true", help="the checkpoint-stall table alone")
    p.add_argument("--no-anchors", action="store_true", help="ddprun's rows only")
    p.add_argument("--budget", type=float, default=120, help="seconds after the kill before a run counts as no recovery")
    p.add_argument("--build", default=os.path.join(ROOT, "build", "bin"))
    p.add_argument("--python", default=None, help="the Python with PyTorch 2.x (build/torch2-venv's)")
    args = p.parse_args()
    if args.only_stall:
        stall_table(args)
        return 0

    python = anchors.torch2_python(args.python)
    if not python:
        anchors.missing("PyTorch 2.x", "build/torch2-venv is missing (scripts/setup-torch2.sh); the script rows "
                        "run on /usr/bin/python3 (1.13) and no anchor runs")
        python = "/usr/bin/python3"
    os.environ["DDPRUN_PYTHON"] = python
    k = args.kill_at_step
    train = lambda ckpt: [os.path.join(args.build, "train"), "--epochs", "3", "--checkpoint-dir", ckpt,
                          "--checkpoint-every", "10", "--print-steps"]
    script = lambda ckpt: [os.path.join(HERE, "recovery_torch.py"), "--checkpoint-dir", ckpt,
                           "--checkpoint-every", "10"]
    ddprun = lambda flags, job: [os.path.join(args.build, "ddprun"), "--nproc", "4", "--max-restarts", "3"] + flags + job
    # Standbys are on by default with --max-restarts; --no-standby rows show
    # what they save.
    b = args.budget
    # train heals by default (ddp::Healer): its restart rows turn heals off.
    rows = [("ddprun + train (C++), default (heals: the survivors go on, a replacement takes the state from a peer)",
             lambda c: heal_once(ddprun([], train(c)), "train", k, b)),
            ("ddprun --max-heals 0 + train (C++), restart from checkpoint (standby)",
             lambda c: restart_once(ddprun(["--max-heals", "0"], train(c)), "train", k, b)),
            ("ddprun --max-heals 0 --no-standby + train (C++)",
             lambda c: restart_once(ddprun(["--max-heals", "0", "--no-standby"], train(c)), "train", k, b)),
            ("ddprun + PyTorch DDP script with ddprun.Healer (heals: the survivors go on, a warm standby takes the "
             "state from a peer)",
             lambda c: heal_once(ddprun([], script(c) + ["--heal"]), "recovery_torch.py", k, b)),
            ("ddprun + PyTorch DDP script, default (standby)",
             lambda c: restart_once(ddprun([], script(c)), "recovery_torch.py", k, b)),
            ("ddprun --no-standby + PyTorch DDP script",
             lambda c: restart_once(ddprun(["--no-standby"], script(c)), "recovery_torch.py", k, b))]
    notes = []
    anchor_name, best_name = None, None
    if not args.no_anchors and python != "/usr/bin/python3":
        torchrun = lambda c: anchors.torchrun(python) + ["--monitor_interval", "0.1", "--max_restarts", "3",
                                                         "--nproc_per_node", "4"] + script(c)
        anchor_name = "%s + PyTorch DDP script (anchor)" % anchors.torchrun_label(python)
        rows.append((anchor_name, lambda c: restart_once(torchrun(c), "recovery_torch.py", k, b)))
        # torchrun at its best: restarted ranks do not share the rendezvous's
        # TCP store, where the previous attempt's Gloo addresses are.
        best_name = ("%s + TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 + PyTorch DDP script (anchor at its best: each "
                     "restart's ranks get a store of their own)" % anchors.torchrun_label(python))
        unshared = dict(os.environ, TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1")
        rows.append((best_name, lambda c: restart_once(torchrun(c), "recovery_torch.py", k, b, unshared)))
        ft_python, why = anchors.anchors_python()
        if ft_python:
            quiet = dict(os.environ, PYTHONWARNINGS="ignore")
            rows.append(("NVRx %s ft_launcher + PyTorch DDP script" % anchors.package_version(
                ft_python, "nvidia-resiliency-ext"), lambda c: restart_once(
                    [os.path.join(os.path.dirname(ft_python), "ft_launcher"), "--monitor-interval", "0.1",
                     "--max-restarts", "3", "--nproc-per-node", "4"] + script(c), "recovery_torch.py", k, b, quiet)))
            rows.append(("torchft %s (Lighthouse, 4 replica groups of 1, healing from a peer)" %
                         anchors.package_version(ft_python, "torchft"), lambda c: torchft_once(ft_python, k, c, b)))
        else:
            notes.append(anchors.missing("torchft and NVRx", why))
        notes.append(anchors.missing(
            "NVRx in-process restart", "it restarts the training function inside processes that are still alive, "
            "so a SIGKILLed worker is ft_launcher's to replace (the row above); and it needs NCCL (its usage guide: "
            "PyTorch >= 2.5.1 and NCCL >= 2.26.2), which this machine without a GPU cannot run"))
    print("## Recovery: SIGKILL of 1 of 4 workers at step %d (checkpoint every 10 steps where one is used), "
          "median of %d, PyTorch %s; a run with no step within %d s of the kill counts as none\n"
          % (k, args.repeats, anchors.torch_version(python), b))
    print("| launcher + job | kill -> next step, median s | min..max s | kill -> replacement stepping, s "
          "| steps done twice | recovered | vs torchrun |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    results = {}
    for name, once in rows:
        runs = measure(once, args.repeats)
        results[name] = runs
        print("measured %s: %s" % (name, ", ".join("none" if r is None else "%.2f" % r.resumed for r in runs)),
              file=sys.stderr, flush=True)

    def med(runs, field="resumed"):
        # A run that did not recover counts as the budget's worth (the median
        # says "none" once half did not).
        values = [b + 1 if r is None else getattr(r, field) for r in runs]
        m = statistics.median(values)
        return None if m > b else m

    anchor = med(results[anchor_name]) if anchor_name else None
    for name, _ in rows:
        runs = results[name]
        ok = [r for r in runs if r is not None]
        m = med(runs)
        if not anchor or m is None:
            ratio = "NO ANCHOR" if not anchor_name else ("-" if m is None else "torchrun did not recover")
        else:
            ratio = "1/%.1f" % (anchor / m) if m <= anchor else "%.1fx" % (m / anchor)
        fmt = lambda v: "none in %d s" % b if v is None else "%.2f" % v
        print("| %s | %s | %s | %s | %s | %d of %d | %s |" % (
            name, fmt(m), "%.2f..%.2f" % (min(r.resumed for r in ok), max(r.resumed for r in ok)) if ok else "-",
            fmt(med(runs, "replaced")), "/".join("-" if r is None else str(r.redone) for r in runs),
            len(ok), len(runs), ratio))
    for note in notes:
        print("\n" + note)
    cpp, py = med(results[rows[0][0]]), med(results[rows[4][0]])
    if anchor and cpp and py:
        print("\nC++ default / torchrun = 1/%.1f (goal <= 1/10: %s); PyTorch script default / torchrun = 1/%.1f "
              "(goal <= 1/3: %s)" % (anchor / cpp, "met" if cpp <= anchor / 10 else "NOT met", anchor / py,
                                    "met" if py <= anchor / 3 else "NOT met"))
    if best_name:
        best = med(results[best_name])
        vs = lambda m: "-" if m is None else ("1/%.1f" % (best / m) if m <= best else "%.1fx" % (m / best))
        if best is None:
            print("\ntorchrun with TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 did not recover in %d s either: no ratio "
                  "against it" % b)
        else:
            print("\nAgainst torchrun at its best (TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1, %.2f s): C++ default = %s "
                  "(goal <= 1/10: %s); PyTorch script default = %s (goal <= 1/3: %s); PyTorch script with "
                  "ddprun.Healer = %s" % (
                      best, vs(cpp), "met" if cpp is not None and cpp <= best / 10 else "NOT met", vs(py),
                      "met" if py is not None and py <= best / 3 else "NOT met", vs(med(results[rows[3][0]]))))

    healed = results[rows[3][0]]
    ph = med(healed)
    if ph is not None:
        print("\nPyTorch script with ddprun.Healer: %.2f s to the next step, steps done twice %s (goal <= 0.3 s and "
              "1 step: %s)" % (ph, "/".join("-" if r is None else str(r.redone) for r in healed),
                               "met" if ph <= 0.3 and all(r is not None and r.redone <= 1 for r in healed)
                               else "NOT met"))

    if args.no_stall:
        return 0
    stall_table(args)
    return 0


def stall_table(args):
    print("\n## Checkpoint stall, 4 ranks (no standby), %d steps (the 104M MLP: %d)\n" %
          (args.stall_steps, max(10, args.stall_steps // 2)))
    print("| model | checkpoint every | ms/step | stall per checkpoint ms, mean | median | stall / step "
          "| background copy ms | step after a save ms | other steps ms | step time vs none |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for model in ("cnn", "wide-mlp", "mlp-100m"):
        steps = args.stall_steps if model != "mlp-100m" else max(10, args.stall_steps // 2)
        ckpt = tempfile.mkdtemp(prefix="ddprun-stall-")
        try:
            base = stall(args, model, 0, ckpt, steps)["ms_per_step"]
            print("| %s | never | %.1f | - | - | - | - | - | - | 1.00 |" % (model, base), flush=True)
            # Every step only where the writer can keep up with it at all.
            for every in (10, 1) if model != "mlp-100m" else (5,):
                r = stall(args, model, every, ckpt, steps)
                print("| %s | %d | %.1f | %.2f | %.2f | %.2f%% | %.1f | %.1f | %.1f | %.2f |" % (
                    model, every, r["ms_per_step"], r["checkpoint_stall_ms"], r["checkpoint_stall_median_ms"],
                    100 * r["checkpoint_stall_ms"] / base, r["checkpoint_copy_ms"], r["ms_after_save"],
                    r["ms_other"], r["ms_per_step"] / base), flush=True)
        finally:
            shutil.rmtree(ckpt, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
