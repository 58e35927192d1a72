#!/usr/bin/python3
"""Exec latency on one sandbox while others are created and deleted beside it.

  python3 bench/create_p99.py [--before DIR] [--after DIR] [--execs N] [--rounds R]

DIR holds moat, moat-serve and moat-agent (default --after: build/; --before
is optional, e.g. a build of an older commit). Each build's binaries are
copied to a temporary directory and run as a `--pool 0` daemon (so every
create builds its sandbox) on a free loopback port with a temporary data
directory. Sandbox A is created, then per round and build:

  idle   N x `exec true` on A, timed by bench/rtt.c (one keep-alive
         connection), nothing else going on;
  create the same while a second connection (Python, a thread) creates
         sandboxes back to back for as long as the execs run (deleted
         afterwards, off the clock);
  churn  the same while that connection creates a sandbox and deletes it,
         back to back (a DELETE still waits for the kernel to end the
         sandbox's processes before it answers: it holds the loop too).

Builds alternate within each round (order reversed every other round).
Prints median, p90, p99 and max per build and kind over all rounds, and
how many creates the churn managed per second.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve import Api, Daemon  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KINDS = ("idle", "create", "churn")


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p / 100))]


def churn(port, stop, counts, delete):
    api = Api(port)
    made = []
    while not stop.is_set():
        sid = api.create({})
        if delete:
            api.delete(sid)
        else:
            made.append(sid)
        counts[0] += 1
    counts.append(made)


def run_execs(rtt, port, sid, n):
    out = subprocess.run([rtt, str(port), "exec", sid, str(n)], capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"rtt: {out.stderr.strip()}")
    return [int(x) / 1e6 for x in out.stdout.split()]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--before")
    ap.add_argument("--after", default=os.path.join(ROOT, "build"))
    ap.add_argument("--execs", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=4)
    a = ap.parse_args()
    builds = [("after", a.after)] + ([("before", a.before)] if a.before else [])
    tmp = tempfile.mkdtemp(prefix="moat-create-p99-")
    daemons = {}
    try:
        rtt = os.path.join(tmp, "rtt")
        subprocess.run(["cc", "-O2", "-Wall", "-Wextra", "-Werror", "-o", rtt,
                        os.path.join(ROOT, "bench", "rtt.c")], check=True)
        for name, src in builds:
            bindir = os.path.join(tmp, "bin-" + name)
            os.mkdir(bindir)
            for b in ("moat", "moat-serve", "moat-agent"):
                shutil.copy2(os.path.join(src, b), bindir)
            d = Daemon(os.path.join(bindir, "moat"), tmp, name, ["--pool", "0"])
            daemons[name] = (d, d.api.create({}))
        samples = {(n, k): [] for n, _ in builds for k in KINDS}
        rates = {(n, k): [] for n, _ in builds for k in KINDS}
        for r in range(a.rounds):
            order = builds if r % 2 == 0 else builds[::-1]
            for name, _ in order:
                d, sid = daemons[name]
                samples[(name, "idle")] += run_execs(rtt, d.port, sid, a.execs)
                for kind in ("create", "churn"):
                    stop, counts = threading.Event(), [0]
                    t = threading.Thread(target=churn,
                                         args=(d.port, stop, counts, kind == "churn"))
                    t0 = time.monotonic()
                    t.start()
                    samples[(name, kind)] += run_execs(rtt, d.port, sid, a.execs)
                    stop.set()
                    t.join()
                    rates[(name, kind)].append(counts[0] / (time.monotonic() - t0))
                    for made in counts[1]:
                        d.api.delete(made)
        rev = subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty"],
                             capture_output=True, text=True).stdout.strip() or "?"
        print(f"create_p99 {time.strftime('%Y-%m-%d %H:%M %Z')}: git {rev}; "
              f"{a.rounds} rounds x {a.execs} execs per build and kind; ms")
        print(f"{'build':8} {'kind':6} {'median':>7} {'p90':>7} {'p99':>7} {'max':>7}"
              f" {'creates/s':>9}")
        for name, _ in builds:
            for k in KINDS:
                xs = samples[(name, k)]
                rate = f"{statistics.median(rates[(name, k)]):9.0f}" if k != "idle" else ""
                print(f"{name:8} {k:6} {statistics.median(xs):7.2f} {pct(xs, 90):7.2f} "
                      f"{pct(xs, 99):7.2f} {max(xs):7.2f} {rate}")
    finally:
        for d, sid in daemons.values():
            d.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
