"""Unified diffs in patch (issue 12, item 9): `POST .../patch` and `moat
patch` take `git diff` and `diff -u` output besides apply_patch. The diffs
are made here by the real tools on host files, applied inside a sandbox,
and the result is read back through /v1 and on the host workspace."""
import os
import shutil
import stat
import subprocess

import pytest

from test_serve import Daemon, assert_error, git, host_names
from test_client import moat, err

pytestmark = pytest.mark.skipif(not shutil.which("git") or not shutil.which("diff"),
                                reason="git and diff are needed")

# what the sandbox starts with: LF, CRLF, no final newline, a file deleted,
# one renamed (and edited), one made executable
BEFORE = {
    "src/a.txt": b"one\ntwo\nthree\nfour\nfive\nsix\nseven\neight\nnine\nten\n",
    "crlf.txt": b"alpha\r\nbeta\r\ngamma\r\n",
    "noeol.txt": b"first\nlast",
    "gone.txt": b"bye\n",
    "old name.txt": b"keep 1\nkeep 2\nkeep 3\nkeep 4\nchange me\n",
    "run.sh": b"#!/bin/sh\necho run\n",
}
AFTER = {
    "src/a.txt": b"one\nTWO\nthree\nfour\nfive\nsix\nseven\neight\nNINE\nten\neleven\n",
    "crlf.txt": b"alpha\r\nBETA\r\ngamma\r\n",
    "noeol.txt": b"first\nmiddle\nlast",
    "new name.txt": b"keep 1\nkeep 2\nkeep 3\nkeep 4\nchanged\n",
    "run.sh": b"#!/bin/sh\necho run\n",
    "sub/new.txt": b"a new file\n",
}


def write_tree(root, files):
    for p, data in files.items():
        f = root / p
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(data)


def git_diff(tmp_path):
    """`git diff` of BEFORE to AFTER, made by git in a real repository."""
    r = tmp_path / "repo"
    r.mkdir()
    git("init", "-q", "-b", "main", cwd=r)
    git("config", "core.autocrlf", "false", cwd=r)
    write_tree(r, BEFORE)
    git("add", "-A", cwd=r)
    git("commit", "-q", "-m", "before", cwd=r)
    (r / "gone.txt").unlink()
    git("mv", "old name.txt", "new name.txt", cwd=r)
    write_tree(r, AFTER)
    os.chmod(r / "run.sh", 0o755)
    git("add", "-A", cwd=r)
    out = subprocess.run(["git", "diff", "--cached", "-M"], cwd=r, check=True,
                         capture_output=True).stdout
    assert b"rename from old name.txt" in out and b"new mode 100755" in out, out
    assert b"\\ No newline at end of file" in out and b"\r\n" in out, out
    return out


@pytest.fixture(scope="module")
def srv():
    d = Daemon()
    yield d
    d.stop()


@pytest.fixture
def box(srv):
    b = srv.create()
    yield b["id"]
    srv.delete(f"/v1/sandboxes/{b['id']}")


def seed(srv, box, files):
    for p, data in files.items():
        srv.fput(box, p, data)


def test_git_diff_applied_through_v1(srv, box, tmp_path):
    seed(srv, box, BEFORE)
    r = srv.patch(box, git_diff(tmp_path).decode())
    assert r.status == 200, r
    ops = {f["path"]: f["op"] for f in r.json()["files"]}
    assert ops["/workspace/gone.txt"] == "delete", ops
    assert ops["/workspace/new name.txt"] == "move", ops
    assert ops["/workspace/sub/new.txt"] == "add", ops
    assert ops["/workspace/src/a.txt"] == "update", ops
    for p, data in AFTER.items():
        assert srv.fread(box, p) == data, p
        assert (srv.ws(box) / p).read_bytes() == data, p
    for p in ("gone.txt", "old name.txt"):
        assert_error(srv.fget(box, p), 404, "not_found")
        assert not (srv.ws(box) / p).exists()
    assert os.stat(srv.ws(box) / "run.sh").st_mode & 0o111, "the mode change was not applied"
    assert host_names(srv.ws(box), ".moat-") == []


def test_diff_u_applied_through_moat_patch(srv, box, tmp_path):
    """`diff -u a/f b/f` (prefixes stripped) and `diff -u f.orig f` (the
    new name), through the client, from a file and from stdin."""
    seed(srv, box, {"x.txt": b"1\n2\n3\n", "y.txt": b"p\nq\n"})
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "x.txt").write_bytes(b"1\n2\n3\n")
    (tmp_path / "b" / "x.txt").write_bytes(b"1\ntwo\n3\n")
    d = subprocess.run(["diff", "-u", "a/x.txt", "b/x.txt"], cwd=tmp_path, capture_output=True)
    assert d.returncode == 1 and d.stdout.startswith(b"--- a/x.txt\t"), d
    pf = tmp_path / "x.diff"
    pf.write_bytes(d.stdout)
    url = f"http://127.0.0.1:{srv.port}"
    r = moat(url, "patch", box, str(pf))
    assert r.returncode == 0, err(r)
    assert r.stdout == b"update /workspace/x.txt\n"
    assert srv.fread(box, "x.txt") == b"1\ntwo\n3\n"
    (tmp_path / "y.txt.orig").write_bytes(b"p\nq\n")
    (tmp_path / "y.txt").write_bytes(b"p\nQ\nr")
    d = subprocess.run(["diff", "-u", "y.txt.orig", "y.txt"], cwd=tmp_path, capture_output=True)
    r = moat(url, "patch", box, "-", input=d.stdout)
    assert r.returncode == 0, err(r)
    assert srv.fread(box, "y.txt") == b"p\nQ\nr"
    assert (srv.ws(box) / "y.txt").read_bytes() == b"p\nQ\nr"


def test_mismatch_refused_naming_file_and_hunk_nothing_changed(srv, box, tmp_path):
    seed(srv, box, BEFORE)
    diff = git_diff(tmp_path)
    srv.fput(box, "crlf.txt", b"alpha\nbeta\ngamma\n")  # LF now: the CRLF context differs
    before = {p: (srv.ws(box) / p).read_bytes() for p in BEFORE}
    r = srv.patch(box, diff.decode())
    assert_error(r, 422, "patch_failed", ["crlf.txt: hunk 1 (@@ -1,3 +1,3 @@", "does not match"])
    after = {p: (srv.ws(box) / p).read_bytes() for p in BEFORE}
    assert after == before
    assert not (srv.ws(box) / "sub" / "new.txt").exists()
    assert not (srv.ws(box) / "new name.txt").exists()
    assert host_names(srv.ws(box), ".moat-") == []
    # through the client: the same refusal, exit 125
    pf = tmp_path / "bad.diff"
    pf.write_bytes(diff)
    c = moat(f"http://127.0.0.1:{srv.port}", "patch", box, str(pf))
    assert c.returncode == 125 and "crlf.txt: hunk 1" in err(c), err(c)


def test_new_file_over_an_existing_one_refused(srv, box):
    srv.fput(box, "exists.txt", b"mine\n")
    r = srv.patch(box, "--- /dev/null\n+++ b/exists.txt\n@@ -0,0 +1 @@\n+theirs\n")
    assert_error(r, 422, "patch_failed", "exists.txt: already exists")
    assert srv.fread(box, "exists.txt") == b"mine\n"


def test_deletion_must_match_the_whole_file(srv, box):
    srv.fput(box, "d.txt", b"bye\nand more\n")
    r = srv.patch(box, "--- a/d.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-bye\n")
    assert_error(r, 422, "patch_failed", "d.txt")
    assert srv.fread(box, "d.txt") == b"bye\nand more\n"


@pytest.mark.parametrize("diff,needle", [
    ("diff --git a/i.png b/i.png\nindex 1..2 100644\nGIT binary patch\nliteral 3\n",
     "'i.png': binary patches are not supported"),
    ("diff --git a/a b/c\nsimilarity index 100%\ncopy from a\ncopy to c\n",
     "copies are not supported"),
    ("--- a/../../etc/x\n+++ b/../../etc/x\n@@ -1 +1 @@\n-a\n+b\n", "without '..'"),
    ("--- /etc/hostname\n+++ /etc/hostname\n@@ -1 +1 @@\n-a\n+b\n", "relative to the workspace"),
    ("just some text\n", "neither apply_patch"),
])
def test_unsupported_refused_clearly(srv, box, diff, needle):
    assert_error(srv.patch(box, diff), 400, "invalid_request", needle)


def test_rename_onto_an_existing_file_refused(srv, box):
    """A diff's rename, as git apply: never over another file (which would
    be lost without a word); nothing is changed, checked on the host."""
    srv.fput(box, "a.txt", b"a\n")
    srv.fput(box, "b.txt", b"precious\n")
    srv.fput(box, "c.txt", b"c\n")
    r = srv.patch(box, "--- a/c.txt\n+++ b/c.txt\n@@ -1 +1 @@\n-c\n+C\n"
                       "diff --git a/a.txt b/b.txt\nsimilarity index 100%\n"
                       "rename from a.txt\nrename to b.txt\n")
    assert_error(r, 422, "patch_failed", "b.txt: already exists")
    ws = srv.ws(box)
    assert (ws / "b.txt").read_bytes() == b"precious\n"
    assert (ws / "a.txt").read_bytes() == b"a\n"
    assert (ws / "c.txt").read_bytes() == b"c\n"
    assert host_names(ws, ".moat-") == []
