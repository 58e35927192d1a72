"""Snapshot export and import (docs/API.md "Snapshots"): a computer moved
to another host. Two daemons with two data directories: a snapshot on A,
GET /v1/snapshots/{sid}/export, POST /v1/snapshots/import of those bytes
on B, a create from it on B sees A's files. The archive is checked as an
OCI image layout on the host (tarfile, json, sha256), and what a refused or
cut transfer leaves is checked in the data directories and moat.db."""
import hashlib
import http.client
import io
import json
import os
import sqlite3
import sys
import tarfile
from pathlib import Path

import pytest

_h = Path(__file__).resolve().parent
sys.path[:0] = [str(_h / "oci"), str(_h.parent / "oci")]
import fixture  # noqa: E402
from fixture import oci_images  # noqa: E402,F401

from conftest import wait_until  # noqa: E402
from test_serve import Daemon  # noqa: E402
from test_snapshots import dies_at  # noqa: E402

ANN = "io.moat.snapshot"


@pytest.fixture
def ab():
    a = Daemon("--pool", "0")
    try:
        b = Daemon("--pool", "0")
        try:
            yield a, b
        finally:
            b.stop()
    finally:
        a.stop()


def snap(d, sid, **body):
    r = d.post(f"/v1/sandboxes/{sid}/snapshots", body)
    assert r.status == 201, r
    return r.json()


def export(d, ref):
    r = d.get(f"/v1/snapshots/{ref}/export", timeout=120)
    assert r.status == 200, r
    assert r.headers["content-type"] == "application/x-tar", r
    return r.body


def import_snap(d, data, name=None, expect=201):
    path = "/v1/snapshots/import" + (f"?name={name}" if name else "")
    r = d.post(path, data, headers={"Content-Type": "application/x-tar"}, timeout=120)
    # a refused archive: the image store's 422 invalid_image, or 400
    assert r.status in ((400, 422) if expect == 400 else (expect,)), r
    return r


def layout(raw):
    """(index, manifest, {digest: bytes}) of an OCI layout tar, every blob
    checked against its name."""
    blobs, index = {}, None
    with tarfile.open(fileobj=io.BytesIO(raw)) as tf:
        names = tf.getnames()
        assert "oci-layout" in names, names
        for m in tf.getmembers():
            if not m.isfile():
                continue
            data = tf.extractfile(m).read()
            if m.name == "index.json":
                index = json.loads(data)
            elif m.name.startswith("blobs/sha256/"):
                hx = m.name.rsplit("/", 1)[1]
                assert hashlib.sha256(data).hexdigest() == hx, m.name
                blobs["sha256:" + hx] = data
    assert index and len(index["manifests"]) == 1, index
    man = json.loads(blobs[index["manifests"][0]["digest"]])
    for d in [man["config"]] + man["layers"]:
        assert d["digest"] in blobs and len(blobs[d["digest"]]) == d["size"], d
    return index, man, blobs


def layer_names(blob):
    with tarfile.open(fileobj=io.BytesIO(blob)) as tf:
        return tf.getnames()


def leftovers(d):
    return sorted(n for n in os.listdir(d.data / "snapshots") if n.startswith("."))


def snap_rows(d):
    con = sqlite3.connect(str(d.data / "moat.db"), timeout=5)
    try:
        return con.execute("SELECT id, name, image FROM snapshots").fetchall()
    finally:
        con.close()


def image_names(d):
    return sorted(n for i in d.get("/v1/images").json()["images"] for n in i["names"])


def test_host_sandbox_moves_to_another_daemon(ab):
    a, b = ab
    sid = a.create()["id"]
    a.sh(sid, "mkdir -p sub && echo 'written on A' > sub/f.txt && ln -s sub/f.txt soft && "
              "chmod 640 sub/f.txt")
    s = snap(a, sid, name="mover")
    raw = export(a, "mover")
    # an OCI image layout: the workspace layer only, said so
    _, man, blobs = layout(raw)
    ann = man["annotations"]
    assert ann[ANN] == "1" and ann[ANN + ".id"] == s["id"], ann
    assert ann[ANN + ".base"] == "host" and ann[ANN + ".base_layers"] == "0", ann
    assert len(man["layers"]) == 1
    names = layer_names(blobs[man["layers"][0]["digest"]])
    assert "workspace/sub/f.txt" in names and all(
        n == "workspace" or n.startswith("workspace/") for n in names), names
    cfg = json.loads(blobs[man["config"]["digest"]])
    assert len(cfg["rootfs"]["diff_ids"]) == 1
    assert leftovers(a) == [], "the export left its work directory"
    # B takes it and starts a sandbox from it
    r = import_snap(b, raw, name="moved").json()
    assert r["name"] == "moved" and r["image"] == "host", r
    assert [x[1] for x in snap_rows(b)] == ["moved"]
    assert image_names(b) == [], "a host snapshot's image stays in the store"
    c = b.create(image="moved")["id"]
    assert b.sh(c, "cat sub/f.txt soft; stat -c %a sub/f.txt; test -L soft && echo link") \
        .split() == ["written", "on", "A", "written", "on", "A", "640", "link"]
    # on B's host: the snapshot's own files
    assert (b.data / "snapshots" / r["id"] / "fs" / "workspace" / "sub" / "f.txt") \
        .read_text() == "written on A\n"
    # the same archive is an image for POST /v1/images/import
    ri = b.post("/v1/images/import?name=localhost/exported:1", raw,
                headers={"Content-Type": "application/x-tar"}, timeout=120)
    assert ri.status == 201, ri


def test_image_sandbox_moves_with_its_root_changes(ab, oci_images):
    a, b = ab
    tar = io.BytesIO()
    with tarfile.open(fileobj=tar, mode="w") as tf:
        tf.add(str(oci_images["multi"]), arcname=".")
    r = a.post("/v1/images/import?name=localhost/base:1", tar.getvalue(),
               headers={"Content-Type": "application/x-tar"}, timeout=120)
    assert r.status == 201, r
    base = r.json()["id"]
    sid = a.create(image="localhost/base:1")["id"]
    a.sh(sid, "echo 'root change' > /etc/added && rm /opt/keep.txt && "
              "echo 'ws on A' > /workspace/w.txt")
    s = snap(a, sid)
    assert s["image"] == base, s
    raw = export(a, s["id"])
    _, man, blobs = layout(raw)
    ann = man["annotations"]
    assert ann[ANN + ".base"] == base, ann
    nb = int(ann[ANN + ".base_layers"])
    assert nb == 2 and len(man["layers"]) == nb + 2, man
    upper = layer_names(blobs[man["layers"][nb]["digest"]])
    assert "etc/added" in upper and "opt/.wh.keep.txt" in upper, upper
    assert "workspace/w.txt" in layer_names(blobs[man["layers"][nb + 1]["digest"]])
    assert leftovers(a) == []
    # B has never seen the base image: the archive carries it
    assert image_names(b) == []
    r = import_snap(b, raw).json()
    c = b.create(image=f"snapshot:{r['id']}")["id"]
    # A's root change and whiteout, the base's own layers, A's workspace
    out = b.sh(c, "cat /etc/added /workspace/w.txt /opt/app/new.txt; "
                  "test -e /opt/keep.txt || echo gone")
    assert out == "root change\nws on A\nupper new\ngone\n", out
    # its image is kept (the snapshot's layers), named after it
    assert image_names(b) == [f"localhost/snapshot:{r['id']}"]
    assert [x[2] for x in snap_rows(b)] == [r["image"]]


def test_bad_archives_name_the_culprit_nothing_imported(ab, oci_images):
    a, b = ab
    before = image_names(b)
    r = import_snap(b, b"this is not a tar at all" * 50, expect=400)
    assert "import" in r.json()["error"]["message"].lower(), r
    # a well-formed image, but no snapshot: refused, and the image it
    # would have added is gone again
    tar = io.BytesIO()
    with tarfile.open(fileobj=tar, mode="w") as tf:
        tf.add(str(oci_images["one"]), arcname=".")
    r = import_snap(b, tar.getvalue(), expect=400)
    assert "not a moat snapshot export" in r.json()["error"]["message"], r
    # a snapshot export with a blob changed: the digest check names it
    sid = a.create()["id"]
    a.sh(sid, "echo x > x.txt")
    raw = bytearray(export(a, snap(a, sid)["id"]))
    _, man, _ = layout(bytes(raw))
    cfgd = man["config"]["digest"]
    src = tarfile.open(fileobj=io.BytesIO(bytes(raw)))
    members = []
    for m in src.getmembers():
        data = src.extractfile(m).read() if m.isfile() else None
        if m.name.endswith(cfgd.split(":")[1]):
            data = data.replace(b'"os":"linux"', b'"os":"linuy"')
        members.append((m, data))
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tf:
        for m, data in members:
            if data is not None:
                m.size = len(data)
                tf.addfile(m, io.BytesIO(data))
            else:
                tf.addfile(m)
    r = import_snap(b, out.getvalue(), expect=400)
    assert "digest mismatch" in r.json()["error"]["message"], r
    # a cut archive
    r = import_snap(b, bytes(raw[:len(raw) // 2]), expect=400)
    assert image_names(b) == before
    assert snap_rows(b) == []
    assert leftovers(b) == []
    assert not [n for n in os.listdir(b.data / "images" / "tmp")], "a blob was left"
    # bad names and methods
    assert import_snap(b, bytes(raw), name="a/b", expect=400)
    assert b.get("/v1/snapshots/import").status in (404, 405)
    assert b.get("/v1/snapshots/nosuch/export").status == 404
    assert b.post("/v1/snapshots/nosuch/export", {}).status == 405


def test_client_gone_mid_export_leaves_nothing():
    """The reader stops after the first bytes and hangs up: the export's
    thread stops (EPIPE) and removes its work directory; the daemon goes on."""
    d = Daemon("--pool", "0")
    try:
        sid = d.create()["id"]
        # incompressible, larger than what pipe and socket buffers hold
        d.sh(sid, "head -c 24000000 /dev/urandom > big && echo ok")
        s = snap(d, sid)
        c = http.client.HTTPConnection("127.0.0.1", d.port, timeout=60)
        c.request("GET", f"/v1/snapshots/{s['id']}/export")
        r = c.getresponse()
        assert r.status == 200
        assert len(r.read(4096)) == 4096
        c.close()
        assert wait_until(lambda: leftovers(d) == [], timeout=60), leftovers(d)
        assert d.sh(sid, "stat -c %s big") == "24000000\n"
        # and a whole export still works afterwards
        assert len(export(d, s["id"])) > 24000000
    finally:
        d.stop()


def test_kill9_mid_export_swept():
    d = Daemon("--pool", "0", env_extra={"MOAT_TEST_CRASH_AT": "export-packed"})
    try:
        sid = d.create()["id"]
        d.sh(sid, "echo x > x.txt")
        s = snap(d, sid)
        dies_at(d, lambda: d.get(f"/v1/snapshots/{s['id']}/export", timeout=30))
        assert leftovers(d), "the crash came before the export's directory was made"
        d.env_extra = {}
        d.start()
        assert leftovers(d) == [], d.log()
        assert [x[0] for x in snap_rows(d)] == [s["id"]]
        layout(export(d, s["id"]))
    finally:
        d.stop()


def test_export_of_a_template_snapshot_refused():
    d = Daemon("--pool", "0", allow=True)
    try:
        root = d.allowed / "root"
        root.mkdir()
        os.chmod(root, 0o755)
        r = d.post("/v1/sandboxes", {"image": str(root)})
        if r.status != 201:
            pytest.skip(f"a root filesystem directory image: {r}")
        sid = r.json()["id"]
        s = snap(d, sid)
        r = d.get(f"/v1/snapshots/{s['id']}/export")
        assert r.status == 409 and "no OCI form" in r.json()["error"]["message"], r
        assert leftovers(d) == []
    finally:
        d.stop()


def test_kill9_mid_import_swept():
    """Killed after the image store took the archive and the snapshot's
    files were copied, before its record: the restart removes both."""
    a = Daemon("--pool", "0")
    try:
        sid = a.create()["id"]
        a.sh(sid, "echo x > x.txt")
        raw = export(a, snap(a, sid)["id"])
    finally:
        a.stop()
    b = Daemon("--pool", "0", env_extra={"MOAT_TEST_CRASH_AT": "import-copied"})
    try:
        dies_at(b, lambda: b.post("/v1/snapshots/import", raw,
                                  headers={"Content-Type": "application/x-tar"}, timeout=60))
        assert leftovers(b), "the crash came before the snapshot's files were made"
        b.env_extra = {}
        b.start()
        assert leftovers(b) == [], b.log()
        assert snap_rows(b) == []
        assert image_names(b) == [], b.log()
        assert "an import that did not finish" in b.log()
        # and the same archive imports whole now
        r = import_snap(b, raw).json()
        c = b.create(image=f"snapshot:{r['id']}")["id"]
        assert b.sh(c, "cat x.txt") == "x\n"
    finally:
        b.stop()
