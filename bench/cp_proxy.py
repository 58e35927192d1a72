#!/usr/bin/python3
"""The control plane's LLM proxy (issue 14): overhead per model call, time to
first streamed token, 200 sessions calling at once, and a session's create
to its agent's first model call.

  python3 bench/cp_proxy.py [--moat build/moat] [--rounds R] [--n N]
                            [--sessions 200] [--calls 20] [--first 20] [--skip-conc]

Starts the fake upstream (tests/cp-sdk/fake_upstream.mjs, node: ~0.15 ms
per plain call on loopback) and `moat serve` (copied to a temporary
directory, free loopback port, temporary data dir) with one route
`oa=<fake>,family=openai,key=OA`. One client, bench/cp_client.py (raw
HTTP/1.1, one keep-alive connection, TCP_NODELAY), is run on both sides, so
that what differs is the path of the request:

  host-direct    the host's /usr/bin/python3 -> the fake (127.0.0.1:PORT);
  sbx-proxy      inside a session's sandbox, as its agent command: -> the
                 control listener 127.0.0.1:7878 -> (relayed to the daemon)
                 -> the LLM proxy -> the fake;
  sbx-local      inside the same sandbox: -> a second copy of the fake,
                 started there on a Unix socket (the sandbox's Landlock
                 refuses a TCP bind, so not loopback TCP): the same client
                 and fake under the sandbox's seccomp filter and Landlock,
                 with no control plane (and AF_UNIX, a little cheaper than
                 TCP loopback);
  sbx-floor      inside: GET /v1/session on the control listener (auth and
                 a JSON answer, no upstream): the listener's own floor.

Each is a POST /v1/chat/completions (plain: a ~330-byte JSON answer;
stream: 6 SSE events, the first content delta timed as the first token).
Overhead = sbx-proxy - host-direct (medians); the ratio is the same two.
Rounds alternate the order (host first, sandbox first). Then:

  conc     --sessions sessions created, each agent waiting for the same
           start time, then --calls plain calls back to back; latency
           percentiles over all calls, beside the same number of host
           processes calling the fake directly at once;
  first    --first times: POST /v1/sessions with an agent that makes one
           call at once (curl, and python3 -S), against the daemon above
           (the default: --pool-sessions 1 with an --llm-route) and a
           second one with --pool-sessions 2 (sessions' sandboxes
           pre-started); the fake's arrival time of
           that call (its wall clock, sub-ms) minus the time just before the
           POST was written; also the POST's own answer time. Off the
           clock between samples: the DELETE and 0.3 s for the pool.

Prints median, p90, p99 per kind; targets: overhead <= 1 ms median (plain
and first token), create -> first call <= 30 ms.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve import Daemon, free_port  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FAKE = os.path.join(ROOT, "tests", "cp-sdk", "fake_upstream.mjs")
CLIENT = os.path.join(ROOT, "bench", "cp_client.py")
PY = "/usr/bin/python3"
NODE = shutil.which("node") or "/usr/bin/node"
KEY = "sk-bench-upstream-key"
CHAT = {"model": "gpt-fake", "messages": [{"role": "user", "content": "hi"}]}
CHAT_S = dict(CHAT, stream=True)
LOCAL_SOCK = "/tmp/fake.sock"  # inside the sandbox: TCP bind is refused there (Landlock)


def pct(xs, q):
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * (len(s) - 1) + 0.5))]


def line(name, xs):
    if not xs:
        return f"  {name:22s} (no samples)"
    return (f"  {name:22s} median {statistics.median(xs):8.3f} ms  p90 {pct(xs, .9):8.3f}  "
            f"p99 {pct(xs, .99):8.3f}  min {min(xs):7.3f}  N {len(xs)}")


class Fake:
    def __init__(self):
        self.p = subprocess.Popen([NODE, FAKE, "--port", "0", "--openai-key", KEY],
                                  stdout=subprocess.PIPE, text=True)
        ln = self.p.stdout.readline()
        if not ln.startswith("PORT "):
            raise RuntimeError(f"fake upstream did not start: {ln!r}")
        self.port = int(ln.split()[1])

    def log(self, clear=True):
        import http.client
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        c.request("GET", "/_fake/log" + ("?clear=1" if clear else ""))
        r = c.getresponse()
        out = json.loads(r.read())
        c.close()
        return out

    def stop(self):
        self.p.terminate()
        self.p.wait(10)


class Bench:
    def __init__(self, a, tmp):
        self.a, self.tmp = a, tmp
        self.client_src = open(CLIENT).read()
        self.fake_src = open(FAKE).read()
        self.fake = Fake()
        secrets = os.path.join(tmp, "secrets")
        with open(secrets, "w") as f:
            f.write(f"OA={KEY}\n")
        os.chmod(secrets, 0o600)
        bindir = os.path.join(tmp, "bin")
        os.mkdir(bindir)
        for b in ("moat", "moat-serve", "moat-agent", "moat-gate"):
            src = os.path.join(os.path.dirname(a.moat), b)
            if os.path.exists(src):
                shutil.copy2(src, bindir)
        self.serve_args = ["--llm-route", f"oa=http://127.0.0.1:{self.fake.port},family=openai,key=OA",
                           "--secrets-file", secrets] + a.serve_arg
        self.moat = os.path.join(bindir, "moat")
        self.d = Daemon(self.moat, tmp, "data", self.serve_args)
        self.d2 = None  # --pool-sessions 2, for `first` only
        self.api = self.d.api
        self.sessions = []

    # ---- sessions ------------------------------------------------------------

    def session(self, cfg, cmd=None, env=None, fake=False):
        """A session whose agent runs cp_client.py with cfg (or cmd); its object.
        fake: the fake's source goes in too (20 KB more of manifest: the
        session's spec, re-stored on every model call, grows by as much)."""
        entries = {"cp_client.py": {"type": "file", "content": self.client_src}}
        if fake:
            entries["fake.mjs"] = {"type": "file", "content": self.fake_src}
        if cfg is not None:
            entries["cfg.json"] = {"type": "file", "content": json.dumps(cfg)}
        body = {"manifest": {"root": "/workspace", "entries": entries},
                "agent": {"cmd": cmd or [PY, "/workspace/cp_client.py", "/workspace/cfg.json"],
                          "env": env or {}},
                "llm": {"routes": ["oa"]}}
        s = self.api.call("POST", "/v1/sessions", body, (201,))
        self.sessions.append(s["id"])
        return s

    def wait_exit(self, sid, secs=600):
        end = time.monotonic() + secs
        while True:
            s = self.api.call("GET", f"/v1/sessions/{sid}")
            if s["state"] != "running":
                return s
            if time.monotonic() > end:
                raise RuntimeError(f"session {sid}: agent still running after {secs} s")
            time.sleep(0.05)

    def result(self, s):
        raw = self.api.call("GET", f"/v1/sandboxes/{s['sandbox_id']}/files?path=/workspace/out.json")
        o = raw if isinstance(raw, dict) else json.loads(raw)
        if o.get("errors"):
            raise RuntimeError(f"session {s['id']}: {o['errors'][:3]}")
        return o

    def end(self, sid):
        self.api.call("DELETE", f"/v1/sessions/{sid}", None, (200, 204, 404))
        if sid in self.sessions:
            self.sessions.remove(sid)

    def host_client(self, cfg):
        path = os.path.join(self.tmp, f"cfg-{time.monotonic_ns()}.json")
        cfg = dict(cfg, out=path + ".out")
        with open(path, "w") as f:
            json.dump(cfg, f)
        return subprocess.Popen([PY, CLIENT, path]), cfg["out"]

    @staticmethod
    def read_out(path):
        with open(path) as f:
            o = json.load(f)
        if o.get("errors"):
            raise RuntimeError(f"host client: {o['errors'][:3]}")
        return o

    # ---- 1: overhead and first token -------------------------------------------

    def overhead(self):
        a = self.a
        n, w = a.n, a.warm
        fp = self.fake.port
        host_cfg = {"rounds": 1, "phases": [
            {"name": "host-direct", "port": fp, "path": "/v1/chat/completions", "auth": f"Bearer {KEY}",
             "body": CHAT, "n": n, "warm": w},
            {"name": "host-direct-stream", "port": fp, "path": "/v1/chat/completions",
             "auth": f"Bearer {KEY}", "body": CHAT_S, "stream": True, "n": n, "warm": w}]}
        sbx_cfg = {"out": "/workspace/out.json", "rounds": 1,
                   "local_fake": {"node": NODE, "script": "/workspace/fake.mjs", "unix": LOCAL_SOCK,
                                  "key": "local"},
                   "phases": [
                       {"name": "sbx-proxy", "port": 7878, "path": "/llm/oa/v1/chat/completions",
                        "auth": "token", "body": CHAT, "n": n, "warm": w},
                       {"name": "sbx-proxy-stream", "port": 7878, "path": "/llm/oa/v1/chat/completions",
                        "auth": "token", "body": CHAT_S, "stream": True, "n": n, "warm": w},
                       {"name": "sbx-local", "port": LOCAL_SOCK, "path": "/v1/chat/completions",
                        "auth": "Bearer local", "body": CHAT, "n": n, "warm": w},
                       {"name": "sbx-local-stream", "port": LOCAL_SOCK, "path": "/v1/chat/completions",
                        "auth": "Bearer local", "body": CHAT_S, "stream": True, "n": n, "warm": w},
                       {"name": "sbx-floor", "port": 7878, "path": "/v1/session", "method": "GET",
                        "auth": "token", "n": n, "warm": w}]}
        S = {}
        per_round = []

        def add(o):
            for k, v in o["phases"].items():
                S.setdefault(k, []).extend(v["ms"])
                if v["ttft_ms"]:
                    S.setdefault(k + " ttft", []).extend(v["ttft_ms"])
            return o

        for r in range(a.rounds):
            got = {}

            def host():
                p, out = self.host_client(host_cfg)
                if p.wait(600) != 0:
                    raise RuntimeError("host client failed")
                got.update(add(self.read_out(out))["phases"])

            def sbx():
                s = self.session(sbx_cfg, fake=True)
                s = self.wait_exit(s["id"])
                got.update(add(self.result(s))["phases"])
                self.end(s["id"])

            for f in ((host, sbx) if r % 2 == 0 else (sbx, host)):
                f()
            med = {k: statistics.median(v["ms"]) for k, v in got.items()}
            per_round.append(med["sbx-proxy"] - med["host-direct"])
        lg = self.fake.log()
        # the proxy's requests (libcurl's Host has the port; cp_client.py's not):
        # how many upstream connections they came on
        up = [x for x in lg if ":" in x["headers"].get("host", "")]
        print(f"upstream: {len(up)} proxied calls on {len({x['port'] for x in up})} connections "
              f"(the host client's: {len(lg) - len(up)} on {len({x['port'] for x in lg if x not in up})})")
        print("overhead per call (plain chat completion; stream: to the end, ttft: to the first delta):")
        for k in sorted(S):
            print(line(k, S[k]))
        m = {k: statistics.median(v) for k, v in S.items()}
        ov = m["sbx-proxy"] - m["host-direct"]
        ovt = m["sbx-proxy-stream ttft"] - m["host-direct-stream ttft"]
        print(f"  overhead sbx-proxy - host-direct: plain {ov:.3f} ms (ratio {m['sbx-proxy'] / m['host-direct']:.2f}; "
              f"per round {', '.join(f'{x:.3f}' for x in per_round)}), first token {ovt:.3f} ms "
              f"(ratio {m['sbx-proxy-stream ttft'] / m['host-direct-stream ttft']:.2f})")
        print(f"  overhead sbx-proxy - sbx-local (both from inside): plain {m['sbx-proxy'] - m['sbx-local']:.3f} ms, "
              f"first token {m['sbx-proxy-stream ttft'] - m['sbx-local-stream ttft']:.3f} ms")
        print(f"  target <= 1 ms median: plain {'met' if ov <= 1 else 'MISSED'}, "
              f"first token {'met' if ovt <= 1 else 'MISSED'}")

    # ---- 2: many sessions at once --------------------------------------------------

    def conc(self):
        a = self.a
        k = a.sessions
        # one start time for all, far enough ahead for every create: timed on
        # five throwaway sessions first (agent `true`)
        t0 = time.monotonic()
        for _ in range(5):
            s = self.session(None, cmd=["true"])
            self.end(s["id"])
        per = (time.monotonic() - t0) / 5
        start_at = time.time() + per * k * 1.5 + 3
        cfg = {"out": "/workspace/out.json", "rounds": 1, "start_at": start_at,
               "phases": [{"name": "conc", "port": 7878, "path": "/llm/oa/v1/chat/completions",
                           "auth": "token", "body": CHAT, "n": a.calls, "warm": 0}]}
        t0 = time.monotonic()
        made = [self.session(cfg)["id"] for _ in range(k)]
        create_s = time.monotonic() - t0
        late_margin = start_at - time.time()
        lat, late, t_first, t_last = [], 0, None, None
        for s in [self.wait_exit(sid, 900) for sid in made]:
            o = self.result(s)
            lat += o["phases"]["conc"]["ms"]
            late += o["late"]
            t_first = min(t_first or o["t0"], o["t0"])
            t_last = max(t_last or o["t1"], o["t1"])
        n_s = len(made)
        for sid in made:
            self.end(sid)
        # the host beside it: as many processes, one start time, straight to the fake
        hstart = time.time() + 0.05 * n_s + 3  # (python start-ups: ~20 ms each)
        hcfg = {"rounds": 1, "start_at": hstart, "phases": [
            {"name": "conc", "port": self.fake.port, "path": "/v1/chat/completions", "auth": f"Bearer {KEY}",
             "body": CHAT, "n": a.calls, "warm": 0}]}
        procs = [self.host_client(hcfg) for _ in range(n_s)]
        hlat, hlate, h0, h1 = [], 0, None, None
        for p, out in procs:
            p.wait(900)
            o = self.read_out(out)
            hlat += o["phases"]["conc"]["ms"]
            hlate += o["late"]
            h0 = min(h0 or o["t0"], o["t0"])
            h1 = max(h1 or o["t1"], o["t1"])
        self.fake.log()
        print(f"{n_s} sessions calling at once, {a.calls} plain calls each, back to back "
              f"(created in {create_s:.1f} s; start {late_margin:.1f} s after the last create; late: {late}):")
        print(line("sessions via proxy", lat))
        print(f"  {'':22s} {len(lat)} calls in {t_last - t_first:.2f} s: {len(lat) / (t_last - t_first):.0f} calls/s")
        print(line(f"{n_s} host procs direct", hlat))
        print(f"  {'':22s} {len(hlat)} calls in {h1 - h0:.2f} s: {len(hlat) / (h1 - h0):.0f} calls/s (late: {hlate})")

    # ---- 3: create -> first model call -----------------------------------------------

    def first(self):
        a = self.a
        curl = ["sh", "-c", 'exec curl -s -o /dev/null -H "Authorization: Bearer $MOAT_SESSION_TOKEN" '
                '-H "Content-Type: application/json" --data-binary "$BODY" '
                '"$MOAT_CONTROL_PLANE_URL/llm/oa/v1/chat/completions"']
        py = [PY, "-S", "-c",
              "import os,http.client as h\n"
              "c=h.HTTPConnection('127.0.0.1',7878)\n"
              "c.request('POST','/llm/oa/v1/chat/completions',os.environ['BODY'],"
              "{'Authorization':'Bearer '+os.environ['MOAT_SESSION_TOKEN'],'Content-Type':'application/json'})\n"
              "c.getresponse().read()\n"]
        self.d2 = Daemon(self.moat, self.tmp, "data2", self.serve_args + ["--pool-sessions", "2"])
        kinds = [(d, agent) for d in ("default (pool-sessions 1)", "pool-sessions 2") for agent in ("curl", "python3 -S")]
        R = {k: ([], []) for k in kinds}
        self.fake.log()
        for i in range(a.first):
            for k in (kinds if i % 2 == 0 else kinds[::-1]):
                dname, agent = k
                api = self.d.api if dname.startswith("default") else self.d2.api
                tagm = f"first-{i}-{dname[0]}-{agent.split()[0]}"
                body = json.dumps(dict(CHAT, model=tagm))
                time.sleep(0.3)  # the pool refills, the last DELETE settles
                t0 = time.time()
                s = api.call("POST", "/v1/sessions",
                             {"agent": {"cmd": curl if agent == "curl" else py, "env": {"BODY": body}},
                              "llm": {"routes": ["oa"]}}, (201,))
                t1 = time.time()
                end = time.monotonic() + 60
                while api.call("GET", f"/v1/sessions/{s['id']}")["state"] == "running":
                    if time.monotonic() > end:
                        raise RuntimeError(f"session {s['id']} ({agent}): agent still running")
                    time.sleep(0.02)
                hit = [x for x in self.fake.log() if (x.get("body") or {}).get("model") == tagm]
                if not hit:
                    raise RuntimeError(f"session {s['id']} ({agent}): its call never reached the fake")
                R[k][0].append(hit[0]["t"] - t0 * 1e3)
                R[k][1].append((t1 - t0) * 1e3)
                api.call("DELETE", f"/v1/sessions/{s['id']}", None, (200, 204, 404))
        print("session create -> the agent's first model call at the fake (POST /v1/sessions written -> "
              "the call's arrival):")
        for (dname, agent), (xs, ys) in R.items():
            print(line(f"{agent}, {dname}: first call", xs))
            print(line(f"{agent}, {dname}: POST answered", ys))
        mc = min(statistics.median(R[k][0]) for k in kinds)
        print(f"  target <= 30 ms: {'met' if mc <= 30 else 'MISSED'} (best median {mc:.2f} ms)")

    def close(self):
        for sid in list(self.sessions):
            try:
                self.end(sid)
            except Exception as e:
                print(f"cleanup: {sid}: {e}", file=sys.stderr)
        self.d.stop()
        if self.d2:
            self.d2.stop()
        self.fake.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--moat", default=os.path.join(ROOT, "build", "moat"))
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--n", type=int, default=200, help="samples per kind and round")
    ap.add_argument("--warm", type=int, default=20)
    ap.add_argument("--sessions", type=int, default=200)
    ap.add_argument("--calls", type=int, default=20, help="calls per session at once")
    ap.add_argument("--first", type=int, default=20, help="create -> first call samples per agent kind")
    ap.add_argument("--skip-conc", action="store_true")
    ap.add_argument("--only", choices=["overhead", "conc", "first"])
    ap.add_argument("--serve-arg", action="append", default=[], help="extra moat serve flag")
    ap.add_argument("--tmpdir")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="moat-bench-cp.", dir=a.tmpdir)
    os.chmod(tmp, 0o755)
    b = None
    try:
        b = Bench(a, tmp)
        rev = subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty"],
                             capture_output=True, text=True).stdout.strip()
        print(f"cp_proxy {time.strftime('%Y-%m-%d %H:%M %Z')}: git {rev}; {os.cpu_count()} CPUs, "
              f"load {os.getloadavg()[0]:.2f}; node {subprocess.run([NODE, '--version'], capture_output=True, text=True).stdout.strip()}")
        if a.only in (None, "overhead"):
            b.overhead()
        if a.only in (None, "first"):
            b.first()
        if a.only == "conc" or (a.only is None and not a.skip_conc):
            b.conc()
        print(f"load {os.getloadavg()[0]:.2f}")
    finally:
        if b:
            b.close()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
