#!/usr/bin/env python3
"""What serving /metrics costs (--metrics-port): the agent's own CPU time
(ddprun's process, its threads; not the workers) and the job's wall time,
for the default job without --metrics-port, with it and nobody scraping,
with a scrape every second (Prometheus's usual is 15 s), and under a
scrape storm (a client asking as fast as it is answered). Runs alternate,
so the machine's drift falls on every row alike. Goal (issue 63): the agent
within 1% of one core of the run without metrics, scraping every second.

The anchor is the same job without --metrics-port in the same run (torchrun
and NVRx serve no metrics; torchft exports OpenTelemetry only: said loudly).

    python3 bench/metrics_overhead.py [--build build/bin] [--repeats 3] [--epochs 4]
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    """utime + stime of the process `pid` (all its threads), or None."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK
    except (OSError, IndexError, ValueError):
        return None


def scraper(port, interval, stop, counts):
    """Asks for /metrics every `interval` seconds (0: as fast as answered)."""
    url = "http://127.0.0.1:%d/metrics" % port
    while not stop.is_set():
        try:
            urllib.request.urlopen(url, timeout=5).read()
            counts[0] += 1
        except OSError:
            counts[1] += 1
        if interval > 0:
            stop.wait(interval)


def run(build, epochs, mode):
    """One job; mode: off, idle, 1s, storm. Returns (wall s, agent CPU s, scrapes, refused)."""
    argv = [os.path.join(build, "ddprun"), "--nproc", "2"]
    if mode != "off":
        argv += ["--metrics-port", "0"]
    argv += [os.path.join(build, "train"), "--limit", "8000", "--epochs", str(epochs)]
    env = dict(os.environ, DDPRUN_CPU_COMM="shm")
    start = time.monotonic()
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    stop, counts, thread = threading.Event(), [0, 0], None
    last_cpu = 0.0
    # The agent's CPU is read until it exits (its last reading stands); the
    # port from its log line.
    err_lines = []

    def read_err():
        for line in p.stderr:
            err_lines.append(line)

    reader = threading.Thread(target=read_err, daemon=True)
    reader.start()
    while p.poll() is None:
        c = cpu_seconds(p.pid)
        if c is not None:
            last_cpu = c
        if mode in ("1s", "storm") and thread is None:
            for line in list(err_lines):
                m = re.search(r"metrics at http://[^:]+:(\d+)/metrics", line)
                if m:
                    thread = threading.Thread(target=scraper, args=(int(m.group(1)), 1.0 if mode == "1s" else 0, stop,
                                                                    counts), daemon=True)
                    thread.start()
        time.sleep(0.05)  # sampling the agent's CPU, not a synchronisation
    wall = time.monotonic() - start
    stop.set()
    if thread:
        thread.join()
    reader.join(timeout=5)
    if p.returncode != 0:
        sys.exit("metrics_overhead: the job failed (%d): %s" % (p.returncode, "".join(err_lines[-20:])))
    return wall, last_cpu, counts[0], counts[1]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build/bin")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=4)
    a = ap.parse_args()
    print("*** ANCHOR NOT RUN: torchrun 2.x, NVRx: they serve no metrics; torchft: OpenTelemetry only, "
          "not a scrape endpoint ***")
    modes = ["off", "idle", "1s", "storm"]
    rows = {m: [] for m in modes}
    for _ in range(a.repeats):
        for m in modes:
            rows[m].append(run(a.build, a.epochs, m))
    base_wall = statistics.median(r[0] for r in rows["off"])
    base_cpu = statistics.median(r[1] for r in rows["off"])
    print("\n%d runs each, alternating; ddprun --nproc 2 train --limit 8000 --epochs %d; medians" % (a.repeats, a.epochs))
    print("%-34s %8s %10s %14s %12s %10s" % ("run", "wall s", "agent CPU s", "agent CPU/wall", "vs off", "scrapes"))
    names = {"off": "no --metrics-port (the anchor)", "idle": "--metrics-port, nobody scrapes",
             "1s": "a scrape every second", "storm": "a scrape storm (back to back)"}
    for m in modes:
        wall = statistics.median(r[0] for r in rows[m])
        cpu = statistics.median(r[1] for r in rows[m])
        scrapes = statistics.median(r[2] for r in rows[m])
        extra = (cpu - base_cpu) / wall * 100  # % of one core over the run's wall time
        print("%-34s %8.2f %10.3f %13.1f%% %+10.2f%% %10.0f" % (names[m], wall, cpu, cpu / wall * 100, extra, scrapes))
    print("\n'vs off': the agent's extra CPU as a share of one core over the run (goal: within 1%% scraping every "
          "second); wall time against the anchor's %.2f s" % base_wall)


if __name__ == "__main__":
    main()
