"""Snapshots, restore, fork and creates from a snapshot (docs/API.md
"Snapshots"), on each storage backend: "copy" on the ext4 /tmp always,
"btrfs" and "xfs" (reflink) in loop filesystems when root and mkfs exist.
Checked through the host (the snapshot's directory, the store's rows, the
process still alive) as well as through /v1."""
import os
import shutil
import sqlite3
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from conftest import MOAT, uid_tag, wait_until
from test_serve import Daemon

IS_ROOT = os.geteuid() == 0


class FsDaemon(Daemon):
    """A Daemon whose data directory lives under mnt (a loop filesystem)."""

    def __init__(self, mnt, *args, env_extra=None):
        self.base = Path(mnt) / f"moat-e2e-snap-{uid_tag()}"
        self.base.mkdir(mode=0o755)
        self.data = self.base / "data"
        self.allowed = self.base / "allowed"
        self.outside = self.base / "outside"
        self.args = list(args)
        self.token = None
        self.env_extra = env_extra or {}
        self.pids = []
        self.agents = set()
        self.proc = None
        self.nstart = 0
        self._limits_ok = None
        self.start()


class LoopFs:
    """A filesystem of kind ("btrfs", "xfs") in a file, loop-mounted."""

    def __init__(self, kind, size="600M"):
        self.dir = Path(tempfile.mkdtemp(prefix=f"moat-snapfs-{kind}-"))
        self.img = self.dir / "fs.img"
        self.mnt = self.dir / "mnt"
        self.mnt.mkdir()
        subprocess.run(["truncate", "-s", size, str(self.img)], check=True)
        mkfs = ["mkfs.btrfs", "-q", str(self.img)] if kind == "btrfs" else \
            ["mkfs.xfs", "-q", "-m", "reflink=1", str(self.img)]
        subprocess.run(mkfs, check=True, stdout=subprocess.DEVNULL)
        subprocess.run(["mount", "-o", "loop", str(self.img), str(self.mnt)], check=True)
        os.chmod(self.mnt, 0o755)

    def close(self):
        subprocess.run(["umount", "-l", str(self.mnt)], check=False)
        shutil.rmtree(self.dir, ignore_errors=True)


def backend_skip(kind):
    if kind == "copy":
        return None
    if not IS_ROOT:
        return "a loop filesystem needs root (mount -o loop)"
    tool = "mkfs.btrfs" if kind == "btrfs" else "mkfs.xfs"
    if not shutil.which(tool):
        return f"{tool} is not installed"
    return None


@pytest.fixture(params=["copy", "btrfs", "xfs"])
def d(request):
    kind = request.param
    why = backend_skip(kind)
    if why:
        pytest.skip(why)
    fs = None if kind == "copy" else LoopFs(kind)
    dm = Daemon("--pool", "0") if fs is None else FsDaemon(fs.mnt, "--pool", "0")
    dm.kind = {"copy": "copy", "btrfs": "btrfs", "xfs": "reflink"}[kind]
    try:
        yield dm
    finally:
        dm.stop()
        if fs:
            fs.close()


def dies_at(d, call):
    """Make the call that reaches the daemon's MOAT_TEST_CRASH_AT step (it
    gets no answer) and wait for the daemon's death."""
    try:
        call()
    except Exception:
        pass
    assert wait_until(lambda: d.proc.poll() is not None, timeout=60), d.log()


def snap(d, sid, **body):
    r = d.post(f"/v1/sandboxes/{sid}/snapshots", body)
    assert r.status == 201, r
    return r.json()


def rows(d):
    con = sqlite3.connect(str(d.data / "moat.db"), timeout=5)
    try:
        return con.execute("SELECT id, name, sandbox, state FROM snapshots").fetchall()
    finally:
        con.close()


def size_of(d, s):
    """A snapshot's size: on btrfs measured after the answer (null until then)."""
    if s["size"] is None:
        assert d.kind == "btrfs", s
        assert wait_until(lambda: d.get(f"/v1/snapshots/{s['id']}").json()["size"] is not None,
                          timeout=30), d.log()
        return d.get(f"/v1/snapshots/{s['id']}").json()["size"]
    return s["size"]


def test_backend_is_the_probed_one(d):
    sid = d.create()["id"]
    s = snap(d, sid)
    assert s["backend"] == d.kind, (s, d.log())
    assert f"snapshots: {d.kind}" in d.log()


def test_doctor_reports_the_backend_and_its_cost(d):
    r = subprocess.run([MOAT, "doctor", "--data", str(d.data)], capture_output=True, text=True,
                       timeout=60)
    line = [x for x in r.stdout.splitlines() if x.strip().startswith("snapshots")]
    assert line and line[0].split()[1] == d.kind, r.stdout
    cost = {"copy": "O(bytes)", "reflink": "O(files)", "btrfs": "O(1)"}[d.kind]
    assert cost in line[0], line
    # the probe left nothing in the data directory
    assert not [n for n in os.listdir(d.data) if n.startswith(".fsclone-probe")]


def test_snapshot_keeps_running_and_create_sees_the_moment(d):
    sid = d.create()["id"]
    d.sh(sid, "mkdir -p sub && echo before > sub/f.txt && ln sub/f.txt hard && "
              "ln -s sub/f.txt soft && chmod 640 sub/f.txt")
    r = d.ex(sid, "sleep 600", yield_ms=0)
    pid = r["process_id"]
    s = snap(d, sid, name="first")
    assert s["sandbox_id"] == sid and s["name"] == "first"
    assert size_of(d, s) > 0, d.log()
    # on the host: the frozen copy, complete, named by the row
    assert (d.data / "snapshots" / s["id"] / "fs" / "workspace" / "sub" / "f.txt").read_text() \
        == "before\n"
    assert [x[0] for x in rows(d)] == [s["id"]]
    # the process runs on through it
    ps = d.get(f"/v1/sandboxes/{sid}/processes").json()["processes"]
    assert any(p["process_id"] == pid and p["running"] for p in ps), ps
    d.sh(sid, "echo after > sub/f.txt && echo new > later.txt")
    for image in (f"snapshot:{s['id']}", "first"):
        c = d.create(image=image)["id"]
        out = d.sh(c, "cat sub/f.txt hard soft; stat -c %a sub/f.txt; "
                      "test -L soft && echo link; test -e later.txt || echo nolater; "
                      "stat -c %h sub/f.txt")
        assert out.split() == ["before", "before", "before", "640", "link", "nolater", "2"], out
        d.rm(c)
    # the parent still has its later write
    assert d.sh(sid, "cat sub/f.txt") == "after\n"
    listed = d.get("/v1/snapshots").json()["snapshots"]
    assert [x["id"] for x in listed] == [s["id"]]
    assert d.get(f"/v1/snapshots/first").json()["id"] == s["id"]


def test_restore_rolls_back(d):
    sid = d.create()["id"]
    d.sh(sid, "echo one > a.txt")
    s = snap(d, sid)
    d.sh(sid, "echo two > a.txt && echo extra > b.txt")
    r = d.post(f"/v1/sandboxes/{sid}/restore", {"snapshot": s["id"]})
    assert r.status == 200, r
    assert r.json()["processes"] == "restarted"
    assert d.sh(sid, "cat a.txt; test -e b.txt || echo nob") == "one\nnob\n"
    # the snapshot itself is untouched by writes after a restore
    d.sh(sid, "echo three > a.txt")
    assert (d.data / "snapshots" / s["id"] / "fs" / "workspace" / "a.txt").read_text() == "one\n"
    assert d.get(f"/v1/sandboxes/{sid}").json()["state"] == "running"


def test_fork_three_independent(d):
    sid = d.create()["id"]
    d.sh(sid, "echo parent > p.txt")
    r = d.post(f"/v1/sandboxes/{sid}/fork", {"count": 3})
    assert r.status == 201, r
    j = r.json()
    assert j["processes"] == "not copied"
    kids = [b["id"] for b in j["sandboxes"]]
    assert len(set(kids)) == 3 and sid not in kids
    for i, k in enumerate(kids):
        assert d.sh(k, "cat p.txt") == "parent\n"
        d.sh(k, f"echo kid{i} > mine.txt")
    for i, k in enumerate(kids):
        assert d.sh(k, "cat mine.txt") == f"kid{i}\n"
    assert d.sh(sid, "test -e mine.txt || echo none") == "none\n"
    # all on the host, each in its own fs/
    for k in kids:
        assert (d.data / "sandboxes" / k / "fs" / "workspace" / "p.txt").is_file()


def test_bad_input(d):
    sid = d.create()["id"]
    assert d.post(f"/v1/sandboxes/{sid}/fork", {"count": 0}).status == 400
    assert d.post(f"/v1/sandboxes/{sid}/fork", {"count": 33}).status == 400
    assert d.post(f"/v1/sandboxes/{sid}/snapshots", {"name": "a/b"}).status == 400
    assert d.post(f"/v1/sandboxes/{sid}/snapshots", {"bogus": 1}).status == 400
    r = d.post(f"/v1/sandboxes/{sid}/restore", {"snapshot": "nosuch"})
    assert r.status == 404 and "nosuch" in r.json()["error"]["message"], r
    r = d.post("/v1/sandboxes", {"image": "snapshot:nosuch"})
    assert r.status == 404, r
    assert d.get("/v1/snapshots/nosuch").status == 404
    assert d.delete("/v1/snapshots/nosuch").status == 404
    snap(d, sid, name="taken")
    r = d.post(f"/v1/sandboxes/{sid}/snapshots", {"name": "taken"})
    assert r.status == 409, r
    assert len(rows(d)) == 1


def test_delete_keeps_clones(d):
    sid = d.create()["id"]
    d.sh(sid, "echo x > x.txt")
    s = snap(d, sid)
    c = d.create(image=f"snapshot:{s['id']}")["id"]
    assert d.delete(f"/v1/snapshots/{s['id']}").status == 204
    assert not (d.data / "snapshots" / s["id"]).exists()
    assert rows(d) == []
    assert d.sh(c, "cat x.txt") == "x\n"


def test_tmpfs_workspace_refused(d):
    if not d.limits_ok():
        pytest.skip("limits.disk needs the memory cgroup here")
    sid = d.create(limits={"disk": "64M"})["id"]
    r = d.post(f"/v1/sandboxes/{sid}/snapshots", {})
    assert r.status == 409 and "limits.disk" in r.json()["error"]["message"], r
    assert rows(d) == []


@pytest.mark.skipif(not IS_ROOT, reason="a tiny loop filesystem needs root (mount -o loop)")
def test_enospc_leaves_nothing():
    """A data dir on a small filesystem: the snapshot of a workspace bigger
    than what is left fails with 507, no snapshot directory and no row, and
    the sandbox as it was."""
    tmp = Path(tempfile.mkdtemp(prefix="moat-snapfs-ext4-"))
    img, mnt = tmp / "fs.img", tmp / "mnt"
    mnt.mkdir()
    try:
        subprocess.run(["truncate", "-s", "120M", str(img)], check=True)
        subprocess.run(["mkfs.ext4", "-q", "-F", str(img)], check=True)
        subprocess.run(["mount", "-o", "loop", str(img), str(mnt)], check=True)
        os.chmod(mnt, 0o755)
        d = FsDaemon(mnt, "--pool", "0")
        try:
            sid = d.create()["id"]
            d.sh(sid, "dd if=/dev/zero of=big bs=1M count=60 status=none && echo ok")
            r = d.post(f"/v1/sandboxes/{sid}/snapshots", {})
            assert r.status == 507, r
            assert r.json()["error"]["code"] == "insufficient_storage"
            assert os.listdir(d.data / "snapshots") == []
            assert rows(d) == []
            assert d.sh(sid, "stat -c %s big") == f"{60 << 20}\n"
        finally:
            d.stop()
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.mark.parametrize("step", ["snapshot-captured", "snapshot-renamed"])
def test_kill9_mid_snapshot(step):
    d = Daemon("--pool", "0", env_extra={"MOAT_TEST_CRASH_AT": step})
    try:
        sid = d.create()["id"]
        d.sh(sid, "echo x > x.txt")
        dies_at(d, lambda: d.post(f"/v1/sandboxes/{sid}/snapshots", {}, timeout=20))
        assert os.listdir(d.data / "snapshots"), "the crash came before any file was made"
        d.env_extra = {}
        d.start()
        assert os.listdir(d.data / "snapshots") == [], d.log()
        assert rows(d) == []
        assert d.get("/v1/snapshots").json()["snapshots"] == []
        assert "no complete snapshot; removed" in d.log()
        # the sandbox was adopted and still snapshots
        assert snap(d, sid)["sandbox_id"] == sid
    finally:
        d.stop()


# ---- the freeze during a copy ------------------------------------------------

# each file replaced whole (rename), a before b
WRITER = ("i=0; while :; do i=$((i+1)); echo $i > a.t && mv a.t a; "
          "echo $i > b.t && mv b.t b; done")


def freezer_state(pid):
    """FROZEN / THAWED of the freezer cgroup pid is in, read on the host
    (v1 freezer.state, v2 cgroup.events), or None without a freezer."""
    lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    for line in lines:
        _, ctrls, path = line.split(":", 2)
        if "freezer" in ctrls.split(","):
            p = Path("/sys/fs/cgroup/freezer") / path.lstrip("/") / "freezer.state"
            return p.read_text().strip()
    for line in lines:
        hid, _, path = line.split(":", 2)
        if hid == "0":
            ev = Path("/sys/fs/cgroup") / path.lstrip("/") / "cgroup.events"
            if ev.exists():
                return "FROZEN" if "frozen 1" in ev.read_text() else "THAWED"
    return None


def has_freezer(d):
    return "pause: available" in d.log()


def counter(d, sid):
    return int(d.sh(sid, "cat a").strip() or "0")


def advancing(d, sid):
    first = counter(d, sid)
    return wait_until(lambda: counter(d, sid) > first, timeout=30)


def test_snapshot_of_a_busy_sandbox_is_of_one_moment(d):
    """A process writes i to a, then to b (each whole), without end. The snapshot holds
    a == b or a == b + 1 (the writer was stopped at one point; a copy
    beside it could see b newer than a); after it the writer is alive,
    thawed, and counting on."""
    sid = d.create()["id"]
    d.ex(sid, WRITER, yield_ms=0)
    assert wait_until(lambda: d.sh(sid, "cat b 2>/dev/null || true").strip(), timeout=30)
    s = snap(d, sid)
    ws = d.data / "snapshots" / s["id"] / "fs" / "workspace"
    a, b = int((ws / "a").read_text() or 0), int((ws / "b").read_text() or 0)
    assert a in (b, b + 1), (a, b)
    if has_freezer(d):
        assert freezer_state(d.agent_pid(sid)) == "THAWED"
    assert advancing(d, sid)
    ps = d.get(f"/v1/sandboxes/{sid}/processes").json()["processes"]
    assert any(p["running"] for p in ps), ps


def test_paused_sandbox_stays_paused_through_a_snapshot(d):
    sid = d.create()["id"]
    d.sh(sid, "echo x > x.txt")
    r = d.post(f"/v1/sandboxes/{sid}/pause", {})
    if r.status == 422:
        pytest.skip(f"pause is unavailable here: {r}")
    assert r.status in (200, 204), r
    snap(d, sid)
    assert d.get(f"/v1/sandboxes/{sid}").json()["state"] == "paused"
    assert freezer_state(d.agent_pid(sid)) == "FROZEN"
    assert d.post(f"/v1/sandboxes/{sid}/resume", {}).status in (200, 204)
    assert d.sh(sid, "cat x.txt") == "x\n"


def test_kill9_while_frozen_for_a_snapshot():
    """The daemon dies with the sandbox frozen for the copy (a test-only
    crash point right after the freeze): the sandbox is frozen on the host
    then; the restarted daemon thaws it (its record says running), and
    leaves no half snapshot."""
    d = Daemon("--pool", "0", env_extra={"MOAT_TEST_CRASH_AT": "snapshot-frozen"})
    try:
        if not has_freezer(d):
            pytest.skip("no freezer for this daemon: the copy is not frozen")
        sid = d.create()["id"]
        d.ex(sid, WRITER, yield_ms=0)
        assert wait_until(lambda: d.sh(sid, "cat b 2>/dev/null || true").strip(), timeout=30)
        agent = d.agent_pid(sid)
        dies_at(d, lambda: d.post(f"/v1/sandboxes/{sid}/snapshots", {}, timeout=20))
        assert freezer_state(agent) == "FROZEN"
        d.env_extra = {}
        d.start()
        assert freezer_state(agent) == "THAWED", d.log()
        assert os.listdir(d.data / "snapshots") == [], d.log()
        assert rows(d) == []
        assert d.get(f"/v1/sandboxes/{sid}").json()["state"] == "running"
        assert advancing(d, sid)
    finally:
        d.stop()


# ---- --store-max ---------------------------------------------------------------

def test_store_max_bounds_snapshots():
    d = Daemon("--pool", "0", "--store-max", "1M")
    try:
        sid = d.create()["id"]
        d.sh(sid, "echo small > s.txt")
        s = snap(d, sid)
        d.sh(sid, "head -c 3000000 /dev/urandom > big && echo ok")
        r = d.post(f"/v1/sandboxes/{sid}/snapshots", {})
        assert r.status == 507, r
        assert r.json()["error"]["code"] == "insufficient_storage"
        assert "--store-max" in r.json()["error"]["message"], r
        # nothing of it on disk or in the store
        assert os.listdir(d.data / "snapshots") == [s["id"]]
        assert [x[0] for x in rows(d)] == [s["id"]]
        assert d.sh(sid, "stat -c %s big") == "3000000\n"
    finally:
        d.stop()


# ---- kill -9 mid-fork, mid-restore ----------------------------------------------

def leftover_clones(d):
    return [n for n in os.listdir(d.data / "sandboxes") if n.startswith(".")]


def test_kill9_mid_fork():
    d = Daemon("--pool", "0", env_extra={"MOAT_TEST_CRASH_AT": "fork-cloned"})
    try:
        sid = d.create()["id"]
        d.sh(sid, "echo parent > p.txt")
        dies_at(d, lambda: d.post(f"/v1/sandboxes/{sid}/fork", {"count": 2}, timeout=20))
        assert leftover_clones(d), "the crash came before any clone was made"
        d.env_extra = {}
        d.start()
        assert leftover_clones(d) == [], d.log()
        listed = [b["id"] for b in d.get("/v1/sandboxes").json()["sandboxes"]]
        assert listed == [sid], listed
        assert sorted(os.listdir(d.data / "sandboxes")) == [sid]
        assert d.sh(sid, "cat p.txt") == "parent\n"
        r = d.post(f"/v1/sandboxes/{sid}/fork", {"count": 1})
        assert r.status == 201, r
    finally:
        d.stop()


def test_kill9_mid_restore():
    d = Daemon("--pool", "0", env_extra={"MOAT_TEST_CRASH_AT": "restore-cloned"})
    try:
        sid = d.create()["id"]
        d.sh(sid, "echo one > a.txt")
        s = snap(d, sid)
        d.sh(sid, "echo two > a.txt")
        dies_at(d, lambda: d.post(f"/v1/sandboxes/{sid}/restore", {"snapshot": s["id"]},
                                  timeout=20))
        assert (d.sbdir(sid) / "fs.new").exists(), "the crash came before the clone"
        d.env_extra = {}
        d.start()
        assert not (d.sbdir(sid) / "fs.new").exists(), d.log()
        # as before the restore that never answered, and usable
        assert d.sh(sid, "cat a.txt") == "two\n"
        assert [x[0] for x in rows(d)] == [s["id"]]
        r = d.post(f"/v1/sandboxes/{sid}/restore", {"snapshot": s["id"]})
        assert r.status == 200, r
        assert d.sh(sid, "cat a.txt") == "one\n"
    finally:
        d.stop()


# ---- a btrfs snapshot's size, measured after the answer ---------------------------

def btrfs_daemon(tmp_path, *args, gate=None):
    why = backend_skip("btrfs")
    if why:
        pytest.skip(why)
    fs = LoopFs("btrfs")
    env = {"MOAT_TEST_SIZE_GATE": str(gate)} if gate else None
    return fs, FsDaemon(fs.mnt, "--pool", "0", *args, env_extra=env)


def row_size(d, sid):
    con = sqlite3.connect(str(d.data / "moat.db"), timeout=5)
    try:
        return con.execute("SELECT size FROM snapshots WHERE id = ?", (sid,)).fetchone()[0]
    finally:
        con.close()


def test_btrfs_snapshot_answers_before_its_size_walk(tmp_path):
    """The walk of every entry (O(files)) is not on the request path: with
    the walk held, the snapshot is answered, usable, listed with size null;
    once let go, the row gets the real size. A daemon killed while a size
    is pending measures it at its next start."""
    gate = tmp_path / "go"
    fs, d = btrfs_daemon(tmp_path, gate=gate)
    try:
        sid = d.create()["id"]
        d.sh(sid, "head -c 300000 /dev/urandom > big && echo ok")
        s = snap(d, sid)
        assert s["size"] is None and s["backend"] == "btrfs", s
        assert row_size(d, s["id"]) is None
        assert d.get("/v1/snapshots").json()["snapshots"][0]["size"] is None
        # usable before it is measured
        c = d.create(image=f"snapshot:{s['id']}")["id"]
        assert d.sh(c, "stat -c %s big") == "300000\n"
        r = subprocess.run([MOAT, "snapshot", "ls"], capture_output=True, text=True, timeout=30,
                           env={**{k: v for k, v in os.environ.items() if k != "MOAT_API_TOKEN"},
                                "MOAT_URL": f"http://127.0.0.1:{d.port}"}, stdin=subprocess.DEVNULL)
        assert "measuring" in r.stdout, (r.stdout, r.stderr)
        gate.touch()
        assert wait_until(lambda: row_size(d, s["id"]) is not None, timeout=30), d.log()
        assert row_size(d, s["id"]) >= 300000
        assert d.get(f"/v1/snapshots/{s['id']}").json()["size"] == row_size(d, s["id"])
        # killed while one is pending: measured at the next start
        gate.unlink()
        s2 = snap(d, sid)
        assert s2["size"] is None
        d.proc.kill()
        d.proc.wait()
        d.env_extra = {}
        d.start()
        assert wait_until(lambda: row_size(d, s2["id"]) is not None, timeout=30), d.log()
        assert row_size(d, s2["id"]) >= 300000
        # deleted while pending: no row, no files, no complaint
        d.stop()
        d.env_extra = {"MOAT_TEST_SIZE_GATE": str(gate)}
        d.start()
        s3 = snap(d, d.create()["id"])
        assert d.delete(f"/v1/snapshots/{s3['id']}").status == 204
        gate.touch()
        time.sleep(0.5)
        assert s3["id"] not in os.listdir(d.data / "snapshots")
        assert f"size of snapshot {s3['id']}" not in d.log()
    finally:
        d.stop()
        fs.close()


def test_btrfs_snapshot_with_store_max_is_measured_at_once(tmp_path):
    gate = tmp_path / "go"  # never made: a walk left to the worker would hang
    fs, d = btrfs_daemon(tmp_path, "--store-max", "100M", gate=gate)
    try:
        sid = d.create()["id"]
        d.sh(sid, "head -c 300000 /dev/urandom > big && echo ok")
        s = snap(d, sid)
        assert s["size"] is not None and s["size"] >= 300000, s
        assert row_size(d, s["id"]) == s["size"]
    finally:
        d.stop()
        fs.close()
