"""The CLI doors of issue 13 (src/client/image*.c, snap.c): `moat image
pull|import|ls|inspect|rm`, `moat snapshot`, `moat fork`, `moat restore`,
`moat pause|resume`, run as a user would against a real `moat serve`, with
images from Debian's docker-registry on loopback (tests/oci/fixture.py).
What each command did is checked through the host (the sandbox's files
under the data directory, the cgroup freezer's state) or moat's own /v1
API, not through the CLI's own output alone."""
import json
import os
import pty
import subprocess
import sys
import tarfile
import time
import urllib.parse
from pathlib import Path

import pytest

_h = Path(__file__).resolve().parent
sys.path[:0] = [str(_h / "oci"), str(_h.parent / "oci")]
import fixture  # noqa: E402
from fixture import registry, oci_images, pushed  # noqa: E402,F401

from conftest import MOAT, wait_until  # noqa: E402
from test_serve import Daemon  # noqa: E402


@pytest.fixture(scope="module")
def d():
    dm = Daemon("--pool", "0")
    try:
        yield dm
    finally:
        dm.stop()


def cli(d, *args, timeout=300):
    env = {k: v for k, v in os.environ.items() if k not in ("MOAT_API_TOKEN",)}
    env["MOAT_URL"] = f"http://127.0.0.1:{d.port}"
    return subprocess.run([MOAT, *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env=env, stdin=subprocess.DEVNULL)


def ok(r):
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
    return r.stdout


def failed(r, *names):
    """A refusal: exit 125, one line on stderr naming every culprit."""
    assert r.returncode == 125, (r.returncode, r.stdout, r.stderr)
    assert r.stdout == "", r.stdout
    for n in names:
        assert n in r.stderr, (n, r.stderr)
    return r.stderr


def store_images(d):
    """The store's images as moat's own API lists them: {id: names}."""
    r = d.get("/v1/images")
    assert r.status == 200, r
    return {i["id"]: i["names"] for i in r.json()["images"]}


def snapshot_ids(d):
    r = d.get("/v1/snapshots")
    assert r.status == 200, r
    return {s["id"] for s in r.json()["snapshots"]}


def new_sandbox(d, *args):
    sid = ok(cli(d, "create", *args)).strip()
    assert d.get(f"/v1/sandboxes/{sid}").status == 200
    d.agent_pid(sid)
    return sid


# ---- images -------------------------------------------------------------------

def test_pull_runs_lists_and_removes(d, pushed, oci_images):
    ref = pushed["one"]
    _, _, digest = fixture.layout_image(oci_images["one"])
    r = ok_r = cli(d, "image", "pull", "--insecure", ref)
    ok(r)
    # stdout: the id, the manifest digest the registry holds; stderr (not a
    # terminal here): one final line, no progress escapes
    assert r.stdout == digest + "\n"
    assert ok_r.stderr.count("\n") == 1 and "\r" not in ok_r.stderr, ok_r.stderr
    assert f"pulled {ref}: 1 layer" in ok_r.stderr
    assert store_images(d)[digest] == [ref]

    table = ok(cli(d, "image", "ls")).splitlines()
    assert table[0].split()[:3] == ["ID", "SIZE", "LAYERS"]
    assert any(ref in line and line.startswith(digest[:19]) for line in table[1:]), table
    listed = json.loads(ok(cli(d, "image", "ls", "--json")))
    assert [i["names"] for i in listed["images"] if i["id"] == digest] == [[ref]]
    insp = json.loads(ok(cli(d, "image", "inspect", ref)))
    assert insp["id"] == digest and insp["config"]["cmd"] == ["/bin/sh"]
    assert len(insp["layers"]) == 1

    # the image runs: a sandbox from it sees the image's files and config
    sid = new_sandbox(d, "--image", ref)
    out = ok(cli(d, "exec", sid, "--", "busybox", "cat", "/etc/passwd"))
    assert out.startswith("root:x:0:0:root:/root:/bin/sh\n"), out
    assert "MOAT_IMAGE=one" in ok(cli(d, "exec", sid, "--", "busybox", "env"))
    # in use: its last name cannot go
    failed(cli(d, "image", "rm", ref), ref, "409")
    assert digest in store_images(d)
    ok(cli(d, "rm", sid))

    ok(cli(d, "image", "rm", ref))
    assert digest not in store_images(d)
    assert digest[:19] not in ok(cli(d, "image", "ls"))
    failed(cli(d, "image", "inspect", ref), ref, "404")


def test_pull_progress_on_a_terminal(d, registry, oci_images):
    """stderr a terminal: one line rewritten in place (\\r, erase), ending
    with the final line; stdout (not a terminal) only the id."""
    ref = registry.push(oci_images["multi"], "moat/cli-tty")
    _, _, digest = fixture.layout_image(oci_images["multi"])
    master, slave = pty.openpty()
    env = dict(os.environ, MOAT_URL=f"http://127.0.0.1:{d.port}")
    p = subprocess.Popen([MOAT, "image", "pull", "--insecure", ref], stdout=subprocess.PIPE,
                         stderr=slave, stdin=subprocess.DEVNULL, env=env)
    os.close(slave)
    err = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the last writer closed the terminal
            break
        if not chunk:
            break
        err += chunk
    os.close(master)
    out = p.stdout.read().decode()
    p.stdout.close()
    assert p.wait(60) == 0, err
    assert out == digest + "\n"
    assert b"\r\x1b[K" + ref.encode() + b": layers " in err, err
    assert b"/2, " in err, err
    # the last thing on the terminal is the final line, alone
    assert err.rsplit(b"\r\x1b[K", 1)[-1].startswith(b"pulled "), err
    ok(cli(d, "image", "rm", ref))


def test_pull_refusals_name_the_culprit(d, registry, pushed):
    before = store_images(d)
    missing = registry.ref("moat/one", "no-such-tag")
    err = failed(cli(d, "image", "pull", "--insecure", missing), "no-such-tag", "not found")
    assert err.count("\n") == 1, err
    failed(cli(d, "image", "pull", "::bad::"), "::bad::", "invalid_request")
    failed(cli(d, "image", "pull", "--insecure", "127.0.0.1:1/moat/one:latest"),
           "127.0.0.1:1/moat/one:latest")
    failed(cli(d, "image", "pull"), "usage")
    failed(cli(d, "image", "pull", "--bogus", "x"), "--bogus")
    failed(cli(d, "image", "frobnicate"), "frobnicate")
    failed(cli(d, "image", "rm", "nosuch:tag"), "nosuch:tag", "404")
    failed(cli(d, "image", "inspect", "nosuch:tag"), "nosuch:tag", "404")
    failed(cli(d, "create", "--image", "nosuch:tag"), "nosuch:tag")
    assert store_images(d) == before


def test_import_layout_dir_and_archive(d, oci_images, tmp_path):
    lay = oci_images["multi"]
    _, _, digest = fixture.layout_image(lay)
    # a directory: sent as a tar made on the fly
    r = cli(d, "image", "import", lay, "--name", "cli-multi:dir")
    assert ok(r) == digest + "\n"
    assert "imported" in r.stderr and "2 layers" in r.stderr, r.stderr
    assert any(n.endswith("cli-multi:dir") for n in store_images(d)[digest])
    # the same layout as an OCI archive file
    arch = tmp_path / "multi.tar"
    with tarfile.open(arch, "w") as tf:
        for e in sorted(os.listdir(lay)):
            tf.add(os.path.join(lay, e), arcname=e)
    assert ok(cli(d, "image", "import", arch, "--name", "cli-multi:tar")) == digest + "\n"
    names = store_images(d)[digest]
    assert any(n.endswith("cli-multi:tar") for n in names), names

    sid = new_sandbox(d, "--image", "cli-multi:tar")
    facts = fixture.MULTI_FACTS
    script = (f"busybox test ! -e /{facts['removed']} && busybox cat /{facts['opaque_new']} "
              f"&& busybox test ! -e /{facts['opaque_hidden']}")
    assert ok(cli(d, "exec", sid, "--", "busybox", "sh", "-c", script)) == "upper new\n"
    ok(cli(d, "rm", sid))
    for n in ("cli-multi:dir", "cli-multi:tar"):
        ok(cli(d, "image", "rm", n))
    assert digest not in store_images(d)


def test_import_of_a_dir_the_tar_cannot_finish_stores_nothing(d, oci_images, tmp_path):
    """A directory the client cannot tar whole (here a FIFO in it): the
    upload is aborted (http.c's upload_eof), nothing is stored, the error
    names the entry. (The tar writer's unflushed last block already cuts the
    tar's last entry, so this passes without the abort too: it guards the
    behaviour, it does not prove the hunk.)"""
    import shutil
    lay = tmp_path / "lay"
    shutil.copytree(oci_images["one"], lay)
    fifo = "zz-fifo"
    os.mkfifo(lay / fifo)
    before = store_images(d)
    err = failed(cli(d, "image", "import", lay, "--name", "cli-cut:1"), fifo,
                 "not a file, directory or symlink")
    assert "imported" not in err
    assert store_images(d) == before


def test_import_refusals(d, tmp_path):
    before = store_images(d)
    failed(cli(d, "image", "import", tmp_path / "absent"), str(tmp_path / "absent"))
    junk = tmp_path / "junk.tar"
    junk.write_bytes(b"this is not an archive\n" * 100)
    failed(cli(d, "image", "import", junk), str(junk))
    empty = tmp_path / "emptydir"
    empty.mkdir()
    failed(cli(d, "image", "import", empty), str(empty))
    failed(cli(d, "image", "import", "/dev/null"), "/dev/null", "not a file or a directory")
    assert store_images(d) == before


# ---- snapshots, restore, fork -------------------------------------------------

def test_snapshot_restore_puts_the_files_back(d):
    sid = new_sandbox(d)
    ws = d.ws(sid)
    ok(cli(d, "exec", sid, "--", "sh", "-c", "echo before > kept.txt && mkdir sub && "
                                              "echo deep > sub/deep.txt"))
    snap = ok(cli(d, "snapshot", sid, "--name", f"cli-{sid}")).strip()
    assert snap in snapshot_ids(d)
    table = ok(cli(d, "snapshot", "ls"))
    assert any(line.split()[:3] == [snap, f"cli-{sid}", sid] for line in table.splitlines())
    listed = json.loads(ok(cli(d, "snapshot", "ls", "--json")))["snapshots"]
    assert [s["sandbox_id"] for s in listed if s["id"] == snap] == [sid]
    # after the snapshot: one file changed, one added, one removed
    ok(cli(d, "exec", sid, "--", "sh", "-c",
           "echo changed > kept.txt && echo after > after.txt && rm sub/deep.txt"))
    assert (ws / "after.txt").exists()

    ok(cli(d, "restore", sid, f"cli-{sid}"))  # by name
    # on the host: the snapshot's files, and only those
    assert (ws / "kept.txt").read_text() == "before\n"
    assert (ws / "sub" / "deep.txt").read_text() == "deep\n"
    assert not (ws / "after.txt").exists()
    # and the restarted sandbox sees the same
    assert ok(cli(d, "exec", sid, "--", "cat", "kept.txt", "sub/deep.txt")) == "before\ndeep\n"
    failed(cli(d, "restore", sid, "no-such-snap"), "no-such-snap", "404")
    failed(cli(d, "restore", sid), "usage")

    ok(cli(d, "snapshot", "rm", snap))
    assert snap not in snapshot_ids(d)
    assert snap not in ok(cli(d, "snapshot", "ls"))
    failed(cli(d, "snapshot", "rm", snap), snap, "404")
    ok(cli(d, "rm", sid))


def test_create_from_snapshot(d):
    sid = new_sandbox(d)
    ok(cli(d, "exec", sid, "--", "sh", "-c", "echo saved > s.txt"))
    snap = ok(cli(d, "snapshot", sid)).strip()
    other = new_sandbox(d, "--image", f"snapshot:{snap}")
    assert (d.ws(other) / "s.txt").read_text() == "saved\n"
    for s in (sid, other):
        ok(cli(d, "rm", s))
    ok(cli(d, "snapshot", "rm", snap))


def test_fork_copies_are_independent(d):
    sid = new_sandbox(d)
    ok(cli(d, "exec", sid, "--", "sh", "-c", "echo parent > p.txt"))
    out = ok(cli(d, "fork", sid, "--count", "2"))
    kids = out.split()
    assert len(kids) == 2 and sid not in kids and len(set(kids)) == 2, out
    for k in kids:
        d.agent_pid(k)
        assert d.get(f"/v1/sandboxes/{k}").json()["state"] == "running"
        assert (d.ws(k) / "p.txt").read_text() == "parent\n"
    # a write in one copy is seen by no other sandbox
    ok(cli(d, "exec", kids[0], "--", "sh", "-c", "echo mine > p.txt && echo new > k.txt"))
    assert (d.ws(kids[0]) / "p.txt").read_text() == "mine\n"
    for other in (sid, kids[1]):
        assert (d.ws(other) / "p.txt").read_text() == "parent\n"
        assert not (d.ws(other) / "k.txt").exists()
    failed(cli(d, "fork", sid, "--count", "0"), "--count", "0")
    failed(cli(d, "fork", sid, "--count", "33"), "--count")
    failed(cli(d, "fork", "nosuchsandbox"), "nosuchsandbox", "404")
    ok(cli(d, "rm", sid, *kids))


def test_fork_and_restore_an_image_sandbox(d, pushed):
    # the image root's changes (/root here) live in fs/upper: a fork and a
    # restore carry them, and a respawn uses the recorded layers
    ref = pushed["one"]
    ok(cli(d, "image", "pull", "--insecure", ref))
    sid = new_sandbox(d, "--image", ref)
    try:
        ok(cli(d, "exec", sid, "--", "busybox", "sh", "-c", "echo v1 > /root/f.txt"))
        snap = ok(cli(d, "snapshot", sid)).strip()
        kid = ok(cli(d, "fork", sid)).strip()
        d.agent_pid(kid)
        assert ok(cli(d, "exec", kid, "--", "busybox", "cat", "/root/f.txt")) == "v1\n"
        ok(cli(d, "exec", sid, "--", "busybox", "sh", "-c", "echo v2 > /root/f.txt"))
        ok(cli(d, "restore", sid, snap))
        assert ok(cli(d, "exec", sid, "--", "busybox", "cat", "/root/f.txt")) == "v1\n"
    finally:
        for s in d.get("/v1/sandboxes").json()["sandboxes"]:
            d.delete(f"/v1/sandboxes/{s['id']}")
        for s in snapshot_ids(d):
            d.delete(f"/v1/snapshots/{s}")
        d.delete("/v1/images/" + urllib.parse.quote(ref, safe=""))


def test_snapshot_refusals(d):
    before = snapshot_ids(d)
    failed(cli(d, "snapshot", "nosuchsandbox"), "nosuchsandbox", "404")
    failed(cli(d, "snapshot"), "usage")
    failed(cli(d, "snapshot", "rm", "nosuchsnap"), "nosuchsnap", "404")
    sid = new_sandbox(d)
    s1 = ok(cli(d, "snapshot", sid, "--name", f"dup-{sid}")).strip()
    failed(cli(d, "snapshot", sid, "--name", f"dup-{sid}"), f"dup-{sid}", "409")
    assert snapshot_ids(d) == before | {s1}
    ok(cli(d, "snapshot", "rm", s1))
    ok(cli(d, "rm", sid))


def export_route(d):
    r = d.get("/v1/snapshots/nosuchsnap/export")
    return not (r.status == 404 and "no such route" in r.text)


def test_snapshot_export_then_import(d, tmp_path):
    if not export_route(d):
        pytest.skip("this moat serve has no GET /v1/snapshots/{sid}/export")
    sid = new_sandbox(d)
    ok(cli(d, "exec", sid, "--", "sh", "-c", "echo exported > e.txt"))
    snap = ok(cli(d, "snapshot", sid)).strip()
    out = tmp_path / "snap.tar"
    ok(cli(d, "snapshot", "export", snap, "-o", out))
    assert out.stat().st_size > 0 and not (tmp_path / "snap.tar.part").exists()
    failed(cli(d, "snapshot", "export", "nosuchsnap", "-o", tmp_path / "x.tar"), "nosuchsnap")
    assert not (tmp_path / "x.tar").exists() and not (tmp_path / "x.tar.part").exists()
    img = ok(cli(d, "image", "import", out, "--name", f"from-{snap}")).strip()
    assert img in store_images(d)
    ok(cli(d, "rm", sid))
    ok(cli(d, "snapshot", "rm", snap))


def test_snapshot_export_python_free(d):
    """--help and usage errors of export need no route."""
    failed(cli(d, "snapshot", "export", "x"), "-o FILE")


# ---- pause ------------------------------------------------------------------------

def freezer_state(pid):
    """The cgroup freezer's state of pid's cgroup: v1 freezer.state, or
    v2 cgroup.freeze ("1" -> FROZEN)."""
    with open(f"/proc/{pid}/cgroup") as f:
        lines = f.read().splitlines()
    for line in lines:
        _, ctrl, path = line.split(":", 2)
        if "freezer" in ctrl.split(","):
            return Path(f"/sys/fs/cgroup/freezer{path}/freezer.state").read_text().strip()
    for line in lines:
        if line.startswith("0::"):
            v = Path(f"/sys/fs/cgroup{line[3:]}/cgroup.freeze").read_text().strip()
            return "FROZEN" if v == "1" else "THAWED"
    raise AssertionError(f"no freezer cgroup for {pid}: {lines}")


def test_pause_freezes_and_resume_thaws(d):
    sid = new_sandbox(d)
    r = d.post(f"/v1/sandboxes/{sid}/exec",
               {"cmd": "i=0; while :; do i=$((i+1)); echo $i > n.txt; done", "yield_ms": 0})
    assert r.status == 200, r
    n = d.ws(sid) / "n.txt"

    def count():
        try:
            return int(n.read_text() or "0")
        except (OSError, ValueError):
            return 0
    assert wait_until(lambda: count() > 10, timeout=30)
    pr = cli(d, "pause", sid)
    if pr.returncode != 0 and "pause_unavailable" in pr.stderr:
        ok(cli(d, "rm", sid))
        pytest.skip("no freezer for this daemon: " + pr.stderr.strip())
    ok(pr)
    assert d.get(f"/v1/sandboxes/{sid}").json()["state"] == "paused"
    agent = d.agent_pid(sid)
    assert agent and freezer_state(agent) == "FROZEN"
    frozen = count()
    time.sleep(0.3)  # a frozen counter cannot move however long this is
    assert count() == frozen
    failed(cli(d, "exec", sid, "--", "true"), "paused")
    failed(cli(d, "pause", sid), sid, "409")
    ok(cli(d, "resume", sid))
    assert d.get(f"/v1/sandboxes/{sid}").json()["state"] == "running"
    assert freezer_state(agent) == "THAWED"
    assert wait_until(lambda: count() > frozen, timeout=30)
    failed(cli(d, "resume", sid), sid, "409")
    ok(cli(d, "rm", sid))


# ---- help -----------------------------------------------------------------------

@pytest.mark.parametrize("args,words", [
    (["--help"], ["image", "snapshot", "fork", "restore", "pause"]),
    (["image", "--help"], ["pull", "import", "ls", "inspect", "rm"]),
    (["image", "pull", "--help"], ["--insecure", "REF"]),
    (["image", "import", "--help"], ["--name", "docker save", "OCI layout"]),
    (["image", "ls", "--help"], ["--json"]),
    (["snapshot", "--help"], ["--name", "ls", "rm", "export", "snapshot:SID"]),
    (["snapshot", "export", "--help"], ["-o", "OCI archive"]),
    (["fork", "--help"], ["--count", "not copied"]),
    (["restore", "--help"], ["SNAPSHOT", "restarted"]),
])
def test_help(args, words):
    r = subprocess.run([MOAT, *args], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r
    for w in words:
        assert w in r.stdout, (w, r.stdout)
    if args != ["--help"]:  # moat's own usage; the API commands say it
        assert "MOAT_URL" in r.stdout
