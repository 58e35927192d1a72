#!/usr/bin/python3
"""Pull of one multi-layer image from a loopback registry: moat vs skopeo.

  python3 bench/oci_pull.py [--tree DIR | --mb MB] [--rounds R] [--no-daemon]
                            [--oci-tool build/oci-tool] [--moat build/moat]

Builds an OCI layout offline (bench/ociimg.py: a ~100 MB base layer, a small
upper with whiteouts, a one-file layer; all gzip'd), starts Debian's
docker-registry on 127.0.0.1 (tests/oci/fixture.py) and pushes it. Then per
round, in alternating order, each into a fresh empty destination (removed
off the clock):

  oci-tool  build/oci-tool pull HOST:PORT/bench/img:multi --store DIR --insecure
            (src/oci: manifest, config and layers into the blob store, each
            digest checked; no unpack)
  skopeo    skopeo copy --quiet --src-tls-verify=false
            docker://HOST:PORT/bench/img:multi oci:DIR:multi
            (the same blobs into an OCI layout dir; no unpack)
  daemon    POST /v1/images {"ref": ..., "insecure": true} to a `moat serve
            --insecure-registry HOST:PORT`, timed to its answer: the pull
            AND the unpack of every layer into the store (what a create
            needs); DELETE /v1/images/{name} off the clock;
  skopeo+umoci  (--with-unpack) skopeo copy as above, then umoci unpack
            --image DIR:multi DIR/bundle: the daemon's peer.

Prints medians and the ratio moat/skopeo (median of per-round ratios).
Target: oci-tool within 1.5x of skopeo.
"""
import argparse
import http.client
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ociimg  # noqa: E402
from ociimg import fixture  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def timed(argv):
    t0 = time.perf_counter()
    r = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    t = time.perf_counter() - t0
    if r.returncode:
        raise RuntimeError(f"{' '.join(argv)}: {r.stderr.strip()}")
    return t * 1000


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ociimg.add_args(ap)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--oci-tool", default=os.path.join(ROOT, "build", "oci-tool"))
    ap.add_argument("--moat", default=os.path.join(ROOT, "build", "moat"))
    ap.add_argument("--no-daemon", action="store_true")
    ap.add_argument("--with-unpack", action="store_true",
                    help="also skopeo copy + umoci unpack, the peer of the daemon's pull")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="moat-bench-pull.")
    reg = d = None
    try:
        img = ociimg.get(a, tmp)
        reg = fixture.Registry(os.path.join(tmp, "reg")).start()
        fixture.push(img["layout"], reg.ref("bench/img", "multi"), "multi")
        ref = reg.ref("bench/img", "multi")
        rev = subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty"],
                             capture_output=True, text=True).stdout.strip()
        sk = subprocess.run(["skopeo", "--version"], capture_output=True, text=True).stdout.strip()
        print(f"oci_pull {time.strftime('%Y-%m-%d %H:%M %Z')}: git {rev}; {sk}; "
              f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}")
        print(f"image {ref}: 3 layers, base layer {img['source']}, "
              f"{img['big_gz'] / 1e6:.1f} MB gzip'd")
        kinds = {
            "oci-tool": lambda dst: timed([a.oci_tool, "pull", ref, "--store", dst, "--insecure"]),
            "skopeo": lambda dst: timed(["skopeo", "copy", "--quiet", "--src-tls-verify=false",
                                         "docker://" + ref, f"oci:{dst}:multi"]),
        }
        if a.with_unpack:
            def skopeo_umoci(dst):
                t = kinds["skopeo"](dst)
                return t + timed(["umoci", "unpack", "--image", f"{dst}:multi", dst + "/bundle"])
            kinds["skopeo+umoci"] = skopeo_umoci
        if not a.no_daemon:
            bindir = os.path.join(tmp, "bin")
            os.mkdir(bindir)
            for b in ("moat", "moat-serve", "moat-agent"):
                shutil.copy2(os.path.join(os.path.dirname(a.moat), b), bindir)
            from serve import Daemon
            d = Daemon(os.path.join(bindir, "moat"), tmp, "daemon",
                       ["--pool", "0", "--insecure-registry", reg.host])
            name = urllib.parse.quote(ref, safe="")

            def daemon_pull(dst):
                t0 = time.perf_counter()
                o = d.api.call("POST", "/v1/images", {"ref": ref, "insecure": True}, (200, 201))
                t = (time.perf_counter() - t0) * 1000
                if o.get("layer_count", 3) != 3 and len(o.get("layers", [1, 2, 3])) != 3:
                    raise RuntimeError(f"daemon pull: {o}")
                d.api.call("DELETE", f"/v1/images/{name}", None, (204,))
                return t
            kinds["daemon"] = daemon_pull
        for f in kinds.values():  # warm-up (page cache, registry)
            dst = os.path.join(tmp, "dst")
            f(dst)
            shutil.rmtree(dst, ignore_errors=True)
        S = {k: [] for k in kinds}
        names = list(kinds)
        print("per round (ms): " + "  ".join(f"{k:>12}" for k in names))
        for r in range(a.rounds):
            order = names if r % 2 == 0 else names[::-1]
            for k in order:
                dst = os.path.join(tmp, "dst")
                S[k].append(kinds[k](dst))
                shutil.rmtree(dst, ignore_errors=True)
            print(f"  round {r + 1}:     " + "  ".join(f"{S[k][-1]:12.1f}" for k in names))
        med = {k: statistics.median(v) for k, v in S.items()}
        print("medians (ms): " + ", ".join(f"{k} {med[k]:.1f} (min {min(S[k]):.1f})"
                                           for k in names))
        rs = [x / y for x, y in zip(S["oci-tool"], S["skopeo"])]
        m = statistics.median(rs)
        print(f"oci-tool / skopeo: {m:.2f} (rounds {min(rs):.2f}-{max(rs):.2f}); target <= 1.5: "
              f"{'met' if m <= 1.5 else 'MISSED'}")
        if "daemon" in S:
            rd = [x / y for x, y in zip(S["daemon"], S["skopeo"])]
            print(f"daemon (pull + unpack) / skopeo (pull only): {statistics.median(rd):.2f}")
        if "daemon" in S and "skopeo+umoci" in S:
            rd = [x / y for x, y in zip(S["daemon"], S["skopeo+umoci"])]
            print(f"daemon / skopeo+umoci (both pull + unpack): {statistics.median(rd):.2f} "
                  f"(rounds {min(rd):.2f}-{max(rd):.2f})")
        print(f"load at the end {os.getloadavg()[0]:.2f}")
        return S
    finally:
        if d:
            d.stop()
        if reg:
            reg.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
