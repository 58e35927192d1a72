#!/usr/bin/python3
"""Pause and resume latency through /v1, beside the freezer write alone.

  python3 bench/pause.py [--n N] [--rounds R] [--moat build/moat] [--tmpdir DIR]

Starts `moat serve --pool 0` (temporary data dir, free loopback port) and
two sandboxes, each with a `sleep 3600` started in the background beside
its agent. Then per round, alternating the order:

  pause    POST /v1/sandboxes/{id}/pause (200, state "paused": the freezer
           cgroup FROZEN and the record saved), timed to the answer;
  resume   POST /v1/sandboxes/{id}/resume (200), timed to the answer;
           (pause and resume alternate, so each sample finds the other state)
  health   GET /healthz on the same connection: the HTTP floor;
  freeze   what src/jail/freezer.c does, alone, from this script, on a
           second sandbox's own freezer cgroup: write FROZEN to
           freezer.state (v1; cgroup.freeze "1" on v2), read back until
           it says FROZEN; thaw   the same with THAWED.

The client is a raw socket (TCP_NODELAY, one prepared request per send,
the answer read to its Content-Length): about 0.1 ms of its own, against
~1 ms for http.client. Prints medians and p90. Target: pause and resume
<= 1 ms each.
"""
import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve import Daemon  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Raw:
    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port))
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def req(self, method, path, body=b""):
        return (f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n").encode() + body

    def call(self, raw):
        """Send a prepared request; (status, body)."""
        self.s.sendall(raw)
        while b"\r\n\r\n" not in self.buf:
            self.buf += self.s.recv(65536)
        head, rest = self.buf.split(b"\r\n\r\n", 1)
        n = 0
        for line in head.split(b"\r\n")[1:]:
            k, _, v = line.partition(b":")
            if k.strip().lower() == b"content-length":
                n = int(v)
        while len(rest) < n:
            rest += self.s.recv(65536)
        self.buf = rest[n:]
        return int(head.split()[1]), rest[:n]


def freezer_of(pid):
    """(file, frozen value, thawed value, read-back file) of pid's freezer cgroup."""
    with open(f"/proc/{pid}/cgroup") as f:
        lines = [ln.rstrip("\n").split(":", 2) for ln in f]
    for _, ctl, path in lines:
        if "freezer" in ctl.split(","):
            d = "/sys/fs/cgroup/freezer" + path
            if os.path.exists(d + "/freezer.state"):
                return d + "/freezer.state", "FROZEN", "THAWED", d + "/freezer.state"
    for _, ctl, path in lines:
        if ctl == "":
            d = "/sys/fs/cgroup/unified" + path
            if os.path.exists(d + "/cgroup.freeze"):
                return d + "/cgroup.freeze", "1", "0", d + "/cgroup.events"
    raise RuntimeError(f"pid {pid}: no freezer cgroup")


def freeze_alone(fz, frozen):
    path, fv, tv, back = fz
    want = fv if frozen else tv
    t0 = time.perf_counter_ns()
    with open(path, "w") as f:
        f.write(want)
    while True:
        with open(back) as f:
            s = f.read()
        if (back == path and s.strip() == want) or \
           (back != path and f"frozen {1 if frozen else 0}" in s):
            break
    return (time.perf_counter_ns() - t0) / 1e6


def pct(xs, q):
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * (len(s) - 1) + 0.5))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=50, help="samples per kind and round")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--moat", default=os.path.join(ROOT, "build", "moat"))
    ap.add_argument("--tmpdir")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="moat-bench-pause.", dir=a.tmpdir)
    d = None
    try:
        bindir = os.path.join(tmp, "bin")
        os.mkdir(bindir)
        for b in ("moat", "moat-serve", "moat-agent"):
            shutil.copy2(os.path.join(os.path.dirname(a.moat), b), bindir)
        d = Daemon(os.path.join(bindir, "moat"), tmp, "data", ["--pool", "0"])
        sid = d.api.create({})
        before = set(d.children())
        sid2 = d.api.create({})
        pid2 = (set(d.children()) - before).pop()
        fz = freezer_of(pid2)
        for s in (sid, sid2):  # a child process in each, besides the agent
            d.api.call("POST", f"/v1/sandboxes/{s}/exec",
                       {"cmd": ["sh", "-c", "sleep 3600 >/dev/null 2>&1 &"]})
        rev = subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty"],
                             capture_output=True, text=True).stdout.split("\n")[0].strip()
        fst = subprocess.run(["findmnt", "-n", "-o", "FSTYPE", "-T", tmp], capture_output=True,
                             text=True).stdout.split("\n")[0].strip()
        print(f"pause {time.strftime('%Y-%m-%d %H:%M %Z')}: git {rev}; {os.cpu_count()} CPUs, "
              f"load {os.getloadavg()[0]:.2f}; data dir {tmp} ({fst}); freezer {fz[0]}")
        raw = Raw(d.port)
        rp = raw.req("POST", f"/v1/sandboxes/{sid}/pause", b"{}")
        rr = raw.req("POST", f"/v1/sandboxes/{sid}/resume", b"{}")
        rh = raw.req("GET", "/healthz")
        S = {k: [] for k in ("pause", "resume", "health", "freeze", "thaw")}

        def cycle():
            for _ in range(a.n):
                t0 = time.perf_counter_ns()
                st, body = raw.call(rp)
                t1 = time.perf_counter_ns()
                if st != 200 or json.loads(body).get("state") != "paused":
                    raise RuntimeError(f"pause: {st} {body[:200]!r}")
                st, body = raw.call(rr)
                t2 = time.perf_counter_ns()
                if st != 200:
                    raise RuntimeError(f"resume: {st} {body[:200]!r}")
                S["pause"].append((t1 - t0) / 1e6)
                S["resume"].append((t2 - t1) / 1e6)

        def health():
            for _ in range(a.n):
                t0 = time.perf_counter_ns()
                raw.call(rh)
                S["health"].append((time.perf_counter_ns() - t0) / 1e6)

        def alone():
            for _ in range(a.n):
                S["freeze"].append(freeze_alone(fz, True))
                S["thaw"].append(freeze_alone(fz, False))

        kinds = [cycle, health, alone]
        cycle()  # warm-up, dropped
        for k in S:
            S[k].clear()
        for r in range(a.rounds):
            for f in (kinds if r % 2 == 0 else kinds[::-1]):
                f()
        for k, v in S.items():
            print(f"  {k:7s} median {statistics.median(v):7.3f} ms  p90 {pct(v, 0.9):7.3f}  "
                  f"min {min(v):7.3f}  N {len(v)}")
        mp, mr = statistics.median(S["pause"]), statistics.median(S["resume"])
        print(f"target <= 1 ms each: pause {mp:.3f} ms, resume {mr:.3f} ms: "
              f"{'met' if max(mp, mr) <= 1 else 'MISSED'}; load {os.getloadavg()[0]:.2f}")
        # still alive after all that: the API answers, the sandbox runs
        d.api.exec_true(sid)
        d.api.exec_true(sid2)
    finally:
        if d:
            d.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
