#!/usr/bin/env python3
"""Reliability under abuse: the default job (examples/train under ddprun,
checkpointing, --max-restarts large, --hang-timeout set) gets N faults, each a
SIGKILL or a SIGSTOP of a random worker at a random step, and must still end
with parameters bit for bit equal to an uninterrupted run's (the
param_checksum of train's --summary-json). Prints a tally: faults injected
(by kind), restarts, hangs detected, and the outcome. Exit status 0 only when
the job finished and the checksums match.

    bench/reliability.py                 # 3 faults, small job (what ctest runs)
    bench/reliability.py --faults 100    # the long run
    bench/reliability.py --seed 7        # replay one sequence of faults
    bench/reliability.py --restart       # no heals: every fault restarts the group
    bench/reliability.py --compound      # a second fault during a heal (bench/compound_faults.py)
    bench/reliability.py --python        # the PyTorch script examples/python/ddp_heal.py (ddprun.Healer)

By default train heals (ddp::Healer): a killed or hung worker is replaced
while the others keep running, and the replacement takes the state from a
peer; a fault outside a step (the evaluation at an epoch's end) still
restarts the group from its checkpoint. --double-fraction of the faults
kill two workers at once. --restart turns heals off (--max-heals 0).

A fault is armed only once the job has recovered from the previous one (a
"resumed from" line, or a step number that went back), so that every fault
hits a running attempt; it comes at a random step within the next two
checkpoint periods, to a random worker, as SIGKILL or (--stop-fraction)
SIGSTOP. The job gets enough epochs to take every fault.

--python runs examples/python/ddp_heal.py instead (its steps through
ddprun.Healer; with --restart, --no-heal), on --torch-python's PyTorch
(build/torch2-venv's, else Debian's): it keeps no checkpoint, so a fault
outside a step restarts it from the start. Its checksum is the one it prints.
"""
import argparse
import json
import os
import random
import re
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
STEP = re.compile(r"step (\d+) done")

sys.path.insert(0, HERE)
from recovery import working_children  # noqa: E402  (ddprun's workers, from /proc; not its standbys)
import compound_faults  # noqa: E402


def checksum(path):
    try:
        with open(path) as f:
            return json.load(f).get("param_checksum", "")
    except (OSError, ValueError):
        return ""


def script_checksum(out):
    """The final loss and checksum examples/python/ddp_heal.py printed last."""
    found = re.findall(r"final loss [0-9.]+; checksum [0-9a-f]{16}", out)
    return found[-1].replace("final loss ", "loss ").replace("; checksum ", "/") if found else ""


def job(args, summary, ckpt=None):
    cmd = [os.path.join(args.build, "ddprun"), "--nproc", str(args.nproc)]
    if args.python:
        if ckpt:  # (the script keeps none: "ckpt" says this is the faulty run)
            cmd += ["--max-restarts", str(args.faults + 10), "--hang-timeout", str(args.hang_timeout),
                    "--max-heals", str(args.faults + 10)]
        cmd += [os.path.join(ROOT, "examples", "python", "ddp_heal.py"), "--samples", str(args.limit),
                "--epochs", str(args.epochs), "--print-steps"]
        return cmd + (["--no-heal"] if args.restart else [])
    if ckpt:
        cmd += ["--max-restarts", str(args.faults + 10), "--hang-timeout", str(args.hang_timeout)]
        if args.restart:
            cmd += ["--max-heals", "0"]
        else:
            cmd += ["--max-heals", str(args.faults + 10)]
    cmd += [os.path.join(args.build, "train"), "--limit", str(args.limit), "--epochs", str(args.epochs),
            "--print-steps", "--summary-json", summary]
    if ckpt:
        cmd += ["--checkpoint-dir", ckpt, "--checkpoint-every", str(args.checkpoint_every)]
    return cmd


def run_with_faults(args, cmd, total_steps, rng):
    """Runs cmd, injecting args.faults faults; returns (exit code, tally, stderr)."""
    tally = {"SIGKILL": 0, "SIGSTOP": 0, "double": 0}
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    sel = selectors.DefaultSelector()
    sel.register(p.stdout, selectors.EVENT_READ, "out")
    sel.register(p.stderr, selectors.EVENT_READ, "err")
    bufs = {"out": b"", "err": b"", "all_out": b""}
    err_text = []
    injected = 0
    armed = True          # the job runs an attempt that has not been hit yet
    last_step = 0
    target = None
    open_streams = 2
    deadline = time.monotonic() + args.budget
    try:
        while open_streams:
            if time.monotonic() > deadline:
                tally["timed out"] = True
                break
            for key, _ in sel.select(timeout=1):
                chunk = os.read(key.fileobj.fileno(), 65536)
                if not chunk:
                    sel.unregister(key.fileobj)
                    open_streams -= 1
                    continue
                bufs[key.data] += chunk
                if key.data == "out":
                    bufs["all_out"] += chunk
                *lines, bufs[key.data] = bufs[key.data].split(b"\n")
                for raw in lines:
                    line = raw.decode(errors="replace")
                    if key.data == "err":
                        err_text.append(line)
                        if args.verbose:
                            print("  err| " + line, flush=True)
                        continue
                    if args.verbose:
                        print("  out| " + line, flush=True)
                    m = STEP.search(line)
                    step = int(m.group(1)) if m else None
                    recovered = "resumed from" in line or "joined at step" in line
                    if not armed and (recovered or (step is not None and step <= last_step)):
                        armed = True  # recovered: the next fault may come
                    if step is None:
                        continue
                    last_step = step
                    if injected >= args.faults or not armed:
                        continue
                    if target is None:
                        # Somewhere in the next two checkpoint periods of this
                        # attempt, so that faults spread over the whole run
                        # (the job is made long enough for all of them).
                        target = min(step + rng.randint(0, 2 * args.checkpoint_every), total_steps - 3)
                    if step < target:
                        continue
                    workers = working_children(p.pid)
                    if not workers:
                        continue
                    kind = signal.SIGSTOP if rng.random() < args.stop_fraction else signal.SIGKILL
                    victims = [rng.choice(workers)]
                    if kind == signal.SIGKILL and len(workers) > 2 and rng.random() < args.double_fraction:
                        victims = rng.sample(workers, 2)  # two at once (one heal, two replacements)
                    try:
                        for victim in victims:
                            os.kill(victim, kind)
                    except ProcessLookupError:
                        continue
                    injected += 1
                    tally[kind.name] += 1
                    tally["double"] += len(victims) == 2
                    print("fault %d/%d: %s to worker(s) %s at step %d" % (
                        injected, args.faults, kind.name, ", ".join(map(str, victims)), step), flush=True)
                    armed = False
                    target = None
        code = p.wait(timeout=max(1, deadline - time.monotonic())) if open_streams == 0 else -1
    except subprocess.TimeoutExpired:
        tally["timed out"] = True
        code = -1
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    return code, tally, "\n".join(err_text), bufs["all_out"].decode(errors="replace")


def compound(args):
    """The compound faults (compound_faults.py), each against the same job's
    uninterrupted run where the world keeps its size."""
    def train(name, summary=None):
        return [os.path.join(args.build, "train"), "--limit", "8000", "--epochs", "2", "--print-steps",
                "--summary-json", summary or os.path.join(args.work, name + ".json")]

    def job_cmd(summary, flags=()):
        return [os.path.join(args.build, "ddprun"), "--nproc", "4", *flags] + train("", summary)

    ref_summary = os.path.join(args.work, "reference-4.json")
    ref = subprocess.run(job_cmd(ref_summary), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    want = checksum(ref_summary)
    if ref.returncode != 0 or not want:
        print(ref.stderr[-4000:])
        print("the uninterrupted reference run failed (exit %d)" % ref.returncode)
        return 2
    rows = [compound_faults.node_lost_during_heal(args, train),
            compound_faults.fallback_during_heal(args, job_cmd, checksum, want),
            compound_faults.paused_replacement(args, job_cmd, checksum, want)]
    print()
    print("| compound fault | outcome | detail | seconds |")
    print("|---|---|---|---|")
    for fault, outcome, detail, secs in rows:
        print("| %s | %s | %s | %.0f |" % (fault, outcome, detail, secs))
    not_run = [r[0] for r in rows if r[1] == "NOT RUN"]
    if not_run:
        print("NOT RUN (say so, do not count it as passed): " + ", ".join(not_run))
    return 0 if all(r[1] in ("ok", "bitwise equal") for r in rows) else 1


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--faults", type=int, default=3)
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--limit", type=int, default=4000, help="training images (train --limit)")
    p.add_argument("--epochs", type=int, default=None,
                   help="epochs of the job [enough for every fault: about faults x checkpoint-every steps]")
    p.add_argument("--checkpoint-every", type=int, default=5)
    p.add_argument("--hang-timeout", type=float, default=3, help="ddprun --hang-timeout: finds SIGSTOPped workers")
    p.add_argument("--stop-fraction", type=float, default=0.3, help="share of faults that are SIGSTOP")
    p.add_argument("--double-fraction", type=float, default=0.2,
                   help="share of SIGKILL faults that hit two workers at once (with more than 2)")
    p.add_argument("--restart", action="store_true", help="no heals (--max-heals 0): every fault restarts the group")
    p.add_argument("--seed", type=int, default=None, help="random seed (default: random, printed)")
    p.add_argument("--budget", type=float, default=None,
                   help="seconds the faulty run may take before it counts as hung [60 + 30 per fault]")
    p.add_argument("--build", default=os.path.join(ROOT, "build", "bin"))
    p.add_argument("--verbose", action="store_true", help="echo the job's output")
    p.add_argument("--python", action="store_true", help="the PyTorch script examples/python/ddp_heal.py instead")
    p.add_argument("--torch-python", default=None, help="with --python: the interpreter [build/torch2-venv's]")
    p.add_argument("--compound", action="store_true",
                   help="instead: a node lost during a heal, a fallback to Gloo during one, a paused replacement")
    args = p.parse_args()
    if args.compound:
        args.budget = args.budget or 300
        args.work = tempfile.mkdtemp(prefix="ddprun-compound-")
        try:
            return compound(args)
        finally:
            shutil.rmtree(args.work, ignore_errors=True)
    if args.python:
        venv = os.path.join(ROOT, "build", "torch2-venv", "bin", "python")
        os.environ["PYTHON_EXEC"] = args.torch_python or (venv if os.path.exists(venv) else "/usr/bin/python3")
        print("the script runs on %s" % os.environ["PYTHON_EXEC"], flush=True)
    if args.epochs is None:
        steps_per_epoch = -(-args.limit // (args.nproc * 32))  # a batch of 32 per rank (train's and the script's)
        # A fault comes within two checkpoint periods of the recovery from the
        # one before (one on average), and a heal costs a step: half as much
        # again, and an epoch more, so that every fault lands.
        args.epochs = max(1, -(-3 * args.faults * args.checkpoint_every // (2 * steps_per_epoch)) + 1)
    if args.budget is None:
        args.budget = 60 + 30 * args.faults
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)
    rng = random.Random(seed)
    work = tempfile.mkdtemp(prefix="ddprun-reliability-")
    try:
        ref_summary = os.path.join(work, "reference.json")
        ref = subprocess.run(job(args, ref_summary), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        want = script_checksum(ref.stdout) if args.python else checksum(ref_summary)
        if ref.returncode != 0 or not want:
            print(ref.stderr[-4000:])
            print("the uninterrupted reference run failed (exit %d)" % ref.returncode)
            return 2
        if args.python:
            total_steps = int(re.search(r"ranks, (\d+) steps", ref.stdout).group(1))
        else:
            with open(ref_summary) as f:
                total_steps = json.load(f)["steps"]

        summary = os.path.join(work, "faulty.json")
        started = time.monotonic()
        code, tally, err, out = run_with_faults(args, job(args, summary, os.path.join(work, "ckpt")), total_steps, rng)
        took = time.monotonic() - started
        got = script_checksum(out) if args.python else checksum(summary)
        restarts = err.count("restarting the workers")
        heals = err.count("replacing it while the other workers go on")
        # Each worker found hung is said once ("rank R (pid P) hung: ...");
        # its peers wait for it beating, so they are not.
        hangs = len(re.findall(r"\(pid \d+\) hung: ", err))
        ok = code == 0 and got == want and not tally.get("timed out")
        if not ok:
            print("\n".join(err.splitlines()[-40:]))
        print()
        print("| seed | faults (SIGKILL + SIGSTOP; two at once) | workers replaced (heals) | restarts | hangs detected "
              "| exit | checksum | outcome | seconds |")
        print("|---|---|---|---|---|---|---|---|---|")
        print("| %d | %d (%d + %d; %d) | %d | %d | %d | %d | %s %s %s | %s | %.0f |" % (
            seed, tally["SIGKILL"] + tally["SIGSTOP"], tally["SIGKILL"], tally["SIGSTOP"], tally["double"], heals,
            restarts, hangs, code,
            got or "none", "==" if got == want else "!=", want, "bitwise equal" if ok else ("HUNG" if tally.get("timed out") else "FAILED"), took))
        injected = tally["SIGKILL"] + tally["SIGSTOP"]
        if injected != args.faults:
            print("only %d of %d faults were injected (the job ended first)" % (injected, args.faults))
            return 1
        return 0 if ok else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
