#!/usr/bin/python3
"""Snapshot, restore and fork of a sandbox through /v1, on each storage backend.

  python3 bench/snapshot.py [--n N] [--big-mb MB] [--files F] [--backends btrfs,reflink,copy]
                            [--moat build/moat] [--no-big-fork-copy]

Root only (loop devices). For each backend a filesystem image (sparse
file in TMPDIR) is made, loop-mounted, and a `moat serve --pool 0` started
with its data directory there; the daemon probes the backend itself
(src/base/fsclone.c), and the script checks the snapshot's "backend" is
the one meant:

  btrfs    mkfs.btrfs: every sandbox's fs/ a subvolume, a snapshot a
           read-only subvolume snapshot;
  reflink  mkfs.xfs -m reflink=1: a tree walk, each file a FICLONE;
  copy     mkfs.ext4: a tree walk copying every byte (copy_file_range).

Workspaces (written inside the sandbox by exec, then `sync`):
  10MB     one 10 MB file;
  1GB      one 1 GiB file;
  10kfiles 10,000 small files in one directory.

Per workspace, N samples each, timed by Python's http.client on one
keep-alive connection (~1 ms of it is the client's):

  snapshot POST /v1/sandboxes/{id}/snapshots {} (201); DELETE of the
           snapshot off the clock, except the last, kept for:
  restore  POST /v1/sandboxes/{id}/restore {"snapshot": sid} (the
           sandbox's processes restarted on the snapshot's files);
  fork10   POST /v1/sandboxes/{id}/fork {"count": 10}, all ten up (the
           ten deleted off the clock);
  create10 (10 MB only) ten POST /v1/sandboxes {} back to back: what
           starting ten sandboxes costs without any copy, the floor of a
           fork of ten as built (clones, then one box_create each).

--no-big-fork-copy skips fork10 at 1 GiB on the copy backend (10 GiB of
writes). Everything is removed at the end: sandboxes, daemons, mounts,
loop devices and images (checked; a leftover is printed). Targets:
snapshot <= 50 ms (aim 10), fork10 <= 200 ms.
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
from serve import Daemon  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MKFS = {"btrfs": ["mkfs.btrfs", "-q", "-f"], "reflink": ["mkfs.xfs", "-q", "-f", "-m", "reflink=1"],
        "copy": ["mkfs.ext4", "-q", "-F"]}
FSNAME = {"btrfs": "btrfs", "reflink": "xfs", "copy": "ext4"}


def run(argv, **kw):
    r = subprocess.run(argv, capture_output=True, text=True, **kw)
    if r.returncode:
        raise RuntimeError(f"{' '.join(argv)}: {r.stderr.strip()}")
    return r.stdout


def ms(f):
    t0 = time.perf_counter()
    out = f()
    return (time.perf_counter() - t0) * 1000, out


def sh(api, sid, script):
    o = api.call("POST", f"/v1/sandboxes/{sid}/exec",
                 {"cmd": ["sh", "-c", script], "timeout_ms": 600000})
    if o.get("exit_code") != 0:
        raise RuntimeError(f"{script}: {o}")
    return o


WORKSPACES = {
    "10MB": lambda mb, nf: "head -c 10485760 /dev/urandom > f && sync",
    "1GB": lambda mb, nf: f"dd if=/dev/zero of=f bs=1M count={mb} status=none && sync",
    "10kfiles": lambda mb, nf: (f"mkdir d && cd d && i=0; while [ $i -lt {nf} ]; do "
                                "echo $i > f$i; i=$((i+1)); done; sync"),
}


def bench_backend(be, a, tmp, res):
    img = os.path.join(tmp, be + ".img")
    mnt = os.path.join(tmp, be)
    os.mkdir(mnt)
    with open(img, "wb") as f:
        f.truncate(a.image_gb << 30)
    run(MKFS[be] + [img])
    run(["mount", "-o", "loop", img, mnt])
    d = None
    try:
        d = Daemon(a.bin_moat, mnt, "data", ["--pool", "0"])
        api = d.api
        for ws, make in WORKSPACES.items():
            sid = api.create({})
            sh(api, sid, make(a.big_mb, a.files))
            snaps = []
            for i in range(a.n):
                t, o = ms(lambda: api.call("POST", f"/v1/sandboxes/{sid}/snapshots", {}, (201,)))
                if o.get("backend") != be:
                    raise RuntimeError(f"{be}: the daemon chose {o.get('backend')}")
                snaps.append(t)
                if i < a.n - 1:
                    api.call("DELETE", f"/v1/snapshots/{o['id']}", None, (204,))
            keep = o["id"]
            size = o.get("size")
            rest = []
            for _ in range(a.n):
                t, _ = ms(lambda: api.call("POST", f"/v1/sandboxes/{sid}/restore",
                                           {"snapshot": keep}))
                rest.append(t)
            api.exec_true(sid)  # the restored sandbox answers
            forks = []
            if not (be == "copy" and ws == "1GB" and a.no_big_fork_copy):
                for _ in range(max(1, a.n // 2)):
                    t, o = ms(lambda: api.call("POST", f"/v1/sandboxes/{sid}/fork",
                                               {"count": 10}, (200, 201)))
                    forks.append(t)
                    kids = [s["id"] for s in o["sandboxes"]]
                    if len(kids) != 10:
                        raise RuntimeError(f"fork: {len(kids)} sandboxes")
                    api.exec_true(kids[-1])
                    for k in kids:
                        api.delete(k)
            create10 = []
            if ws == "10MB":  # the floor of a fork of 10: ten creates of an empty sandbox
                for _ in range(max(1, a.n // 2)):
                    t0 = time.perf_counter()
                    kids = [api.create({}) for _ in range(10)]
                    create10.append((time.perf_counter() - t0) * 1000)
                    api.exec_true(kids[-1])
                    for k in kids:
                        api.delete(k)
            api.call("DELETE", f"/v1/snapshots/{keep}", None, (204,))
            api.delete(sid)
            r = {"snapshot": snaps, "restore": rest, "fork10": forks, "size": size,
                 "create10": create10}
            res[(be, ws)] = r
            med = {k: (statistics.median(v) if v else None) for k, v in r.items() if k != "size"}
            f = f"{med['fork10']:8.1f}" if med["fork10"] is not None else "       -"
            if med["create10"] is not None:
                f += f" (10 creates {med['create10']:.1f})"
            print(f"  {be:8s} {ws:9s} snapshot {med['snapshot']:8.1f} (min {min(snaps):7.1f})  "
                  f"restore {med['restore']:8.1f}  fork10 {f}   size {size}", flush=True)
    finally:
        if d:
            d.stop()
        subprocess.run(["umount", mnt])
        os.rmdir(mnt)
        os.unlink(img)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=5, help="samples per operation")
    ap.add_argument("--big-mb", type=int, default=1024)
    ap.add_argument("--files", type=int, default=10000)
    ap.add_argument("--image-gb", type=int, default=16, help="size of each (sparse) fs image")
    ap.add_argument("--backends", default="btrfs,reflink,copy")
    ap.add_argument("--moat", default=os.path.join(ROOT, "build", "moat"))
    ap.add_argument("--no-big-fork-copy", action="store_true")
    ap.add_argument("--tmpdir", default=tempfile.gettempdir())
    a = ap.parse_args()
    if os.getuid() != 0:
        sys.exit("snapshot.py needs root (loop mounts)")
    tmp = tempfile.mkdtemp(prefix="moat-bench-snap.", dir=a.tmpdir)
    bindir = os.path.join(tmp, "bin")
    os.mkdir(bindir)
    for b in ("moat", "moat-serve", "moat-agent"):
        shutil.copy2(os.path.join(os.path.dirname(a.moat), b), bindir)
    a.bin_moat = os.path.join(bindir, "moat")
    rev = subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty"],
                         capture_output=True, text=True).stdout.strip()
    print(f"snapshot {time.strftime('%Y-%m-%d %H:%M %Z')}: git {rev}; {os.cpu_count()} CPUs, "
          f"load {os.getloadavg()[0]:.2f}; N {a.n} (fork10: {max(1, a.n // 2)}); "
          f"1GB = {a.big_mb} MiB, {a.files} files; medians in ms")
    res = {}
    try:
        for be in a.backends.split(","):
            bench_backend(be, a, tmp, res)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        loops = run(["losetup", "-a"])
        left = [line for line in loops.splitlines() if tmp in line]
        mounts = [line for line in open("/proc/mounts") if tmp in line]
        if left or mounts or os.path.exists(tmp):
            print(f"warning: left behind: {left} {mounts} {tmp if os.path.exists(tmp) else ''}")
    worst_snap = max(statistics.median(r["snapshot"]) for r in res.values())
    forks = [statistics.median(r["fork10"]) for r in res.values() if r["fork10"]]
    print(f"targets: snapshot <= 50 ms (aim 10): worst median {worst_snap:.1f} ms; "
          f"fork10 <= 200 ms: worst median {max(forks):.1f} ms; load {os.getloadavg()[0]:.2f}")
    print("(published figures, not measured here: Sprites ~300 ms per checkpoint, "
          "Firecracker ~3 ms per snapshot restore)")


if __name__ == "__main__":
    main()
