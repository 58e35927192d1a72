#!/usr/bin/python3
"""Benchmarks of the egress gateway (stdlib only; Debian's /usr/bin/python3).

  python3 bench/gateway.py [--quick] [--moat build/moat] [--rounds R]
                           [--size BYTES] [--requests N] [--exchanges N]
                           [--json FILE]

Copies moat and moat-gate to a temporary directory (a rebuild during the run
cannot swap them) and starts three local servers in this process, on
127.0.0.1 (the host's loopback):

  bulk   reads one byte, then streams --size bytes of zeros (default 1 GiB)
         from one 1 MiB buffer, shuts down its side and waits for the close;
  http   one small request per connection: reads the head, answers
         `HTTP/1.1 200 OK` with a 2-byte body and `Connection: close`, closes;
  exch   on one open connection, answers every 200 bytes received with 100.

Clients run inside sandboxes, from a script written to the sandbox's
workspace and run by /usr/bin/python3, timing in-process
(time.perf_counter_ns):

  direct     `moat run --net host`: the client connects straight to the
             server (the floor: the same sandbox, no gateway);
  gateway    `moat run --allow-domain bulk.test --allow-domain small.test
             --resolve bulk.test:127.0.0.1 --resolve small.test:127.0.0.1`:
             the sandbox's only way out is moat-gate, reached through its
             listeners on 127.0.0.1:3128 (HTTP proxy) and :1080 (SOCKS5).

1. Throughput: one transfer of --size bytes, timed from connect() to EOF
   (the count is checked), direct, through an HTTP CONNECT tunnel and
   through SOCKS5; one sandbox per transfer; the CPU time moat-gate used
   is sampled from /proc while it runs.
2. Latency of a small request, one connection each (as a client through a
   proxy does; the gateway forwards one request per connection): N
   requests per kind, each timed from socket() to EOF. In the gateway
   sandbox the kinds take turns request by request (http: absolute-URI GET
   to the proxy; connect: CONNECT, then the GET in the tunnel; socks:
   SOCKS5 greeting, CONNECT by name, then the GET; refused: a GET for a
   name not allowed, answered 403 by the gateway without any upstream
   connection: the cost of reaching the gateway and its decision alone).
   moat-gate's CPU time per request is sampled as in 1.
3. Exchanges on one open tunnel (a check for Nagle's algorithm in the
   relay): the client, with TCP_NODELAY, writes 100 bytes, waits --gap µs
   (1000), writes 100 more and reads the 100-byte answer; --exchanges
   (50) per kind per round; direct, CONNECT and SOCKS5.

The machine's speed drifts, so all three run in ROUNDS rounds, in reverse order
every other round; figures are medians over rounds of per-round medians,
and ratios/differences are medians of per-round ratios/differences.
MB = 10^6 bytes.
"""
import argparse
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = "/usr/bin/python3"
GIB = 1 << 30

# ---- the client, run inside the sandboxes ------------------------------------

CLIENT = r'''
import json, os, socket, struct, sys, time
ND = socket.TCP_NODELAY
PROXY = ("127.0.0.1", 3128)
SOCKS = ("127.0.0.1", 1080)

def conn(addr):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.IPPROTO_TCP, ND, 1)
    s.connect(addr)
    return s

def exact(s, n):
    b = b""
    while len(b) < n:
        k = s.recv(n - len(b))
        if not k:
            raise RuntimeError("EOF after %r" % b)
        b += k
    return b

def head(s):
    b = b""
    while b"\r\n\r\n" not in b:
        k = s.recv(4096)
        if not k:
            raise RuntimeError("EOF in head %r" % b)
        b += k
    h, rest = b.split(b"\r\n\r\n", 1)
    return h, rest

def upto_eof(s):
    out = []
    while True:
        k = s.recv(65536)
        if not k:
            return b"".join(out)
        out.append(k)

def tunnel(kind, host, port):
    """A socket whose next bytes go to host:port (through the gateway)."""
    if kind == "direct":
        return conn(("127.0.0.1", port)), b""
    if kind == "connect":
        s = conn(PROXY)
        s.sendall(b"CONNECT %s:%d HTTP/1.1\r\nHost: %s:%d\r\n\r\n" % (host, port, host, port))
        h, rest = head(s)
        if not h.startswith(b"HTTP/1.1 200"):
            raise RuntimeError("CONNECT: %r" % h)
        return s, rest
    if kind == "socks":
        s = conn(SOCKS)
        s.sendall(b"\x05\x01\x00")
        if exact(s, 2) != b"\x05\x00":
            raise RuntimeError("SOCKS5 method")
        s.sendall(b"\x05\x01\x00\x03" + bytes([len(host)]) + host + struct.pack(">H", port))
        r = exact(s, 4)
        if r[1] != 0:
            raise RuntimeError("SOCKS5 reply %r" % r)
        exact(s, {1: 6, 4: 18}[r[3]] if r[3] != 3 else exact(s, 1)[0] + 2)
        return s, b""
    raise ValueError(kind)

def bulk(kind, port, size):
    c0 = os.times()
    t0 = time.perf_counter_ns()
    s, rest = tunnel(kind, b"bulk.test", port)
    s.sendall(b"x")
    n = len(rest)
    buf = bytearray(1 << 20)
    while True:
        k = s.recv_into(buf)
        if not k:
            break
        n += k
    t1 = time.perf_counter_ns()
    s.close()
    c1 = os.times()
    if n != size:
        raise RuntimeError("%s: got %d bytes of %d" % (kind, n, size))
    return {"bytes": n, "secs": (t1 - t0) / 1e9,
            "cpu": (c1.user - c0.user) + (c1.system - c0.system)}

def request(kind, port):
    if kind == "http":
        s = conn(PROXY)
        s.sendall(b"GET http://small.test:%d/x HTTP/1.1\r\nHost: small.test:%d\r\n\r\n" % (port, port))
        want = b"HTTP/1.1 200"
    elif kind == "refused":
        s = conn(PROXY)
        s.sendall(b"GET http://denied.test:%d/x HTTP/1.1\r\nHost: denied.test:%d\r\n\r\n" % (port, port))
        want = b"HTTP/1.1 403"
    else:
        s, rest = tunnel(kind, b"small.test", port)
        s.sendall(b"GET /x HTTP/1.1\r\nHost: small.test:%d\r\nConnection: close\r\n\r\n" % port)
        want = b"HTTP/1.1 200"
    r = upto_eof(s)
    s.close()
    if not r.startswith(want):
        raise RuntimeError("%s: %r" % (kind, r[:200]))

def latency(kinds, port, n, warm):
    t = {k: [] for k in kinds}
    for i in range(warm + n):
        j = i % len(kinds)
        for k in kinds[j:] + kinds[:j]:
            t0 = time.perf_counter_ns()
            request(k, port)
            t1 = time.perf_counter_ns()
            if i >= warm:
                t[k].append(t1 - t0)
    return t

def exchanges(kinds, port, n, gap_us):
    conns = {}
    for k in kinds:
        c, rest = tunnel(k, b"small.test", port)
        c.setsockopt(socket.IPPROTO_TCP, ND, 1)
        conns[k] = c
    t = {k: [] for k in kinds}
    for i in range(n):
        for k in kinds:
            c = conns[k]
            t0 = time.perf_counter_ns()
            c.sendall(b"h" * 100)
            time.sleep(gap_us / 1e6)
            c.sendall(b"b" * 100)
            got = 0
            while got < 100:
                r = c.recv(4096)
                if not r:
                    raise RuntimeError("EOF in exchange")
                got += len(r)
            t[k].append(time.perf_counter_ns() - t0)
    for c in conns.values():
        c.close()
    return t

a = sys.argv[1:]
print("READY", flush=True)
time.sleep(0.2)   # the gateway's CPU is sampled from here on
if a[0] == "bulk":
    out = bulk(a[1], int(a[2]), int(a[3]))
elif a[0] == "exch":
    out = exchanges(a[1].split(","), int(a[2]), int(a[3]), int(a[4]))
else:
    out = latency(a[1].split(","), int(a[2]), int(a[3]), int(a[4]))
print("RESULT " + json.dumps(out))
'''

# ---- the servers, on the host's loopback --------------------------------------


class Servers:
    def __init__(self, size):
        self.size = size
        self.bulk_cpu = []   # server thread CPU seconds per bulk transfer
        self.errors = []
        self.bulk = self._listen()
        self.http = self._listen()
        self.exch = self._listen()
        for fn, s in ((self._bulk_loop, self.bulk), (self._http_loop, self.http),
                      (self._exch_loop, self.exch)):
            threading.Thread(target=fn, args=(s,), daemon=True).start()

    @staticmethod
    def _listen():
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", 0))
        s.listen(128)
        return s

    def port(self, which):
        return getattr(self, which).getsockname()[1]

    def _bulk_loop(self, ls):
        while True:
            c, _ = ls.accept()
            threading.Thread(target=self._bulk_one, args=(c,), daemon=True).start()

    def _bulk_one(self, c):
        try:
            t0 = time.thread_time()
            if c.recv(1) != b"x":
                return
            mv = memoryview(bytes(1 << 20))
            left = self.size
            while left:
                k = c.send(mv[:min(left, len(mv))])
                left -= k
            c.shutdown(socket.SHUT_WR)
            c.recv(1)  # the peer's close
            self.bulk_cpu.append(time.thread_time() - t0)
        except OSError as e:
            self.errors.append(f"bulk: {e}")
        finally:
            c.close()

    def _exch_loop(self, ls):
        while True:
            c, _ = ls.accept()
            threading.Thread(target=self._exch_one, args=(c,), daemon=True).start()

    def _exch_one(self, c):
        # 200 bytes in (however they arrive), 100 bytes out, until EOF
        try:
            c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            while True:
                got = 0
                while got < 200:
                    k = c.recv(4096)
                    if not k:
                        return
                    got += len(k)
                c.sendall(b"r" * 100)
        except OSError as e:
            self.errors.append(f"exchange: {e}")
        finally:
            c.close()

    def _http_loop(self, ls):
        # serial: the clients make one request at a time
        resp = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
        while True:
            c, _ = ls.accept()
            try:
                c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                b = b""
                while b"\r\n\r\n" not in b:
                    k = c.recv(4096)
                    if not k:
                        break
                    b += k
                if b:
                    c.sendall(resp)
            except OSError as e:
                self.errors.append(f"http: {e}")
            finally:
                c.close()


# ---- running a sandbox ------------------------------------------------------------

def proc_stat(pid):
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()


def find_child(ppid, comm):
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                s = f.read()
        except OSError:
            continue
        name = s[s.index("(") + 1:s.rindex(")")]
        if name == comm and int(s.rsplit(")", 1)[1].split()[1]) == ppid:
            return int(d)
    return None


class Runner:
    def __init__(self, moat, ws, servers):
        self.moat, self.ws, self.servers = moat, ws, servers
        self.tick = os.sysconf("SC_CLK_TCK")

    def argv(self, gateway, client_args):
        a = [self.moat, "run", "-w", self.ws]
        if gateway:
            a += ["--allow-domain", "bulk.test", "--allow-domain", "small.test",
                  "--resolve", "bulk.test:127.0.0.1", "--resolve", "small.test:127.0.0.1"]
        else:
            a += ["--net", "host"]
        return a + ["--", PY, "client.py"] + client_args

    def run(self, gateway, client_args, timeout=600):
        """Run the client in a sandbox: its result, and the CPU seconds (user, sys)
        moat-gate used from the client's start (its `READY` line, after which it
        idles 0.2 s) to its end -- moat-gate's own start-up (~60 ms: OpenSSL
        loads the system's CAs) is left out."""
        argv = self.argv(gateway, client_args)
        err = tempfile.TemporaryFile()
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL)
        samples = []        # (monotonic time, (user, sys)) of moat-gate
        ready = []          # when the client said READY
        pid = [None]

        def sample():
            while p.poll() is None:
                try:
                    if pid[0] is None:
                        pid[0] = find_child(p.pid, "moat-gate")
                    if pid[0] is not None:
                        f = proc_stat(pid[0])
                        samples.append((time.monotonic(),
                                        (int(f[11]) / self.tick, int(f[12]) / self.tick)))
                except (OSError, ValueError, IndexError):
                    pass
                time.sleep(0.05)

        th = threading.Thread(target=sample, daemon=True)
        th.start()
        killer = threading.Timer(timeout, p.kill)
        killer.start()
        out = []
        for line in p.stdout:
            line = line.decode(errors="replace")
            if line.startswith("READY"):
                ready.append(time.monotonic())
            out.append(line)
        p.wait()
        killer.cancel()
        th.join()
        err.seek(0)
        errs = err.read().decode(errors="replace")
        err.close()
        res = [ln for ln in out if ln.startswith("RESULT ")]
        if p.returncode != 0 or not res:
            raise RuntimeError(f"exit {p.returncode}: {' '.join(argv)}\n{''.join(out)}{errs}")
        cpu = None
        if ready and samples:
            base = [c for t, c in samples if t >= ready[0]]
            if base:
                cpu = (samples[-1][1][0] - base[0][0], samples[-1][1][1] - base[0][1])
        return json.loads(res[-1][7:]), cpu


# ---- the measurements ---------------------------------------------------------------

def med(xs):
    return statistics.median(xs)


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def bench_bulk(r, servers, rounds, size, kinds):
    port = servers.port("bulk")
    per = {k: [] for k in kinds}     # MB/s per round
    gcpu = {k: [] for k in kinds}    # moat-gate (user, sys) per round
    ccpu = {k: [] for k in kinds}    # client CPU s
    scpu = {k: [] for k in kinds}    # server thread CPU s
    secs = {k: [] for k in kinds}
    print(f"1. throughput: {size} bytes ({size / GIB:g} GiB) per transfer, one sandbox each, "
          f"MB/s (10^6 bytes/s) timed in the client from connect() to EOF", flush=True)
    for i in range(rounds):
        order = kinds if i % 2 == 0 else kinds[::-1]
        line = []
        for k in order:
            n0 = len(servers.bulk_cpu)
            res, g = r.run(k != "direct", ["bulk", k, str(port), str(size)])
            per[k].append(res["bytes"] / res["secs"] / 1e6)
            secs[k].append(res["secs"])
            ccpu[k].append(res["cpu"])
            scpu[k].append(servers.bulk_cpu[-1] if len(servers.bulk_cpu) > n0 else float("nan"))
            if k != "direct":
                gcpu[k].append(g or (float("nan"), float("nan")))
        for k in kinds:
            s = f"{k} {per[k][-1]:7.1f} MB/s"
            if k != "direct":
                s += f" ({per[k][-1] / per['direct'][-1]:.2f} of direct; moat-gate CPU " \
                     f"{gcpu[k][-1][0]:.2f} user + {gcpu[k][-1][1]:.2f} sys s in {secs[k][-1]:.2f} s)"
            line.append(s)
        print(f"  round {i + 1}: " + ", ".join(line), flush=True)
    out = {}
    for k in kinds:
        o = {"mbps_median": med(per[k]), "mbps_rounds": per[k], "secs_median": med(secs[k]),
             "client_cpu_median": med(ccpu[k]), "server_cpu_median": med(scpu[k])}
        if k != "direct":
            o["ratio_median"] = med([a / b for a, b in zip(per[k], per["direct"])])
            o["gate_user_median"] = med([u for u, _ in gcpu[k]])
            o["gate_sys_median"] = med([s for _, s in gcpu[k]])
        out[k] = o
    s = ", ".join(
        f"{k} {out[k]['mbps_median']:.1f} MB/s" +
        (f" (median ratio {out[k]['ratio_median']:.2f})" if k != "direct" else "")
        for k in kinds)
    print(f"  overall: {s}")
    for k in kinds:
        o = out[k]
        s = f"    {k}: {o['secs_median']:.2f} s wall; client CPU {o['client_cpu_median']:.2f} s, " \
            f"server CPU {o['server_cpu_median']:.2f} s"
        if k != "direct":
            s += f", moat-gate CPU {o['gate_user_median']:.2f} user + {o['gate_sys_median']:.2f} sys s"
        print(s)
    return out


def bench_latency(r, servers, rounds, n, warm, kinds):
    port = servers.port("http")
    gk = [k for k in kinds if k != "direct"]
    per = {k: [] for k in kinds}    # per-round medians, µs
    p90 = {k: [] for k in kinds}
    gcpu = []                        # moat-gate CPU µs per request, per round
    print(f"2. latency: {n} small requests per kind per round, one connection each, "
          f"µs from socket() to EOF; the gateway kinds take turns request by request", flush=True)
    for i in range(rounds):
        runs = [False, True] if i % 2 == 0 else [True, False]
        for gw in runs:
            if gw:
                res, g = r.run(True, ["lat", ",".join(gk), str(port), str(n), str(warm)])
                if g:  # moat-gate's CPU over all the requests it saw (start-up included)
                    gcpu.append((g[0] + g[1]) / ((n + warm) * len(gk)) * 1e6)
            else:
                res, _ = r.run(False, ["lat", "direct", str(port), str(n), str(warm)])
            for k, v in res.items():
                per[k].append(med(v) / 1e3)
                p90[k].append(pct(v, 0.9) / 1e3)
        d = per["direct"][-1]
        s = ", ".join(f"{k} {per[k][-1]:6.1f} (+{per[k][-1] - d:5.1f})" for k in gk)
        g = f"; moat-gate CPU {gcpu[-1]:.0f} µs/request" if gcpu else ""
        print(f"  round {i + 1}: median direct {d:6.1f}, {s}{g}", flush=True)
    out = {"gate_cpu_us_per_request": med(gcpu) if gcpu else None}
    for k in kinds:
        o = {"median_us": med(per[k]), "p90_us": med(p90[k]), "rounds_us": per[k]}
        if k != "direct":
            o["added_us"] = med([a - b for a, b in zip(per[k], per["direct"])])
            o["ratio"] = med([a / b for a, b in zip(per[k], per["direct"])])
        out[k] = o
    print("  overall (median of round medians; added = median of per-round differences):")
    for k in kinds:
        o = out[k]
        s = f"    {k:8s} median {o['median_us']:6.1f} µs, p90 {o['p90_us']:6.1f} µs"
        if k != "direct":
            s += f", added {o['added_us']:6.1f} µs, ratio {o['ratio']:.2f}"
        print(s)
    if gcpu:
        print(f"    moat-gate CPU (user+sys, all kinds together): {med(gcpu):.0f} µs per request")
    return out


def bench_exchanges(r, servers, rounds, n, gap_us, kinds):
    port = servers.port("exch")
    gk = [k for k in kinds if k != "direct"]
    per = {k: [] for k in kinds}
    slow = {k: 0 for k in kinds}
    print(f"3. exchanges on one open connection: the client (TCP_NODELAY) writes 100 bytes, "
          f"waits {gap_us} µs, writes 100 more, reads a 100-byte answer; {n} per kind per round, "
          f"ms", flush=True)
    for i in range(rounds):
        runs = [False, True] if i % 2 == 0 else [True, False]
        for gw in runs:
            ks = gk if gw else ["direct"]
            res, _ = r.run(gw, ["exch", ",".join(ks), str(port), str(n), str(gap_us)])
            for k, v in res.items():
                per[k].append(med(v) / 1e6)
                slow[k] += sum(1 for x in v if x > 20e6)
        s = ", ".join(f"{k} {per[k][-1]:6.2f}" for k in kinds)
        print(f"  round {i + 1}: median {s}", flush=True)
    out = {k: {"median_ms": med(per[k]), "over_20ms": slow[k], "of": n * rounds} for k in kinds}
    s = ", ".join(f"{k} {out[k]['median_ms']:.2f} ms ({slow[k]} of {n * rounds} over 20 ms)"
                  for k in kinds)
    print(f"  overall: median {s}")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="2 rounds, 256 MiB, 200 requests")
    ap.add_argument("--moat", default=os.path.join(ROOT, "build", "moat"),
                    help="moat binary; moat-gate must be next to it")
    ap.add_argument("--rounds", type=int)
    ap.add_argument("--size", type=int, help="bytes per transfer (default 1 GiB)")
    ap.add_argument("--requests", type=int, help="requests per kind per round (default 1000)")
    ap.add_argument("--warmup", type=int, default=20, help="untimed requests per kind first")
    ap.add_argument("--no-socks", action="store_true", help="skip SOCKS5 in both benchmarks")
    ap.add_argument("--skip", choices=["bulk", "latency", "exchanges"], help="skip one benchmark")
    ap.add_argument("--exchanges", type=int, default=50,
                    help="two-write exchanges per kind per round (0: skip)")
    ap.add_argument("--gap", type=int, default=1000, help="µs between the two writes")
    ap.add_argument("--tmpdir", default=tempfile.gettempdir())
    ap.add_argument("--json", help="also write all figures to this file")
    a = ap.parse_args()
    rounds = a.rounds or (2 if a.quick else 5)
    size = a.size or ((256 << 20) if a.quick else GIB)
    n = a.requests or (200 if a.quick else 1000)

    tmp = tempfile.mkdtemp(prefix="moat-gate-bench.", dir=a.tmpdir)
    try:
        src = os.path.dirname(os.path.abspath(a.moat))
        bindir = os.path.join(tmp, "bin")
        os.mkdir(bindir)
        for b in ("moat", "moat-gate"):
            shutil.copy2(os.path.join(src, b), os.path.join(bindir, b))
        ws = os.path.join(tmp, "ws")
        os.mkdir(ws)
        with open(os.path.join(ws, "client.py"), "w") as f:
            f.write(CLIENT)
        servers = Servers(size)
        r = Runner(os.path.join(bindir, "moat"), ws, servers)
        try:
            libevent = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "libevent-2.1-7"],
                                      capture_output=True, text=True).stdout or "?"
        except OSError:
            libevent = "?"
        print(f"moat: {os.path.abspath(a.moat)} (copied; {'root' if os.geteuid() == 0 else 'rootless'}); "
              f"{os.cpu_count()} CPUs; kernel {platform.release()}; libevent {libevent}; "
              f"client python {subprocess.run([PY, '-V'], capture_output=True, text=True).stdout.split()[-1]}; "
              f"{time.strftime('%Y-%m-%d %H:%M %Z')}")
        print(f"rounds {rounds}, in reverse order every other round", flush=True)
        result = {"rounds": rounds, "size": size, "requests": n,
                  "date": time.strftime("%Y-%m-%d"), "kernel": platform.release()}
        bulk_kinds = ["direct", "connect"] + ([] if a.no_socks else ["socks"])
        lat_kinds = ["direct", "http", "connect"] + ([] if a.no_socks else ["socks"]) + ["refused"]
        if a.skip != "bulk":
            result["bulk"] = bench_bulk(r, servers, rounds, size, bulk_kinds)
        if a.skip != "latency":
            result["latency"] = bench_latency(r, servers, rounds, n, a.warmup, lat_kinds)
        if a.skip != "exchanges" and a.exchanges:
            result["exchanges"] = bench_exchanges(r, servers, rounds, a.exchanges, a.gap,
                                                  bulk_kinds)
        if servers.errors:
            print("server errors: " + "; ".join(servers.errors[:5]), file=sys.stderr)
        # the table for docs/benchmarks.md
        print()
        print("| measure | direct | through the gateway | gateway/direct |")
        print("|---|---|---|---|")
        names = {"connect": "HTTP CONNECT tunnel", "socks": "SOCKS5", "http": "HTTP proxy (absolute URI)",
                 "refused": "refused by the gateway (403, no upstream)"}
        if "bulk" in result:
            b = result["bulk"]
            for k in bulk_kinds[1:]:
                print(f"| {size / GIB:g} GiB, {names[k]} | {b['direct']['mbps_median']:.0f} MB/s | "
                      f"{b[k]['mbps_median']:.0f} MB/s | **{b[k]['ratio_median']:.2f}** |")
        if "latency" in result:
            L = result["latency"]
            for k in lat_kinds[1:]:
                print(f"| small request, {names[k]} | {L['direct']['median_us']:.0f} µs | "
                      f"{L[k]['median_us']:.0f} µs | +{L[k]['added_us']:.0f} µs (**{L[k]['ratio']:.2f}×**) |")
        if "exchanges" in result:
            E = result["exchanges"]
            for k in bulk_kinds[1:]:
                print(f"| two-write exchange on an open connection, {names[k]} | "
                      f"{E['direct']['median_ms']:.2f} ms | {E[k]['median_ms']:.2f} ms | "
                      f"**{E[k]['median_ms'] / E['direct']['median_ms']:.0f}×** |")
        if a.json:
            with open(a.json, "w") as f:
                json.dump(result, f, indent=1)
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
