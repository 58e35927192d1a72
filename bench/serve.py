#!/usr/bin/python3
"""Benchmarks of `moat serve` (stdlib only; Debian's /usr/bin/python3).

  python3 bench/serve.py [--quick] [--moat build/moat] [--rounds R] [--idle N]

Copies moat, moat-serve and moat-agent to a temporary directory (a rebuild
during the run cannot swap them), starts two daemons from the copy on free
loopback ports with temporary data directories -- one as configured by
default (a pool of pre-started sandboxes) and one with `--pool 0` (every
create builds its sandbox) -- and talks to each over one persistent
keep-alive HTTP/1.1 connection (http.client, TCP_NODELAY). Timing is
time.perf_counter_ns around each request, its answer fully read.

  exec-c, tti-pool-c, tti-cold-c, health-c
             the same requests as exec, tti-pool, tti-cold and health below,
             timed by bench/rtt.c (a minimal C client, one keep-alive
             connection, each request one write): the daemon's and the
             sandbox's share without Python's (http.client costs about a
             millisecond per exec here); these are the figures the targets
             are read against, the Python ones are kept beside them;
  spawn-c    /bin/true through posix_spawn+waitpid in C: what starting the
             command alone costs on this machine;
  exec       POST /v1/sandboxes/{id}/exec {"cmd":["true"]} in a running
             sandbox;
  tti-pool   time to interactive, default daemon: POST /v1/sandboxes {} and
             the first exec of `true` in it, up to the exec's answer; a
             pause before each sample lets the pool refill (the DELETE is
             off the clock and reported on its own);
  tti-cold   the same against the `--pool 0` daemon, back to back;
  tti-shm    as tti-cold, a `--pool 0` daemon whose data directory (so the
             sandboxes' workspaces) is on tmpfs (/dev/shm) instead of the
             filesystem of TMPDIR (ext4 here);
  bwrap      one-shot `bwrap --unshare-all ... /bin/true` (the peer);
  run        one-shot `moat run -- /bin/true` in an empty workspace (a
             fresh sandbox per command: what a local tool does);
  spawn      /bin/true itself through the same posix_spawn+waitpid loop
             (the harness's floor, included in bwrap and run);
  health     GET /healthz (HTTP and Python floor, no agent);
  stat       GET /v1/sandboxes/{id}/files/stat?path=/workspace (one
             daemon-agent round trip, no process started).

The machine's speed drifts, so the kinds run in ROUNDS short rounds, in
reverse order every other round; ratios are medians of per-round ratios.
Then the `--pool 0` daemon holds IDLE sandboxes at once (each created and
used by one exec); host memory per sandbox is measured several ways
(regression over steps of the count, so that one outside blip does not
decide it), they are all deleted and checked gone. At the end every
sandbox is deleted, the pools are drained (a restart with `--pool 0`;
a stopped daemon leaves its sandboxes and its pool running) and the
daemons stopped.
"""
import argparse
import http.client
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BWRAP = ["bwrap", "--unshare-all", "--die-with-parent", "--new-session",
         "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
         "--tmpfs", "/tmp", "/bin/true"]
NS = 1e6  # ns per ms
RTT = None  # bench/rtt.c, compiled into the run's temporary directory


# ---- HTTP ---------------------------------------------------------------------

class Api:
    """One persistent keep-alive connection to a daemon."""

    def __init__(self, port):
        self.port = port
        self.conn = None
        self.connect()

    def connect(self):
        if self.conn:
            self.conn.close()
        self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        self.conn.connect()
        self.conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def call(self, method, path, body=None, expect=(200,)):
        data = json.dumps(body).encode() if body is not None else None
        hdrs = {"Content-Type": "application/json"} if data is not None else {}
        self.conn.request(method, path, body=data, headers=hdrs)
        r = self.conn.getresponse()
        raw = r.read()
        if r.status not in expect:
            raise RuntimeError(f"{method} {path}: {r.status} {raw[:300]!r}")
        if r.getheader("Connection", "").lower() == "close":
            self.connect()
        return json.loads(raw) if raw and raw[:1] in b"{[" else raw

    def create(self, spec):
        return self.call("POST", "/v1/sandboxes", spec, (201,))["id"]

    def exec_true(self, sid):
        o = self.call("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": ["true"]})
        if o.get("exit_code") != 0:
            raise RuntimeError(f"exec true in {sid}: {o}")
        return o

    def delete(self, sid):
        self.call("DELETE", f"/v1/sandboxes/{sid}", None, (204,))

    def ids(self):
        return [s["id"] for s in self.call("GET", "/v1/sandboxes")["sandboxes"]]


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Daemon:
    def __init__(self, moat, tmp, name, extra=()):
        self.moat, self.extra = moat, list(extra)
        self.data = os.path.join(tmp, name)
        self.logpath = os.path.join(tmp, name + ".log")
        self.port = free_port()
        self.start(self.extra)
        self.pids_seen = set()

    def start(self, extra):
        self.log = open(self.logpath, "a+")
        # `moat serve` execs moat-serve in place: the pid is the daemon's
        self.proc = subprocess.Popen(
            [self.moat, "serve", "--listen", f"127.0.0.1:{self.port}", "--data", self.data]
            + list(extra), stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while True:
            try:
                self.api = Api(self.port)
                self.api.call("GET", "/healthz")
                return
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.log.seek(0)
                    raise RuntimeError("moat serve did not start: " + self.log.read())
                time.sleep(0.02)

    def children(self):
        """Live pids whose parent is the daemon (sandboxes' and the pool's pid 1s)."""
        out = []
        try:
            tids = os.listdir(f"/proc/{self.proc.pid}/task")
        except OSError:
            return out
        for tid in tids:
            try:
                with open(f"/proc/{self.proc.pid}/task/{tid}/children") as f:
                    out += [int(x) for x in f.read().split()]
            except OSError:
                pass
        self.pids_seen.update(out)
        return out

    def term(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()

    def stop(self):
        """Delete every sandbox, drain the pool, stop. Returns what is left."""
        left = []
        try:
            for sid in self.api.ids():
                self.api.delete(sid)
            self.children()
            self.term()
            # a stopped daemon keeps its pool running for the next start:
            # start once more without a pool, which deletes the pool's boxes
            self.start(["--pool", "0"])
            for sid in self.api.ids():
                self.api.delete(sid)
            left = self.api.ids()
        except Exception as e:  # report, still stop
            print(f"warning: cleanup of {self.data}: {e}", file=sys.stderr)
        self.term()
        time.sleep(0.2)
        alive = [p for p in self.pids_seen if alive_pid(p)]
        if left or alive:
            print(f"warning: {self.data}: sandboxes left {left}, processes left {alive}",
                  file=sys.stderr)
        return left, alive


def alive_pid(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


# ---- one-shot commands --------------------------------------------------------

def spawn_run(argv, cwd):
    """Time of one posix_spawn + waitpid (stdout/stderr to /dev/null)."""
    fa = [(os.POSIX_SPAWN_OPEN, 1, "/dev/null", os.O_WRONLY, 0),
          (os.POSIX_SPAWN_DUP2, 1, 2)]
    old = os.getcwd()
    os.chdir(cwd)
    try:
        t0 = time.perf_counter_ns()
        pid = os.posix_spawnp(argv[0], argv, os.environ, file_actions=fa)
        _, st = os.waitpid(pid, 0)
        t1 = time.perf_counter_ns()
    finally:
        os.chdir(old)
    if st != 0:
        raise RuntimeError(f"{' '.join(argv)}: wait status {st}")
    return t1 - t0


# ---- statistics ---------------------------------------------------------------

def pct(xs, q):
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * (len(s) - 1) + 0.5))]


def summary(xs):
    return {"median": statistics.median(xs) / NS, "p90": pct(xs, 0.9) / NS,
            "min": min(xs) / NS, "n": len(xs)}


def fmt(s):
    return (f"median {s['median']:7.3f} ms  p90 {s['p90']:7.3f}  min {s['min']:7.3f}  "
            f"N {s['n']}")


def slope(xs, ys):
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx


# ---- memory -------------------------------------------------------------------

def meminfo():
    m = {}
    with open("/proc/meminfo") as f:
        for line in f:
            k, v = line.split(":")
            m[k] = int(v.split()[0])  # kB
    # `free`'s "used": total - free - buffers - cache - reclaimable slab
    m["used"] = m["MemTotal"] - m["MemFree"] - m["Buffers"] - m["Cached"] - m["SReclaimable"]
    m["MemAvailable-"] = -m["MemAvailable"]
    return m


def slabinfo():
    out = {}
    try:
        with open("/proc/slabinfo") as f:
            for line in f.readlines()[2:]:
                p = line.split()
                out[p[0]] = int(p[2]) * int(p[3])  # num_objs * objsize (bytes)
    except OSError:
        pass
    return out


def status_kb(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def cgroup_dirs(pid):
    """The cgroup directories pid is in (v1 controllers and v2)."""
    out = set()
    try:
        with open(f"/proc/{pid}/cgroup") as f:
            for line in f:
                _, ctl, path = line.rstrip("\n").split(":", 2)
                for c in (ctl.split(",") if ctl else ["", "unified"]):
                    c = c.replace("name=", "")
                    d = os.path.join("/sys/fs/cgroup", c, path.lstrip("/"))
                    if os.path.isdir(d):
                        out.add(d)
    except OSError:
        pass
    return out


def rollup(pid):
    r = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            p = line.split()
            if len(p) >= 3 and p[2] == "kB":
                r[p[0].rstrip(":")] = int(p[1])
    return r


MEMKEYS = [("used (free(1))", "used"), ("MemAvailable drop", "MemAvailable-"),
           ("Slab", "Slab"), ("  SUnreclaim", "SUnreclaim"),
           ("  SReclaimable", "SReclaimable"), ("PageTables", "PageTables"),
           ("KernelStack", "KernelStack"), ("Cached (page cache)", "Cached")]


def idle_test(d, n, spec, steps=5):
    api = d.api
    dpid = d.proc.pid
    print(f"\n== {n} idle sandboxes at once (daemon with --pool 0; each created, one exec "
          "of `true`, then left idle) ==")
    time.sleep(2)
    kids0 = set(d.children())
    points = [(0, meminfo())]
    s0 = slabinfo()
    rss0, pss0 = status_kb(dpid, "VmRSS"), rollup(dpid)["Pss"]
    ids, create_ns, first_ns = [], [], []
    t_all = 0
    for step in range(1, steps + 1):
        t = time.perf_counter_ns()
        while len(ids) < n * step // steps:
            t0 = time.perf_counter_ns()
            sid = api.create(spec)
            t1 = time.perf_counter_ns()
            api.exec_true(sid)
            t2 = time.perf_counter_ns()
            ids.append(sid)
            create_ns.append(t1 - t0)
            first_ns.append(t2 - t1)
        t_all += time.perf_counter_ns() - t
        time.sleep(1)  # settle before each reading
        points.append((len(ids), meminfo()))
    warm = []  # one more exec in each: are they all still responsive?
    for sid in ids:
        t0 = time.perf_counter_ns()
        api.exec_true(sid)
        warm.append(time.perf_counter_ns() - t0)
    time.sleep(2)
    m1, s1 = meminfo(), slabinfo()
    points.append((n, m1))
    rss1, pss1 = status_kb(dpid, "VmRSS"), rollup(dpid)["Pss"]
    agents = [p for p in d.children() if p not in kids0]
    pss = [rollup(p) for p in agents]
    mine = cgroup_dirs(dpid)
    cgs = set().union(*(cgroup_dirs(p) for p in agents)) - mine if agents else set()
    listed = len(api.ids())
    res = {"n": n, "agents": len(agents), "listed": listed, "create_all_s": t_all / 1e9,
           "create_first": summary(create_ns[:50]), "create_last": summary(create_ns[-50:]),
           "tti_all": summary([a + b for a, b in zip(create_ns, first_ns)]),
           "exec_at_n": summary(warm)}
    print(f"created {n} (+1 exec each) in {res['create_all_s']:.2f} s; "
          f"listed {listed}, live agents {len(agents)}")
    print(f"  create, first 50:  {fmt(res['create_first'])}")
    print(f"  create, last 50:   {fmt(res['create_last'])}")
    print(f"  tti over all {n}:  {fmt(res['tti_all'])}")
    print(f"  exec with {n} up:  {fmt(res['exec_at_n'])}")

    # delete them all, check they are gone
    dels = []
    t_all = time.perf_counter_ns()
    for sid in ids:
        t0 = time.perf_counter_ns()
        api.delete(sid)
        dels.append(time.perf_counter_ns() - t0)
    t_all = time.perf_counter_ns() - t_all
    left_api = set(api.ids()) & set(ids)
    left_pids = [p for p in agents if alive_pid(p)]
    sbdir = os.path.join(d.data, "sandboxes")
    left_dirs = [x for x in os.listdir(sbdir) if x in ids]
    left_cgs = [c for c in cgs if os.path.isdir(c)]
    time.sleep(3)  # namespace teardown in the kernel is partly deferred
    m2 = meminfo()

    print(f"host memory per sandbox (KiB): slope over {steps} steps | two-point "
          f"(0 -> {n}) | released by the deletes")
    mem = {}
    for label, key in MEMKEYS:
        sl = slope([c for c, _ in points], [m[key] for _, m in points])
        two = (m1[key] - points[0][1][key]) / n
        rel = (m1[key] - m2[key]) / n
        mem[key] = {"slope": sl, "two_point": two, "released": rel}
        print(f"  {label:22s} {sl:8.0f} | {two:8.0f} | {rel:8.0f}")
    tot = {k: sum(p.get(k, 0) for p in pss) for k in ("Pss", "Pss_Anon", "Pss_File", "Rss")}
    mem["agents_pss"] = tot["Pss"] / n
    mem["agents_pss_anon"] = tot["Pss_Anon"] / n
    mem["agents_pss_file"] = tot["Pss_File"] / n
    mem["daemon_rss"] = (rss1 - rss0) / n
    mem["daemon_pss"] = (pss1 - pss0) / n
    print(f"  agents' PSS (sum/n)    {mem['agents_pss']:8.0f}   (anonymous "
          f"{mem['agents_pss_anon']:.0f}, file {mem['agents_pss_file']:.0f}; one agent's "
          f"RSS {statistics.median(p['Rss'] for p in pss):.0f}, mostly its shared binary)")
    print(f"  daemon RSS growth      {mem['daemon_rss']:8.1f}   (PSS {mem['daemon_pss']:.1f})")
    grow = sorted(((s1.get(c, 0) - s0.get(c, 0), c) for c in set(s0) | set(s1)), reverse=True)
    top = [(c, b / n / 1024) for b, c in grow[:10] if b > 0]
    if top:
        print("  slab caches that grew most (KiB per sandbox): " +
              ", ".join(f"{c} {k:.1f}" for c, k in top))
    res.update(mem=mem, slab_top=top, delete=summary(dels), delete_all_s=t_all / 1e9,
               left_api=len(left_api), left_pids=len(left_pids), left_dirs=len(left_dirs),
               cgroups=len(cgs), left_cgroups=len(left_cgs))
    print(f"deleted {n} in {res['delete_all_s']:.2f} s ({fmt(res['delete'])})")
    print(f"  left: {len(left_api)} in the API, {len(left_pids)} live agent processes, "
          f"{len(left_dirs)} sandbox directories, {len(left_cgs)} of {len(cgs)} cgroups"
          + ("  ERROR: not everything is gone"
             if left_api or left_pids or left_dirs or left_cgs else ""))
    return res


# ---- rounds -------------------------------------------------------------------

def bench(pooled, cold, shm, moat, ws, rounds, nn, spec):
    api, capi = pooled.api, cold.api
    warm = api.create(spec)  # the sandbox for exec round trips
    for _ in range(20):
        api.exec_true(warm)
    time.sleep(0.5)  # pool refilled
    S = {k: [] for k in ("exec-c", "tti-pool-c", "create-pool-c", "first-pool-c",
                         "tti-cold-c", "create-cold-c", "first-cold-c", "spawn-c",
                         "health-c", "exec", "tti-pool", "tti-cold", "tti-shm", "bwrap",
                         "run", "spawn", "health", "stat", "create-pool", "first-pool",
                         "next-pool", "create-cold", "first-cold", "next-cold",
                         "create-shm", "first-shm", "next-shm", "delete")}
    per_round = {}

    def timed(f, n):
        xs = []
        for _ in range(n):
            t0 = time.perf_counter_ns()
            f()
            xs.append(time.perf_counter_ns() - t0)
        return xs

    def tti(a, n, tag, pause):
        xs, ids = [], []
        for _ in range(n):
            if pause:
                time.sleep(pause)
            t0 = time.perf_counter_ns()
            sid = a.create(spec)
            t1 = time.perf_counter_ns()
            a.exec_true(sid)
            t2 = time.perf_counter_ns()
            for _ in range(3):  # the next execs: does the refill get in the way?
                t3 = time.perf_counter_ns()
                a.exec_true(sid)
                S["next-" + tag].append(time.perf_counter_ns() - t3)
            xs.append(t2 - t0)
            S["create-" + tag].append(t1 - t0)
            S["first-" + tag].append(t2 - t1)
            ids.append(sid)
            if pause:  # pool: delete off the clock, before the pause
                t0 = time.perf_counter_ns()
                a.delete(sid)
                S["delete"].append(time.perf_counter_ns() - t0)
        for sid in ids if not pause else []:
            t0 = time.perf_counter_ns()
            a.delete(sid)
            S["delete"].append(time.perf_counter_ns() - t0)
        time.sleep(0.3)  # let a pool refill before the next kind
        return xs

    def rtt(*args):
        """bench/rtt.c's samples (ns); tti: totals, parts into S."""
        out = subprocess.run([RTT] + [str(x) for x in args], capture_output=True, text=True)
        if out.returncode:
            raise RuntimeError(f"rtt {args}: {out.stderr.strip()}")
        rows = [[int(x) for x in line.split()] for line in out.stdout.splitlines()]
        if args[1] == "tti":
            tag = "pool-c" if args[0] == pooled.port else "cold-c"
            S["create-" + tag] += [r[1] for r in rows]
            S["first-" + tag] += [r[2] for r in rows]
            time.sleep(0.3)  # let a pool refill before the next kind
        return [r[0] for r in rows]

    stat = f"/v1/sandboxes/{warm}/files/stat?path=/workspace"
    kinds = [k for k in [
        ("exec-c", lambda: rtt(pooled.port, "exec", warm, nn["exec"])),
        ("tti-pool-c", lambda: rtt(pooled.port, "tti", nn["tti"], 250)),
        ("tti-cold-c", lambda: rtt(cold.port, "tti", nn["tti"], 0)),
        ("spawn-c", lambda: rtt("spawn", nn["exec"], "/bin/true")),
        ("health-c", lambda: rtt(pooled.port, "get", "/healthz", nn["probe"])),
        ("exec", lambda: timed(lambda: api.exec_true(warm), nn["exec"])),
        ("tti-pool", lambda: tti(api, nn["tti"], "pool", 0.25)),
        ("tti-cold", lambda: tti(capi, nn["tti"], "cold", 0)),
        ("tti-shm", lambda: tti(shm.api, nn["tti"], "shm", 0)),
        ("bwrap", lambda: [spawn_run(BWRAP, ws) for _ in range(nn["one"])]),
        ("run", lambda: [spawn_run([moat, "run", "--", "/bin/true"], ws)
                         for _ in range(nn["one"])]),
        ("spawn", lambda: [spawn_run(["/bin/true"], ws) for _ in range(nn["one"])]),
        ("health", lambda: timed(lambda: api.call("GET", "/healthz"), nn["probe"])),
        ("stat", lambda: timed(lambda: api.call("GET", stat), nn["probe"])),
    ] if k[0] != "tti-shm" or shm]
    for argv in (BWRAP, [moat, "run", "--", "/bin/true"]):  # warm caches
        for _ in range(5):
            spawn_run(argv, ws)
    print("\nper-round medians (ms):\n           " + "".join(f"{k:>11s}" for k, _ in kinds))
    for r in range(rounds):
        order = kinds if r % 2 == 0 else kinds[::-1]
        med = {}
        for k, f in order:
            xs = f()
            S[k] += xs
            med[k] = statistics.median(xs) / NS
            per_round.setdefault(k, []).append(med[k])
        print(f"  round {r + 1}: " + "".join(f"{med[k]:11.3f}" for k, _ in kinds))
    api.delete(warm)

    res = {k: summary(v) for k, v in S.items() if v}
    labels = {"exec-c": "C client: exec `true` round trip",
              "tti-pool-c": "C client: TTI, pool (default)",
              "create-pool-c": "  POST create (pool)", "first-pool-c": "  first exec",
              "tti-cold-c": "C client: TTI, --pool 0",
              "create-cold-c": "  POST create (built)", "first-cold-c": "  first exec",
              "spawn-c": "C: spawn /bin/true (floor)", "health-c": "C client: GET /healthz",
              "exec": "serve exec `true` round trip",
              "tti-pool": "serve TTI, pool (default)",
              "create-pool": "  POST create (pool)", "first-pool": "  first exec",
              "next-pool": "  next 3 execs", "tti-cold": "serve TTI, --pool 0",
              "create-cold": "  POST create (built)", "first-cold": "  first exec",
              "next-cold": "  next 3 execs", "tti-shm": "serve TTI, --pool 0, tmpfs data",
              "create-shm": "  POST create (built)", "first-shm": "  first exec",
              "next-shm": "  next 3 execs", "delete": "serve DELETE (off clock)",
              "bwrap": "bwrap one-shot /bin/true", "run": "moat run -- /bin/true",
              "spawn": "spawn /bin/true (floor)", "health": "GET /healthz",
              "stat": "GET files/stat (1 agent hop)"}
    print("\nall samples:")
    for k in [k for k in labels if S[k]]:
        print(f"  {labels[k]:30s} {fmt(res[k])}")
    fast = sum(1 for x in S["create-pool"] if x < statistics.median(S["create-cold"]) / 2)
    res["pool_hits"] = [fast, len(S["create-pool"])]
    print(f"  ({fast} of {len(S['create-pool'])} pooled creates were faster than half the "
          "median built create: served from the pool)")

    print("\nratios, serve / peer (median of per-round ratios of medians; < 1: serve faster):")
    res["ratios"] = {}
    for a_, b_ in (("exec-c", "spawn-c"), ("exec", "bwrap"), ("exec", "run"), ("tti-pool", "bwrap"),
                   ("tti-pool", "run"), ("tti-cold", "bwrap"), ("tti-cold", "run"),
                   ("tti-shm", "bwrap"), ("tti-shm", "run")):
        if b_ not in per_round or a_ not in per_round:
            continue
        rs = [x / y for x, y in zip(per_round[a_], per_round[b_])]
        m = statistics.median(rs)
        res["ratios"][f"{a_}/{b_}"] = {"median": m, "min": min(rs), "max": max(rs)}
        how = f"{1 / m:.1f}x faster" if m <= 1 else f"{m:.2f}x slower"
        print(f"  {a_:8s} / {b_:5s}  {m:6.3f}  (rounds {min(rs):.3f}-{max(rs):.3f}; "
              f"serve {how})")
    t, e = res["tti-pool"]["median"], res["exec"]["median"]
    tc = res["tti-cold"]["median"]
    tcc, tpc, ec = (res[k]["median"] for k in ("tti-cold-c", "tti-pool-c", "exec-c"))
    fl = res["spawn-c"]["median"]
    print(f"\ntargets (C client; Python http.client in brackets): TTI median <= 20 ms, "
          f"aim < 5: pool {tpc:.2f} ms [{t:.2f}], --pool 0 {tcc:.2f} ms [{tc:.2f}]; "
          f"exec median <= 3 ms, aim 1: {ec:.2f} ms [{e:.2f}] "
          f"(of which starting /bin/true: {fl:.2f} ms)")
    res["per_round"] = per_round
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="3 short rounds, 100 idle")
    ap.add_argument("--moat", default=os.path.join(ROOT, "build", "moat"),
                    help="moat binary; moat-serve and moat-agent must be beside it")
    ap.add_argument("--rounds", type=int)
    ap.add_argument("--idle", type=int, help="idle sandboxes to hold at once (0: skip)")
    ap.add_argument("--limits", action="store_true",
                    help='create sandboxes with {"limits":{"memory":"512M","pids":256}} '
                         "(cgroups; never pooled)")
    ap.add_argument("--tmpdir", default=tempfile.gettempdir(),
                    help="where the data directories and `moat run`'s workspace go "
                         "(default: TMPDIR or /tmp)")
    ap.add_argument("--no-shm", action="store_true", help="skip the tmpfs data-dir daemon")
    ap.add_argument("--json", help="also write all figures to this file")
    a = ap.parse_args()
    rounds = a.rounds or (3 if a.quick else 7)
    nn = ({"exec": 60, "tti": 10, "one": 12, "probe": 30} if a.quick else
          {"exec": 300, "tti": 30, "one": 40, "probe": 100})
    idle = a.idle if a.idle is not None else (100 if a.quick else 500)
    spec = {"limits": {"memory": "512M", "pids": 256}} if a.limits else {}
    if not shutil.which("bwrap"):
        sys.exit("bwrap missing (apt-get install bubblewrap)")
    tmp = tempfile.mkdtemp(prefix="moat-bench-serve.", dir=a.tmpdir)
    ws = os.path.join(tmp, "ws")  # empty workspace for `moat run` (same fs as the data)
    os.mkdir(ws)
    bindir = os.path.join(tmp, "bin")
    os.mkdir(bindir)
    src = os.path.dirname(os.path.abspath(a.moat))
    for b in ("moat", "moat-serve", "moat-agent"):
        shutil.copy2(os.path.join(src, b), bindir)
    moat = os.path.join(bindir, "moat")
    global RTT
    RTT = os.path.join(bindir, "rtt")
    subprocess.run(["cc", "-O2", "-Wall", "-Wextra", "-Werror", "-o", RTT,
                    os.path.join(ROOT, "bench", "rtt.c")], check=True)
    rev = subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty"],
                         capture_output=True, text=True).stdout.strip() or "?"
    bw = subprocess.run(["bwrap", "--version"], capture_output=True, text=True).stdout.split()
    print(f"moat serve benchmark {time.strftime('%Y-%m-%d %H:%M %Z')}: {src}/moat (git {rev}); "
          f"kernel {os.uname().release}, {os.cpu_count()} CPUs, uid {os.getuid()}, "
          f"bwrap {bw[-1] if bw else '?'}, load {os.getloadavg()[0]:.2f}")
    fst = subprocess.run(["findmnt", "-n", "-o", "FSTYPE", "-T", tmp], capture_output=True,
                         text=True).stdout.strip() or "?"
    print(f"data dirs and `moat run` workspace under {tmp} ({fst})")
    print(f"{rounds} rounds; per round: exec {nn['exec']}, tti {nn['tti']} per daemon, "
          f"bwrap/run/spawn {nn['one']}, probes {nn['probe']}; create body {json.dumps(spec)}")
    daemons, res = [], {}
    try:
        pooled = Daemon(moat, tmp, "pooled")
        daemons.append(pooled)
        cold = Daemon(moat, tmp, "cold", ["--pool", "0"])
        daemons.append(cold)
        shm = None
        if not a.no_shm and os.path.isdir("/dev/shm"):
            shmtmp = tempfile.mkdtemp(prefix="moat-bench-serve.", dir="/dev/shm")
            shm = Daemon(moat, shmtmp, "shm", ["--pool", "0"])
            shm.tmp = shmtmp
            daemons.append(shm)
        time.sleep(0.5)
        res = bench(pooled, cold, shm, moat, ws, rounds, nn, spec)
        if idle:
            res["idle"] = idle_test(cold, idle, spec)
    finally:
        for d in daemons:
            left, alive = d.stop()
            res.setdefault("cleanup", []).append({"left": left, "alive": alive})
        print("\ncleanup: " + "; ".join(
            f"{os.path.basename(d.data)}: {len(c['left'])} sandboxes, {len(c['alive'])} "
            "processes left" for d, c in zip(daemons, res["cleanup"])))
        if a.json:
            with open(a.json, "w") as f:
                json.dump(res, f, indent=1, default=str)
        shutil.rmtree(tmp, ignore_errors=True)
        for d in daemons:
            if getattr(d, "tmp", None):
                shutil.rmtree(d.tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
