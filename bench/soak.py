#!/usr/bin/env python3
"""Slowness is not failure: a soak under load. Jobs of every kind run while
the machine is loaded far past its cores (stress-ng: busy processes and a
memory hog), and while they run they are shaken but not harmed: their
agents are paused for less than a lease (SIGSTOP, then SIGCONT), a worker is
paused for less than half --hang-timeout (the other half is its own time
between two beats, which the load stretches past a second), and on
namespace hosts a link goes down
for less than a lease (`ip link set ... down`; this kernel has no netem).
Every job must end 0 with the checksum of the same job run quietly, and no
ddprun may have judged anything hung, lost, partitioned or restarted.

    bench/soak.py                      # 10 jobs of each kind (50), 20 busy processes + 512 MB hog
    bench/soak.py --jobs 2 --load 40   # fewer jobs, more load
    bench/soak.py --faults             # then real faults, each found and healed: detection quiet and loaded
    bench/soak.py --short              # what ctest runs: 2 kinds, one loaded job each, 8 busy processes
    bench/soak.py --only-hangs         # hangs in which the processes live: found quiet and loaded

The kinds (the launcher's defaults otherwise; the default job, examples/train,
with its Healer; --hang-timeout 2 wherever a job has one node):
  one-node   ddprun --nproc 4 --hang-timeout 2 train          (agent and worker pauses)
  python     ddprun --nproc 2 --hang-timeout 2 examples/python/ddp_heal.py, on
             build/torch2-venv's PyTorch and on Debian's 1.13   (agent pauses)
  two-hosts  2 namespace hosts, the default backend           (link blips, agent pauses,
             the whole job suspended past a lease)
  embedded   3 namespace hosts, the embedded control plane (the default from 3)
             (blips of the serving node's link among them, agent pauses, a suspend)
  etcd       3 namespace hosts and an etcd member on a 4th    (link blips, agent pauses)

A false failure is a job that exits non-zero, ends with another checksum,
or whose ddprun says a rank hung, a node was lost or cut off, a round was
superseded or the workers restarted. A leadership change of a control plane
("stopped serving") is counted apart: it costs a pause, not the job.

With --faults, the same kinds then get one real fault each (a worker
SIGKILLed; a host SIGKILLed, the serving one for the embedded plane; a link
cut for longer than a lease and an allowance), quiet and loaded: each job
must still end 0, and the table gives the seconds from the fault to the
line of ddprun's that found it, quiet beside loaded.

With --hangs (or --only-hangs), hangs that beats alone never find, under
the default --hang-timeout (auto), quiet and loaded: a C++ rank that spins
at step 20 while the others wait (hang_check --busy-ms 1e12), one beside a
rank that stops itself (at step 200: the stopped one is named), a Python
rank that spins, and a Python
deadlock in which every rank waits inside torch.distributed (each beats).
Each must be found with the right rank named; the table gives the seconds
from the worker's line that begins it to ddprun's verdict.

Needs root and iproute2 for the namespace hosts, stress-ng for the load
(scripts/install-deps.sh installs it), etcd-server for the etcd kind. A kind
that cannot run says so in the table (NOT RUN, and why) and fails the run.
"""
import argparse
import json
import os
import queue
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from node_loss import IP, Lab, kill, start_etcd  # noqa: E402  (the namespace hosts)
from recovery import working_children  # noqa: E402  (ddprun's workers, not its standbys)

# The bounds a disturbance must stay under to cost nothing: the jobs' own
# --hang-timeout and ddprun's lease.
HANG_TIMEOUT_S = 2.0
LEASE_S = 3.0
# A worker's silence is the pause plus its own time since its last beat
# before the pause (seen: 1.1 s between two collectives of `train` at load
# 8 on 2 cores, and a 1.5 s pause judged hung at 2.0 s of silence): a
# worker's pause stays under half the hang timeout.
WORKER_PAUSE_BOUND_S = HANG_TIMEOUT_S / 2
STEP = re.compile(r"step (\d+) done")
CHECKSUM = re.compile(r"parameters identical on all \d+ ranks \(checksum ([0-9a-f]+)\)|checksum ([0-9a-f]{8,})")
# What a healthy job must never make ddprun say (its own lines only).
FALSE_ALARMS = [
    ("hung", re.compile(r"(?<!not )hung: |\) hung\b")),
    ("lost", re.compile(r"was lost: |lost contact with the rendezvous|dropped from the job")),
    ("partition", re.compile(r"reached no majority")),
    ("restart", re.compile(r"restarting the workers|superseded by round|stopping the workers for the next round")),
]
LEADER_CHANGE = re.compile(r"stopped serving job \S+ rendezvous")
SLOW_NOTE = re.compile(r"is slow, not hung")
DDPRUN_LINE = re.compile(r"^\[ddprun \d\d:\d\d:\d\d\.\d+\]")


# ---- Load ------------------------------------------------------------------

class Load:
    """stress-ng's busy processes and a memory hog, for as long as it lives."""

    def __init__(self, busy, hog_mb):
        self.busy, self.hog_mb, self.proc = busy, hog_mb, None

    def __enter__(self):
        if self.busy <= 0:
            return self
        self.proc = subprocess.Popen(["stress-ng", "--cpu", str(self.busy), "--vm", "1", "--vm-bytes",
                                      "%dM" % self.hog_mb, "--quiet"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        return self

    def __exit__(self, *exc):
        if self.proc:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def loadavg():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


# ---- One job ---------------------------------------------------------------

class Job:
    """One job's processes (one per node), their output lines as they come
    (node, unix time, line) and what was done to them."""

    def __init__(self, name, logs):
        self.name, self.logs, self.lines, self.procs = name, logs, queue.Queue(), []
        self.done = []  # what the job went through, in words
        self.overran = []  # disturbances the harness held past their bound (it ran late)
        self.out = {}   # node -> its lines

    def start(self, node, proc):
        self.procs.append(proc)
        self.out[node] = []
        path = os.path.join(self.logs, "%s-node%d.log" % (self.name, node))

        def read():
            with open(path, "w") as log:
                for raw in iter(proc.stdout.readline, b""):
                    line, now = raw.decode(errors="replace").rstrip("\n"), time.time()
                    log.write("%.3f %s\n" % (now, line))
                    self.out[node].append((now, line))
                    self.lines.put((node, now, line))
            self.lines.put((node, time.time(), None))

        threading.Thread(target=read, daemon=True).start()

    def wait_step(self, step, deadline):
        """Until some node prints training step `step`; False at the deadline or an exit."""
        while True:
            try:
                node, _, line = self.lines.get(timeout=max(0.0, deadline - time.time()))
            except queue.Empty:
                return False
            if line is None:
                return False
            s = STEP.search(line)
            if s and int(s.group(1)) >= step:
                return True

    def finish(self, deadline):
        codes = []
        for p in self.procs:
            try:
                codes.append(p.wait(timeout=max(1.0, deadline - time.time())))
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                codes.append("timed out")
        time.sleep(0.2)  # the reader threads drain what the pipes still hold
        return codes

    def text(self):
        return "\n".join(line for node in sorted(self.out) for _, line in self.out[node])


def checksum_of(job, summary):
    try:
        with open(summary) as f:
            return json.load(f).get("param_checksum", "")
    except (OSError, ValueError):
        pass
    for line in reversed(job.text().splitlines()):
        m = CHECKSUM.search(line)
        if m:
            return m.group(1) or m.group(2)
    return ""


def judge(job, codes, got, want):
    """Whether a finished job ended well (every node 0, the quiet run's
    checksum, no false alarm), its false alarms by kind, leadership changes
    and slow notes."""
    alarms = {}
    leader_changes = slow = 0
    for line in job.text().splitlines():
        if not DDPRUN_LINE.search(line):
            continue
        for what, pattern in FALSE_ALARMS:
            if pattern.search(line):
                alarms.setdefault(what, line.strip()[:200])
        leader_changes += bool(LEADER_CHANGE.search(line))
        slow += bool(SLOW_NOTE.search(line))
    ok = codes == [0] * len(codes) and got == want and not alarms
    return ok, alarms, leader_changes, slow


# ---- The kinds -------------------------------------------------------------

def train_argv(build, summary, nodes):
    # Enough steps that the disturbances land inside training on any machine.
    return [os.path.join(build, "train"), "--limit", "6000" if nodes == 1 else "4000", "--epochs", "2",
            "--print-steps", "--summary-json", summary]


class Kind:
    """How to run one kind of job, and what to shake it with."""

    def __init__(self, name, hosts, python=None):
        self.name, self.hosts, self.python = name, hosts, python
        self.shakes, self.longest = ("agent", "link", "worker", "suspend"), 2.0

    def missing(self, args):
        if self.hosts and os.geteuid() != 0:
            return "needs root (network namespaces)"
        if self.hosts and not os.path.exists(IP):
            return "needs iproute2"
        if self.name == "etcd" and not shutil.which("etcd"):
            return "needs etcd (apt-get install etcd-server)"
        if self.python is not None and not os.path.exists(self.python):
            return "no %s (scripts/setup-torch2.sh makes build/torch2-venv)" % self.python
        return ""

    def run(self, args, shake, rng, logs, tag):
        """Runs one job; shake: disturb it (soak) or None (the quiet reference)
        or a fault name. Returns (codes, checksum, job, fault time or None)."""
        summary = os.path.join(logs, "%s-%s.json" % (self.name, tag))
        job = Job("%s-%s" % (self.name, tag), logs)
        deadline = time.time() + args.budget
        lab = Lab(self.hosts + (1 if self.name == "etcd" else 0)) if self.hosts else None
        fault_at = None
        try:
            if lab:
                lab.create()
                if self.name == "etcd":
                    start_etcd(lab, self.hosts, summary + ".etcd", os.path.join(logs, job.name + "-etcd.log"))
            for i in range(max(1, self.hosts)):
                argv = self.command(args, lab, i, summary)
                env = dict(os.environ, PYTHONUNBUFFERED="1")
                if self.python:
                    env["PYTHON_EXEC"] = self.python
                if lab:
                    job.start(i, lab.spawn(i, argv, env))
                else:
                    job.start(i, subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                                  env=env, start_new_session=True))
            # A fault waits for steady training (every node's workers said
            # they heal: a node lost in the first steps restarts instead).
            if not job.wait_step(30 if shake not in (None, "soak") else 5, deadline):
                return ["never trained"], "", job, None
            if shake == "soak":
                self.soak(job, lab, rng, deadline)
            elif shake:
                fault_at = self.fault(job, lab, shake, rng, deadline)
            codes = job.finish(deadline)
            return codes, checksum_of(job, summary), job, fault_at
        finally:
            for p in job.procs:
                if p.poll() is None:
                    os.killpg(p.pid, signal.SIGKILL)
            if lab:
                lab.destroy()
            shutil.rmtree(summary + ".etcd", ignore_errors=True)

    def command(self, args, lab, i, summary):
        ddprun = os.path.join(args.build, "ddprun")
        if self.name == "one-node":
            return [ddprun, "--nproc", "4", "--hang-timeout", "%g" % HANG_TIMEOUT_S] + train_argv(args.build, summary, 1)
        if self.name.startswith("python"):
            return [ddprun, "--nproc", "2", "--hang-timeout", "%g" % HANG_TIMEOUT_S,
                    os.path.join(ROOT, "examples", "python", "ddp_heal.py"), "--samples", "16000", "--epochs", "1",
                    "--print-steps"]
        # MIN:MAX nodes, so that a lost node shrinks the job (--faults); no
        # restart allowed: a soak's restart is a false failure.
        endpoint = lab.etcd if self.name == "etcd" else lab.addr[0] + ":29400"
        flags = [ddprun, "--nnodes", "%d:%d" % (self.hosts - 1, self.hosts), "--nproc", "1", "--node-rank", str(i),
                 "--rdzv-endpoint", endpoint, "--rdzv-id", "soak", "--max-restarts", "0", "--rdzv-conf",
                 "last_call_timeout=60"]
        if self.name == "etcd":
            flags += ["--rdzv-backend", "etcd"]
        return flags + train_argv(args.build, summary, self.hosts)

    # The disturbances, shorter than what would be a fault: a pause of an
    # agent under its lease (3 s), of a worker under half --hang-timeout
    # (WORKER_PAUSE_BOUND_S), a link down under the lease.
    def soak(self, job, lab, rng, deadline):
        for _ in range(3):
            if time.time() > deadline or any(p.poll() is not None for p in job.procs):
                return
            node = rng.randrange(len(job.procs))
            # A whole job suspended (a scheduler's suspend: every process of
            # every node stopped, then continued), for longer than a lease:
            # no clock of the job's ran meanwhile. Not with etcd, which a
            # job's suspend leaves running (its leases do expire).
            kinds = [k for k in (["agent", "link", "worker"] if lab else ["agent", "worker"]) if k in self.shakes]
            if lab and self.name != "etcd" and "suspend" in self.shakes:
                kinds.append("suspend")
            if not kinds:
                return
            what = rng.choice(kinds)
            if what == "worker" and self.name != "one-node":
                what = "agent"
            length = rng.uniform(0.3, 0.9) if what == "worker" else rng.uniform(0.5, self.longest)
            if what == "suspend":
                length = rng.uniform(LEASE_S + 1, 2 * LEASE_S + 1)  # past the lease: nobody's clock ran
                pids = []
                for p in job.procs:
                    pids += [p.pid] + children_deep(p.pid)
                freeze(pids, signal.SIGSTOP)
                time.sleep(length)  # the suspension's length is the point
                freeze(pids, signal.SIGCONT)
                job.done.append("suspend %.1f s" % length)
                time.sleep(rng.uniform(1.0, 3.0))
                continue
            if what == "link":
                # The embedded plane's serving node is node 0: its blips are the ones that matter most.
                node = 0 if self.name == "embedded" and rng.random() < 0.5 else node
                ip_link(lab, node, "down")
                cut = time.monotonic()
                time.sleep(length)  # the blip's length is the point
                held = time.monotonic() - cut
                ip_link(lab, node, "up")
            else:
                pid = job.procs[node].pid if what == "agent" else pick_worker(job.procs[node].pid, rng)
                if not pid:
                    continue
                held = pause(pid, length, whole_node=lab is not None and what == "agent")
            job.done.append("%s %d %.1f s" % (what, node, length))
            # Under load this harness's own sleep can run late: a pause held
            # past its bound (the hang timeout for a worker, the lease for
            # the rest) is a real fault, and the job is not judged.
            bound = WORKER_PAUSE_BOUND_S if what == "worker" else LEASE_S
            if held >= bound:
                job.overran.append("%s %d held %.1f s (meant %.1f s, bound %.1f s)" % (what, node, held, length, bound))
            time.sleep(rng.uniform(1.0, 3.0))  # between disturbances

    def fault(self, job, lab, fault, rng, deadline):
        """One real fault; returns when it was made. The embedded plane loses
        its serving node (node 0), the others their last node."""
        t = time.time()
        victim = 0 if self.name == "embedded" else len(job.procs) - 1
        if fault == "worker":
            pid = pick_worker(job.procs[0].pid, rng)
            if pid:
                kill(pid)
        elif fault == "host":
            lab.kill_host(victim, job.procs[victim].pid)
        elif fault == "cut":
            # Longer than a lease and a takeover's allowance: found, then the
            # link comes back (the node, dropped, grows the job again).
            ip_link(lab, victim, "down")
            while found_after(job, fault, t) is None and time.time() < min(deadline, t + 60):
                time.sleep(0.2)  # polling the lines the readers collect
            ip_link(lab, victim, "up")
        job.done.append(fault)
        return t


def ip_link(lab, i, state):
    subprocess.run([IP, "-n", lab.ns[i], "link", "set", lab.host_if[i], state], check=True)


def pick_worker(agent_pid, rng):
    """A worker of the agent (found through its launcher in a lab: ip netns exec execs)."""
    for pid in [agent_pid] + children_deep(agent_pid):
        workers = working_children(pid)
        if workers:
            return rng.choice(workers)
    return 0


def children_deep(pid):
    out = []
    try:
        with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
            kids = [int(x) for x in f.read().split()]
    except OSError:
        return out
    for k in kids:
        out += [k] + children_deep(k)
    return out


def freeze(pids, sig):
    for p in pids:
        try:
            os.kill(p, sig)
        except ProcessLookupError:
            pass


def pause(pid, seconds, whole_node):
    """SIGSTOP for `seconds`, then SIGCONT: the agent (and, for a node, its
    workers too: a frozen host), or one worker."""
    pids = [pid] + (children_deep(pid) if whole_node else [])
    freeze(pids, signal.SIGSTOP)
    stopped = time.monotonic()
    time.sleep(seconds)  # the pause's length is the point
    held = time.monotonic() - stopped
    freeze(pids, signal.SIGCONT)
    return held


# Each fault, and ddprun's line that says it found it.
FOUND = {"worker": re.compile(r"failed \(killed by SIGKILL\)"),
         "host": re.compile(r"was lost: |took over node rank"),
         "cut": re.compile(r"was lost: ")}


def found_after(job, fault, at):
    pattern = FOUND[fault]
    for node in sorted(job.out):
        for t, line in job.out[node]:
            if t >= at and DDPRUN_LINE.search(line) and pattern.search(line):
                return t - at
    return None


# ---- Main ------------------------------------------------------------------

def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default=os.path.join(ROOT, "build", "bin"))
    p.add_argument("--jobs", type=int, default=10, help="loaded jobs of each kind")
    p.add_argument("--load", type=int, default=20, help="stress-ng busy processes")
    p.add_argument("--hog-mb", type=int, default=512, help="stress-ng memory hog")
    p.add_argument("--budget", type=int, default=900, help="seconds a job may take")
    p.add_argument("--faults", action="store_true", help="then real faults, quiet and loaded")
    p.add_argument("--fault-repeats", type=int, default=3, help="jobs of each fault, quiet and loaded")
    p.add_argument("--only-faults", action="store_true", help="the real faults alone (no soak)")
    p.add_argument("--hangs", action="store_true", help="then hangs in which the processes live, quiet and loaded")
    p.add_argument("--only-hangs", action="store_true", help="those hangs alone")
    p.add_argument("--short", action="store_true", help="ctest's: one-node and embedded, one loaded job each")
    p.add_argument("--kinds", default="", help="comma list of kinds (default: all)")
    p.add_argument("--shakes", default="agent,link,worker,suspend", help="which disturbances (comma list)")
    p.add_argument("--longest", type=float, default=2.0, help="the longest agent pause or link blip (s)")
    p.add_argument("--seed", type=int, default=int(time.time()))
    p.add_argument("--keep-logs", default="")
    args = p.parse_args()
    if args.short:
        args.jobs, args.load, args.hog_mb, args.kinds = 1, 8, 256, args.kinds or "one-node,embedded"
    if args.load > 0 and not shutil.which("stress-ng"):
        print("soak: NOT RUN: stress-ng is missing (scripts/install-deps.sh installs it)", file=sys.stderr)
        return 2
    rng = random.Random(args.seed)
    venv = os.path.join(ROOT, "build", "torch2-venv", "bin", "python")
    kinds = [Kind("one-node", 0), Kind("python", 0, venv), Kind("python-1.13", 0, "/usr/bin/python3"),
             Kind("two-hosts", 2), Kind("embedded", 3), Kind("etcd", 3)]
    if args.kinds:
        kinds = [k for k in kinds if k.name in args.kinds.split(",")]
    for k in kinds:
        k.shakes, k.longest = args.shakes.split(","), args.longest
    logs = args.keep_logs or tempfile.mkdtemp(prefix="ddprun-soak-")
    os.makedirs(logs, exist_ok=True)
    print("soak: seed %d, %d loaded job(s) of each of %s; load: stress-ng --cpu %d --vm 1 (%d MB); logs in %s"
          % (args.seed, args.jobs, ", ".join(k.name for k in kinds), args.load, args.hog_mb, logs), flush=True)
    rows, failed = [], False
    for kind in [] if args.only_faults or args.only_hangs else kinds:
        why = kind.missing(args)
        if why:
            rows.append((kind.name, "NOT RUN: " + why))
            failed = True
            continue
        codes, want, _, _ = kind.run(args, None, rng, logs, "quiet")
        if codes != [0] * max(1, kind.hosts) or not want:
            rows.append((kind.name, "NOT RUN: its quiet reference failed (%s); see %s" % (codes, logs)))
            failed = True
            continue
        false, changes, slow, loads, shakes, unjudged = 0, 0, 0, [], 0, 0
        for n in range(args.jobs):
            with Load(args.load, args.hog_mb):
                codes, got, job, _ = kind.run(args, "soak", rng, logs, "soak%d" % n)
                loads.append(loadavg())
            ok, alarms, c, s = judge(job, codes, got, want)
            changes, slow, shakes = changes + c, slow + s, shakes + len(job.done)
            if job.overran:
                unjudged += 1
                print("soak: NOT JUDGED %s job %d: this harness ran late and held %s; %s; logs in %s" % (
                    kind.name, n, "; ".join(job.overran), "it ended ok" if ok else "it failed, as a fault that "
                    "long may make it", logs), flush=True)
            elif not ok:
                false += 1
                print("soak: FALSE FAILURE %s job %d (%s): exit %s, checksum %s (want %s), %s; logs in %s" % (
                    kind.name, n, "; ".join(job.done), codes, got or "none", want, alarms or "no alarm", logs),
                      flush=True)
            else:
                print("soak: %s job %d ok (%s)" % (kind.name, n, "; ".join(job.done)), flush=True)
        # A kind none of whose jobs could be judged showed nothing: that fails too.
        failed = failed or false > 0 or unjudged == args.jobs
        rows.append((kind.name, "%d job(s), %d disturbance(s), load average %.0f-%.0f: %d false failure(s); "
                     "%d leadership change(s), %d slow note(s)%s" % (
                         args.jobs, shakes, min(loads), max(loads), false, changes, slow,
                         "; %d NOT JUDGED (the harness held a disturbance past its bound)" % unjudged
                         if unjudged else "")))
    if rows:
        print("\nsoak under load (goal: 0 false failures)")
    for name, text in rows:
        print("  %-12s %s" % (name, text))
    if args.faults or args.only_faults:
        failed = faults(args, kinds, rng, logs) or failed
    if args.hangs or args.only_hangs:
        failed = hangs(args, logs) or failed
    if not args.keep_logs and not failed:
        shutil.rmtree(logs, ignore_errors=True)
    return 1 if failed else 0


def found_text(seen, number):
    """"quiet 1.23 s (median of 3), loaded ..." from {loaded: [seconds or None]}."""
    text = []
    for loaded in (False, True):
        ok = [t for t in seen[loaded] if t is not None]
        text.append("%s %s" % ("loaded" if loaded else "quiet",
                                (number + " s (median of %d)") % (statistics.median(ok), len(ok)) if ok
                                else "never found"))
    return ", ".join(text)


def faults(args, kinds, rng, logs):
    """Each kind's real fault, quiet and loaded; True when one was missed."""
    plan = {"one-node": ["worker"], "python": ["worker"], "python-1.13": ["worker"], "two-hosts": ["host", "cut"],
            "embedded": ["host"], "etcd": ["host"]}
    print("\nreal faults (found: seconds from the fault to ddprun's line that names it)")
    missed = False
    for kind in kinds:
        if kind.missing(args):
            continue
        for fault in plan[kind.name]:
            seen = {}
            for loaded in (False, True):
                times = []
                for n in range(args.fault_repeats):
                    with Load(args.load if loaded else 0, args.hog_mb):
                        codes, _, job, at = kind.run(args, fault, rng, logs, "%s-%s%d" % (fault, loaded, n))
                    t = found_after(job, fault, at) if at else None
                    times.append(t)
                    if t is None:
                        missed = True
                        print("soak: MISSED %s %s (loaded %s): exit %s; logs in %s" % (kind.name, fault, loaded,
                                                                                       codes, logs), flush=True)
                seen[loaded] = times
            print("  %-12s %-7s %s" % (kind.name, fault, found_text(seen, "%.2f")), flush=True)
    return missed


# Hangs in which every process lives (issue 60): how each is begun, the
# worker's line that says it began, and ddprun's verdict that must follow.
HANGS = [
    ("C++ spin", ["--nproc", "3"], ["hang_check", "--work-ms", "20", "--stuck", "1", "--at", "20", "--busy-ms", "1e12"],
     None, r"rank 1 computes for", r"rank 1 \(pid \d+\) hung: it spins"),
    ("C++ stop+spin", ["--nproc", "3"], ["hang_check", "--work-ms", "20", "--stuck", "1", "--at", "200", "--busy-ms",
                                          "1e12", "--also-stopped", "2"],
     None, r"rank 2 stops itself", r"rank 2 \(pid \d+\) hung: no heartbeat"),
    ("Python spin", ["--nproc", "2"], ["hang_script.py", "--train-steps", "150", "--spin"], "venv",
     r"rank 1 spins", r"rank 1 \(pid \d+\) hung: it spins"),
    ("Python deadlock", ["--nproc", "2"], ["hang_script.py", "--train-steps", "150", "--deadlock"], "venv",
     r"rank 1 waits for ever", r"hung: no rank of the job has advanced a step"),
]


def hangs(args, logs):
    """Each hang of HANGS, quiet and loaded; True when one was missed or
    named the wrong rank."""
    venv = os.path.join(ROOT, "build", "torch2-venv", "bin", "python")
    print("\nhangs in which the processes live (found: seconds from the worker's line to ddprun's verdict; "
          "the default --hang-timeout)")
    missed = False
    for name, flags, program, python, began, verdict in HANGS:
        if python == "venv" and not os.path.exists(venv):
            print("  %-16s NOT RUN: no %s" % (name, venv))
            missed = True
            continue
        if program[0].endswith(".py"):
            argv = [os.path.join(ROOT, "tests", "interop", program[0])] + program[1:]
        else:
            argv = [os.path.join(args.build, program[0])] + program[1:]
        seen = {}
        for loaded in (False, True):
            times = []
            for n in range(args.fault_repeats):
                env = dict(os.environ, PYTHONUNBUFFERED="1")
                if python == "venv":
                    env["DDPRUN_PYTHON"] = venv
                job = Job("hang-%s-%s%d" % (name.replace(" ", "-").replace("+", "-"), loaded, n), logs)
                with Load(args.load if loaded else 0, args.hog_mb):
                    job.start(0, subprocess.Popen([os.path.join(args.build, "ddprun")] + flags + argv,
                                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                                                  start_new_session=True))
                    codes = job.finish(time.time() + args.budget)
                t = None
                start = None
                for when, line in job.out.get(0, []):
                    if start is None and re.search(began, line):
                        start = when
                    if start is not None and DDPRUN_LINE.search(line) and re.search(verdict, line):
                        t = when - start
                        break
                times.append(t)
                if t is None:
                    missed = True
                    print("soak: MISSED hang %s (loaded %s): exit %s; logs in %s" % (name, loaded, codes, logs),
                          flush=True)
            seen[loaded] = times
        print("  %-16s %s" % (name, found_text(seen, "%.1f")), flush=True)
    return missed


if __name__ == "__main__":
    sys.exit(main())
