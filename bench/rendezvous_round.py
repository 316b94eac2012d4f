#!/usr/bin/env python3
"""Rendezvous round: the time for N simulated agents to complete one round
against one rendezvous server, ddprun against PyTorch's c10d rendezvous (the
anchor) in the same run. Goal: 10k agents in under 2 s.

ddprun: `rendezvous_round` (bench/rendezvous_round.cpp) issues N async Join
calls over a few gRPC channels, from the first Join sent to the last
response; the server runs in that process, and (unless --no-external) also
as `ddprun rendezvous` in a process of its own.

c10d (anchor): torch 1.13's DynamicRendezvousHandler with a
C10dRendezvousBackend over one TCPStore, each of the N agents a thread with
its own handler and TCPStore connection, spread over --anchor-procs
processes; from the moment they are released to the last next_rendezvous()
returning. An anchor that does not finish within --anchor-timeout s (or
outgrows --anchor-max-rss-gb) is reported as not finished, with how many
agents had joined.

    bench/rendezvous_round.py [--nodes 1000,10000] [--repeats 3]
        [--anchor-timeout 120] [--anchor-procs 4] [--no-anchor] [--no-external]
        [--bench build-bench/bin/rendezvous_round] [--ddprun build-bench/bin/ddprun]

Prints a table; asserts nothing.
"""
import argparse
import datetime
import json
import os
import select
import signal
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

def run_ddprun(bench, nodes, repeats, target=None):
    """{N: (median s, min s, samples)} from one rendezvous_round run."""
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        cmd = [bench, "--nodes", ",".join(map(str, nodes)), "--repeats", str(repeats), "--out", out.name]
        if target:
            cmd += ["--target", target]
        print("+ " + " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True)
        with open(out.name) as f:
            data = json.load(f)
    return {r["nodes"]: (r["median_s"], r["min_s"], r["samples"]) for r in data["results"]}


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

def anchor_store_main(run_id):
    """Hosts the TCPStore; prints its port, lives until stdin closes. For
    each "peek" line it prints how far the rendezvous state got."""
    import base64
    import pickle
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


def anchor_worker_main(port, run_id, nodes, count, join_timeout):
    """count agents as threads: each a DynamicRendezvousHandler over its own
    TCPStore connection. Prints "ready", waits for "go" on stdin, prints
    "go T" and one "done T RANK WORLD" (or "error ...") line per agent (T:
    time.monotonic(), one clock for every process), then stays (the agents
    keep their heartbeats, as real ones do) until stdin closes."""
    import torch.distributed as dist
    from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import C10dRendezvousBackend
    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import (
        DynamicRendezvousHandler, RendezvousTimeout)

    threading.stack_size(512 * 1024)
    timeout = RendezvousTimeout(join=datetime.timedelta(seconds=join_timeout))
    handlers = []
    for _ in range(count):
        store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=datetime.timedelta(seconds=600))
        backend = C10dRendezvousBackend(store, run_id)
        handlers.append(DynamicRendezvousHandler.from_backend(
            run_id, store, backend, min_nodes=nodes, max_nodes=nodes, timeout=timeout))
    go = threading.Event()
    out_lock = threading.Lock()

    def say(line):
        with out_lock:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()

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


def run_anchor(python, nodes, procs, budget, max_rss):
    """One c10d round of `nodes` agents. Returns a dict: seconds (or None),
    done (agents that joined), why (when it did not finish)."""
    run_id = "bench-%d-%d-%d" % (os.getpid(), nodes, time.time_ns())
    store = subprocess.Popen([python, ME, "--_anchor-store", run_id], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    workers = []
    try:
        port = int(store.stdout.readline())
        procs = max(1, min(procs, nodes))
        for i in range(procs):
            count = nodes // procs + (1 if i < nodes % procs else 0)
            workers.append(subprocess.Popen(
                [python, ME, "--_anchor-worker", str(port), run_id, str(nodes), str(count), str(int(budget) + 60)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1))
        # Handlers and connections are made before the clock starts.
        setup_start = time.monotonic()
        for w in workers:
            line = w.stdout.readline().strip()
            if line != "ready":
                return {"seconds": None, "done": 0, "why": "a worker failed to start (%r)" % line}
        setup = time.monotonic() - setup_start
        lines = []
        lines_lock = threading.Lock()

        def reader(w):
            for line in w.stdout:
                with lines_lock:
                    lines.append(line.split())

        readers = [threading.Thread(target=reader, args=(w,), daemon=True) for w in workers]
        for r in readers:
            r.start()
        for w in workers:
            w.stdin.write("go\n")
            w.stdin.flush()
        start = time.monotonic()
        why = None
        while True:
            with lines_lock:
                done = sum(1 for l in lines if l[0] == "done")
                errors = [" ".join(l) for l in lines if l[0] == "error"]
            if done + len(errors) >= nodes:
                break
            elapsed = time.monotonic() - start
            if elapsed > budget:
                why = "did not finish %d agents within %.0f s" % (nodes, budget)
                break
            rss = sum(rss_bytes(p.pid) for p in workers + [store])
            if rss > max_rss:
                why = "stopped after %.0f s: its processes used %.1f GiB (> --anchor-max-rss-gb)" % (elapsed, rss / 2**30)
                break
            if any(w.poll() is not None for w in workers):
                why = "a worker process died (exit %s)" % [w.poll() for w in workers]
                break
            time.sleep(0.2)
        with lines_lock:
            gos = [float(l[1]) for l in lines if l[0] == "go"]
            dones = [l for l in lines if l[0] == "done"]
            errors = [" ".join(l) for l in lines if l[0] == "error"]
        result = {"done": len(dones), "setup_s": setup}
        if why is not None:
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
        if why is not None:
            result.update(seconds=None, why=why)
        else:
            result.update(seconds=max(float(l[1]) for l in dones) - min(gos), why=None)
        return result
    finally:
        for p in workers + [store]:
            try:
                p.kill()
            except OSError:
                pass
        for p in workers + [store]:
            p.wait()


# ---------------------------------------------------------------- driver

def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", default="1000,10000", help="agents per round, comma separated")
    p.add_argument("--repeats", type=int, default=3, help="ddprun rounds per N (median and min)")
    p.add_argument("--bench", default=os.path.join(ROOT, "build-bench", "bin", "rendezvous_round"))
    p.add_argument("--ddprun", default=os.path.join(ROOT, "build-bench", "bin", "ddprun"))
    p.add_argument("--no-external", action="store_true", help="skip ddprun with the server in its own process")
    p.add_argument("--no-anchor", action="store_true")
    p.add_argument("--anchor-timeout", type=float, default=120, help="wall-clock budget of one c10d round, s")
    p.add_argument("--anchor-repeats", type=int, default=1)
    p.add_argument("--anchor-procs", type=int, default=4, help="processes the c10d agents (threads) are spread over")
    p.add_argument("--anchor-max-rss-gb", type=float, default=8, help="stop the c10d round when its processes outgrow this")
    p.add_argument("--python", default="/usr/bin/python3", help="the Python with torch 1.13 (python3-torch)")
    p.add_argument("--out", help="also write the results as JSON")
    p.add_argument("--_anchor-store", metavar="RUN_ID", help=argparse.SUPPRESS)
    p.add_argument("--_anchor-worker", nargs=5, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args._anchor_store:
        return anchor_store_main(args._anchor_store)
    if args._anchor_worker:
        port, run_id, nodes, count, join_timeout = args._anchor_worker
        return anchor_worker_main(int(port), run_id, int(nodes), int(count), float(join_timeout))

    nodes = [int(n) for n in args.nodes.split(",")]
    results = {"date": datetime.datetime.now().isoformat(timespec="seconds"), "cpus": os.cpu_count(), "rows": []}
    inproc = run_ddprun(args.bench, nodes, args.repeats)
    external = None
    if not args.no_external:
        if os.path.exists(args.ddprun):
            external = run_ddprun_external(args.ddprun, args.bench, nodes, args.repeats)
        else:
            print("%s not found: the separate-process server is not measured" % args.ddprun, file=sys.stderr)

    anchor = {}
    for n in nodes:
        if args.no_anchor:
            break
        runs = []
        for _ in range(args.anchor_repeats):
            print("+ c10d anchor: %d agents in %d process(es), budget %.0f s" % (n, args.anchor_procs, args.anchor_timeout), flush=True)
            r = run_anchor(args.python, n, args.anchor_procs, args.anchor_timeout, args.anchor_max_rss_gb * 2**30)
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
    print("| N | ddprun s (in-process) | ddprun s (own process) | server CPU s per round | c10d s | ddprun / c10d |")
    print("|---:|---:|---:|---:|---:|---:|")
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
        print("| %d | %.3f (%.3f) | %s | %s | %s | %s |" % (n, med, lo, ext, cpu, c10d, ratio))
        results["rows"].append({"nodes": n, "ddprun_inprocess": inproc[n], "ddprun_external": external[n] if external else None,
                                "c10d": runs})
    goal = [n for n in nodes if n >= 10000]
    for n in goal:
        print("\ngoal: %d agents in under 2 s: %s (%.3f s in-process%s)"
              % (n, "met" if inproc[n][0] < 2 else "NOT met", inproc[n][0],
                 ", %.3f s own process" % external[n][0] if external else ""))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
