#!/usr/bin/env python3
"""Rendezvous round: the time for N simulated agents to complete one round
against one rendezvous server, ddprun against PyTorch's c10d rendezvous (the
anchor) in the same run. Goal: 10k agents in under 2 s.

ddprun: `rendezvous_round` (bench/rendezvous_round.cpp) issues N async Join
calls over a few gRPC channels, from the first Join sent to the last
response; the server runs in that process, and (unless --no-external) also
as `ddprun rendezvous` in a process of its own; and with its state saved in
a one-member etcd started here (each round's job served as its control
plane's leader: what --rdzv-backend etcd adds; NOT RUN without etcd); and
with it committed by a Raft group of 3 members in that process, each behind
a rendezvous service of its own (the embedded control plane, the default from
3 nodes).

c10d (anchor): torch 1.13's DynamicRendezvousHandler with a
C10dRendezvousBackend over one TCPStore, each of the N agents a thread with
its own handler and TCPStore connection, spread over --anchor-procs
processes; from the moment they are released to the last next_rendezvous()
returning. An anchor that does not finish within --anchor-timeout s (or
outgrows --anchor-max-rss-gb) is reported as not finished, with how many
agents the shared state held; one that cannot start (e.g. too few file
descriptors for the TCPStore) says why.

    /usr/bin/python3 bench/rendezvous_round.py [--nodes 1000,10000] [--repeats 3]
        [--anchor-timeout 120] [--anchor-procs 4] [--anchor-agents-per-connection 1]
        [--no-anchor] [--no-external]
        [--bench build/bin/rendezvous_round] [--ddprun build/bin/ddprun]

Prints a table; asserts nothing.
"""
import argparse
import datetime
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
ME = os.path.abspath(__file__)


# ---------------------------------------------------------------- ddprun

def run_ddprun(bench, nodes, repeats, target=None, etcd=None, raft_voters=0):
    """{N: (median s, min s, samples)} from one rendezvous_round run."""
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        cmd = [bench, "--nodes", ",".join(map(str, nodes)), "--repeats", str(repeats), "--out", out.name]
        if target:
            cmd += ["--target", target]
        if etcd:
            cmd += ["--etcd", etcd]
        if raft_voters:
            cmd += ["--raft-voters", str(raft_voters)]
        print("+ " + " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True)
        with open(out.name) as f:
            data = json.load(f)
    return {r["nodes"]: (r["median_s"], r["min_s"], r["samples"]) for r in data["results"]}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ddprun_etcd(bench, nodes, repeats):
    """The same with --rdzv-backend etcd's cost: every round's job served as
    its control plane's leader, its state saved in a one-member etcd started
    here (Debian's etcd-server). None, said loudly, when etcd is missing."""
    if not shutil.which("etcd"):
        print("**etcd is not installed: the etcd row is NOT RUN (apt-get install etcd-server)**", file=sys.stderr)
        return None
    client, peer = free_port(), free_port()
    with tempfile.TemporaryDirectory() as data:
        url = "http://127.0.0.1:%d" % client
        etcd = subprocess.Popen(["etcd", "--name", "bench", "--data-dir", data, "--listen-client-urls", url,
                                 "--advertise-client-urls", url, "--listen-peer-urls", "http://127.0.0.1:%d" % peer,
                                 "--initial-advertise-peer-urls", "http://127.0.0.1:%d" % peer,
                                 "--initial-cluster", "bench=http://127.0.0.1:%d" % peer],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 30
            while subprocess.run(["etcdctl", "--endpoints", url, "endpoint", "health"], capture_output=True).returncode:
                if time.monotonic() > deadline or etcd.poll() is not None:
                    print("**etcd did not start: the etcd row is NOT RUN**", file=sys.stderr)
                    return None
                time.sleep(0.1)  # polling etcd's health, not a synchronisation
            return run_ddprun(bench, nodes, repeats, etcd="127.0.0.1:%d" % client)
        finally:
            etcd.kill()
            etcd.wait()


def cpu_seconds(pid):
    """User + system CPU seconds a process has used so far."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_ddprun_external(ddprun, bench, nodes, repeats):
    """The same, against `ddprun rendezvous` in a process of its own; adds
    the server's CPU seconds per round to each N's figures."""
    server = subprocess.Popen([ddprun, "rendezvous", "--host", "127.0.0.1", "--port", "0"],
                              stdout=subprocess.PIPE, text=True)
    try:
        line = server.stdout.readline()
        prefix = "ddprun rendezvous: listening on "
        if not line.startswith(prefix):
            raise RuntimeError("ddprun rendezvous printed %r, not its address" % line)
        target = line[len(prefix):].strip()
        results = {}
        for n in nodes:
            cpu = cpu_seconds(server.pid)
            results.update(run_ddprun(bench, [n], repeats, target=target))
            results[n] = results[n] + ((cpu_seconds(server.pid) - cpu) / repeats,)
        return results
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


# ---------------------------------------------------------------- c10d anchor
#
# One c10d round runs in a session of its own (`--_anchor-run`, started by
# the driver): Linux's autogroup scheduling then gives its thousands of
# threads one share of the CPU, as one program, and the driver can kill the
# whole session. In it: one process hosts the TCPStore (`--_anchor-store`)
# and --anchor-procs processes hold the agents (`--_anchor-worker`). Every
# line they print is a word and its arguments; times are time.monotonic(),
# one clock for every process.

def die_with_parent():
    """SIGKILL this process when its parent goes (Linux prctl)."""
    try:
        import ctypes
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def raise_fd_limit(want=1 << 16):
    """Each TCPStore client holds two connections (one for its callback
    thread): 10k agents need more descriptors than the usual soft limit, in
    the store's process above all. Returns the limit this process got."""
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    for limit in ((max(want, hard), max(want, hard)), (hard, hard)):
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, limit)
            break
        except (ValueError, OSError):
            pass
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def yield_to_runner():
    """SCHED_IDLE for the anchor's busy processes, so that the runner, which
    shares their session (and their share of the CPU), can always watch the
    budget and stop them."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):
        pass


def anchor_store_main(run_id):
    """Hosts the TCPStore; prints its port, lives until stdin closes. For
    each "peek" line it prints how far the rendezvous state got."""
    import base64
    import pickle
    die_with_parent()
    raise_fd_limit()
    yield_to_runner()
    import torch.distributed as dist
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                          timeout=datetime.timedelta(seconds=600))
    print(store.port, flush=True)
    for line in sys.stdin:
        if line.strip() == "peek":
            try:
                state = pickle.loads(base64.b64decode(store.get("torch.rendezvous." + run_id)))
                print("%d %d %d" % (len(state.participants), state.complete, state.round), flush=True)
            except Exception:  # no state yet (the sentinel) or unreadable
                print("0 0 0", flush=True)
    os._exit(0)


def anchor_worker_main(port, run_id, nodes, count, join_timeout, per_connection):
    """count agents as threads: each a DynamicRendezvousHandler over its own
    TCPStore client (or one client per `per_connection` agents, where the
    store could not hold a connection per agent). Prints "made K" as it
    sets them up and "ready",
    waits for "go" on stdin, prints "go T" and one "done T RANK WORLD" (or
    "error ...") line per agent, then stays (the agents keep their
    heartbeats, as real ones do) until stdin closes."""
    die_with_parent()
    raise_fd_limit()
    yield_to_runner()
    import torch.distributed as dist
    from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import C10dRendezvousBackend
    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import (
        DynamicRendezvousHandler, RendezvousTimeout)

    out_lock = threading.Lock()

    def say(line):
        with out_lock:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()

    threading.stack_size(512 * 1024)
    timeout = RendezvousTimeout(join=datetime.timedelta(seconds=join_timeout))
    handlers = []
    for i in range(count):
        if i % per_connection == 0:
            store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=datetime.timedelta(seconds=600))
        backend = C10dRendezvousBackend(store, run_id)
        handlers.append(DynamicRendezvousHandler.from_backend(
            run_id, store, backend, min_nodes=nodes, max_nodes=nodes, timeout=timeout))
        if (i + 1) % 100 == 0:
            say("made %d" % (i + 1))
    go = threading.Event()

    def agent(h):
        go.wait()
        try:
            _, rank, world = h.next_rendezvous()
            say("done %.6f %d %d" % (time.monotonic(), rank, world))
        except Exception as e:  # reported, counted by the driver
            say("error %s: %s" % (type(e).__name__, str(e).replace("\n", " ")))

    threads = [threading.Thread(target=agent, args=(h,), daemon=True) for h in handlers]
    for t in threads:
        t.start()
    say("ready")
    if sys.stdin.readline().strip() != "go":
        os._exit(1)
    say("go %.6f" % time.monotonic())
    go.set()
    sys.stdin.read()
    os._exit(0)


def rss_bytes(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class Lines:
    """Collects the lines a child prints, from a thread of its own."""

    def __init__(self, proc):
        self.proc = proc
        self.lines = []
        self.lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            with self.lock:
                self.lines.append(line.split())

    def words(self, word):
        with self.lock:
            return [l for l in self.lines if l and l[0] == word]


def anchor_run_main(python, nodes, procs, budget, max_rss, setup_budget, per_connection):
    """One c10d round of `nodes` agents; prints its result as JSON: seconds
    (None when it did not finish), why not, done (agents that got a rank),
    participants (in the shared state when it stopped), setup_s."""
    die_with_parent()
    result = {"seconds": None, "why": None, "done": 0, "participants": None, "setup_s": None}
    # The store's process holds two descriptors per client: where the limit
    # does not allow that, say so at once (the store would die half-way).
    fd_limit = raise_fd_limit()
    clients = -(-nodes // per_connection)
    if 2 * clients + 64 > fd_limit:
        result["why"] = ("cannot run: %d TCPStore clients need %d descriptors in the store's process, "
                         "the limit here is %d (ulimit -Hn; or --anchor-agents-per-connection %d)"
                         % (clients, 2 * clients + 64, fd_limit, -(-nodes * 2 // (fd_limit - 64))))
        print(json.dumps(result), flush=True)
        return
    run_id = "bench-%d-%d-%d" % (os.getpid(), nodes, time.time_ns())
    store = subprocess.Popen([python, ME, "--_anchor-store", run_id], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True, bufsize=1)
    workers = []

    def stopped(why):
        if store.poll() is not None:
            return why + "; the TCPStore server died (exit %d)" % store.returncode
        dead = [w.returncode for w in workers if w.poll() is not None]
        if dead:
            return why + "; %d agent process(es) died (exit %s)" % (len(dead), dead)
        return why

    try:
        port = int(store.stdout.readline())
        procs = max(1, min(procs, nodes))
        for i in range(procs):
            count = nodes // procs + (1 if i < nodes % procs else 0)
            workers.append(subprocess.Popen(
                [python, ME, "--_anchor-worker", str(port), run_id, str(nodes), str(count), str(int(budget) + 60),
                 str(per_connection)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1))
        outs = [Lines(w) for w in workers]
        # Handlers and connections are made before the clock starts.
        setup_start = time.monotonic()
        while not all(o.words("ready") for o in outs):
            made = sum(int(o.words("made")[-1][1]) if o.words("made") else 0 for o in outs)
            if time.monotonic() - setup_start > setup_budget:
                result["why"] = stopped("could not set up %d agents within %.0f s (%d made)" % (nodes, setup_budget, made))
                return result
            if store.poll() is not None or any(w.poll() is not None for w in workers):
                result["why"] = stopped("failed while setting up %d agents (%d made)" % (nodes, made))
                return result
            time.sleep(0.2)
        result["setup_s"] = time.monotonic() - setup_start
        for w in workers:
            w.stdin.write("go\n")
            w.stdin.flush()
        start = time.monotonic()
        why = None
        while True:
            done = sum(len(o.words("done")) for o in outs)
            errors = sum(len(o.words("error")) for o in outs)
            if done + errors >= nodes:
                break
            elapsed = time.monotonic() - start
            if elapsed > budget:
                why = "did not finish %d agents within %.0f s" % (nodes, budget)
                break
            rss = sum(rss_bytes(p.pid) for p in workers + [store])
            if rss > max_rss:
                why = "stopped after %.0f s: its processes used %.1f GiB (> --anchor-max-rss-gb)" % (elapsed, rss / 2**30)
                break
            if store.poll() is not None or any(w.poll() is not None for w in workers):
                why = stopped("broke off after %.0f s" % elapsed)
                break
            time.sleep(0.2)
        gos = [float(l[1]) for o in outs for l in o.words("go")]
        dones = [l for o in outs for l in o.words("done")]
        errors = [" ".join(l) for o in outs for l in o.words("error")]
        result["done"] = len(dones)
        if why is not None and store.poll() is None:
            # How far the shared state got: participants of the open round.
            store.stdin.write("peek\n")
            store.stdin.flush()
            participants, complete, _ = (int(x) for x in store.stdout.readline().split())
            result["participants"] = participants
            why += "; %d of %d in the round's state%s" % (participants, nodes, ", complete" if complete else "")
        if why is None and errors:
            why = "%d agent(s) failed, e.g. %s" % (len(errors), errors[0])
        if why is None:
            ranks = sorted(int(l[2]) for l in dones)
            worlds = {int(l[3]) for l in dones}
            if ranks != list(range(nodes)) or worlds != {nodes}:
                why = "wrong assignment: ranks not 0..%d or world size %s" % (nodes - 1, worlds)
        if why is None:
            result["seconds"] = max(float(l[1]) for l in dones) - min(gos)
        result["why"] = why
        return result
    except Exception as e:  # reported in the table, not raised
        result["why"] = "the anchor broke: %s: %s" % (type(e).__name__, e)
        return result
    finally:
        for p in workers + [store]:
            try:
                p.kill()
            except OSError:
                pass
        for p in workers + [store]:
            p.wait()
        print(json.dumps(result), flush=True)


def run_anchor(python, nodes, procs, budget, max_rss, setup_budget, per_connection):
    """One c10d round in a session of its own (see above); its result."""
    cmd = [python, ME, "--_anchor-run", str(nodes), str(procs), str(budget), str(max_rss), str(setup_budget),
           str(per_connection), python]
    runner = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, _ = runner.communicate(timeout=setup_budget + budget + 120)
        return json.loads(out.strip().splitlines()[-1])
    except (subprocess.TimeoutExpired, ValueError, IndexError):
        return {"seconds": None, "done": 0, "participants": None, "setup_s": None,
                "why": "the anchor run did not report (exit %s)" % runner.poll()}
    finally:
        try:
            os.killpg(runner.pid, signal.SIGKILL)
        except OSError:
            pass
        runner.wait()


# ---------------------------------------------------------------- driver

def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", default="1000,10000", help="agents per round, comma separated")
    p.add_argument("--repeats", type=int, default=3, help="ddprun rounds per N (median and min)")
    p.add_argument("--bench", default=os.path.join(ROOT, "build", "bin", "rendezvous_round"))
    p.add_argument("--ddprun", default=os.path.join(ROOT, "build", "bin", "ddprun"))
    p.add_argument("--no-external", action="store_true", help="skip ddprun with the server in its own process")
    p.add_argument("--no-anchor", action="store_true")
    p.add_argument("--anchor-timeout", type=float, default=120, help="wall-clock budget of one c10d round, s")
    p.add_argument("--anchor-repeats", type=int, default=1)
    p.add_argument("--anchor-agents-per-connection", type=int, default=1,
                   help="c10d agents sharing one TCPStore client (1: each its own, as real agents)")
    p.add_argument("--anchor-setup-timeout", type=float, default=300,
                   help="budget for making the c10d agents' handlers and connections (not timed), s")
    p.add_argument("--anchor-procs", type=int, default=4, help="processes the c10d agents (threads) are spread over")
    p.add_argument("--anchor-max-rss-gb", type=float, default=8, help="stop the c10d round when its processes outgrow this")
    p.add_argument("--python", default="/usr/bin/python3", help="the Python with torch 1.13 (python3-torch)")
    p.add_argument("--out", help="also write the results as JSON")
    p.add_argument("--_anchor-store", metavar="RUN_ID", help=argparse.SUPPRESS)
    p.add_argument("--_anchor-worker", nargs=6, help=argparse.SUPPRESS)
    p.add_argument("--_anchor-run", nargs=7, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args._anchor_store:
        return anchor_store_main(args._anchor_store)
    if args._anchor_worker:
        port, run_id, nodes, count, join_timeout, per_connection = args._anchor_worker
        return anchor_worker_main(int(port), run_id, int(nodes), int(count), float(join_timeout), int(per_connection))
    if args._anchor_run:
        nodes, procs, budget, max_rss, setup_budget, per_connection, python = args._anchor_run
        return anchor_run_main(python, int(nodes), int(procs), float(budget), float(max_rss), float(setup_budget),
                               int(per_connection))

    nodes = [int(n) for n in args.nodes.split(",")]
    results = {"date": datetime.datetime.now().isoformat(timespec="seconds"), "cpus": os.cpu_count(), "rows": []}
    inproc = run_ddprun(args.bench, nodes, args.repeats)
    external = None
    if not args.no_external:
        if os.path.exists(args.ddprun):
            external = run_ddprun_external(args.ddprun, args.bench, nodes, args.repeats)
        else:
            print("%s not found: the separate-process server is not measured" % args.ddprun, file=sys.stderr)

    with_etcd = run_ddprun_etcd(args.bench, nodes, args.repeats)
    # The embedded control plane (the default from 3 nodes): 3 voters commit every answer's state.
    with_raft = run_ddprun(args.bench, nodes, args.repeats, raft_voters=3)

    anchor = {}
    for n in nodes:
        if args.no_anchor:
            break
        runs = []
        for _ in range(args.anchor_repeats):
            print("+ c10d anchor: %d agents in %d process(es), budget %.0f s" % (n, args.anchor_procs, args.anchor_timeout), flush=True)
            r = run_anchor(args.python, n, args.anchor_procs, args.anchor_timeout, args.anchor_max_rss_gb * 2**30,
                           args.anchor_setup_timeout, args.anchor_agents_per_connection)
            print("  %s" % (("%.3f s" % r["seconds"]) if r["seconds"] is not None else
                            "c10d: %s; %d of %d agents got a rank" % (r["why"], r["done"], n)), flush=True)
            runs.append(r)
            if r["seconds"] is None:
                break  # a round that did not finish is not repeated
        anchor[n] = runs

    print("\nrendezvous round; ddprun: median (min) of %d rounds, %s; c10d: agent threads over %d "
          "processes, budget %.0f s; %d CPUs\n"
          % (args.repeats, "server in-process and in its own process" if external else "server in-process",
             args.anchor_procs, args.anchor_timeout, os.cpu_count()))
    print("| N | ddprun s (in-process) | ddprun s (own process) | server CPU s per round | ddprun s (state saved in etcd) "
          "| ddprun s (embedded: 3 Raft voters) | c10d s | ddprun / c10d |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n in nodes:
        med, lo, _ = inproc[n]
        ext = "%.3f (%.3f)" % external[n][:2] if external else "not run"
        cpu = "%.3f" % external[n][3] if external else "-"
        runs = anchor.get(n, [])
        ok = [r["seconds"] for r in runs if r["seconds"] is not None]
        if args.no_anchor:
            c10d, ratio = "not run (--no-anchor)", "-"
        elif runs and runs[-1]["seconds"] is None:
            r = runs[-1]
            c10d = "**c10d: %s; %d of %d agents got a rank**" % (r["why"], r["done"], n)
            ratio = "< %.4f" % (med / args.anchor_timeout) if r["why"].startswith("did not finish") else "-"
        else:
            c = statistics.median(ok)
            c10d = "%.3f" % c
            ratio = "%.4f (1/%.0f)" % (med / c, c / med)
        saved = "%.3f (%.3f)" % with_etcd[n][:2] if with_etcd else "**NOT RUN (no etcd)**"
        raft = "%.3f (%.3f)" % with_raft[n][:2]
        print("| %d | %.3f (%.3f) | %s | %s | %s | %s | %s | %s |" % (n, med, lo, ext, cpu, saved, raft, c10d, ratio))
        results["rows"].append({"nodes": n, "ddprun_inprocess": inproc[n], "ddprun_external": external[n] if external else None,
                                "ddprun_etcd": with_etcd[n] if with_etcd else None, "ddprun_raft": with_raft[n],
                                "c10d": runs})
    goal = [n for n in nodes if n >= 10000]
    for n in goal:
        met = inproc[n][0] < 2 and (not with_etcd or with_etcd[n][0] < 2) and with_raft[n][0] < 2
        print("\ngoal: %d agents in under 2 s: %s (%.3f s in-process%s%s, %.3f s committed by 3 Raft voters)"
              % (n, "met" if met else "NOT met", inproc[n][0],
                 ", %.3f s own process" % external[n][0] if external else "",
                 ", %.3f s with its state saved in etcd" % with_etcd[n][0] if with_etcd else "", with_raft[n][0]))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
