#!/usr/bin/env python3
"""Gray failures, measured: how long the default (learned) hang timeout
takes to catch a rank that stops, how many steps a slow rank costs before
it is named and replaced, the job's pace before, during and after, and
false alarms over a long run on a loaded machine.

    bench/gray_failures.py [--build build/bin] [--runs 3] [--steps 10000]

- Hang: the default job (train) and gpt (tiny), 2 ranks, no flag; 5 s
  after rank 0 passed step 60, rank 1 is stopped (SIGSTOP). Timed from the
  stop to ddprun's "hung:" line.
- Straggler: train, 2 ranks; from step 40 rank 1 is stopped 5 ms of every
  15 ms (a noisy neighbour: it computes at about 1.5x the others' time).
  Steps until it is named, until it is replaced (--straggler-action
  replace), and rank 0's steps per second before, while slowed, and after,
  against --straggler-action warn (doing nothing).
- False alarms: hang_check, 2 ranks, 1 ms steps, --steps N under two CPU
  hogs, default flags: "hung" and "straggler" lines per 10,000 steps.

Anchors: torchrun kills a hung rank only when a collective times out (30
min by default) and names no straggler; NVRx's straggler detector is tried
on a PyTorch script where it runs (it wants CUDA; said loudly if not).
"""
import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import anchors  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Job:
    """ddprun running, its output lines timed as they arrive."""

    def __init__(self, argv, env=None):
        self.lines = []  # (monotonic s, stream, text)
        self.cv = threading.Condition()
        self.p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  env=dict(os.environ, **(env or {})))
        self.readers = [threading.Thread(target=self._read, args=(s, n), daemon=True)
                        for s, n in ((self.p.stdout, "out"), (self.p.stderr, "err"))]
        for r in self.readers:
            r.start()

    def _read(self, stream, name):
        for line in stream:
            with self.cv:
                self.lines.append((time.monotonic(), name, line.rstrip("\n")))
                self.cv.notify_all()

    def wait_for(self, pattern, timeout=300):
        """(time, match) of the first line matching pattern, or None when the job ends first."""
        rx = re.compile(pattern)
        seen = 0
        deadline = time.monotonic() + timeout
        with self.cv:
            while True:
                for t, _, text in self.lines[seen:]:
                    m = rx.search(text)
                    if m:
                        return t, m
                seen = len(self.lines)
                if self.p.poll() is not None and not any(r.is_alive() for r in self.readers):
                    return None
                if time.monotonic() > deadline:
                    return None
                self.cv.wait(0.2)

    def finish(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
        self.p.wait(timeout=120)
        for r in self.readers:
            r.join()
        return "\n".join(text for _, s, text in self.lines if s == "err")


def worker_pid(ddprun_pid, rank):
    """The pid of ddprun's worker of `rank` (not a standby)."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            stat = open("/proc/%s/stat" % pid).read()
            if int(stat[stat.rindex(")") + 2:].split()[1]) != ddprun_pid:
                continue
            env = open("/proc/%s/environ" % pid, "rb").read().split(b"\0")
        except OSError:
            continue
        if any(e.startswith(b"DDPRUN_STANDBY_FD=") for e in env):
            continue
        if b"RANK=%d" % rank in env:
            return int(pid)
    raise RuntimeError("no worker of rank %d under ddprun %d" % (rank, ddprun_pid))


def hang_detection(build, name, argv, step_rx):
    """(seconds from the stop to "hung:", the learned limit s, whether it stopped in an announced phase)."""
    job = Job([os.path.join(build, "ddprun"), "--nproc", "2"] + argv, {"DDPRUN_CPU_COMM": "shm"})
    try:
        if not job.wait_for(step_rx % 60):
            raise RuntimeError("%s never reached step 60:\n%s" % (name, job.finish()))
        # The first seconds of training are start-up, never judged (a worker
        # is watched once it showed 20 gaps after its first 3): train a while.
        time.sleep(5)
        victim = worker_pid(job.p.pid, 1)
        stopped = time.monotonic()
        os.kill(victim, signal.SIGSTOP)
        found = job.wait_for(r"hung: no heartbeat for ([0-9.]+) s( in a phase it announced)?[^(]*"
                             r"\(--hang-timeout auto: ([0-9.]+) s", timeout=600)
        if not found:
            raise RuntimeError("%s: no hang found:\n%s" % (name, job.finish()))
        t, m = found
        return t - stopped, float(m.group(3)), bool(m.group(2))
    finally:
        job.finish()


def straggler_run(build, action, period_ms=15, stopped_ms=5, start_step=40):
    """Steps to flag and to replace, and rank 0's steps/s before, slowed, after."""
    job = Job([os.path.join(build, "ddprun"), "--nproc", "2", "--straggler-action", action,
               os.path.join(build, "train"), "--limit", "8000", "--epochs", "8", "--print-steps"],
              {"DDPRUN_CPU_COMM": "shm"})
    steps = re.compile(r"^\[rank0\]:step (\d+) done")
    try:
        if not job.wait_for(r"^\[rank0\]:step %d done" % start_step):
            raise RuntimeError("train never reached step %d:\n%s" % (start_step, job.finish()))
        victim = worker_pid(job.p.pid, 1)
        slowed_at = time.monotonic()
        done = threading.Event()

        def neighbour():
            while not done.is_set():
                try:
                    os.kill(victim, signal.SIGSTOP)
                    time.sleep(stopped_ms / 1000.0)
                    os.kill(victim, signal.SIGCONT)
                except ProcessLookupError:
                    return
                time.sleep((period_ms - stopped_ms) / 1000.0)

        th = threading.Thread(target=neighbour, daemon=True)
        th.start()
        flagged = job.wait_for(r"rank 1 (\(pid \d+\) )?is a straggler", timeout=300)
        replaced = job.wait_for(r"\(--straggler-action replace\)", timeout=5) if action == "replace" else None
        job.p.wait(timeout=600)
        done.set()
        th.join()
        try:
            os.kill(victim, signal.SIGCONT)
        except ProcessLookupError:
            pass
    finally:
        err = job.finish()
    if job.p.returncode != 0:
        raise RuntimeError("train failed:\n" + err)
    marks = [(t, int(m.group(1))) for t, s, text in job.lines if s == "out" for m in [steps.search(text)] if m]

    def step_at(t):
        before = [s for tt, s in marks if tt <= t]
        return before[-1] if before else 0

    def pace(t0, t1):
        inside = [(tt, s) for tt, s in marks if t0 <= tt <= t1]
        if len(inside) < 2 or inside[-1][0] == inside[0][0]:
            return float("nan")
        return (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])

    first, last = marks[0][0], marks[-1][0]
    flag_t = flagged[0] if flagged else None
    repl_t = replaced[0] if replaced else None
    return {
        "to_flag": step_at(flag_t) - step_at(slowed_at) if flag_t else None,
        "to_replace": step_at(repl_t) - step_at(slowed_at) if repl_t else None,
        "before": pace(first, slowed_at),
        "slowed": pace(slowed_at, repl_t or last),
        "after": pace(repl_t, last) if repl_t else float("nan"),
    }


def false_alarms(build, steps):
    hogs = [subprocess.Popen(["/bin/sh", "-c", "while :; do :; done"]) for _ in range(2)]
    try:
        t0 = time.monotonic()
        p = subprocess.run([os.path.join(build, "ddprun"), "--nproc", "2", os.path.join(build, "hang_check"),
                            "--at", "-1", "--work-ms", "1", "--steps", str(steps)],
                           capture_output=True, text=True, timeout=3600)
        secs = time.monotonic() - t0
    finally:
        for h in hogs:
            h.kill()
    if p.returncode != 0:
        raise RuntimeError("hang_check failed:\n" + p.stderr)
    return p.stderr.count("hung:"), p.stderr.count("is a straggler"), secs


def nvrx_note():
    python, why = anchors.anchors_python()
    if not python:
        return anchors.missing("NVRx straggler detector", why)
    probe = subprocess.run([python, "-c", "import torch; from nvidia_resiliency_ext import straggler; "
                            "print(torch.cuda.is_available())"], capture_output=True, text=True)
    if probe.returncode != 0:
        return anchors.missing("NVRx %s straggler detector" % anchors.package_version(python, "nvidia-resiliency-ext"),
                               "it does not import here: " + (probe.stderr.strip().splitlines() or ["?"])[-1])
    if probe.stdout.strip() != "True":
        return anchors.missing("NVRx %s straggler detector" % anchors.package_version(python, "nvidia-resiliency-ext"),
                               "it needs a GPU: initialize() loads CUPTI (libcupti.so.12) and generate_report() "
                               "calls torch.cuda.synchronize(); this machine has none")
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build", "bin"))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=10000, help="steps of the false-alarm run")
    args = ap.parse_args()
    b = args.build

    print("anchor: torchrun kills a hung rank only when a collective times out (30 min by default) and names no "
          "straggler: NO ROW to compare with", file=sys.stderr)
    print("| job (2 ranks, no flag) | rank stopped to found hung (s, median of %d) | max (s) | learned limit (s) | "
          "stopped in an announced evaluation |" % args.runs)
    print("| --- | --- | --- | --- | --- |")
    for name, argv, rx in (
            ("train (the default job)", [os.path.join(b, "train"), "--limit", "8000", "--epochs", "50",
                                         "--print-steps"], r"^\[rank0\]:step %d done"),
            ("gpt --model tiny", [os.path.join(b, "gpt"), "--model", "tiny", "--steps", "100000"],
             r"^\[rank0\]:step %d/")):
        runs = [hang_detection(b, name, argv, rx) for _ in range(args.runs)]
        print("| %s | %.1f | %.1f | %.1f | %d of %d |" % (name, statistics.median(r[0] for r in runs),
                                                       max(r[0] for r in runs), statistics.median(r[1] for r in runs),
                                                       sum(r[2] for r in runs), len(runs)))

    print()
    print("| train, 2 ranks, rank 1 slowed ~1.5x from step 40 | steps to name it | steps to replace it | "
          "steps/s before | slowed | after |")
    print("| --- | --- | --- | --- | --- | --- |")
    for action in ("warn", "replace"):
        r = straggler_run(b, action)
        fmt = lambda v: "-" if v is None else str(v)  # noqa: E731
        print("| --straggler-action %s | %s | %s | %.0f | %.0f | %s |" % (
            action, fmt(r["to_flag"]), fmt(r["to_replace"]), r["before"], r["slowed"],
            "-" if r["after"] != r["after"] else "%.0f" % r["after"]))
    note = nvrx_note()
    if note:
        print("\n" + note)

    print()
    hung, named, secs = false_alarms(b, args.steps)
    print("| false alarms: hang_check, 2 ranks, 1 ms steps, two CPU hogs, default flags | steps | hangs | "
          "stragglers | per 10,000 steps | wall (s) |")
    print("| --- | --- | --- | --- | --- | --- |")
    print("| | %d | %d | %d | %.1f | %.0f |" % (args.steps, hung, named, 10000.0 * (hung + named) / args.steps, secs))


if __name__ == "__main__":
    main()
