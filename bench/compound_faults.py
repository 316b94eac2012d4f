"""Compound faults for bench/reliability.py --compound: a second thing goes
wrong while a heal is under way, and the job must still end right.

- node lost during a heal: three agents on loopback (--nnodes 2:3, one
  worker each); node 1's worker is killed and, as soon as node 1 says its
  replacement heals, node 2's agent is killed. The round must shrink past
  node 2 and the replacement connect the world of 2 (no restart, no store
  timeout): the job ends on nodes 0 and 1 with identical parameters.
- backend fallback during a heal: four workers on shared memory in a mount
  namespace whose /dev/shm is a 64 MiB tmpfs; every segment is held open
  and the rest filled, then a worker is killed: the healed group connects
  over Gloo, summing rank by rank, and must end bit for bit as the
  uninterrupted run on shared memory (needs root for the tmpfs).
- paused replacement: four workers, --hang-timeout 3; the warm standbys
  are stopped, then a worker is killed: the standby released as its
  replacement never beats, is found hung, and is replaced afresh; the job
  must end bit for bit as the uninterrupted run.

Each returns a row: (fault, outcome, detail, seconds)."""
import os
import re
import selectors
import signal
import socket
import subprocess
import time

from recovery import children, working_children

STEP = re.compile(r"step (\d+) done")


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Watched:
    """Processes whose output lines are read as they come (no threads)."""

    def __init__(self):
        self.sel = selectors.DefaultSelector()
        self.procs = {}
        self.text = {}

    def start(self, name, cmd, env=None):
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             env=dict(os.environ, **(env or {})))
        self.procs[name] = p
        self.text[name] = {"out": [], "err": []}
        for stream, key in ((p.stdout, "out"), (p.stderr, "err")):
            os.set_blocking(stream.fileno(), False)
            self.sel.register(stream, selectors.EVENT_READ, (name, key, [b""]))
        return p

    def pump(self, timeout=0.5):
        """Reads what came; returns [(name, stream, line)]."""
        got = []
        for key, _ in self.sel.select(timeout=timeout):
            name, stream, buf = key.data
            try:
                chunk = os.read(key.fileobj.fileno(), 65536)
            except BlockingIOError:
                continue
            if not chunk:
                self.sel.unregister(key.fileobj)
                if buf[0]:
                    got.append((name, stream, buf[0].decode(errors="replace")))
                continue
            buf[0] += chunk
            *lines, buf[0] = buf[0].split(b"\n")
            for raw in lines:
                line = raw.decode(errors="replace")
                self.text[name][stream].append(line)
                got.append((name, stream, line))
        return got

    def wait_for(self, pred, deadline):
        """Pumps until pred(name, stream, line) holds; False at the deadline."""
        while time.monotonic() < deadline:
            for name, stream, line in self.pump():
                if pred(name, stream, line):
                    return True
            if all(p.poll() is not None for p in self.procs.values()) and not self.sel.get_map():
                return False
        return False

    def finish(self, deadline):
        while self.sel.get_map() and time.monotonic() < deadline:
            self.pump()
        for p in self.procs.values():
            if p.poll() is None:
                p.kill()
            p.wait()
        return {name: p.returncode for name, p in self.procs.items()}

    def err(self, name):
        return "\n".join(self.text[name]["err"])

    def out(self, name):
        return "\n".join(self.text[name]["out"])


def _kill_tree(pid, sig=signal.SIGKILL):
    for c in children(pid):
        _kill_tree(c, sig)
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def node_lost_during_heal(args, train):
    ddprun = os.path.join(args.build, "ddprun")
    port = _free_port()
    env = {"DDPRUN_CPU_COMM": "gloo", "OMP_NUM_THREADS": "1", "DDPRUN_TIMEOUT_S": "60"}
    w = Watched()
    started = time.monotonic()
    for i in range(3):
        w.start(i, [ddprun, "--nnodes", "2:3", "--nproc", "1", "--node-rank", str(i), "--rdzv-endpoint",
                    "127.0.0.1:%d" % port, "--rdzv-id", "compound-%d" % port, "--max-restarts", "3",
                    "--rdzv-conf", "join_timeout=120,last_call_timeout=60"] + train("node-lost"), env)
    deadline = started + args.budget
    if not w.wait_for(lambda n, s, l: n == 0 and (m := STEP.search(l)) and int(m.group(1)) >= 30, deadline):
        w.finish(time.monotonic())
        return ("node lost during a heal", "FAILED", "never reached step 30", time.monotonic() - started)
    victim = working_children(w.procs[1].pid)
    if not victim:
        w.finish(time.monotonic())
        return ("node lost during a heal", "FAILED", "node 1 has no worker", time.monotonic() - started)
    os.kill(victim[0], signal.SIGKILL)
    healing = w.wait_for(lambda n, s, l: n == 1 and "heals from the other workers in generation" in l, deadline)
    _kill_tree(w.procs[2].pid)  # node 2 with its worker, while node 1's replacement connects
    codes = w.finish(deadline)
    shrunk = "the job goes on with 2 node(s), world size 2" in w.err(0)
    restarted = any("restarting the workers" in w.err(n) for n in (0, 1))
    same = "parameters identical on all 2 ranks" in w.out(0)
    ok = healing and codes[0] == 0 and codes[1] == 0 and shrunk and not restarted and same
    detail = "exit %d/%d, %s, %s, %s" % (codes[0], codes[1], "shrank to 2" if shrunk else "did not shrink",
                                         "restarted" if restarted else "no restart",
                                         "parameters identical" if same else "parameters not checked")
    return ("node lost during a heal", "ok" if ok else "FAILED", detail, time.monotonic() - started)


def _held_and_filled(shm, pids):
    """Holds every file in shm and every segment pids map from it, then fills the rest."""
    fds = []
    for name in os.listdir(shm):
        try:
            fds.append(os.open(os.path.join(shm, name), os.O_RDONLY))
        except OSError:
            pass
    for pid in pids:
        d = "/proc/%d/map_files" % pid
        try:
            entries = os.listdir(d)
        except OSError:
            continue
        for e in entries:
            try:
                if os.readlink(os.path.join(d, e)).startswith("/dev/shm/"):
                    fds.append(os.open(os.path.join(d, e), os.O_RDONLY))
            except OSError:
                pass
    fill = os.open(os.path.join(shm, "reliability-filler"), os.O_RDWR | os.O_CREAT, 0o600)
    fds.append(fill)
    st = os.fstatvfs(fill)
    free = st.f_bavail * st.f_frsize
    if free > (512 << 10):
        os.posix_fallocate(fill, 0, free - (512 << 10))
    return fds


def fallback_during_heal(args, job_cmd, checksum, reference):
    if os.geteuid() != 0 or not os.path.exists("/usr/bin/unshare"):
        return ("backend fallback during a heal", "NOT RUN", "needs root and unshare to mount a tmpfs on /dev/shm", 0)
    started = time.monotonic()
    summary = os.path.join(args.work, "fallback.json")
    cmd = ["/usr/bin/unshare", "--mount", "--propagation", "private", "sh", "-c",
           "mount -t tmpfs -o size=64m,mode=1777 tmpfs /dev/shm || exit 99; exec \"$@\"", "sh"] + job_cmd(summary)
    w = Watched()
    p = w.start("job", cmd, {"DDPRUN_CPU_COMM": "auto"})
    deadline = started + args.budget
    if not w.wait_for(lambda n, s, l: (m := STEP.search(l)) and int(m.group(1)) >= 15, deadline):
        codes = w.finish(time.monotonic())
        if codes["job"] == 99:
            return ("backend fallback during a heal", "NOT RUN", "cannot mount a tmpfs here", 0)
        return ("backend fallback during a heal", "FAILED", "never reached step 15", time.monotonic() - started)
    ddprun = p.pid  # unshare execs sh, which execs ddprun: one process
    workers = working_children(ddprun)
    held = _held_and_filled("/proc/%d/root/dev/shm" % ddprun, workers)
    try:
        os.kill(workers[1], signal.SIGKILL)
        fell_back = w.wait_for(lambda n, s, l: "summed rank by rank" in l, deadline)
        w.wait_for(lambda n, s, l: "joined at step" in l, deadline)
    finally:
        for fd in held:
            os.close(fd)
    codes = w.finish(deadline)
    got = checksum(summary)
    ok = codes["job"] == 0 and fell_back and got == reference
    detail = "%s, checksum %s %s %s" % ("fell back to Gloo" if fell_back else "did not fall back", got or "none",
                                        "==" if got == reference else "!=", reference)
    return ("backend fallback during a heal", "bitwise equal" if ok else "FAILED", detail, time.monotonic() - started)


def paused_replacement(args, job_cmd, checksum, reference):
    started = time.monotonic()
    summary = os.path.join(args.work, "paused.json")
    w = Watched()
    p = w.start("job", job_cmd(summary, ["--hang-timeout", "3"]), {"DDPRUN_CPU_COMM": "shm"})
    deadline = started + args.budget
    if not w.wait_for(lambda n, s, l: (m := STEP.search(l)) and int(m.group(1)) >= 15, deadline):
        w.finish(time.monotonic())
        return ("paused replacement", "FAILED", "never reached step 15", time.monotonic() - started)
    standbys = []
    while not standbys and time.monotonic() < deadline:
        workers = set(working_children(p.pid))
        standbys = [c for c in children(p.pid) if c not in workers and "ddprun-watchdog" not in _comm(c)]
        w.pump(0.05)
    for s in standbys:
        os.kill(s, signal.SIGSTOP)
    os.kill(sorted(working_children(p.pid))[2], signal.SIGKILL)
    codes = w.finish(deadline)
    got = checksum(summary)
    hung = "hung: a replacement that never beat" in w.err("job")
    ok = codes["job"] == 0 and hung and got == reference
    detail = "%s, checksum %s %s %s" % ("the paused replacement was found hung and replaced" if hung else
                                        "no hang found", got or "none", "==" if got == reference else "!=", reference)
    return ("paused replacement", "bitwise equal" if ok else "FAILED", detail, time.monotonic() - started)


def _comm(pid):
    try:
        with open("/proc/%d/comm" % pid) as f:
            return f.read()
    except OSError:
        return ""
