#!/usr/bin/python3
"""Create (and first exec) of a sandbox from a pulled multi-layer image vs the host image.

  python3 bench/image_create.py [--tree DIR | --mb MB] [--rounds R] [--n N]
                                [--moat build/moat] [--tmpdir DIR]

Builds bench/ociimg.py's 3-layer image (~100 MB base), serves it from a
loopback docker-registry, starts one `moat serve --pool 0` (every create
builds its sandbox; the pool only ever holds host sandboxes) with
--insecure-registry, pulls the image through POST /v1/images, then per
round, alternating the order, N times each:

  host   POST /v1/sandboxes {} (the host image), then exec `true` in it;
  image  POST /v1/sandboxes {"image": "HOST:PORT/bench/img:multi"}: the
         image's three unpacked layers as id-mapped overlay lowers, its
         Env/WorkingDir as defaults; then exec `true` (the image's
         /usr/bin/true);

timed by Python's http.client on one keep-alive connection (which adds
about 1 ms per request here: bench/serve.py); the DELETE is off the clock.
Also the CPU time the daemon and its reaped sandboxes used per sample
(create + exec + delete; /proc/PID/stat utime+stime+cutime+cstime, 10 ms
ticks), which the load of a shared machine does not inflate as much.
Prints medians of create, first exec and the two together per kind, and
the ratio image/host. Target: image create median <= 20 ms, same order as
the host's.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ociimg  # noqa: E402
from ociimg import fixture  # noqa: E402
from serve import Daemon  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cpu_ms(pid):
    """utime+stime+cutime+cstime of pid (the daemon; it reaps its sandboxes)."""
    with open(f"/proc/{pid}/stat") as f:
        v = f.read().rsplit(")", 1)[1].split()
    return sum(int(x) for x in v[11:15]) * 1000 / os.sysconf("SC_CLK_TCK")


def sample(api, spec):
    t0 = time.perf_counter_ns()
    sid = api.create(spec)
    t1 = time.perf_counter_ns()
    api.exec_true(sid)
    t2 = time.perf_counter_ns()
    api.delete(sid)
    return (t1 - t0) / 1e6, (t2 - t1) / 1e6


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ociimg.add_args(ap)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--n", type=int, default=10, help="samples per kind and round")
    ap.add_argument("--moat", default=os.path.join(ROOT, "build", "moat"))
    ap.add_argument("--tmpdir", help="where the daemon's data dir goes (default TMPDIR)")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="moat-bench-imgcreate.", dir=a.tmpdir)
    reg = d = None
    try:
        img = ociimg.get(a, tmp)
        reg = fixture.Registry(os.path.join(tmp, "reg")).start()
        ref = reg.ref("bench/img", "multi")
        fixture.push(img["layout"], ref, "multi")
        bindir = os.path.join(tmp, "bin")
        os.mkdir(bindir)
        for b in ("moat", "moat-serve", "moat-agent"):
            shutil.copy2(os.path.join(os.path.dirname(a.moat), b), bindir)
        d = Daemon(os.path.join(bindir, "moat"), tmp, "data",
                   ["--pool", "0", "--insecure-registry", reg.host])
        t0 = time.perf_counter()
        o = d.api.call("POST", "/v1/images", {"ref": ref, "insecure": True}, (200, 201))
        pull_ms = (time.perf_counter() - t0) * 1000
        rev = subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty"],
                             capture_output=True, text=True).stdout.split("\n")[0].strip()
        fst = subprocess.run(["findmnt", "-n", "-o", "FSTYPE", "-T", tmp], capture_output=True,
                             text=True).stdout.split("\n")[0].strip()
        print(f"image_create {time.strftime('%Y-%m-%d %H:%M %Z')}: git {rev}; "
              f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}; data dir {tmp} ({fst})")
        print(f"image {ref}: {img['source']}, {len(o.get('layers', []))} layers "
              f"(pulled and unpacked by the daemon in {pull_ms:.0f} ms)")
        kinds = {"host": {}, "image": {"image": ref}}
        for spec in kinds.values():  # warm-up
            sample(d.api, spec)
        C = {k: [] for k in kinds}
        F = {k: [] for k in kinds}
        per = {k: [] for k in kinds}
        cpu = {k: 0.0 for k in kinds}
        print("per-round medians, create + first exec (ms):    host     image")
        for r in range(a.rounds):
            for k in (list(kinds) if r % 2 == 0 else list(kinds)[::-1]):
                c0 = cpu_ms(d.proc.pid)
                xs = [sample(d.api, kinds[k]) for _ in range(a.n)]
                cpu[k] += cpu_ms(d.proc.pid) - c0
                C[k] += [c for c, _ in xs]
                F[k] += [f for _, f in xs]
                per[k].append(statistics.median(c + f for c, f in xs))
            print(f"  round {r + 1}:                                {per['host'][-1]:8.2f}"
                  f"  {per['image'][-1]:8.2f}")
        for k in kinds:
            tot = [c + f for c, f in zip(C[k], F[k])]
            print(f"{k:6s} create median {statistics.median(C[k]):7.2f} ms (min {min(C[k]):.2f}),"
                  f" first exec {statistics.median(F[k]):6.2f}, together "
                  f"{statistics.median(tot):7.2f}  N {len(tot)}; CPU (daemon + sandboxes, create+exec+"
                  f"delete) {cpu[k] / len(tot):.1f} ms per sample")
        rs = [x / y for x, y in zip(per["image"], per["host"])]
        mc = statistics.median(C["image"])
        print(f"image / host (create + first exec, median of per-round ratios): "
              f"{statistics.median(rs):.2f} (rounds {min(rs):.2f}-{max(rs):.2f})")
        print(f"target: image create median <= 20 ms: {mc:.2f} ms, "
              f"{'met' if mc <= 20 else 'MISSED'}; load at the end {os.getloadavg()[0]:.2f}")
    finally:
        if d:
            d.stop()
        if reg:
            reg.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
