"""Images for the OCI benches (bench/oci_pull.py, oci_unpack.py, image_create.py).

build(dest, tree=None, mb=100) makes an OCI layout dir at dest with two tags:

  multi  three layers: a big base layer, then tests/oci/fixture.py's small
         "multi" upper (a whiteout, an opaque dir, a hard link, a long name),
         then a one-file layer;
  big    the big base layer alone (bench/oci_unpack.py).

The big layer is the tree TREE (e.g. a `debootstrap --variant=minbase
bookworm` root; its dev/, proc/, sys/ contents and apt's cached .debs left
out, device nodes skipped) or, without one, busybox-static plus about MB
MB of files copied from /usr/lib (fixture.py's "big" layer). Layers are
gzip'd by `umoci raw add-layer`, as registries' images are. Offline.
"""
import os
import shutil
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "oci"))
import fixture  # noqa: E402  (Registry, push, _run, _lower_tar, _upper_tar, _big_tar)

SKIP = ("dev/", "proc/", "sys/", "var/cache/apt/archives/", "var/lib/apt/lists/")


def tree_tar(tree, path):
    """The tree as a PAX tar (owners and modes kept, devices skipped)."""
    tree = os.path.abspath(tree)

    def keep(ti):
        n = ti.name
        if n.startswith("./"):
            n = n[2:]
        if any(n.startswith(s) and n != s.rstrip("/") for s in SKIP):
            return None
        if ti.ischr() or ti.isblk() or ti.isfifo():
            return None
        ti.name = n or "."
        return ti

    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tf:
        for e in sorted(os.listdir(tree)):
            tf.add(os.path.join(tree, e), arcname=e, filter=keep)


def tar_bytes(path):
    """Sum of the regular files' sizes in a tar."""
    with tarfile.open(path) as tf:
        return sum(m.size for m in tf if m.isreg())


def _tiny_tar(path):
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tf:
        fixture._add_dir(tf, "etc")
        fixture._add_file(tf, "etc/moat-bench", b"top layer\n")


def build(dest, tree=None, mb=100):
    """Returns {"layout", "big_bytes" (uncompressed file bytes of the big layer),
    "big_blob" (path of its gzip'd blob), "source"}."""
    dest = Path(dest)
    if dest.exists():
        shutil.rmtree(dest)
    work = Path(tempfile.mkdtemp(prefix="moat-bench-img-", dir=dest.parent))
    try:
        big = work / "big.tar"
        if tree:
            tree_tar(tree, big)
            source = f"the tree {tree}"
            shell = "/bin/sh"
        else:
            # busybox + /usr/lib files in one layer: fixture's two tars concatenated
            fixture._lower_tar(work / "lower.tar")
            fixture._big_tar(work / "usrlib.tar", mb)
            with tarfile.open(big, "w", format=tarfile.PAX_FORMAT) as out:
                for part in ("lower.tar", "usrlib.tar"):
                    with tarfile.open(work / part) as tf:
                        for m in tf:
                            out.addfile(m, tf.extractfile(m) if m.isreg() else None)
            source = f"busybox-static + {mb} MB of /usr/lib"
            shell = "/bin/sh"
        fixture._upper_tar(work / "upper.tar")
        _tiny_tar(work / "tiny.tar")
        fixture._run(["umoci", "init", "--layout", str(dest)])
        for tag, layers in (("multi", ["big.tar", "upper.tar", "tiny.tar"]), ("big", ["big.tar"])):
            img = f"{dest}:{tag}"
            fixture._run(["umoci", "new", "--image", img])
            fixture._run(["umoci", "config", "--image", img, "--os", "linux",
                          "--architecture", fixture.host_arch(), "--config.cmd", shell,
                          "--config.env", "PATH=/usr/bin:/bin", "--config.workingdir", "/root"])
            for layer in layers:
                fixture._run(["umoci", "raw", "add-layer", "--image", img, str(work / layer)])
        fixture._run(["umoci", "gc", "--layout", str(dest)])
        _, man, _ = fixture.layout_image(dest, "big")
        blob = fixture.blob_path(dest, man["layers"][0]["digest"])
        return {"layout": str(dest), "big_bytes": tar_bytes(big), "big_blob": str(blob),
                "big_gz": man["layers"][0]["size"], "source": source}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def add_args(ap):
    ap.add_argument("--tree", help="make the big layer from this tree (e.g. a debootstrap "
                    "--variant=minbase root); default: busybox + /usr/lib files")
    ap.add_argument("--mb", type=int, default=100, help="MB of /usr/lib without --tree")
    ap.add_argument("--layout", help="reuse this OCI layout (made by an earlier run with "
                    "--keep-layout) instead of building one")
    ap.add_argument("--keep-layout", help="build the layout here and leave it")


def get(a, tmp):
    """The layout the arguments ask for (built or reused)."""
    if a.layout:
        _, man, _ = fixture.layout_image(a.layout, "big")
        blob = fixture.blob_path(a.layout, man["layers"][0]["digest"])
        return {"layout": a.layout, "big_bytes": None, "big_blob": str(blob),
                "big_gz": man["layers"][0]["size"], "source": "reused " + a.layout}
    dest = Path(a.keep_layout) if a.keep_layout else Path(tmp) / "layout"
    dest.parent.mkdir(parents=True, exist_ok=True)
    return build(dest, a.tree, a.mb)


def du(path):
    """Bytes of regular files under path (st_size), and the entry count."""
    tot = n = 0
    for root, dirs, files in os.walk(path):
        n += len(dirs) + len(files)
        for f in files:
            try:
                st = os.lstat(os.path.join(root, f))
            except OSError:
                continue
            if not os.path.islink(os.path.join(root, f)):
                tot += st.st_size
    return tot, n
