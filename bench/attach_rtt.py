#!/usr/bin/python3
"""Keystroke round trip over the attach WebSocket vs. /v1's stdin call
(stdlib only; Debian's /usr/bin/python3).

  python3 bench/attach_rtt.py [--moat build/moat] [-n 500]

Starts `moat serve --pool 0` from the build directory on a free loopback
port with a temporary data directory, creates a sandbox and starts `cat`
on a pty in it (POST .../exec {"tty":true,"yield_ms":0}). Then, N times
each, one byte goes in and the time to its echo (the pty's line
discipline echoes it) is taken with time.perf_counter_ns:

  attach  a binary frame on one WebSocket (GET .../attach), the echo read
          from the same connection;
  stdin   POST .../processes/{pid}/stdin {"data":"x","yield_ms":1} on one
          keep-alive connection, then empty polls like it until the echo
          is in an answer (what a client without the attach has to do).

Prints the median, p90 and p99 in milliseconds of each.
"""
import argparse
import base64
import http.client
import json
import os
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Api:
    def __init__(self, port):
        self.c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        self.c.connect()
        self.c.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def call(self, method, path, body=None):
        data = json.dumps(body) if body is not None else None
        self.c.request(method, path, body=data, headers={"Content-Type": "application/json"})
        r = self.c.getresponse()
        return json.loads(r.read() or b"null")


class WS:
    def __init__(self, port, path):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        key = base64.b64encode(os.urandom(16)).decode()
        self.s.sendall((f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
                        f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                        "Sec-WebSocket-Version: 13\r\n\r\n").encode())
        self.buf = b""
        while b"\r\n\r\n" not in self.buf:
            self.buf += self.s.recv(65536)
        head, _, self.buf = self.buf.partition(b"\r\n\r\n")
        if b" 101 " not in head.split(b"\r\n")[0]:
            sys.exit(f"attach refused: {head!r}")

    def send_byte(self, b):
        k = os.urandom(4)
        self.s.sendall(bytes([0x82, 0x80 | len(b)]) + k + bytes(c ^ k[i % 4] for i, c in enumerate(b)))

    def frame(self):
        while True:
            if len(self.buf) >= 2:
                n, off = self.buf[1] & 0x7F, 2
                if n == 126 and len(self.buf) >= 4:
                    n, off = struct.unpack(">H", self.buf[2:4])[0], 4
                if n < 126 and len(self.buf) >= off + n:
                    op, p = self.buf[0] & 0x0F, self.buf[off:off + n]
                    self.buf = self.buf[off + n:]
                    return op, p
            self.buf += self.s.recv(65536)


def pct(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, int(q * len(v)))]


def report(name, ns):
    ms = [x / 1e6 for x in ns]
    print(f"{name:8s} n={len(ms)}  median {statistics.median(ms):.3f} ms  "
          f"p90 {pct(ms, 0.9):.3f}  p99 {pct(ms, 0.99):.3f}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--moat", default="build/moat")
    ap.add_argument("-n", type=int, default=500)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="moat-bench-attach-")
    port = free_port()
    log = open(os.path.join(tmp, "serve.log"), "wb")
    d = subprocess.Popen([a.moat, "serve", "--listen", f"127.0.0.1:{port}", "--data",
                          os.path.join(tmp, "data"), "--pool", "0"], stdout=log, stderr=log)
    try:
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        api = Api(port)
        sid = api.call("POST", "/v1/sandboxes", {})["id"]
        base = f"/v1/sandboxes/{sid}"
        pid = api.call("POST", base + "/exec", {"cmd": ["cat"], "tty": True, "yield_ms": 0})["process_id"]
        ws = WS(port, f"{base}/processes/{pid}/attach")
        ws.frame()  # attached
        times = []
        for i in range(a.n):
            c = bytes([ord("a") + i % 26])
            t0 = time.perf_counter_ns()
            ws.send_byte(c)
            got = b""
            while c not in got:
                op, p = ws.frame()
                got += p if op == 2 else b""
            times.append(time.perf_counter_ns() - t0)
        ws.s.sendall(bytes([0x88, 0x82]) + b"\0\0\0\0" + struct.pack(">H", 1000))
        ws.s.close()
        report("attach", times)
        time.sleep(0.5)  # the detach reaches the agent
        api.call("POST", f"{base}/processes/{pid}/stdin", {"data": "", "yield_ms": 50})
        times = []
        for i in range(a.n):
            c = chr(ord("a") + i % 26)
            t0 = time.perf_counter_ns()
            r = api.call("POST", f"{base}/processes/{pid}/stdin", {"data": c, "yield_ms": 1})
            while c not in r.get("stdout", ""):
                r = api.call("POST", f"{base}/processes/{pid}/stdin", {"data": "", "yield_ms": 1})
            times.append(time.perf_counter_ns() - t0)
        report("stdin", times)
        api.call("DELETE", base)
    finally:
        d.send_signal(signal.SIGTERM)
        d.wait(timeout=30)
        log.close()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
