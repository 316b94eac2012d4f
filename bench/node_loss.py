#!/usr/bin/env python3
"""Node loss on separate hosts: two nodes of one worker each train together,
each node on its own "host" (a Linux network namespace, joined to the other
by a bridge); then the non-hosting node (node 1) dies: its agent is SIGKILLed
mid-training, and with it everything else on that host. Measured: seconds
from the kill to the first training step that the survivor (node 0)
completes after it restored the checkpoint, for

  ddprun   --nnodes 1:2 ... examples/train (the multi-node tests' job), and
  torchrun --nnodes 1:2 --rdzv_backend c10d ... (the anchor: torchrun 2.x
           from build/torch2-venv, bench/anchors.py, --monitor_interval 0.1)
           running the same job as a PyTorch DDP script (node_loss_torch.py).

and, for ddprun's checkpointless recovery (ddprun only; no restart, no
checkpoint read), seconds from the kill to node 0's first step after the heal:
  - shrink: no node waits, so the running round goes on without node 1 and
    node 0's worker heals alone at world 1 (the first row runs with
    --max-heals 0 to measure the restart from the checkpoint instead);
  - spare: a third node waits as a hot spare (--nnodes 2 is full) and takes
    over the lost node's ranks in the running round; its worker heals from
    node 0's;
  - worker: only node 1's worker is SIGKILLed (its node lives): node 1's
    agent replaces it in a heal generation the rendezvous names, and node
    0's worker heals with the replacement.

A second table (alone with --only-host-loss) loses the node that serves the
rendezvous instead: 3 nodes (--nnodes 2:3, so ddprun runs its embedded control
plane), node 0's host SIGKILLed, node 1's next step counted; beside it node 2
lost (any other node), ddprun with --rdzv-backend etcd (one etcd member on a
4th host), and torchrun 2.x with c10d and with its etcd-v2 backend (etcd 3.4
with --enable-v2; python-etcd in the anchor's venv, else a loud NOT RUN).

Both train the same CNN on the first 6000 Fashion-MNIST images for 2
epochs, checkpoint every 10 steps to a directory both hosts share, and may
restart 3 times. A launcher that has not completed a step after the restore
within --budget seconds of the kill counts as "did not recover within
BUDGET s"; one whose survivor exits first counts as failed. The table says
which, with what the survivor printed; nothing is asserted.

Each run gets a fresh lab (namespaces named ddpnl-<pid>-<n>-*, a 10.A.B.0/24
subnet) that is removed, with every process in it, when the run ends, fails,
or the benchmark is interrupted (Ctrl-C, SIGTERM). Needs root and iproute2.

    bench/node_loss.py [--repeats 3] [--budget 120] [--build build/bin] [--keep-logs DIR]
"""
import argparse
import os
import queue
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import anchors

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
IP = shutil.which("ip") or "/usr/sbin/ip"

STEP = re.compile(r"step (\d+) done at ([0-9.]+)")
# examples/train says "... on 6000 images: 2 ranks x ..."; node_loss_torch.py says "world 2".
WORLD = re.compile(r"(?:\b(\d+) ranks x|^(?:\[rank\d+\]:)?world (\d+)$)")
RESUMED = re.compile(r"resumed from (\S+) at step (\d+)")
HEALED = re.compile(r"healed in generation (\d+)")
EPOCH = re.compile(r"(\d+) per epoch, batch (\d+) per rank")
WAITS = "node(s) wait to join"
WARMED = "warmed up"



# ---- The lab: hosts made of network namespaces ----------------------------

class Lab:
    """`hosts` network namespaces, each with lo up and one end of a veth pair
    holding 10.A.B.(i+1)/24, the other end a port of a bridge that lives in a
    namespace of its own (the root namespace's network is never touched).
    The Python twin of tests/support/netns.cpp."""

    count = 0

    def __init__(self, hosts):
        Lab.count += 1
        pid, n = os.getpid(), Lab.count
        self.hosts = hosts
        self.prefix = "ddpnl-%d-%d" % (pid, n)
        tag = "%sx%s" % (base36(pid), base36(n))  # interface names: 15 characters at most
        self.bridge_ns, self.bridge_if = self.prefix + "-br", "br" + tag
        self.ns = [self.prefix + "-h%d" % i for i in range(hosts)]
        self.host_if = ["v%sh%d" % (tag, i) for i in range(hosts)]  # in host i's namespace
        self.port_if = ["v%sb%d" % (tag, i) for i in range(hosts)]  # in the bridge namespace
        v = (pid * 40503 + n) & 0xFFFF
        self.addr = ["10.%d.%d.%d" % (v >> 8, v & 0xFF, i + 1) for i in range(hosts)]
        self.made = []   # namespaces made so far, for destroy()
        self.procs = []  # Popen objects of what was started in the lab

    def create(self):
        def ip(*args):
            subprocess.run([IP] + list(args), check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

        def add_ns(name):
            ip("netns", "add", name)
            self.made.append(name)

        add_ns(self.bridge_ns)
        ip("-n", self.bridge_ns, "link", "add", self.bridge_if, "type", "bridge")
        ip("-n", self.bridge_ns, "link", "set", self.bridge_if, "up")
        for i, h in enumerate(self.ns):
            add_ns(h)
            ip("-n", h, "link", "set", "lo", "up")
            # Made inside host i with the peer sent straight to the bridge namespace.
            ip("-n", h, "link", "add", self.host_if[i], "type", "veth", "peer", "name", self.port_if[i],
               "netns", self.bridge_ns)
            ip("-n", self.bridge_ns, "link", "set", self.port_if[i], "master", self.bridge_if)
            ip("-n", self.bridge_ns, "link", "set", self.port_if[i], "up")
            ip("-n", h, "addr", "add", self.addr[i] + "/24", "dev", self.host_if[i])
            ip("-n", h, "link", "set", self.host_if[i], "up")

    def spawn(self, i, argv, env=None, out=subprocess.PIPE):
        """Starts argv on host i, its stdout and stderr together into a pipe.
        The host also gets a hostname of its own (a UTS namespace), its
        address: torchrun publishes its hostname as MASTER_ADDR and decides
        whether it hosts the c10d store by it, as it would on real hosts."""
        wrapped = [IP, "netns", "exec", self.ns[i], "unshare", "--uts", "/bin/sh", "-c",
                   'hostname "$0" && exec "$@"', self.addr[i]] + argv
        p = subprocess.Popen(wrapped, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                             env=env, start_new_session=True)  # Ctrl-C reaches only us; we stop them
        self.procs.append(p)
        return p

    def pids(self, i):
        """Every process in host i's network namespace."""
        out = subprocess.run([IP, "netns", "pids", self.ns[i]], capture_output=True, text=True).stdout
        return [int(x) for x in out.split()]

    def kill_worker(self, i, agent):
        """SIGKILLs the worker of the agent with pid `agent` on host i (not a
        warm standby: those hold DDPRUN_STANDBY_FD). Returns the time of the kill."""
        for p in self.pids(i):
            try:
                with open("/proc/%d/stat" % p) as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                with open("/proc/%d/environ" % p, "rb") as f:
                    standby = b"DDPRUN_STANDBY_FD=" in f.read()
            except (OSError, ValueError, IndexError):
                continue
            if ppid == agent and not standby:
                t = time.time()
                kill(p)
                return t
        raise RuntimeError("no worker of agent %d on host %d" % (agent, i))

    def kill_host(self, i, first):
        """SIGKILLs process `first` (the node's agent), then everything else
        left on host i: the host is gone. Returns the time of the first kill."""
        rest = [p for p in self.pids(i) if p != first]
        t = time.time()
        kill(first)
        for p in rest:
            kill(p)
        return t

    def destroy(self):
        """Kills every process in the lab, then deletes its namespaces (which
        takes every link with them). Safe to call on a half-made lab."""
        for _ in range(50):
            left = [p for i in range(self.hosts) if self.ns[i] in self.made for p in self.pids(i)]
            if not left:
                break
            for p in left:
                kill(p)
            time.sleep(0.1)
        else:
            print("node_loss: processes still in the lab: %s" % left, file=sys.stderr)
        for p in self.procs:
            kill(p.pid)
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                print("node_loss: pid %d would not exit" % p.pid, file=sys.stderr)
        for name in reversed(self.made):
            r = subprocess.run([IP, "netns", "delete", name], capture_output=True, text=True)
            if r.returncode != 0:
                print("node_loss: cannot delete netns %s: %s" % (name, r.stderr.strip()), file=sys.stderr)
        self.made = []


def base36(v):
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    s = ""
    while True:
        s = digits[v % 36] + s
        v //= 36
        if not v:
            return s


def kill(pid):
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


# ---- One measurement ------------------------------------------------------

def watch(node, proc, log_path, lines):
    """Copies proc's output to log_path (each line after the unix time it
    came) and, as (node, time, line), to `lines`; (node, time, None) at its end."""
    with open(log_path, "w") as log:
        for line in iter(proc.stdout.readline, b""):
            text, now = line.decode(errors="replace").rstrip("\n"), time.time()
            log.write("%.3f %s\n" % (now, text))
            log.flush()
            lines.put((node, now, text))
    lines.put((node, time.time(), None))


def last_words(tail):
    """The survivor's last line that says something (skips step lines)."""
    for line in reversed(tail):
        if line.strip() and not STEP.search(line):
            return line.strip()[:160]
    return "(nothing)"


def start_etcd(lab, host, data_dir, log_path, v2=False):
    """One etcd member (Debian's etcd-server) on lab host `host`, clients at
    its address:2379 (lab.etcd); v2: its v2 API on too (torchrun's etcd-v2
    backend speaks only that). Returns once it answers, or raises."""
    url = "http://%s:2379" % lab.addr[host]
    with open(log_path, "w") as log:
        lab.spawn(host, ["etcd", "--name", "bench", "--data-dir", data_dir, "--listen-client-urls", url,
                         "--advertise-client-urls", url, "--listen-peer-urls", "http://%s:2380" % lab.addr[host]]
                  + (["--enable-v2"] if v2 else []), out=log)
    deadline = time.time() + 30
    while subprocess.run([IP, "netns", "exec", lab.ns[host], "etcdctl", "--endpoints", url, "endpoint", "health"],
                         capture_output=True).returncode:
        if time.time() > deadline:
            raise RuntimeError("etcd on host %d did not answer in 30 s" % host)
        time.sleep(0.1)  # polling etcd's health, not a synchronisation
    lab.etcd = "%s:2379" % lab.addr[host]


def node_loss_once(node_cmd, env_for, logs, budget, kill_at, start_timeout, spare=False, worker=False,
                   nodes=2, victim=1, watcher=0, etcd=None, first_says=None):
    """One run on a fresh lab. Returns (seconds or None, what happened, {milestone: seconds after the kill}).
    spare: a third node joins before the kill and waits; node 0 heals instead of restoring.
    worker: only node 1's worker is killed, not its host.
    nodes: how many nodes train before the kill; victim: the node killed (0: the
    one that serves the rendezvous); watcher: the survivor whose next step counts.
    etcd: "v3" or "v2": one more host runs an etcd member (lab.etcd) first.
    first_says: node 0 starts alone until it prints this (it then serves the rendezvous)."""
    lab = Lab((3 if spare else nodes) + (1 if etcd else 0))
    ckpt = tempfile.mkdtemp(prefix="ddprun-node-loss-")
    lines = queue.Queue()
    try:
        lab.create()
        if etcd:
            try:
                start_etcd(lab, lab.hosts - 1, ckpt + ".etcd", os.path.join(logs, "etcd.log"),
                           v2=etcd == "v2")
            except (OSError, RuntimeError) as e:
                return None, "SETUP FAILED: %s" % e, {}
        procs = []

        def next_line(deadline):
            """The next (node, time, line), or None once `deadline` passes."""
            try:
                return lines.get(timeout=max(0.0, deadline - time.time()))
            except queue.Empty:
                return None

        early = []  # node 0's lines while it starts alone, for step 1
        for i in range(nodes):
            procs.append(lab.spawn(i, node_cmd(lab, i, ckpt), env_for(lab, i)))
            threading.Thread(target=watch, args=(i, procs[i], os.path.join(logs, "node%d.log" % i), lines),
                             daemon=True).start()
            while i == 0 and first_says:
                got = next_line(time.time() + start_timeout)
                if got is None or got[2] is None:
                    return None, "SETUP FAILED: node 0 never said %r" % first_says, {}
                early.append(got)
                if first_says in got[2]:
                    break
        for got in early:
            lines.put(got)

        # 1. Wait until every node is in the job (world `nodes`) and it has
        #    trained kill_at steps since. Any node's worker may be rank 0 before the kill.
        deadline, world, step, per_epoch = time.time() + start_timeout, 0, 0, 0
        while not (world == nodes and step >= kill_at):
            got = next_line(deadline)
            if got is None:
                return None, "SETUP FAILED: no %d-node training reached step %d in %d s" % (
                    nodes, kill_at, start_timeout), {}
            node, _, line = got
            if line is None:
                return None, "SETUP FAILED: node %d exited (code %s) before the kill" % (
                    node, procs[node].wait()), {}
            m, s, e = WORLD.search(line), STEP.search(line), EPOCH.search(line)
            if e:
                per_epoch = -(-int(e.group(1)) // int(e.group(2)))  # steps an epoch
            if m:
                world, step = int(m.group(1) or m.group(2)), 0
            elif s and world == nodes:
                step = int(s.group(1))

        # 1b. The spare joins, waits for a place, and warms its worker up.
        if spare:
            procs.append(lab.spawn(2, node_cmd(lab, 2, ckpt), env_for(lab, 2)))
            threading.Thread(target=watch, args=(2, procs[2], os.path.join(logs, "node2.log"), lines),
                             daemon=True).start()
            deadline, waits, warmed = time.time() + start_timeout, False, False
            while not (waits and warmed):
                got = next_line(deadline)
                if got is None or got[2] is None:
                    return None, "SETUP FAILED: the spare did not wait and warm up (node %s ended)" % (
                        got[0] if got else "none"), {}
                node, _, line = got
                waits = waits or (node == 0 and WAITS in line)
                warmed = warmed or (node == 2 and WARMED in line)
            # A spare waits for a failure a long time on a real job: give its
            # warm worker the two seconds it takes to load and wait ready.
            settle = time.time() + 2
            while True:
                got = next_line(settle)
                if got is None:
                    break
                if got[2] is None:
                    return None, "SETUP FAILED: node %d ended while the spare warmed up" % got[0], {}
            # Then the kill lands mid-epoch, as in the other runs: a failure in
            # the evaluation at an epoch's end is no step and restarts.
            while per_epoch:
                got = next_line(deadline)
                if got is None or got[2] is None:
                    return None, "SETUP FAILED: no step mid-epoch after the spare warmed up", {}
                s = STEP.search(got[2]) if got[0] == 0 else None
                if s and kill_at <= int(s.group(1)) % per_epoch <= per_epoch - kill_at:
                    break

        # 2. The victim's host dies (or only node 1's worker).
        killed_at = lab.kill_worker(1, procs[1].pid) if worker else lab.kill_host(victim, procs[victim].pid)

        # 3. Wait on node 0 for "resumed from", then its next step. On the way,
        #    note when the survivor first said anything (its worker's error),
        #    when its new workers came up (their world line) and when they
        #    had loaded the checkpoint: seconds after the kill.
        deadline, resumed, tail, marks = killed_at + budget, None, [], {}
        while True:
            got = next_line(deadline)
            if got is None:
                state = "resumed from step %s, no step since" % resumed if resumed else "no restore"
                return None, "did not recover within %d s (%s; survivor last said: %s)" % (
                    budget, state, last_words(tail)), marks
            node, at, line = got
            if node != watcher:
                continue
            if line is None:
                return None, "failed: survivor exited with code %s within %d s (last said: %s)" % (
                    procs[watcher].wait(), budget, last_words(tail)), marks
            tail = (tail + [line])[-50:]
            if not STEP.search(line):
                marks.setdefault("noticed", at - killed_at)
            m = WORLD.search(line)
            if m:
                world = int(m.group(1) or m.group(2))
                marks["world"] = at - killed_at
            r = RESUMED.search(line)
            if r:
                resumed = r.group(2)
                marks["resumed"] = at - killed_at
            h = HEALED.search(line)
            if h:
                resumed = "heal"
                marks["healed"] = at - killed_at
            s = STEP.search(line)
            if s and resumed == "heal":
                how = ("healed with the spare's worker" if spare else
                       "healed with node 1's replacement worker" if worker else
                       "shrank to world %d and healed" % (nodes - 1))
                return float(s.group(2)) - killed_at, "recovered: %s, no restart" % how, marks
            if s and resumed:
                return float(s.group(2)) - killed_at, "recovered: resumed from step %s's checkpoint, world %d" % (
                    resumed, world), marks
    finally:
        lab.destroy()
        shutil.rmtree(ckpt, ignore_errors=True)
        shutil.rmtree(ckpt + ".etcd", ignore_errors=True)


def measure(name, node_cmd, env_for, args, **where):
    """--repeats runs; returns (seconds or None, outcomes, milestones), a list each.
    where: node_loss_once's nodes, victim and watcher."""
    times, outcomes, marks = [], [], []
    for r in range(args.repeats):
        logs = os.path.join(args.logs, "%s-%d" % (name, r))
        os.makedirs(logs, exist_ok=True)
        t, what, m = node_loss_once(node_cmd, env_for, logs, args.budget, args.kill_at, args.start_timeout,
                                    spare=name.endswith("spare"), worker=name.endswith("worker"), **where)
        print("  %s run %d: %s  %s  %s" % (name, r + 1, "-" if t is None else "%.2f s" % t, what,
                                           " ".join("%s +%.2f" % kv for kv in m.items())), file=sys.stderr, flush=True)
        times.append(t)
        outcomes.append(what)
        marks.append(m)
    return times, outcomes, marks


# ---- The two launchers ----------------------------------------------------

def ddprun_node(args, flags=(), nnodes="1:2", pinned=2, etcd=False):
    """The multi-node tests' NetNodes job (tests/integration/multinode_test.cpp);
    nodes from `pinned` on are spares (no --node-rank: they take a lost one's).
    From 3 nodes (--nnodes 2:3) the default backend is the embedded control plane;
    etcd: --rdzv-backend etcd, the lab's etcd member as the endpoint."""
    def cmd(lab, i, ckpt):
        pin = ["--node-rank", str(i)] if i < pinned else []
        return [os.path.join(args.build, "ddprun"), "--nnodes", nnodes, "--nproc", "1"] + list(flags) + pin + [
                "--rdzv-endpoint", lab.etcd if etcd else lab.addr[0] + ":29400", "--rdzv-id", "lab",
                "--max-restarts", "3",
                "--stop-timeout", "3",
                os.path.join(args.build, "train"), "--limit", "6000", "--epochs", "2", "--print-steps",
                "--checkpoint-dir", ckpt, "--checkpoint-every", "10"]
    return cmd


def torchrun_node(args, launcher=None, nnodes="1:2", backend="c10d"):
    """torchrun's c10d rendezvous, hosted by node 0's agent (its hostname is the endpoint's address);
    launcher: another torchrun-like command (NVRx's ft_launcher); backend etcd-v2: the lab's etcd member."""
    def cmd(lab, i, ckpt):
        return (launcher or anchors.torchrun(args.python)) + [
                "--monitor_interval", "0.1", "--nnodes", nnodes, "--nproc_per_node", "1",
                "--rdzv_backend", backend, "--rdzv_endpoint", lab.addr[0] + ":29500" if backend == "c10d" else lab.etcd,
                "--rdzv_id", "job",
                "--max_restarts", "3",
                os.path.join(HERE, "node_loss_torch.py"), "--limit", "6000", "--epochs", "2",
                "--checkpoint-dir", ckpt, "--checkpoint-every", "10"]
    return cmd


def torch_env(lab, i):
    # Gloo binds to the host's veth; the rest of the environment as it is.
    return dict(os.environ, GLOO_SOCKET_IFNAME=lab.host_if[i], PYTHONUNBUFFERED="1")


MILESTONES = [("noticed", "survivor's worker failed"), ("world", "new workers up alone"),
              ("resumed", "checkpoint loaded"), ("healed", "healed")]


def seconds_or_none(med, budget):
    """A table's seconds: the median, or that none recovered within the budget."""
    return "> %d (no recovery)" % budget if med is None else "%.2f" % med


def summary(times, outcomes, marks):
    """(median or None, min..max text, what happened text) of one launcher's runs."""
    ok = [t for t in times if t is not None]
    what = "; ".join(sorted(set(re.sub(r"step \d+", "step N", o) for o in outcomes)))
    seen = [(label, [m[k] for m in marks if k in m]) for k, label in MILESTONES]
    steps = ", ".join("%s +%.1f s" % (label, statistics.median(v)) for label, v in seen if v)
    if steps:
        what += " (median after the kill: %s)" % steps
    if len(ok) < len(times):
        what = "%d of %d runs recovered: %s" % (len(ok), len(times), what)
    # A run that did not recover counts as endless: it can only raise the median.
    med = statistics.median([float("inf") if t is None else t for t in times])
    spread = "%.2f..%.2f" % (min(ok), max(ok)) if ok else "-"
    return (None if med == float("inf") else med), spread, what


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=3, help="runs per launcher (ddprun's median is over these)")
    p.add_argument("--torchrun-repeats", type=int, default=None, help="runs of torchrun [--repeats]")
    p.add_argument("--budget", type=float, default=120, help="seconds after the kill before it counts as no recovery")
    p.add_argument("--kill-at", type=int, default=25, help="kill once the 2-node job has done this many steps")
    p.add_argument("--start-timeout", type=float, default=300, help="seconds allowed to reach --kill-at")
    p.add_argument("--build", default=os.path.join(ROOT, "build", "bin"))
    p.add_argument("--python", default=None, help="the Python whose torchrun 2.x is the anchor (build/torch2-venv's)")
    p.add_argument("--keep-logs", metavar="DIR", help="keep every node's output under DIR (else a temp dir, removed)")
    p.add_argument("--only-host-loss", action="store_true",
                   help="run only the second table: 3 nodes, the node that serves the rendezvous lost")
    args = p.parse_args()
    if os.geteuid() != 0:
        sys.exit("node_loss: needs root (network namespaces)")
    args.logs = args.keep_logs or tempfile.mkdtemp(prefix="ddprun-node-loss-logs-")

    # SIGTERM and SIGHUP unwind like Ctrl-C, so every finally (lab.destroy) runs.
    def interrupted(signum, frame):
        raise KeyboardInterrupt()
    signal.signal(signal.SIGTERM, interrupted)
    signal.signal(signal.SIGHUP, interrupted)

    if args.only_host_loss:
        try:
            return host_loss(args)
        finally:
            if not args.keep_logs:
                shutil.rmtree(args.logs, ignore_errors=True)
    try:
        ours = summary(*measure("ddprun", ddprun_node(args, ["--max-heals", "0"]), lambda lab, i: None, args))
        shrunk = summary(*measure("ddprun-shrink", ddprun_node(args), lambda lab, i: None, args))
        spared = summary(*measure("ddprun-spare", ddprun_node(args), lambda lab, i: None, args))
        replaced = summary(*measure("ddprun-worker", ddprun_node(args), lambda lab, i: None, args))
        anchor_note = None
        args.python = anchors.torch2_python(args.python)
        if not args.python:
            anchor_note = anchors.missing("torchrun 2.x", "build/torch2-venv is missing (scripts/setup-torch2.sh)")
        else:
            args.anchor_label = anchors.torchrun_label(args.python)
        if anchor_note is None:
            reps = argparse.Namespace(**dict(vars(args), repeats=args.torchrun_repeats or args.repeats))
            theirs = summary(*measure("torchrun", torchrun_node(args), torch_env, reps))
            if "SETUP FAILED" in theirs[2]:
                anchor_note = "ANCHOR DID NOT RUN: " + theirs[2]
        else:
            theirs = (None, "-", anchor_note)
        ft_python, ft_why = anchors.anchors_python() if anchor_note is None else (None, "no PyTorch 2.x")
        if ft_python:
            args.nvrx_label = "NVRx %s ft_launcher" % anchors.package_version(ft_python, "nvidia-resiliency-ext")
            ft = [os.path.join(os.path.dirname(ft_python), "ft_launcher")]
            quiet_env = lambda lab, i: dict(torch_env(lab, i), PYTHONWARNINGS="ignore")
            nvrx = summary(*measure("ft_launcher", torchrun_node(args, ft), quiet_env, reps))
        else:
            nvrx = (None, "-", anchors.missing("NVRx ft_launcher", ft_why))
    finally:
        if not args.keep_logs:
            shutil.rmtree(args.logs, ignore_errors=True)

    print("## Node loss on separate hosts: 2 nodes x 1 worker (network namespaces), SIGKILL of node 1's agent "
          "at step %d -> first step after restore on node 0; median of %d, budget %d s\n"
          % (args.kill_at, args.repeats, args.budget))
    print("| launcher | kill -> first step after restore (s) | min..max s | what happened |")
    print("|---|---:|---:|---|")
    fmt = lambda med: seconds_or_none(med, args.budget)
    print("| ddprun + train (C++), --max-heals 0: restart from the checkpoint | %s | %s | %s |" % (
        fmt(ours[0]), ours[1], ours[2]))
    print("| ddprun + train (C++), no spare: the job shrinks, node 0 heals alone (first step after the heal) "
          "| %s | %s | %s |" % (fmt(shrunk[0]), shrunk[1], shrunk[2]))
    print("| ddprun + train (C++), a spare node waiting: it takes over, node 0 heals (first step after the heal) "
          "| %s | %s | %s |" % (fmt(spared[0]), spared[1], spared[2]))
    print("| ddprun + train (C++), only node 1's worker killed: replaced there, node 0 heals with it "
          "(first step after the heal) | %s | %s | %s |" % (fmt(replaced[0]), replaced[1], replaced[2]))
    if anchor_note:
        print("| **torchrun (anchor)** | **%s** | - | - |" % anchor_note)
    else:
        print("| %s + PyTorch DDP script (anchor) | %s | %s | %s |" % (args.anchor_label, fmt(theirs[0]), theirs[1],
                                                                     theirs[2]))
    if ft_python:
        print("| %s + PyTorch DDP script | %s | %s | %s |" % (args.nvrx_label, fmt(nvrx[0]), nvrx[1], nvrx[2]))
    else:
        print("| **NVRx ft_launcher** | **%s** | - | - |" % nvrx[2])
    print("| **torchft** | **NOT RUN here: its unit of failure is a replica group, which bench/recovery.py "
          "kills on one host; across these namespace hosts its Lighthouse would need a third host** | - | - |")
    print()
    if ours[0] is None:
        print("ddprun / torchrun: no ratio, ddprun did not recover")
    elif anchor_note:
        print("ddprun / torchrun: no ratio, THE ANCHOR DID NOT RUN")
    elif theirs[0] is None:
        print("ddprun / torchrun < %.3f (torchrun did not recover within %d s; ddprun %.2f s)"
              % (ours[0] / args.budget, args.budget, ours[0]))
    else:
        ratio = ours[0] / theirs[0]
        print("ddprun (restart) / torchrun = %.3f (1/%.1f)" % (ratio, 1 / ratio))
        if shrunk[0] is not None:
            ratio = shrunk[0] / theirs[0]
            print("ddprun (shrink, no restart) / torchrun = %.4f (1/%.0f)" % (ratio, 1 / ratio))
    print()
    host_loss(args)
    if args.keep_logs:
        print("\nnode logs: %s" % args.keep_logs)


def etcd_v2_client_missing(python):
    """Why torchrun's etcd-v2 backend cannot run with `python` ("" when it can)."""
    if not shutil.which("etcd"):
        return "etcd is not installed (apt-get install etcd-server)"
    r = subprocess.run([python, "-c", "import etcd"], capture_output=True, text=True)
    if r.returncode != 0:
        return ("its client, python-etcd, is not in %s (pip install python-etcd: the v2 API's client, "
                "unmaintained since 2018)" % os.path.dirname(os.path.dirname(python)))
    return ""


def host_loss(args):
    """The second table: 3 nodes, SIGKILL of node 0's host (the node that
    serves the rendezvous) -> node 1's first step after; and of node 2's (any
    other node) -> node 0's, to show the serving node costs what any costs."""
    none = lambda lab, i: None
    three = dict(nodes=3, watcher=1, victim=0)
    rows = []
    embedded = dict(three, first_says="starting job lab's control plane")
    rows.append(("ddprun + train (C++), embedded control plane (the default from 3 nodes): serving node 0 lost",
                 summary(*measure("ddprun-embedded-host", ddprun_node(args, nnodes="2:3", pinned=3), none, args,
                                  **embedded))))
    rows.append(("ddprun + train (C++), embedded control plane: node 2 lost (not serving)",
                 summary(*measure("ddprun-embedded-other", ddprun_node(args, nnodes="2:3", pinned=3), none, args,
                                  **dict(embedded, victim=2, watcher=0)))))
    if shutil.which("etcd"):
        rows.append(("ddprun + train (C++), --rdzv-backend etcd (1 etcd member on a 4th host): serving node 0 lost",
                     summary(*measure("ddprun-etcd-host", ddprun_node(args, ["--rdzv-backend", "etcd"], nnodes="2:3",
                                                                      pinned=3, etcd=True), none, args,
                                      **dict(three, etcd="v3", first_says="serves job lab's rendezvous")))))
    else:
        rows.append(("**ddprun --rdzv-backend etcd**",
                     (None, "-", anchors.missing("ddprun's etcd row", "etcd is not installed (apt-get install etcd-server)"))))
    python = anchors.torch2_python(args.python)
    if not python:
        why = anchors.missing("torchrun 2.x", "build/torch2-venv is missing (scripts/setup-torch2.sh)")
        rows.append(("**torchrun (anchor)**", (None, "-", why)))
    else:
        label = anchors.torchrun_label(python)
        args.python = python
        reps = argparse.Namespace(**dict(vars(args), repeats=args.torchrun_repeats or args.repeats))
        rows.append(("%s c10d + PyTorch DDP script (anchor): node 0 lost (it hosts the c10d store)" % label,
                     summary(*measure("torchrun-host", torchrun_node(args, nnodes="2:3"), torch_env, reps, **three))))
        why = etcd_v2_client_missing(python)
        if why:
            rows.append(("**%s etcd-v2 (anchor)**" % label, (None, "-", anchors.missing(label + " etcd-v2", why))))
        else:
            rows.append(("%s etcd-v2 (etcd 3.4, --enable-v2) + PyTorch DDP script (anchor): node 0 lost" % label,
                         summary(*measure("torchrun-etcd-v2-host", torchrun_node(args, nnodes="2:3", backend="etcd-v2"),
                                          torch_env, reps, **dict(three, etcd="v2")))))
    print("## The node that serves the rendezvous lost: 3 nodes x 1 worker (network namespaces), SIGKILL of the "
          "node's host at step %d -> a survivor's first step after; median of %d, budget %d s\n"
          % (args.kill_at, args.repeats, args.budget))
    print("| launcher | kill -> first step after (s) | min..max s | what happened |")
    print("|---|---:|---:|---|")
    for name, (med, spread, what) in rows:
        if med is None and spread == "-" and "NOT RUN" in what:
            print("| %s | **%s** | - | - |" % (name, what))
        else:
            print("| %s | %s | %s | %s |" % (name, seconds_or_none(med, args.budget), spread, what))
    served, other = rows[0][1][0], rows[1][1][0]
    if served is not None and other is not None:
        print("\nserving node lost / other node lost (embedded) = %.2f" % (served / other))


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit("node_loss: interrupted; the labs were removed")
