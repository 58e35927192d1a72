"""Pause, resume and hibernation (docs/API.md "Pause and resume"), checked
through the host: a counter's file in the workspace (read from the data
directory, not through the sandbox), the freezer's state file, the
sandbox's processes and cgroups, the store's row; and through /v1.

Plain pause needs a freezer cgroup per sandbox: the root pass has one
(v1 or v2), the unprivileged pass is refused with 422 pause_unavailable.
Hibernation ("release": true) stops the processes instead, so it needs no
freezer and runs in both passes."""
import os
import subprocess
import time
import uuid

import pytest

from conftest import MOAT, pids_with, wait_until
from test_serve import Daemon, assert_error, cgroup_dirs_of, gone, mounts, sbdir_removed

IS_ROOT = os.geteuid() == 0
# a shell counting into count; the marker finds it among the host's processes
COUNTER = ": {marker}; i=0; while :; do i=$((i+1)); echo $i > count.tmp && " \
          "mv count.tmp count; sleep 0.05; done"
# what a running counter surely gets past in this many seconds
QUIET_S = 1.5


@pytest.fixture
def d():
    dm = Daemon("--pool", "0")
    try:
        yield dm
    finally:
        dm.stop()


def count(d, sid):
    """The counter's value, read on the host; None before its first write."""
    try:
        t = (d.ws(sid) / "count").read_text().strip()
    except OSError:
        return None
    return int(t) if t else None


def start_counter(d, sid):
    """Start the counter; its marker."""
    marker = f"moatctr{uuid.uuid4().hex[:12]}"
    d.ex(sid, COUNTER.format(marker=marker), yield_ms=0)
    assert wait_until(lambda: (count(d, sid) or 0) >= 3, timeout=20), d.log()
    assert pids_with(marker)
    return marker


def advances(d, sid):
    c = count(d, sid)
    return wait_until(lambda: (count(d, sid) or 0) > c, timeout=20)


def freezer_state(pid):
    """THAWED / FROZEN (/ FREEZING) of pid's freezer cgroup, read on the host."""
    for c in cgroup_dirs_of(pid):
        if os.path.exists(f"{c}/freezer.state"):
            with open(f"{c}/freezer.state") as f:
                return f.read().strip()
        if os.path.exists(f"{c}/cgroup.freeze") and not c.endswith("/sys/fs/cgroup"):
            with open(f"{c}/cgroup.freeze") as f:
                return "FROZEN" if f.read().strip() == "1" else "THAWED"
    return None


def sandbox_pids(d, sid, marker=None):
    """Host pids of the sandbox: the agent its row names (while it is a
    moat-agent) and the processes carrying marker."""
    out = [pid for i, pid, _ in d.db_rows() if i == sid and pid > 1 and not gone(pid)]
    return out + (pids_with(marker) if marker else [])


def in_store(d, sid):
    """Its row is there (read on the host: a GET would count as activity)."""
    return any(i == sid for i, _, _ in d.db_rows())


def state(d, sid):
    r = d.get(f"/v1/sandboxes/{sid}")
    assert r.status == 200, r
    return r.json()


def pause(d, sid, **body):
    return d.post(f"/v1/sandboxes/{sid}/pause", body)


def resume(d, sid):
    return d.post(f"/v1/sandboxes/{sid}/resume", {})


def need_freezer(d, sid):
    """Plain pause: 200 as root; refused clearly (and nothing changed) when
    this daemon has no freezer (the unprivileged pass)."""
    r = pause(d, sid)
    if IS_ROOT:
        assert r.status == 200, (r, d.log())
        return r.json()
    assert_error(r, 422, "pause_unavailable")
    assert state(d, sid)["state"] == "running"
    pytest.skip("no freezer for the unprivileged daemon (422 asserted)")


def test_pause_freezes_resume_thaws(d):
    sid = d.create()["id"]
    start_counter(d, sid)
    agent = d.agent_pid(sid)
    p = need_freezer(d, sid)
    assert p["state"] == "paused" and p["released"] is False and p["processes"] == "frozen", p
    assert "paused_at" in p
    # on the host: its freezer says so, and the counter stands still
    assert freezer_state(agent) == "FROZEN"
    c = count(d, sid)
    time.sleep(QUIET_S)
    assert count(d, sid) == c
    assert not gone(agent)
    # every operation that needs its agent: 409 paused
    assert_error(d.post(f"/v1/sandboxes/{sid}/exec", {"cmd": "true"}), 409, "paused")
    assert_error(d.fget(sid, "count"), 409, "paused")
    assert_error(d.fput(sid, "x", b"x", expect=None), 409, "paused")
    assert not (d.ws(sid) / "x").exists()
    assert state(d, sid)["state"] == "paused"
    # pause of a paused one, release or not: 409 conflict
    assert_error(pause(d, sid), 409, "conflict")
    assert_error(pause(d, sid, release=True), 409, "conflict")
    r = resume(d, sid)
    assert r.status == 200, r
    assert r.json()["state"] == "running" and r.json()["processes"] == "thawed", r.json()
    assert freezer_state(agent) == "THAWED"
    assert advances(d, sid)
    assert d.sh(sid, "echo ok") == "ok\n"
    assert_error(resume(d, sid), 409, "conflict")


def test_paused_not_reaped_by_idle_timeout(d):
    a = d.create(idle_timeout_s=1)["id"]
    h = d.create(idle_timeout_s=1)["id"]
    assert pause(d, h, release=True).status == 200
    if IS_ROOT:
        assert pause(d, a).status == 200
    # a running one with the same timeout is reaped: the clock does run
    c = d.create(idle_timeout_s=1)["id"]
    assert wait_until(lambda: not in_store(d, c), timeout=30), d.log()
    ids = [a, h] if IS_ROOT else [h]
    for sid in ids:
        assert in_store(d, sid)
        assert state(d, sid)["state"] == "paused"
    # resumed, its idle clock runs again
    for sid in ids:
        assert resume(d, sid).status == 200
    for sid in ids:
        assert wait_until(lambda: not in_store(d, sid), timeout=30), d.log()


@pytest.mark.parametrize("how", ["term", "kill9"])
def test_restart_keeps_paused_and_frozen(d, how):
    sid = d.create()["id"]
    start_counter(d, sid)
    agent = d.agent_pid(sid)
    need_freezer(d, sid)
    c = count(d, sid)
    d.term() if how == "term" else d.kill9()
    d.start()
    s = state(d, sid)
    assert s["state"] == "paused" and s["released"] is False, s
    assert freezer_state(agent) == "FROZEN"
    time.sleep(QUIET_S)
    assert count(d, sid) == c
    assert_error(d.post(f"/v1/sandboxes/{sid}/exec", {"cmd": "true"}), 409, "paused")
    assert resume(d, sid).status == 200
    assert advances(d, sid)
    assert d.agent_pid(sid) == agent


def test_hibernate_and_resume(d):
    sid = d.create()["id"]
    d.sh(sid, "mkdir -p sub && echo kept > sub/f.txt")
    marker = start_counter(d, sid)
    agent = d.agent_pid(sid)
    cgs = cgroup_dirs_of(agent)
    r = pause(d, sid, release=True)
    assert r.status == 200, (r, d.log())
    h = r.json()
    assert h["state"] == "paused" and h["released"] is True and h["processes"] == "stopped", h
    # on the host: no process of it, no cgroup (so no memory held), its
    # files as they were, and no snapshot row or copy for it
    assert wait_until(lambda: gone(agent), timeout=20)
    assert sandbox_pids(d, sid, marker) == []
    assert [c for c in cgs if os.path.exists(c)] == []
    assert (d.ws(sid) / "sub" / "f.txt").read_text() == "kept\n"
    c = count(d, sid)
    assert c and c >= 3
    time.sleep(QUIET_S)
    assert count(d, sid) == c
    assert d.get("/v1/snapshots").json()["snapshots"] == []
    assert [x for x in d.db_rows() if x[0] == sid][0][2] == "hibernated"
    # paused for every door and every operation
    assert_error(d.post(f"/v1/sandboxes/{sid}/exec", {"cmd": "true"}), 409, "paused")
    assert_error(d.fget(sid, "sub/f.txt"), 409, "paused")
    assert_error(pause(d, sid, release=True), 409, "conflict")
    assert_error(pause(d, sid), 409, "conflict")
    listed = {b["id"]: b for b in d.get("/v1/sandboxes").json()["sandboxes"]}
    assert listed[sid]["state"] == "paused", listed
    # a restart keeps it hibernated (nothing started)
    d.term()
    d.start()
    s = state(d, sid)
    assert s["state"] == "paused" and s["released"] is True, s
    assert sandbox_pids(d, sid, marker) == []
    # resume: the same id, its files, its processes restarted
    r = resume(d, sid)
    assert r.status == 200, (r, d.log())
    w = r.json()
    assert w["id"] == sid and w["state"] == "running" and w["processes"] == "restarted", w
    assert "paused_at" not in w and "released" not in w, w
    new = d.agent_pid(sid)
    assert new and new != agent
    assert d.sh(sid, "cat sub/f.txt; cat count") == f"kept\n{c}\n"
    # the counter was a process: it did not come back
    assert pids_with(marker) == []
    time.sleep(QUIET_S)
    assert count(d, sid) == c
    assert [x for x in d.db_rows() if x[0] == sid][0][2] == "running"
    assert_error(resume(d, sid), 409, "conflict")
    # and it hibernates again
    assert pause(d, sid, release=True).status == 200
    assert resume(d, sid).status == 200
    assert d.sh(sid, "cat sub/f.txt") == "kept\n"


def test_hibernate_refused_for_memory_workspace(d):
    sid = d.create(limits={"disk": 16 << 20})["id"]
    d.sh(sid, "echo m > m.txt")
    agent = d.agent_pid(sid)
    assert_error(pause(d, sid, release=True), 409, "conflict", "limits.disk")
    # nothing changed
    assert state(d, sid)["state"] == "running"
    assert not gone(agent)
    assert d.sh(sid, "cat m.txt") == "m\n"


def test_hibernate_bad_body(d):
    sid = d.create()["id"]
    assert_error(pause(d, sid, release="yes"), 400)
    assert_error(pause(d, sid, memory=True), 400)
    assert state(d, sid)["state"] == "running"


def test_delete_hibernated(d):
    sid = d.create()["id"]
    d.sh(sid, "echo x > x.txt")
    assert pause(d, sid, release=True).status == 200
    d.rm(sid)
    assert d.get(f"/v1/sandboxes/{sid}").status == 404
    assert wait_until(lambda: sbdir_removed(d, sid), timeout=10)
    assert [x for x in d.db_rows() if x[0] == sid] == []
    d.term()
    d.start()
    assert d.get(f"/v1/sandboxes/{sid}").status == 404


def no_leftovers(d, sid):
    """Only the sandbox's own directory, no mount of the data dir on the
    host, no process of it."""
    names = sorted(os.listdir(d.data / "sandboxes"))
    assert names == [sid], names
    assert [m for m in mounts() if str(d.data) in m] == []


@pytest.mark.parametrize("step", ["hibernate-saved", "hibernate-stopped", "wake-spawned"])
def test_kill9_mid_hibernation(step):
    d = Daemon("--pool", "0", env_extra={"MOAT_TEST_CRASH_AT": step})
    try:
        sid = d.create()["id"]
        d.sh(sid, "echo kept > f.txt")
        marker = start_counter(d, sid)
        agent = d.agent_pid(sid)
        try:
            pause(d, sid, release=True)
            if step == "wake-spawned":
                resume(d, sid)
        except OSError:
            pass
        assert wait_until(lambda: d.proc.poll() is not None, timeout=20), d.log()
        assert f"MOAT_TEST_CRASH_AT={step}" in d.log()
        if step == "wake-spawned":
            # the crash came with a new agent running: the record says hibernated
            assert sandbox_pids(d, sid), "the crash came before the resume started it"
        else:
            assert pids_with(marker) or step == "hibernate-stopped"
        d.env_extra = {}
        d.start()
        # hibernated, whole: no process left of it, its files
        s = state(d, sid)
        assert s["state"] == "paused" and s["released"] is True, (s, d.log())
        assert wait_until(lambda: gone(agent) and sandbox_pids(d, sid, marker) == [],
                          timeout=20), (sandbox_pids(d, sid, marker), d.log())
        if step != "hibernate-stopped":
            assert "recorded as hibernated, but its processes run" in d.log()
        no_leftovers(d, sid)
        assert (d.ws(sid) / "f.txt").read_text() == "kept\n"
        r = resume(d, sid)
        assert r.status == 200, (r, d.log())
        assert d.sh(sid, "cat f.txt") == "kept\n"
    finally:
        d.stop()


def cli(d, *args):
    env = {k: v for k, v in os.environ.items() if k != "MOAT_API_TOKEN"}
    env["MOAT_URL"] = f"http://127.0.0.1:{d.port}"
    return subprocess.run([MOAT, *args], env=env, capture_output=True, timeout=60,
                          stdin=subprocess.DEVNULL)


def test_cli_pause_release_and_resume(d):
    sid = d.create()["id"]
    d.sh(sid, "echo kept > f.txt")
    agent = d.agent_pid(sid)
    r = cli(d, "pause", "--release", sid)
    assert r.returncode == 0, r
    s = state(d, sid)
    assert s["state"] == "paused" and s["released"] is True, s
    assert wait_until(lambda: gone(agent), timeout=20)
    r = cli(d, "pause", "--release", sid)
    assert r.returncode != 0 and b"already paused" in r.stderr, r
    r = cli(d, "resume", sid)
    assert r.returncode == 0, r
    assert b"hibernated" in r.stderr and b"did not survive" in r.stderr, r
    assert state(d, sid)["state"] == "running"
    assert d.sh(sid, "cat f.txt") == "kept\n"
    r = cli(d, "resume", sid)
    assert r.returncode != 0 and b"not paused" in r.stderr, r
    assert b"--release" in cli(d, "pause", "--help").stdout


def test_e2b_door_sees_a_hibernated_sandbox():
    """E2B's pause {"memory": false} is moat's release: the sandbox stays
    the door's (GET, list state=paused), and connect starts it again."""
    from test_e2b_api import TOKEN, api, create
    d = Daemon("--pool", "0", token=TOKEN)
    try:
        sid = create(d)["sandboxID"]
        agent = d.agent_pid(sid)
        r = api(d, "POST", f"/sandboxes/{sid}/pause", {"memory": False})
        assert r.status == 204, (r, d.log())
        assert wait_until(lambda: gone(agent), timeout=20)
        r = api(d, "GET", f"/sandboxes/{sid}")
        assert r.status == 200 and r.json()["state"] == "paused", r
        r = api(d, "GET", "/v2/sandboxes?state=paused")
        assert r.status == 200 and [x["sandboxID"] for x in r.json()] == [sid], r
        r = api(d, "POST", f"/sandboxes/{sid}/connect", {"timeout": 300})
        assert r.status == 201, (r, d.log())
        assert api(d, "GET", f"/sandboxes/{sid}").json()["state"] == "running"
        new = d.agent_pid(sid)
        assert new and new != agent
    finally:
        d.stop()


def test_hibernate_keeps_the_image_roots_changes():
    """A rootfs-image sandbox: its changes outside the workspace (fs/upper)
    are part of what a hibernation keeps."""
    from conftest import uid_tag
    from test_serve import make_rootfs
    d = Daemon("--pool", "0", allow=True)
    try:
        rf = d.allowed / f"rootfs-{uid_tag()}"
        make_rootfs(rf)
        sid = d.create(image=str(rf))["id"]
        d.sh(sid, "echo changed > /data/f; echo new > /etc/added; echo w > /workspace/w")
        assert pause(d, sid, release=True).status == 200
        assert (d.sbdir(sid) / "fs" / "upper" / "etc" / "added").read_text() == "new\n"
        # a start that fails (its image root is gone): it stays hibernated, whole
        away = rf.with_name(rf.name + ".away")
        rf.rename(away)
        assert_error(resume(d, sid), 500, "internal", "stays hibernated")
        s = state(d, sid)
        assert s["state"] == "paused" and s["released"] is True, s
        assert [x for x in d.db_rows() if x[0] == sid][0][2] == "hibernated"
        assert (d.sbdir(sid) / "fs" / "upper" / "etc" / "added").read_text() == "new\n"
        away.rename(rf)
        r = resume(d, sid)
        assert r.status == 200 and r.json()["processes"] == "restarted", (r, d.log())
        assert d.sh(sid, "read a < /data/f; read b < /etc/added; read c < /workspace/w; "
                         "echo $a $b $c") == "changed new w\n"
        assert (rf / "data" / "f").read_text() == "orig\n"
    finally:
        d.stop()


def test_snapshot_and_restore_of_a_hibernated_sandbox(d):
    """Its files are on disk: a snapshot takes them as they are, and a
    restore starts it (awake: no longer hibernated)."""
    sid = d.create()["id"]
    d.sh(sid, "echo one > f.txt")
    r = d.post(f"/v1/sandboxes/{sid}/snapshots", {})
    assert r.status == 201, r
    snap = r.json()["id"]
    d.sh(sid, "echo two > f.txt")
    assert pause(d, sid, release=True).status == 200
    r = d.post(f"/v1/sandboxes/{sid}/snapshots", {})
    assert r.status == 201, (r, d.log())
    later = r.json()["id"]
    assert (d.data / "snapshots" / later / "fs" / "workspace" / "f.txt").read_text() == "two\n"
    r = d.post(f"/v1/sandboxes/{sid}/restore", {"snapshot": snap})
    assert r.status == 200, (r, d.log())
    s = state(d, sid)
    assert s["state"] == "running" and "released" not in s, s
    assert [x for x in d.db_rows() if x[0] == sid][0][2] == "running"
    assert d.sh(sid, "cat f.txt") == "one\n"
    assert_error(resume(d, sid), 409, "conflict")
