#!/usr/bin/python3
"""The client of bench/cp_proxy.py: times model calls over raw HTTP/1.1.

  python3 cp_client.py CONFIG.json

Runs the same code on the host (straight to the fake upstream) and inside a
session's sandbox as its agent command (to the control plane at
127.0.0.1:7878, or to a fake started inside the same sandbox), so that the
two sides differ only in the path the request takes. Stdlib only (the
sandbox has the host's /usr/bin/python3 and nothing else).

CONFIG: {"out": path, "start_at": unix time or 0 (sleep until then: many
agents start calling at the same moment), "rounds": R,
 "local_fake": {"node": path, "script": path, "unix": path, "key": K} or absent
   (start that fake here first, on a Unix socket: a sandbox's Landlock
   refuses TCP bind; stopped at the end),
 "phases": [{"name", "port" (TCP on 127.0.0.1, or a Unix socket's path), "path", "method"?, "auth": "token" (Bearer
   $MOAT_SESSION_TOKEN) | "Bearer K", "body"? (JSON), "stream"?: bool,
   "n": samples per round, "warm": calls dropped first (round 0 only)}]}
Per round the phases run in order, reversed every other round. A call is
timed from just before its request is written (one send, TCP_NODELAY, one
keep-alive connection per phase) until its answer is read to the end
(Content-Length or the last chunk); a streamed call also until the first
content delta ("str", the fake's first piece) has arrived: the time to
first token. Writes {"phases": {name: {"ms": [...], "ttft_ms": [...]}},
"t0", "t1" (unix times of the first request and the last answer), "late"
(start_at had passed already), "errors": [...]} to out.
"""
import json
import os
import socket
import subprocess
import sys
import time

FIRST_PIECE = b'"str"'  # tests/cp-sdk/fake_upstream.mjs STREAM_PIECES[0], as a JSON string


class Conn:
    def __init__(self, port):
        self.port = port  # a TCP port on 127.0.0.1, or a Unix socket's path
        self.s = None
        self.connect()

    def connect(self):
        if self.s:
            self.s.close()
        if isinstance(self.port, str):
            self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.s.settimeout(60)
            self.s.connect(self.port)
        else:
            self.s = socket.create_connection(("127.0.0.1", self.port), timeout=60)
            self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def _more(self):
        b = self.s.recv(65536)
        if not b:
            raise ConnectionError("connection closed mid-answer")
        self.buf += b

    def call(self, raw, mark=None):
        """Send a prepared request; (status, body, ns at which mark was first seen or None)."""
        t_mark = None
        self.s.sendall(raw)
        while b"\r\n\r\n" not in self.buf:
            self._more()
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        lines = head.split(b"\r\n")
        status = int(lines[0].split()[1])
        hdr = {}
        for ln in lines[1:]:
            k, _, v = ln.partition(b":")
            hdr[k.strip().lower()] = v.strip().lower()
        body = b""
        if b"content-length" in hdr:
            n = int(hdr[b"content-length"])
            while len(self.buf) < n:
                if mark and t_mark is None and mark in self.buf:
                    t_mark = time.perf_counter_ns()
                self._more()
            body, self.buf = self.buf[:n], self.buf[n:]
        elif hdr.get(b"transfer-encoding") == b"chunked":
            while True:
                while b"\r\n" not in self.buf:
                    self._more()
                i = self.buf.index(b"\r\n")
                size = int(self.buf[:i].split(b";")[0], 16)
                while len(self.buf) < i + 2 + size + 2:  # the chunk and its CRLF
                    self._more()
                body += self.buf[i + 2:i + 2 + size]
                self.buf = self.buf[i + 2 + size + 2:]
                if mark and t_mark is None and mark in body:
                    t_mark = time.perf_counter_ns()
                if size == 0:
                    break
        else:  # to the close
            try:
                while True:
                    self._more()
            except ConnectionError:
                pass
            body, self.buf = self.buf, b""
            self.connect()
        if mark and t_mark is None and mark in body:
            t_mark = time.perf_counter_ns()
        if hdr.get(b"connection") == b"close":
            self.connect()
        return status, body, t_mark


def prepare(ph, token):
    auth = f"Bearer {token}" if ph["auth"] == "token" else ph["auth"]
    body = json.dumps(ph["body"]).encode() if ph.get("body") is not None else b""
    method = ph.get("method", "POST")
    return (f"{method} {ph['path']} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: {auth}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body


def wait_port(port, secs=10):
    end = time.monotonic() + secs
    while True:
        try:
            Conn(port).s.close()
            return
        except OSError:
            if time.monotonic() > end:
                raise
            time.sleep(0.01)


def main():
    cfg = json.load(open(sys.argv[1]))
    token = os.environ.get("MOAT_SESSION_TOKEN", "")
    out = {"phases": {}, "errors": [], "late": False}
    fake = None
    try:
        lf = cfg.get("local_fake")
        if lf:
            fake = subprocess.Popen([lf["node"], lf["script"], "--unix", lf["unix"],
                                     "--openai-key", lf["key"]], stdout=subprocess.DEVNULL)
            wait_port(lf["unix"])
        phases = cfg["phases"]
        conns = {ph["name"]: Conn(ph["port"]) for ph in phases}
        reqs = {ph["name"]: prepare(ph, token) for ph in phases}
        for ph in phases:
            out["phases"][ph["name"]] = {"ms": [], "ttft_ms": []}
        if cfg.get("start_at"):
            dt = cfg["start_at"] - time.time()
            if dt > 0:
                time.sleep(dt)
            else:
                out["late"] = True
        out["t0"] = time.time()
        for r in range(cfg.get("rounds", 1)):
            for ph in (phases if r % 2 == 0 else phases[::-1]):
                c, raw, rec = conns[ph["name"]], reqs[ph["name"]], out["phases"][ph["name"]]
                mark = FIRST_PIECE if ph.get("stream") else None
                for i in range(ph.get("warm", 0) if r == 0 else 0):
                    c.call(raw, mark)
                for i in range(ph["n"]):
                    t0 = time.perf_counter_ns()
                    st, body, tm = c.call(raw, mark)
                    t1 = time.perf_counter_ns()
                    if st != 200:
                        out["errors"].append(f"{ph['name']}: {st} {body[:200]!r}")
                        continue
                    rec["ms"].append((t1 - t0) / 1e6)
                    if mark:
                        if tm is None:
                            out["errors"].append(f"{ph['name']}: no first piece in {body[:200]!r}")
                        else:
                            rec["ttft_ms"].append((tm - t0) / 1e6)
        out["t1"] = time.time()
    except Exception as e:  # recorded: the bench reads the file, not our stderr
        out["errors"].append(f"{type(e).__name__}: {e}")
    finally:
        if fake:
            fake.terminate()
            fake.wait()
    tmp = cfg["out"] + ".tmp"
    with open(tmp, "w") as f:
        json.dump(out, f)
    os.rename(tmp, cfg["out"])


if __name__ == "__main__":
    main()
