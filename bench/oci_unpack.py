#!/usr/bin/python3
"""Unpack of one ~100 MB layer: moat's oci-tool vs umoci, same image.

  python3 bench/oci_unpack.py [--tree DIR | --mb MB] [--rounds R]
                              [--oci-tool build/oci-tool] [--layout DIR]

Builds the layout of bench/ociimg.py (tag "big": one gzip'd layer), then per
round, in alternating order, into a fresh destination on the same
filesystem (TMPDIR; removed off the clock):

  oci-tool   build/oci-tool unpack BLOB DIR --keep-owners
             (src/oci/unpack.c: gunzip, every entry through openat2
             RESOLVE_BENEATH, whiteouts made overlay ones, diff_id hashed)
  umoci      umoci unpack --image LAYOUT:big DIR
             (as root: owners kept; it also writes DIR/config.json and an
             mtree manifest of the rootfs, which is part of what it does)
  gunzip     gzip -dc BLOB > /dev/null: the decompression floor both pay

--dir puts the destinations elsewhere (a loop-mounted ext4, tmpfs): this
machine's root ext4 costs about 1.3 ms per file created, which hides both
tools' own work (docs/benchmarks.md).

Prints medians, the ratio oci-tool/umoci (median of per-round ratios) and
checks both trees hold the same number of entries. Target: at most 0.5.
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

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def timed(argv, shell=False):
    t0 = time.perf_counter()
    r = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                       shell=shell)
    t = time.perf_counter() - t0
    if r.returncode:
        raise RuntimeError(f"{argv}: {r.stderr.strip()}")
    return t * 1000


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ociimg.add_args(ap)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--oci-tool", default=os.path.join(ROOT, "build", "oci-tool"))
    ap.add_argument("--dir", help="unpack under this directory (default TMPDIR); the root "
                    "disk here costs ~1.3 ms per file created, a loop-mounted ext4 ~40 us")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="moat-bench-unpack.", dir=a.dir)
    try:
        img = ociimg.get(a, tmp)
        blob, lay = img["big_blob"], img["layout"]
        rev = subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty"],
                             capture_output=True, text=True).stdout.split("\n")[0].strip()
        um = subprocess.run(["umoci", "--version"], capture_output=True, text=True).stdout.split("\n")[0].strip()
        fst = subprocess.run(["findmnt", "-n", "-o", "FSTYPE", "-T", tmp], capture_output=True,
                             text=True).stdout.split("\n")[0].strip()
        print(f"oci_unpack {time.strftime('%Y-%m-%d %H:%M %Z')}: git {rev}; {um}; "
              f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}; into {tmp} ({fst})")
        dst = os.path.join(tmp, "dst")
        kinds = {
            "oci-tool": lambda: timed([a.oci_tool, "unpack", blob, dst, "--keep-owners"]),
            "umoci": lambda: timed(["umoci", "unpack", "--image", lay + ":big", dst]),
            "gunzip": lambda: timed(f"gzip -dc '{blob}' > /dev/null", shell=True),
        }
        counts = {}
        for k, f in kinds.items():  # warm-up; count what each made
            f()
            if k == "oci-tool":
                counts[k] = ociimg.du(dst)
            elif k == "umoci":
                counts[k] = ociimg.du(os.path.join(dst, "rootfs"))
            shutil.rmtree(dst, ignore_errors=True)
        print(f"layer: {img['source']}, {img['big_gz'] / 1e6:.1f} MB gzip'd; unpacked: " +
              "; ".join(f"{k} {b / 1e6:.1f} MB in {n} entries" for k, (b, n) in counts.items()))
        names = list(kinds)
        S = {k: [] for k in names}
        print("per round (ms): " + "  ".join(f"{k:>9}" for k in names))
        for r in range(a.rounds):
            for k in (names if r % 2 == 0 else names[::-1]):
                S[k].append(kinds[k]())
                subprocess.run(["sync", "-f", tmp])  # writeback of the last off the clock
                shutil.rmtree(dst, ignore_errors=True)
            print(f"  round {r + 1}:     " + "  ".join(f"{S[k][-1]:9.1f}" for k in names))
        med = {k: statistics.median(v) for k, v in S.items()}
        print("medians (ms): " + ", ".join(f"{k} {med[k]:.1f} (min {min(S[k]):.1f})"
                                           for k in names))
        rs = [x / y for x, y in zip(S["oci-tool"], S["umoci"])]
        m = statistics.median(rs)
        print(f"oci-tool / umoci: {m:.2f} (rounds {min(rs):.2f}-{max(rs):.2f}); target <= 0.5: "
              f"{'met' if m <= 0.5 else 'MISSED'}")
        print(f"load at the end {os.getloadavg()[0]:.2f}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
