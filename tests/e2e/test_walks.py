"""Host-side walks of trees a sandbox shaped, and the disk limit
(issue 9, finding 4).

A served sandbox builds a tree deeper than PATH_MAX (64 levels of
68-character names, 20 MB at the bottom), with a mode-000 and a read-only
directory in the middle, symlinks out to a host directory, a symlink loop
and a FIFO. DELETE must leave nothing of it in the data dir and must not
touch the host directory the links point to. A write past limits.disk gets
ENOSPC inside, in the workspace, /tmp and the home alike, and the host's
data dir does not grow.
"""
import json
import os
import signal
import stat

import pytest

from conftest import snapshot, diff_snap, wait_until
from test_serve import (Daemon, SERVE, AGENT, make_rootfs, quiet_delete,  # noqa: F401
                        tar_members)

pytestmark = pytest.mark.skipif(
    not (os.access(SERVE, os.X_OK) and os.access(AGENT, os.X_OK)),
    reason="moat-serve / moat-agent not found")

# Runs inside the sandbox (the host's python3 is visible there).
DEEP = r"""
import os, sys
outside = sys.argv[1]
name = "d" * 68
os.chdir("/workspace")
os.symlink(outside, "out")
os.symlink(".", "loop")
for i in range(64):
    os.mkdir(name)
    os.chdir(name)
    if i in (10, 40):
        os.symlink(outside, "out")
        os.symlink(outside + "/keep.txt", "keep")
        os.symlink("..", "up")
    if i == 20:
        os.mkfifo("fifo")
with open("big", "wb") as f:
    for _ in range(20):
        f.write(b"x" * (1 << 20))
os.mkfifo("fifo")
os.symlink(outside, "out")
# a mode-000 directory at level 32 (its contents stay below it) and a
# read-only one at level 16: climb back up by ".." to reach them
for i in range(64, 32, -1):
    os.chdir("..")
os.chmod(name, 0)
for i in range(32, 16, -1):
    os.chdir("..")
os.chmod(name, 0o500)
print("ok")
"""


def tree_bytes(root):
    """Bytes (allocated) under root, not following links."""
    total = 0
    for d, dirs, files in os.walk(str(root), onerror=lambda e: None):
        for n in dirs + files:
            try:
                total += os.lstat(os.path.join(d, n)).st_blocks * 512
            except OSError:
                pass
    return total


@pytest.fixture
def walksrv():
    d = Daemon(allow=True)
    (d.outside / "keep.txt").write_text("host data\n")
    (d.outside / "sub").mkdir()
    (d.outside / "sub" / "f").write_text("more\n")
    os.chmod(d.outside, 0o755)
    yield d
    d.stop()


def build_deep(d, sid):
    j = d.ex(sid, ["/usr/bin/python3", "-c", DEEP, str(d.outside)], timeout_ms=120000)
    assert j.get("exit_code") == 0, j
    # the tree is on the host, deeper than PATH_MAX
    assert d.ws(sid).is_dir()
    assert os.path.islink(d.ws(sid) / "out")


def assert_all_gone(d, sid, before):
    assert wait_until(lambda: not os.path.lexists(d.sbdir(sid)), timeout=30), \
        f"{d.sbdir(sid)} is still there after DELETE"
    assert sid not in os.listdir(d.data / "sandboxes")
    assert tree_bytes(d.data / "sandboxes") < 1 << 20, "sandbox data left in the data dir"
    assert not diff_snap(before, snapshot(d.outside)), "the host directory changed"
    assert (d.outside / "keep.txt").read_text() == "host data\n"


def test_delete_removes_a_tree_deeper_than_path_max(walksrv):
    d = walksrv
    before = snapshot(d.outside)
    sid = d.create()["id"]
    build_deep(d, sid)
    d.rm(sid)
    assert_all_gone(d, sid, before)
    assert d.ids() == []


def test_delete_after_a_restart_removes_the_deep_tree(walksrv):
    """The same tree, the daemon killed and restarted in between: the
    restored sandbox's DELETE removes it all."""
    d = walksrv
    before = snapshot(d.outside)
    sid = d.create()["id"]
    build_deep(d, sid)
    d.kill9()
    d.start()
    assert sid in d.ids()
    d.rm(sid)
    assert_all_gone(d, sid, before)


def test_api_walks_cope_with_the_deep_tree(walksrv):
    """Listing and archiving a tree deeper than PATH_MAX from the API: a
    clean answer (success, or an error naming the cause), the agent alive."""
    d = walksrv
    sid = d.create()["id"]
    j = d.ex(sid, ["/usr/bin/python3", "-c", DEEP.replace("os.chmod(name, 0)\n", "").replace("os.chmod(name, 0o500)\n", ""),
                   "/nonexistent"], timeout_ms=120000)
    assert j.get("exit_code") == 0, j
    r = d.flist(sid, "/workspace", depth=64)
    assert r.status == 200, r
    names = [e["path"] for e in r.json()["entries"]]
    assert max(len(p) for p in names) > 4096  # the whole depth, full paths
    # deeper than an archive path may be (4095 bytes): refused whole,
    # naming the cause, not a tree cut short
    r = d.get(f"/v1/sandboxes/{sid}/archive")
    assert r.status == 400, r
    assert "longer than 4095" in r.json()["error"]["message"], r
    # recursive delete from the API, then the agent still answers
    r = d.fdel(sid, "/workspace/" + "d" * 68, recursive=True)
    assert r.status == 204, r
    assert d.sh(sid, "test -e /workspace/" + "d" * 68 + " && echo left || echo gone").strip() == "gone"
    d.rm(sid)
    assert wait_until(lambda: not os.path.lexists(d.sbdir(sid)), timeout=30)


def disk_ok(d):
    r = d.post("/v1/sandboxes", {"limits": {"disk": "16M"}})
    if r.status != 201:
        return None
    return r.json()["id"]


WRITE = r"""
import errno, os, sys
where = sys.argv[1]
n = 0
try:
    with open(os.path.join(where, "fill"), "wb") as f:
        while n < (64 << 20):
            f.write(b"y" * (1 << 20))
            f.flush()
            n += 1 << 20
    print("no-error", n)
except OSError as e:
    print(errno.errorcode.get(e.errno), n)
"""

INODES = r"""
import errno, os, sys
where = os.path.join(sys.argv[1], "many")
os.mkdir(where)
n = 0
try:
    while n < 20000:
        open(os.path.join(where, str(n)), "wb").close()
        n += 1
    print("no-error", n)
except OSError as e:
    print(errno.errorcode.get(e.errno), n)
"""


def py(d, sid, code, arg):
    j = d.ex(sid, ["/usr/bin/python3", "-c", code, arg], timeout_ms=120000)
    assert j.get("exit_code") == 0, j
    return j["stdout"].split()


@pytest.mark.parametrize("where", ["/workspace", "/tmp", "$HOME", "/dev/shm"])
def test_disk_limit_bounds_every_writable_place(walksrv, where):
    d = walksrv
    sid = disk_ok(d)
    if sid is None:
        pytest.skip("limits.disk is refused here")
    try:
        home = d.sh(sid, "echo $HOME").strip()
        w = home if where == "$HOME" else where
        grown0 = tree_bytes(d.data)
        out = py(d, sid, WRITE, w)
        assert out[0] == "ENOSPC", out
        assert int(out[1]) <= 16 << 20, out
        d.sh(sid, f"rm -f {w}/fill")
        out = py(d, sid, INODES, w)
        assert out[0] == "ENOSPC", out
        assert int(out[1]) < 20000, out
        assert tree_bytes(d.data) < grown0 + (4 << 20), "the host's data dir grew"
    finally:
        quiet_delete(d, sid)


def test_disk_limit_is_one_budget(walksrv):
    """The workspace, /tmp and the home share the one limit: 12 MB in the
    workspace leaves no 12 MB for /tmp."""
    d = walksrv
    sid = disk_ok(d)
    if sid is None:
        pytest.skip("limits.disk is refused here")
    try:
        d.sh(sid, "head -c 12582912 /dev/zero > /workspace/a")
        j = d.ex(sid, "head -c 12582912 /dev/zero > /tmp/b")
        assert j["exit_code"] != 0 and "No space" in j["stderr"], j
    finally:
        quiet_delete(d, sid)


def test_archive_of_a_deep_tree_is_whole(walksrv):
    """300 levels of one-letter names fit an archive path: all of it comes
    out, the bottom file included (not a tree cut at some depth)."""
    d = walksrv
    sid = d.create()["id"]
    try:
        d.sh(sid, "/usr/bin/python3 -c 'import os; os.makedirs(\"a/\" * 300); "
                  "open(\"a/\" * 300 + \"bottom\", \"w\").write(\"deep\")'")
        r = d.get(f"/v1/sandboxes/{sid}/archive")
        assert r.status == 200, r
        m = tar_members(r.body)
        assert m["a/" * 300 + "bottom"][1] == b"deep"
        r = d.flist(sid, "/workspace", depth=64)
        assert r.status == 200, r
        assert r.json()["truncated"] is False
        assert any(e["path"].endswith("/a" * 64) for e in r.json()["entries"])
        # an unreadable directory inside: said, not silently left out
        d.sh(sid, "mkdir -p locked/x && chmod 000 locked")
        r = d.flist(sid, "/workspace", depth=3)
        assert r.status == 200, r
        assert r.json()["truncated"] is True, r
    finally:
        quiet_delete(d, sid)


def test_commondir_made_a_tree_is_removed_whole(run, ws, outside):
    """moat run: a `.git/commondir` the sandbox made is removed at the end
    (test_escape.py); made a directory holding a tree (a mode-000 part, a
    link out to a host directory), it goes whole and the host directory
    behind the link stays."""
    (ws / ".git").mkdir()
    (outside / "keep.txt").write_text("host\n")
    before = snapshot(outside)
    r = run.sh(f'mkdir -p .git/commondir/a/b && echo x > .git/commondir/a/b/f && '
               f'ln -s {outside} .git/commondir/a/out && chmod 000 .git/commondir/a/b && '
               f'echo WROTE')
    assert "WROTE" in r.stdout, r.stderr
    assert not os.path.lexists(ws / ".git" / "commondir"), r.stderr
    assert "removed" in r.stderr and "commondir" in r.stderr, r.stderr
    assert not diff_snap(before, snapshot(outside))


# dash only (an image has no coreutils): exit 9 when a write fails
FILL = ('s=$(printf "%01024d" 0); i=0; while [ $i -lt {n} ]; do echo $s || exit 9; '
        'i=$((i+1)); done > {f}; echo rc=$?')


def test_disk_limit_covers_an_image_overlay(walksrv):
    """With an image, its overlay's changes share the same budget: 12 MB
    written over the image leave no 12 MB for the workspace."""
    d = walksrv
    rf = d.allowed / "rootfs"
    make_rootfs(rf)
    r = d.post("/v1/sandboxes", {"image": str(rf), "limits": {"disk": "16M"}})
    if r.status != 201:
        pytest.skip(f"an image with limits.disk is refused here: {r!r}")
    sid = r.json()["id"]
    try:
        j = d.ex(sid, FILL.format(n=40000, f="/data/big"))
        assert j["exit_code"] == 9, j  # a write failed (dash says "I/O error")
        d.sh(sid, ": > /data/big")  # no rm in the image: emptied
        j = d.ex(sid, FILL.format(n=12 * 1024, f="/data/a"))
        assert "rc=0" in j["stdout"], j
        j = d.ex(sid, FILL.format(n=12 * 1024, f="/workspace/b"))
        assert j["exit_code"] == 9, j
    finally:
        quiet_delete(d, sid)
