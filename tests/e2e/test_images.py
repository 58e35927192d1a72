"""The daemon's image service (issue 13 section 1) end to end through /v1:
pull (with SSE progress), list, inspect, delete, creates from a pulled
image (whiteouts, opaque directories, config defaults), imports of an OCI
layout, an OCI archive and a `docker save` tar, concurrent pulls, hostile
registries and layers, --store-max, garbage collection and a kill -9 mid
pull / mid import.

Every claim is checked on the host as well as through the API: the store's
directories (<data>/images/{blobs,layers,tmp}), what the registry received,
the inodes a sandbox sees, /proc/self/mountinfo."""
import gzip
import hashlib
import http.client
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path

import pytest

_h = Path(__file__).resolve().parent
sys.path[:0] = [str(_h / "oci"), str(_h.parent / "oci")]
import fixture  # noqa: E402
from fixture import registry, oci_images, pushed  # noqa: E402,F401

from conftest import force_rmtree, wait_until  # noqa: E402
from test_serve import Daemon, assert_error  # noqa: E402

IS_ROOT = os.geteuid() == 0

pytestmark = pytest.mark.skipif(
    not (shutil.which("docker-registry") and shutil.which("skopeo") and shutil.which("umoci")),
    reason="docker-registry, skopeo and umoci are needed")


# ---- helpers ---------------------------------------------------------------------

def enc(name):
    return urllib.parse.quote(name, safe="")


def pull(d, ref, expect=200, **kw):
    r = d.post("/v1/images", {"ref": ref, "insecure": True}, timeout=kw.pop("timeout", 180))
    if expect is not None:
        assert r.status == expect, (r, d.log())
    return r


def pull_sse(d, ref, timeout=180):
    """POST /v1/images with Accept: text/event-stream: [(event, data)]."""
    c = http.client.HTTPConnection("127.0.0.1", d.port, timeout=timeout)
    try:
        c.request("POST", "/v1/images", body=json.dumps({"ref": ref, "insecure": True}),
                  headers={"Content-Type": "application/json",
                           "Accept": "text/event-stream"})
        r = c.getresponse()
        assert r.status == 200, (r.status, r.read())
        assert r.getheader("Content-Type", "").startswith("text/event-stream")
        return parse_sse(r.read().decode())
    finally:
        c.close()


def parse_sse(text):
    out = []
    for block in text.split("\n\n"):
        ev, data = None, None
        for line in block.splitlines():
            if line.startswith("event: "):
                ev = line[7:]
            elif line.startswith("data: "):
                data = json.loads(line[6:])
        if ev:
            out.append((ev, data))
    return out


def images(d):
    r = d.get("/v1/images")
    assert r.status == 200, r
    return r.json()["images"]


def imroot(d):
    return d.data / "images"


def blobs(d):
    p = imroot(d) / "blobs" / "sha256"
    return sorted(x.name for x in p.iterdir()) if p.exists() else []


def layer_dirs(d, hidden=False):
    p = imroot(d) / "layers"
    if not p.exists():
        return []
    return sorted(x.name for x in p.iterdir() if hidden or not x.name.startswith("."))


def tmp_files(d):
    p = imroot(d) / "tmp"
    return sorted(x.name for x in p.iterdir()) if p.exists() else []


def mounts_under(path):
    path = str(path)
    with open("/proc/self/mountinfo") as f:
        return [ln for ln in f if path in ln]


def assert_store_empty(d):
    """Nothing of a failed pull or import anywhere: blobs, layers (and
    their .tmp-* dirs), tmp/, rows."""
    assert images(d) == [], d.log()
    assert wait_until(lambda: blobs(d) == [], timeout=10), blobs(d)
    assert wait_until(lambda: layer_dirs(d, hidden=True) == [], timeout=10), \
        layer_dirs(d, hidden=True)
    assert tmp_files(d) == [], tmp_files(d)


def manifest_digests(layout):
    """(manifest digest, config digest, [layer digests]) of a layout's tag."""
    raw, man, dg = fixture.layout_image(layout)
    return dg, man["config"]["digest"], [x["digest"] for x in man["layers"]]


def diff_ids(layout):
    _, man, _ = fixture.layout_image(layout)
    conf = json.loads(fixture.blob_path(layout, man["config"]["digest"]).read_bytes())
    return conf["rootfs"]["diff_ids"]


def make_layout(dest, layers, config_args=()):
    """An OCI layout (tag latest) of the lower busybox layer plus the given
    extra layer tars (paths), with umoci config arguments."""
    dest = Path(dest)
    img = "%s:latest" % dest
    work = Path(tempfile.mkdtemp(prefix="moat-imgt-", dir=dest.parent))
    try:
        fixture._run(["umoci", "init", "--layout", str(dest)])
        fixture._run(["umoci", "new", "--image", img])
        fixture._run(["umoci", "config", "--image", img, "--os", "linux",
                      "--architecture", fixture.host_arch(), "--config.env", "PATH=/bin",
                      *config_args])
        fixture._lower_tar(work / "lower.tar")
        fixture._run(["umoci", "raw", "add-layer", "--image", img, str(work / "lower.tar")])
        for t in layers:
            fixture._run(["umoci", "raw", "add-layer", "--image", img, str(t)])
        fixture._run(["umoci", "gc", "--layout", str(dest)])
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return dest


def tar_of_dir(src, dest):
    """A tar of a directory's contents (an OCI layout as an archive)."""
    with tarfile.open(dest, "w") as tf:
        for p in sorted(Path(src).rglob("*")):
            tf.add(p, arcname=str(p.relative_to(src)), recursive=False)
    return dest


def import_(d, path, name=None, expect=201):
    q = "?name=" + enc(name) if name else ""
    r = d.post("/v1/images/import" + q, Path(path).read_bytes(),
               headers={"Content-Type": "application/x-tar"}, timeout=180)
    if expect is not None:
        assert r.status == expect, (r, d.log())
    return r


class Gated(fixture.Hostile):
    """A Hostile whose last layer stops halfway until .go is set (a stall
    the test ends, not a clock)."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.go = threading.Event()
        self.halfway = threading.Event()

    def _blob(self, h, dg, head):
        if dg != self.last_layer or head or "gate" not in self.faults:
            return super()._blob(h, dg, head)
        data = self.blobs[dg].read_bytes()
        h.send_response(200)
        h.send_header("Content-Type", "application/octet-stream")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        try:
            h.wfile.write(data[:len(data) // 2])
            h.wfile.flush()
            self.halfway.set()
            self.go.wait(120)
            h.wfile.write(data[len(data) // 2:])
        except OSError:
            pass


def blob_gets(srv):
    return [r["path"] for r in srv.received("/v2/") if "/blobs/" in r["path"]
            and r["method"] == "GET"]


@pytest.fixture
def d():
    dm = Daemon("--pool", "0")
    try:
        yield dm
    finally:
        dm.stop()


@pytest.fixture(scope="module")
def work():
    w = Path(tempfile.mkdtemp(prefix="moat-e2e-images-"))
    os.chmod(w, 0o755)
    try:
        yield w
    finally:
        force_rmtree(w)


# ---- pull, list, inspect, delete, create ----------------------------------------------

def test_pull_sse_list_inspect_create_delete(d, pushed, oci_images):
    ref = pushed["multi"]
    evs = pull_sse(d, ref)
    kinds = [e for e, _ in evs]
    assert kinds[-1] == "image", evs
    progress = [x for e, x in evs if e == "progress"]
    assert progress, evs
    last = progress[-1]
    man, conf, lays = manifest_digests(oci_images["multi"])
    sizes = sum(fixture.blob_path(oci_images["multi"], x).stat().st_size for x in lays)
    assert last["layers_total"] == 2 and last["layers_done"] == 2, progress
    assert last["bytes_total"] >= sizes and last["bytes_done"] == last["bytes_total"], progress
    # bytes grow, never pass the total
    bd = [p["bytes_done"] for p in progress]
    assert bd == sorted(bd) and all(p["bytes_done"] <= p["bytes_total"] for p in progress)
    im = evs[-1][1]
    assert im["id"] == man and im["names"] == [ref], im
    # the host: every blob, one layer directory per diff_id
    assert set(blobs(d)) == {x.split(":")[1] for x in [man, conf] + lays}
    assert layer_dirs(d) == sorted(x.split(":")[1] for x in diff_ids(oci_images["multi"]))
    assert tmp_files(d) == []
    ls = images(d)
    assert [(x["id"], x["names"], x["layer_count"]) for x in ls] == [(man, [ref], 2)], ls
    r = d.get("/v1/images/" + enc(ref))
    assert r.status == 200, r
    ins = r.json()
    assert ins["config"]["env"] == ["PATH=/bin", "MOAT_IMAGE=multi"], ins
    assert ins["config"]["workdir"] == "/root" and ins["config"]["cmd"] == ["/bin/sh"], ins
    assert [x["digest"] for x in ins["layers"]] == lays, ins
    assert d.get("/v1/images/" + man).json()["id"] == man

    sid = d.create(image=ref)["id"]
    f = fixture.MULTI_FACTS
    out = d.sh(sid, "cd /; for p in %s %s %s %s; do test -e $p && echo yes $p || echo no $p; "
                    "done; cat /%s /%s; echo $MOAT_IMAGE; pwd" % (
                        f["removed"], f["opaque_hidden"], f["opaque_new"], f["long"],
                        f["opaque_new"], f["hardlink"][1]))
    assert out.split("\n")[:4] == ["no " + f["removed"], "no " + f["opaque_hidden"],
                                   "yes " + f["opaque_new"], "yes " + f["long"]], out
    assert "upper new\nhard linked\nmulti\n/\n" in out, out
    # no cwd, no cmd: the image's WorkingDir, Env, Cmd
    j = d.ex(sid, ["/bin/sh", "-c", "pwd; echo $MOAT_IMAGE"])
    assert j["stdout"] == "/root\nmulti\n", j
    # an image in use: its last name cannot go
    assert_error(d.delete("/v1/images/" + enc(ref)), 409, "conflict", contains=sid)
    assert images(d) != []
    d.rm(sid)
    r = d.delete("/v1/images/" + enc(ref))
    assert r.status == 204, r
    assert images(d) == []
    assert_error(d.get("/v1/images/" + enc(ref)), 404, "not_found")
    assert wait_until(lambda: blobs(d) == [] and layer_dirs(d, hidden=True) == [], timeout=10), \
        (blobs(d), layer_dirs(d, hidden=True))


def test_config_entrypoint_cmd_user_defaults(d, registry, work):
    lay = make_layout(work / "ep", [], [
        "--config.entrypoint", "/bin/echo", "--config.entrypoint", "ep",
        "--config.cmd", "from-cmd", "--config.workingdir", "/opt",
        "--config.env", "GREETING=hi", "--config.user", "root"])
    ref = registry.push(lay, "moat/ep")
    pull(d, ref)
    ins = d.get("/v1/images/" + enc(ref)).json()
    assert ins["config"]["entrypoint"] == ["/bin/echo", "ep"] and \
        ins["config"]["cmd"] == ["from-cmd"] and ins["config"]["user"] == "root", ins
    sid = d.create(image=ref)["id"]
    r = d.post(f"/v1/sandboxes/{sid}/exec", {})
    assert r.status == 200, r
    assert r.json()["stdout"] == "ep from-cmd\n", r.json()
    j = d.ex(sid, ["/bin/sh", "-c", "pwd; echo $GREETING"])
    assert j["stdout"] == "/opt\nhi\n", j
    # an exec's own env and cwd win over the image's
    j = d.ex(sid, ["/bin/sh", "-c", "pwd; echo $GREETING"], cwd="/", env={"GREETING": "yo"})
    assert j["stdout"] == "/\nyo\n", j
    d.rm(sid)


# ---- imports ------------------------------------------------------------------------

def test_import_layout_archive_docker_save(d, oci_images, work):
    lay = oci_images["multi"]
    man, conf, lays = manifest_digests(lay)
    # an OCI layout directory as a tar
    t1 = tar_of_dir(lay, work / "layout.tar")
    r = import_(d, t1, name="local/multi:v1")
    assert r.json()["id"] == man and r.json()["names"] == ["docker.io/local/multi:v1"], r.json()
    # an OCI archive (skopeo's oci-archive:)
    t2 = work / "oci-archive.tar"
    fixture._run(["skopeo", "copy", "--quiet", "oci:%s:latest" % lay,
                  "oci-archive:%s:local/arch:v2" % t2])
    r = import_(d, t2)
    assert r.json()["id"] == man, r.json()
    assert r.json()["names"] == ["docker.io/local/arch:v2", "docker.io/local/multi:v1"], r.json()
    # a docker save tar (skopeo's docker-archive:): docker v2 manifest, a new id
    t3 = work / "docker.tar"
    fixture._run(["skopeo", "copy", "--quiet", "oci:%s:latest" % lay,
                  "docker-archive:%s:local/docker:v3" % t3])
    r = import_(d, t3)
    dj = r.json()
    assert dj["names"] == ["docker.io/local/docker:v3"], dj
    ls = images(d)
    assert len(ls) == 2, ls
    # the layers: docker-archive's are uncompressed blobs of the same diff_ids
    assert layer_dirs(d) == sorted(x.split(":")[1] for x in diff_ids(lay)), layer_dirs(d)
    for name in ("local/multi:v1", dj["id"]):
        sid = d.create(image=name)["id"]
        out = d.sh(sid, "test -e /etc/motd || echo gone; cat /opt/app/new.txt")
        assert out == "gone\nupper new\n", out
        d.rm(sid)
    assert tmp_files(d) == []


def test_import_garbage_refused_nothing_left(d, oci_images, work):
    lay = oci_images["one"]
    # a layout tar whose layer blob was changed
    bad = work / "bad-layout"
    if bad.exists():
        shutil.rmtree(bad)
    shutil.copytree(lay, bad)
    _, _, lays = manifest_digests(bad)
    p = fixture.blob_path(bad, lays[-1])
    data = bytearray(p.read_bytes())
    data[len(data) // 2] ^= 0xFF
    os.chmod(p, 0o644)
    p.write_bytes(bytes(data))
    r = import_(d, tar_of_dir(bad, work / "bad.tar"), expect=None)
    e = assert_error(r, 422, "invalid_image")
    assert lays[-1] in e["message"], e
    assert_store_empty(d)
    r = d.post("/v1/images/import", b"not a tar at all" * 100,
               headers={"Content-Type": "application/x-tar"})
    assert 400 <= r.status < 500, r
    assert_store_empty(d)


# ---- concurrency and sharing -----------------------------------------------------------

def test_concurrent_pulls_fetch_once_layers_shared(d, oci_images):
    lay = oci_images["multi"]
    srv = Gated(lay, faults={"gate"}).start()
    try:
        res = [None, None]

        def one(i):
            res[i] = pull(d, srv.ref, expect=None)

        t0 = threading.Thread(target=one, args=(0,))
        t0.start()
        assert srv.halfway.wait(60), d.log()
        t1 = threading.Thread(target=one, args=(1,))
        t1.start()
        # the second joined the first: it asked the registry nothing
        assert wait_until(lambda: t1.is_alive(), timeout=5)
        srv.go.set()
        t0.join(180)
        t1.join(180)
        assert res[0].status == 200 and res[1].status == 200, (res, d.log())
        assert res[0].json()["id"] == res[1].json()["id"]
        gets = blob_gets(srv)
        assert len(gets) == len(set(gets)) == 3, gets  # config + 2 layers, once each
    finally:
        srv.go.set()
        srv.stop()
    # two sandboxes on the same layer directory: the file a sandbox sees is
    # the host's layer file (one inode)
    dids = diff_ids(lay)
    lower = imroot(d) / "layers" / dids[0].split(":")[1]
    ino = os.stat(lower / "bin" / "busybox").st_ino
    a = d.create(image=srv.ref)["id"]
    b = d.create(image=srv.ref)["id"]
    for sid in (a, b):
        got = d.sh(sid, "stat -c %i /bin/busybox").strip()
        assert int(got) == ino, (sid, got, ino)
    assert len(layer_dirs(d)) == 2
    d.rm(a)
    d.rm(b)


# ---- hostile registries and layers ----------------------------------------------------

@pytest.mark.parametrize("fault", ["tamper", "cl_big", "cl_small", "endless"])
def test_hostile_blob_refused_nothing_left(d, oci_images, fault):
    lay = oci_images["multi"]
    _, _, lays = manifest_digests(lay)
    with fixture.hostile(lay, faults={fault}) as srv:
        r = pull(d, srv.ref, expect=None)
    assert r.status in ((422,) if fault == "tamper" else (422, 502)), (r, d.log())
    e = assert_error(r, r.status)
    assert lays[-1] in e["message"], e
    assert_store_empty(d)
    assert mounts_under(d.data) == []


def tar_bytes(entries):
    bio = io.BytesIO()
    with tarfile.open(fileobj=bio, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for name, data in entries:
            fixture._add_file(tf, name, data)
    return bio.getvalue()


def test_tar_bomb_refused_nothing_left(oci_images, work):
    # 64 MiB of zeros, gzip'd to about 64 KiB; the daemon allows 8 MiB a layer
    bomb = work / "bomb.tar"
    with tarfile.open(bomb, "w") as tf:
        for i in range(4):
            t = fixture._ti("bomb/zeros-%d" % i, size=16 << 20)

            class Z(io.RawIOBase):
                left = 16 << 20

                def readable(self):
                    return True

                def readinto(self, b):
                    n = min(len(b), self.left)
                    b[:n] = b"\0" * n
                    self.left -= n
                    return n
            tf.addfile(t, io.BufferedReader(Z()))
    gz = work / "bomb.tar.gz"
    with open(bomb, "rb") as f, gzip.open(gz, "wb") as g:
        shutil.copyfileobj(f, g)
    bomb.unlink()
    lay = work / "bomb-layout"
    if lay.exists():
        shutil.rmtree(lay)
    # umoci raw add-layer takes an uncompressed tar: add the bomb as a gzip
    # layer ourselves (the manifest and config edited, digests recomputed)
    make_layout(lay, [])
    add_gzip_layer(lay, gz)
    dm = Daemon("--pool", "0", "--layer-max", str(8 << 20))
    try:
        with fixture.hostile(lay) as srv:
            r = pull(dm, srv.ref, expect=None)
        e = assert_error(r, 413, "too_large")
        assert "layer 2" in e["message"], e
        assert_store_empty(dm)
    finally:
        dm.stop()


def add_gzip_layer(lay, gz):
    """Append a gzip'd tar as a layer of the layout's tag (the manifest,
    the config's diff_ids and the index rewritten)."""
    lay = Path(lay)
    raw, man, mdg = fixture.layout_image(lay)
    data = Path(gz).read_bytes()
    dg = "sha256:" + hashlib.sha256(data).hexdigest()
    with gzip.open(gz, "rb") as f:
        h = hashlib.sha256()
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    diff = "sha256:" + h.hexdigest()

    def put(b):
        d_ = "sha256:" + hashlib.sha256(b).hexdigest()
        p = fixture.blob_path(lay, d_)
        p.write_bytes(b)
        return d_, len(b)
    put(data)
    conf = json.loads(fixture.blob_path(lay, man["config"]["digest"]).read_bytes())
    conf["rootfs"]["diff_ids"].append(diff)
    conf.setdefault("history", []).append({"created_by": "bomb", "empty_layer": False})
    cdg, csz = put(json.dumps(conf).encode())
    man["config"] = dict(man["config"], digest=cdg, size=csz)
    man["layers"].append({"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                          "digest": dg, "size": len(data)})
    mdg2, msz = put(json.dumps(man).encode())
    idx = json.loads((lay / "index.json").read_text())
    for m in idx["manifests"]:
        if m["digest"] == mdg:
            m["digest"], m["size"] = mdg2, msz
    (lay / "index.json").write_text(json.dumps(idx))


def test_store_max_507_nothing_left(oci_images, pushed):
    lay = oci_images["multi"]
    # the store may hold less than the image's blobs
    dm = Daemon("--pool", "0", "--store-max", str(64 << 10))
    try:
        r = pull(dm, pushed["multi"], expect=None)
        e = assert_error(r, 507, "insufficient_storage")
        assert "--store-max" in e["message"], e
        assert_store_empty(dm)
    finally:
        dm.stop()
    # room for the blobs, not for the unpacked layers
    blob_sum = sum(p.stat().st_size for p in (Path(lay) / "blobs" / "sha256").iterdir())
    dm = Daemon("--pool", "0", "--store-max", str(blob_sum + (64 << 10)))
    try:
        r = pull(dm, pushed["multi"], expect=None)
        assert_error(r, 507, "insufficient_storage")
        assert_store_empty(dm)
    finally:
        dm.stop()


# ---- garbage collection ----------------------------------------------------------------

def test_gc_layers_kept_while_a_sandbox_uses_them(d, registry, oci_images, work):
    """A tag re-pushed and pulled again moves its name: the old image,
    nameless, stays while a sandbox runs on it, and goes (rows, blobs,
    layers) once that sandbox is gone."""
    ref = registry.push(oci_images["one"], "moat/gc")
    old = pull(d, ref).json()
    sid = d.create(image=ref)["id"]
    old_layers = set(layer_dirs(d))
    registry.push(oci_images["multi"], "moat/gc")
    new = pull(d, ref).json()
    assert new["id"] != old["id"]
    ids = {x["id"]: x["names"] for x in images(d)}
    assert ids == {old["id"]: [], new["id"]: [ref]}, ids
    # the old image is still there for its sandbox
    assert d.sh(sid, "echo $MOAT_IMAGE; test -e /etc/motd && echo motd") == "one\nmotd\n"
    # by digest: refused while in use
    assert_error(d.delete("/v1/images/" + old["id"]), 409, "conflict")
    # the new image's delete keeps the old's layers (the sandbox's)
    assert d.delete("/v1/images/" + enc(ref)).status == 204
    assert old_layers <= set(layer_dirs(d))
    assert [x["id"] for x in images(d)] == [old["id"]]
    d.rm(sid)
    # the sandbox gone: nothing names the old image, it is collected
    assert wait_until(lambda: images(d) == [], timeout=10), images(d)
    assert wait_until(lambda: blobs(d) == [] and layer_dirs(d, hidden=True) == [],
                      timeout=10), (blobs(d), layer_dirs(d, hidden=True))


# ---- kill -9 ----------------------------------------------------------------------------

def assert_restart_clean(d):
    d.start()
    assert images(d) == [], d.log()
    assert tmp_files(d) == []
    assert [x for x in layer_dirs(d, hidden=True) if x.startswith(".")] == [], \
        layer_dirs(d, hidden=True)
    assert wait_until(lambda: blobs(d) == [], timeout=10), blobs(d)
    assert layer_dirs(d) == []
    assert mounts_under(d.data) == []


def test_kill9_mid_pull_then_pull_succeeds(d, oci_images):
    lay = oci_images["multi"]
    srv = Gated(lay, faults={"gate"}).start()
    try:
        def doomed():
            try:
                pull(d, srv.ref, expect=None)
            except OSError:
                pass  # the daemon is killed under it
        th = threading.Thread(target=doomed, daemon=True)
        th.start()
        assert srv.halfway.wait(60), d.log()
        # the half blob is on the disk
        assert wait_until(lambda: tmp_files(d) != [], timeout=10)
        d.kill9()
        assert tmp_files(d) != []  # what the killed daemon left
        assert_restart_clean(d)
        srv.faults.clear()
        r = pull(d, srv.ref)
        assert r.json()["id"] == manifest_digests(lay)[0]
        sid = d.create(image=srv.ref)["id"]
        assert d.sh(sid, "cat /opt/app/new.txt") == "upper new\n"
        d.rm(sid)
    finally:
        srv.go.set()
        srv.stop()


def test_kill9_mid_import(d, work):
    big = fixture.build_image("big", work / "big", big_mb=40)
    t = work / "big-docker.tar"
    fixture._run(["skopeo", "copy", "--quiet", "oci:%s:latest" % big,
                  "docker-archive:%s:local/big:v1" % t])
    shutil.rmtree(big)
    data = t.read_bytes()
    t.unlink()
    res = {}

    def post():
        try:
            res["r"] = d.post("/v1/images/import", data,
                              headers={"Content-Type": "application/x-tar"}, timeout=180)
        except OSError as e:
            res["e"] = e
    th = threading.Thread(target=post, daemon=True)
    th.start()

    def midway():
        return tmp_files(d) != [] or [x for x in layer_dirs(d, hidden=True)
                                     if x.startswith(".tmp-")]
    assert wait_until(midway, timeout=120, step=0.002), (res, d.log())
    d.kill9()
    th.join(30)
    assert "r" not in res, res  # killed before it answered
    assert_restart_clean(d)
    r = d.post("/v1/images/import", data, headers={"Content-Type": "application/x-tar"},
               timeout=180)
    assert r.status == 201, (r, d.log())
    assert r.json()["names"], r.json()
    assert tmp_files(d) == []
