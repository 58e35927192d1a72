"""No orphan sandboxes: a `moat serve` killed (SIGKILL) at any step of a
create leaves, once restarted, every sandbox either known (listed, usable)
or gone, with no process, mount, cgroup directory or sandbox directory left.

MOAT_TEST_CRASH_AT=<step> makes moat-serve raise SIGKILL on itself at that
step of every create (docs/ARCHITECTURE.md lists the steps):
  dir      sandboxes/<id>/ made, nothing recorded yet
  record   the child cloned, its "creating" row written, no go-ahead yet
  go       the go-ahead given, the child setting itself up
  spawned  the child exec'd the agent, the row still says "creating"
  saved    the row says "running", the client not answered
Processes are found by their executable (this run's moat-serve and
moat-agent copies) and by their cgroup (the daemons' moat-<pid>-* ones).
"""
import os
import signal
import socket
import sqlite3
import subprocess

import pytest

from conftest import MOAT, kill_pids, moat_cgroup_dirs, proc_status, wait_until
from test_serve import AGENT, SERVE, Daemon, free_port, mounts

pytestmark = pytest.mark.skipif(
    not (os.access(SERVE, os.X_OK) and os.access(AGENT, os.X_OK)),
    reason=f"moat-serve / moat-agent not found next to {MOAT}")

STEPS = ["dir", "record", "go", "spawned", "saved"]
CRASH_TIMEOUT = 60


@pytest.fixture(scope="module")
def limit_args():
    """Daemon-wide limits, so that every sandbox (pooled ones too) gets
    cgroups whose leftovers the test can see; none where the daemon cannot
    make cgroups (rootless without delegation)."""
    d = Daemon("--pool", "0")
    try:
        ok = d.limits_ok()
    finally:
        stop(d)
    return ["--memory", "256M", "--pids", "256"] if ok else []


def start_crashing(d, step, args):
    """Start d's daemon with the crash hook (it may die before it answers)."""
    env = {k: v for k, v in os.environ.items() if k != "MOAT_API_TOKEN"}
    env["MOAT_TEST_CRASH_AT"] = step
    d.port = free_port()
    d.nstart += 1
    d.logpath = d.base / f"serve-{d.nstart}.log"
    with open(d.logpath, "wb") as log:
        d.proc = subprocess.Popen(
            [MOAT, "serve", "--listen", f"127.0.0.1:{d.port}", "--data", str(d.data), *args],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env)
    d.pids.append(d.proc.pid)


def assert_crashed_at(d, step):
    try:
        rc = d.proc.wait(timeout=CRASH_TIMEOUT)
    except subprocess.TimeoutExpired:
        d.proc.kill()
        d.proc.wait()
        raise AssertionError(f"moat serve did not reach step {step!r}:\n{d.log()}")
    assert rc == -signal.SIGKILL, (rc, d.log())
    assert f"MOAT_TEST_CRASH_AT={step}:" in d.log(), d.log()


def exe(pid):
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return ""


def in_cgroups(pid, daemon_pids):
    try:
        with open(f"/proc/{pid}/cgroup") as f:
            text = f.read()
    except OSError:
        return False
    return any(f"/moat-{p}-" in text for p in daemon_pids)


def ours(d):
    """Live processes of this test's sandboxes: the agents and the children
    being set up (this run's binaries, not the running daemon), anything in
    their cgroups, and anything in the pid namespace of one of them."""
    mine = {os.path.realpath(AGENT), os.path.realpath(SERVE)}
    running = d.proc.pid if d.proc and d.proc.poll() is None else None
    found, nss = set(), set()
    procs = [int(n) for n in os.listdir("/proc") if n.isdigit()]
    for pid in procs:
        if pid == running or proc_status(pid).get("State", "Z").startswith("Z"):
            continue
        if exe(pid) in mine or in_cgroups(pid, d.pids):
            found.add(pid)
            try:
                nss.add(os.readlink(f"/proc/{pid}/ns/pid"))
            except OSError:
                pass
    nss.discard(os.readlink("/proc/self/ns/pid"))
    for pid in procs:
        try:
            if os.readlink(f"/proc/{pid}/ns/pid") in nss and \
                    not proc_status(pid).get("State", "Z").startswith("Z"):
                found.add(pid)
        except OSError:
            pass
    return found


def leftovers(d):
    """What is left on the host of sandboxes the daemon does not list."""
    left = []
    sb = d.data / "sandboxes"
    if sb.is_dir():
        left += [f"directory sandboxes/{n}" for n in sorted(os.listdir(sb))]
    left += [f"process {p} ({exe(p) or '?'})" for p in sorted(ours(d))]
    for p in d.pids:
        left += [f"cgroup {c}" for c in moat_cgroup_dirs(p)]
    left += [f"mount {m}" for m in mounts() if str(d.data) in m]
    return left


def stop(d):
    """Stop d; kill first what a failed check left (an orphan would be
    counted against the next test)."""
    try:
        left = ours(d)
        kill_pids(left)
        wait_until(lambda: not (ours(d) & left), timeout=10)
    finally:
        d.stop()


def check_known_or_gone(d):
    """Every listed sandbox works; deleting them leaves nothing at all."""
    for sid in d.ids():
        assert d.ex(sid, ["true"]).get("exit_code") == 0, sid
        d.rm(sid)
    # the daemon's own clean-up runs before its answers; a process the
    # kernel is still tearing down may take a moment to leave
    wait_until(lambda: not leftovers(d), timeout=10)
    assert leftovers(d) == [], (leftovers(d), d.log())


@pytest.mark.parametrize("step", STEPS)
def test_killed_during_a_create(step, limit_args):
    d = Daemon("--pool", "0", *limit_args)
    try:
        assert d.term() == 0, d.log()
        start_crashing(d, step, ["--pool", "0", *limit_args])
        up = wait_until(lambda: d.healthy() or d.proc.poll() is not None, timeout=30)
        assert up and d.healthy(), d.log()
        try:
            r = d.post("/v1/sandboxes", {"metadata": {"step": step}}, timeout=CRASH_TIMEOUT)
            raise AssertionError(f"the create was answered: {r}")
        except OSError:
            pass  # the daemon died under the request
        assert_crashed_at(d, step)
        d.start()
        if step == "saved":
            assert len(d.ids()) == 1, d.log()  # recorded: it is known
        check_known_or_gone(d)
    finally:
        stop(d)


@pytest.mark.parametrize("step", ["record", "spawned", "saved"])
def test_killed_during_a_pool_refill(step, limit_args):
    """The refill that fills the pool at start, killed: its sandbox is
    removed at the next start (a pooled sandbox is never adopted)."""
    d = Daemon("--pool", "0", *limit_args)
    try:
        assert d.term() == 0, d.log()
        start_crashing(d, step, ["--pool", "1", *limit_args])
        assert_crashed_at(d, step)
        d.start()
        assert d.ids() == [], d.log()
        check_known_or_gone(d)
    finally:
        stop(d)


def test_client_gone_mid_create_leaves_nothing(limit_args):
    """A client that hangs up while its sandbox is set up: the sandbox is
    deleted, nothing leaks, the daemon serves on."""
    d = Daemon("--pool", "0", *limit_args)
    try:
        for _ in range(5):
            s = socket.create_connection(("127.0.0.1", d.port))
            body = b'{"metadata":{"x":"gone"}}'
            s.sendall(b"POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nContent-Type: "
                      b"application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
            s.close()
        assert wait_until(lambda: not leftovers(d), timeout=20), (leftovers(d), d.log())
        assert d.ids() == []
        sid = d.create()["id"]
        assert d.ex(sid, ["true"]).get("exit_code") == 0
        d.rm(sid)
        assert d.term() == 0, d.log()
        assert leftovers(d) == [], leftovers(d)
    finally:
        stop(d)


def test_directory_sweep_spares_unreadable_records():
    """A directory with no record goes at start; one whose record exists
    but cannot be read stays (its sandbox may run), and a record without a
    usable id stops the sweep altogether, said in the log."""
    d = Daemon("--pool", "0")
    try:
        a = d.create()["id"]
        b = d.create()["id"]
        assert d.term() == 0, d.log()
        stray = d.data / "sandboxes" / "strayxyz"
        (stray / "workspace").mkdir(parents=True)
        con = sqlite3.connect(str(d.data / "moat.db"), timeout=5)
        try:
            con.execute("UPDATE sandboxes SET spec = '{not json' WHERE id = ?", (b,))
            con.commit()
        finally:
            con.close()
        d.start()
        assert d.ids() == [a]
        assert not stray.exists(), d.log()
        assert "sandboxes/strayxyz has no record" in d.log(), d.log()
        assert (d.data / "sandboxes" / b).is_dir()
        # a row whose id names no directory we could match: sweep nothing
        assert d.term() == 0, d.log()
        (stray / "workspace").mkdir(parents=True)
        con = sqlite3.connect(str(d.data / "moat.db"), timeout=5)
        try:
            con.execute("INSERT INTO sandboxes VALUES ('../Bad', 0, '{}', 0, 0, '[]', 'running')")
            con.commit()
        finally:
            con.close()
        d.start()
        assert stray.is_dir(), d.log()
        assert "no directory under sandboxes/ is swept" in d.log(), d.log()
        assert (d.data / "sandboxes" / b).is_dir()
        assert d.ids() == [a]
        d.rm(a)
    finally:
        stop(d)
