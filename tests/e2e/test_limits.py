"""Resource limits for a normal user (issue 12, item 3) and every
subcommand's --help (item 9).

Without a delegated cgroup (the unprivileged pass): moat doctor says which
limits are unavailable, why and the fix; moat run refuses a limit naming it;
a served create asking for one is a 4xx naming limits.<name> that leaves
nothing behind; moat serve --allow-degraded runs without it and says so.
With delegation (the root pass sets it up for the unprivileged user, as
root would on cgroup v1: a child cgroup per controller, chowned): the
user's moat makes its cgroups below it and the limits hold for real."""
import os
import pwd
import shutil
import signal
import subprocess

import pytest

from conftest import IS_ROOT, MOAT, PY, SH, uid_tag, wait_until
from test_mcp import Mcp
from test_serve import Daemon, free_port, request

needs_root = pytest.mark.skipif(not IS_ROOT, reason="root sets up the delegation")
needs_user = pytest.mark.skipif(IS_ROOT, reason="only meaningful for an unprivileged caller")
V1 = not os.path.exists("/sys/fs/cgroup/cgroup.controllers")
CONTROLLERS = ("memory", "pids", "cpu")


def own_cgroup(controller, pid="self"):
    with open(f"/proc/{pid}/cgroup") as f:
        for line in f:
            _, ctrls, path = line.rstrip("\n").split(":", 2)
            if controller in ctrls.split(","):
                return path
    return None


def cg_dir(controller, path):
    return f"/sys/fs/cgroup/{controller}{path if path != '/' else ''}"


def moat_children(d):
    """moat-* cgroups directly below directory d."""
    try:
        return sorted(os.path.join(d, n) for n in os.listdir(d) if n.startswith("moat-"))
    except OSError:
        return []


def cgroups_of(pid):
    """moat-<pid>-* cgroups below this process's own cgroups (where moat
    process pid would make them; others' runs may share the parent)."""
    out = []
    for c in CONTROLLERS:
        own = own_cgroup(c)
        if own:
            out += [d for d in moat_children(cg_dir(c, own))
                    if os.path.basename(d).startswith(f"moat-{pid}-")]
    return out


# ---- --help of every command ---------------------------------------------------------

COMMANDS = [[], ["run"], ["serve"], ["doctor"], ["token"], ["create"], ["ls"], ["exec"],
            ["cp"], ["patch"], ["rm"], ["ps"], ["kill"], ["mcp"]]


@pytest.mark.parametrize("cmd", COMMANDS, ids=lambda c: c[0] if c else "moat")
def test_every_help_exits_0(cmd):
    r = subprocess.run([MOAT, *cmd, "--help"], capture_output=True, text=True, timeout=30,
                       stdin=subprocess.DEVNULL)
    assert r.returncode == 0, (cmd, r.stdout, r.stderr)
    assert "usage" in (r.stdout + r.stderr).lower(), (cmd, r.stdout, r.stderr)


# ---- without delegation (the unprivileged pass) ------------------------------------------

def test_doctor_limits_line():
    r = subprocess.run([MOAT, "doctor"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    usable = all(os.access(cg_dir(c, own_cgroup(c)), os.W_OK) for c in CONTROLLERS) if V1 \
        else None
    if usable is False:
        assert "ready: every layer is available" not in r.stdout, r.stdout
        assert "ready, without resource limits" in r.stdout, r.stdout
        for opt, c in (("--memory", "memory"), ("--pids", "pids"), ("--cpus", "cpu")):
            line = [ln for ln in r.stdout.splitlines() if ln.strip().startswith(opt + " ")]
            assert line and "unavailable" in line[0], r.stdout
            assert f"({c}) is owned by uid 0 (root), not delegated to uid {os.geteuid()}" \
                in line[0], line
            # the fix names things that exist
            assert "chown" in line[0] and "run moat as root" in line[0], line
            assert "--allow-degraded" in line[0], line
    elif usable:
        assert "ready: every layer is available" in r.stdout, r.stdout
        assert "unavailable" not in r.stdout, r.stdout


@needs_user
@pytest.mark.parametrize("opt,name", [(["--memory", "64M"], "memory"),
                                      (["--pids", "64"], "pids"), (["--cpus", "1"], "cpu")])
def test_run_limit_refused_names_reason_and_fix(tmp_path, opt, name):
    if os.access(cg_dir(name, own_cgroup(name)), os.W_OK):
        pytest.skip("this user has a delegated cgroup")
    ws = tmp_path / "ws"
    ws.mkdir()
    p = subprocess.Popen([MOAT, "run", "-w", str(ws), *opt, "--", SH, "-c", "echo ran > ran"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = p.communicate(timeout=60)
    r = subprocess.CompletedProcess(p.args, p.returncode, out, err)
    assert r.returncode == 125, r.stderr
    assert f"moat: {name} limit: cannot be enforced: cgroup " in r.stderr, r.stderr
    assert f"not delegated to uid {os.geteuid()}" in r.stderr, r.stderr
    assert "--allow-degraded overrides" in r.stderr, r.stderr
    assert os.listdir(ws) == []
    assert cgroups_of(p.pid) == []


@pytest.fixture
def plain_daemon():
    d = Daemon("--pool", "0")
    yield d
    d.stop()


@needs_user
@pytest.mark.parametrize("limits,field", [({"memory": "256M"}, "limits.memory"),
                                          ({"pids": 50}, "limits.pids"),
                                          ({"cpus": 1}, "limits.cpus"),
                                          ({"pids": 50, "disk": "8M"}, "limits.pids")])
def test_serve_create_limit_unavailable_is_422(plain_daemon, limits, field):
    if os.access(cg_dir("memory", own_cgroup("memory")), os.W_OK):
        pytest.skip("this user has a delegated cgroup")
    d = plain_daemon
    r = d.post("/v1/sandboxes", {"limits": limits})
    assert r.status == 422, r
    err = r.json()["error"]
    assert err["code"] == "limit_unavailable", err
    assert err["message"].startswith(field + ": this daemon cannot enforce it: cgroup "), err
    assert f"not delegated to uid {os.geteuid()}" in err["message"], err
    assert "moat serve with --allow-degraded" in err["message"], err
    # nothing was made: no sandbox, no directory, no cgroup
    r = d.get("/v1/sandboxes")
    assert r.status == 200 and r.json()["sandboxes"] == [], r
    sb = d.data / "sandboxes"
    assert not sb.exists() or os.listdir(sb) == []
    assert cgroups_of(d.pid) == []


@needs_user
def test_client_create_limit_unavailable(plain_daemon):
    if os.access(cg_dir("memory", own_cgroup("memory")), os.W_OK):
        pytest.skip("this user has a delegated cgroup")
    d = plain_daemon
    env = {k: v for k, v in os.environ.items() if k != "MOAT_API_TOKEN"}
    env["MOAT_URL"] = f"http://127.0.0.1:{d.port}"
    r = subprocess.run([MOAT, "create", "--pids", "50"], capture_output=True, text=True,
                       timeout=60, env=env)
    assert r.returncode != 0 and r.stdout == "", (r.stdout, r.stderr)
    assert "limits.pids: this daemon cannot enforce it" in r.stderr, r.stderr
    assert "without --pids" in r.stderr and "HTTP 422" in r.stderr, r.stderr
    assert d.get("/v1/sandboxes").json()["sandboxes"] == []


@needs_user
def test_serve_mcp_create_reports_degraded_default():
    """The MCP door's sandbox_create (which takes no limits) gets the
    operator's: under --allow-degraded one not enforced is reported."""
    if os.access(cg_dir("memory", own_cgroup("memory")), os.W_OK):
        pytest.skip("this user has a delegated cgroup")
    d = Daemon("--pool", "0", "--pids", "200", "--allow-degraded", token="lim-" + uid_tag())
    try:
        sc = Mcp(d).ok("sandbox_create", {})["structuredContent"]
        assert sc["degraded"] == ["limits.pids"], sc
        assert d.get(f"/v1/sandboxes/{sc['id']}").json()["degraded"] == ["limits.pids"]
    finally:
        d.stop()


@needs_user
def test_serve_default_limit_it_cannot_enforce(tmp_path):
    if os.access(cg_dir("memory", own_cgroup("memory")), os.W_OK):
        pytest.skip("this user has a delegated cgroup")
    r = subprocess.run([MOAT, "serve", "--data", str(tmp_path / "data"), "--listen",
                        "127.0.0.1:1", "--memory", "256M"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 125, r.stderr
    assert "--memory: this daemon cannot enforce it" in r.stderr, r.stderr
    assert "--allow-degraded" in r.stderr and "not delegated" in r.stderr, r.stderr


@needs_user
def test_serve_allow_degraded_runs_without_and_says_so():
    if os.access(cg_dir("memory", own_cgroup("memory")), os.W_OK):
        pytest.skip("this user has a delegated cgroup")
    d = Daemon("--pool", "0", "--memory", "256M", "--allow-degraded")
    try:
        assert "--memory: not enforced (--allow-degraded)" in d.log(), d.log()
        b = d.create()
        assert b["degraded"] == ["limits.memory"], b
        assert "memory" not in b["limits"], b
        b2 = d.create(limits={"pids": 50})
        assert b2["degraded"] == ["limits.memory", "limits.pids"], b2
        assert "pids" not in b2["limits"], b2
        assert d.get(f"/v1/sandboxes/{b2['id']}").json()["degraded"] == b2["degraded"]
        assert "limits.pids of a create: not enforced" in d.log(), d.log()
        out = d.ex(b2["id"], "echo hi")
        assert out["stdout"] == "hi\n", out
    finally:
        d.stop()


# ---- with delegation (root sets it up) ----------------------------------------------------

USER = "moate2e"
# runs until the test creates ./stop (no timing: the test waits for ./started)
STOPPABLE = ("import os, time\nopen('started', 'w').close()\n"
             "while not os.path.exists('stop'): time.sleep(0.05)\n")


def _user():
    try:
        return pwd.getpwnam(USER)
    except KeyError:
        pytest.skip(f"no user {USER} (tests/e2e/run.sh creates it)")


@pytest.fixture
def delegated():
    """A child cgroup of this process's own, per v1 controller moat uses,
    owned by the test user (as root delegates on cgroup v1); removed after."""
    if not V1:
        pytest.skip("the v1 delegation set-up (this machine's); v2 needs a delegated subtree")
    u = _user()
    name = f"e2edeleg-{uid_tag()}"
    dirs = {}
    try:
        for c in CONTROLLERS:
            d = os.path.join(cg_dir(c, own_cgroup(c)), name)
            os.mkdir(d)
            dirs[c] = d
            for f in ("", "cgroup.procs", "tasks"):
                os.chown(os.path.join(d, f) if f else d, u.pw_uid, u.pw_gid)
        yield u, dirs
    finally:
        for d in dirs.values():
            _kill_members(d)
            for m in moat_children(d):  # left by a failed run: still reported below
                wait_until(lambda m=m: not os.path.exists(m) or _try_rmdir(m), timeout=10)
            wait_until(lambda d=d: _try_rmdir(d), timeout=10)


def _kill_members(d, sig=9):
    """The test's own processes still in d (after a failed test: SIGKILL)."""
    try:
        pids = [int(x) for x in open(os.path.join(d, "cgroup.procs")).read().split()]
    except OSError:
        return
    for pid in pids:
        try:
            os.kill(pid, sig)
        except OSError:
            pass


def _try_rmdir(d):
    try:
        os.rmdir(d)
        return True
    except FileNotFoundError:
        return True
    except OSError:
        return False


def user_moat(u, dirs, ws, args):
    """Popen of `moat run ARGS` as user u, started inside dirs (it moves
    itself in: a process may enter a cgroup it owns)."""
    enter = "; ".join(f"echo $$ > {d}/cgroup.procs" for d in dirs.values())
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(ws), "USER": u.pw_name,
           "LANG": "C.UTF-8"}
    return subprocess.Popen(["runuser", "-u", u.pw_name, "--", "env", "-i",
                             *[f"{k}={v}" for k, v in env.items()], SH, "-c",
                             f'{enter}; exec "$0" "$@"', MOAT, "run", "-w", str(ws), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def user_ws(u):
    ws = f"/tmp/moat-e2e-deleg-{uid_tag()}"
    os.mkdir(ws, 0o755)
    os.chown(ws, u.pw_uid, u.pw_gid)
    return ws


@needs_root
def test_delegated_user_limits_are_enforced(delegated):
    u, dirs = delegated
    ws = user_ws(u)
    try:
        code = STOPPABLE
        p = user_moat(u, dirs, ws, ["--memory", "64M", "--pids", "40", "--cpus", "0.5",
                                    "--", PY, "-c", code])
        seen = wait_until(lambda: all(moat_children(d) for d in dirs.values()) and
                          os.path.exists(os.path.join(ws, "started")), timeout=30)
        if not seen:
            p.kill()
            out, err = p.communicate()
            pytest.fail(f"no cgroups below the delegated ones: {err}")
        kids = {c: moat_children(d) for c, d in dirs.items()}
        assert all(len(k) == 1 for k in kids.values()), kids
        rd = lambda c, f: open(os.path.join(kids[c][0], f)).read().strip()
        assert rd("memory", "memory.limit_in_bytes") == str(64 << 20)
        assert rd("pids", "pids.max") == "40"
        assert rd("cpu", "cpu.cfs_quota_us") == "50000"
        # made by the user's moat, below the delegated cgroup (never elsewhere)
        assert os.stat(kids["memory"][0]).st_uid == u.pw_uid
        open(os.path.join(ws, "stop"), "w").close()
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        assert wait_until(lambda: not any(moat_children(d) for d in dirs.values()),
                          timeout=15), kids
    finally:
        shutil.rmtree(ws, ignore_errors=True)


@needs_root
def test_delegated_user_memory_and_fork_bombs_fail(delegated):
    u, dirs = delegated
    ws = user_ws(u)
    try:
        p = user_moat(u, dirs, ws, ["--memory", "64M", "--", PY, "-c",
                                    "a = []\nwhile True: a.append(bytearray(10**7))\n"])
        out, err = p.communicate(timeout=120)
        assert p.returncode == 137 and "out of memory" in err, (p.returncode, err)
        bomb = ("import os, signal\nkids = []\nfor i in range(100):\n"
                "    try:\n        pid = os.fork()\n    except OSError:\n        break\n"
                "    if pid == 0:\n        signal.pause()\n        os._exit(0)\n"
                "    kids.append(pid)\n"
                "print('FORKS', len(kids), flush=True)\n"
                "for k in kids:\n    os.kill(k, 9)\n    os.waitpid(k, 0)\n")
        p = user_moat(u, dirs, ws, ["--pids", "30", "--", PY, "-c", bomb])
        out, err = p.communicate(timeout=120)
        assert "FORKS" in out, (out, err)
        forks = int(out.split("FORKS ")[1].split()[0])
        assert forks < 30, out
        assert not any(moat_children(d) for d in dirs.values())
    finally:
        shutil.rmtree(ws, ignore_errors=True)


@needs_root
def test_root_limits_below_its_own_child_cgroup():
    """Root started in a child cgroup: moat's cgroups go below that one."""
    if not V1:
        pytest.skip("v1 set-up")
    name = f"e2eroot-{uid_tag()}"
    dirs = {}
    ws = f"/tmp/moat-e2e-rootcg-{uid_tag()}"
    os.mkdir(ws)
    try:
        for c in CONTROLLERS:
            dirs[c] = os.path.join(cg_dir(c, own_cgroup(c)), name)
            os.mkdir(dirs[c])
        enter = "; ".join(f"echo $$ > {d}/cgroup.procs" for d in dirs.values())
        p = subprocess.Popen([SH, "-c", f'{enter}; exec "$0" "$@"', MOAT, "run", "-w", ws,
                              "--memory", "80M", "--pids", "33", "--", PY, "-c",
                              STOPPABLE],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        ok = wait_until(lambda: moat_children(dirs["memory"]) and moat_children(dirs["pids"])
                        and os.path.exists(os.path.join(ws, "started")), timeout=30)
        if not ok:
            p.kill()
            pytest.fail(p.communicate()[1])
        m = moat_children(dirs["memory"])[0]
        assert open(os.path.join(m, "memory.limit_in_bytes")).read().strip() == str(80 << 20)
        assert open(os.path.join(moat_children(dirs["pids"])[0], "pids.max")).read().strip() \
            == "33"
        open(os.path.join(ws, "stop"), "w").close()
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        assert wait_until(lambda: not any(moat_children(d) for d in dirs.values()),
                          timeout=15)
    finally:
        for d in dirs.values():
            wait_until(lambda d=d: _try_rmdir(d), timeout=10)
        shutil.rmtree(ws, ignore_errors=True)


@needs_root
def test_delegated_user_serve_limits(delegated):
    """The user's moat serve started in the delegated cgroups: a create with
    limits is 201, its cgroups are below the delegated ones with the values
    asked, and go with the sandbox."""
    u, dirs = delegated
    data = user_ws(u)
    port = free_port()
    enter = "; ".join(f"echo $$ > {d}/cgroup.procs" for d in dirs.values())
    log = open(data + ".log", "wb")  # beside the data: the user cannot write it
    p = subprocess.Popen(["runuser", "-u", u.pw_name, "--", "env", "-i",
                          "PATH=/usr/local/bin:/usr/bin:/bin", f"HOME={data}", SH, "-c",
                          f'{enter}; exec "$0" "$@"', MOAT, "serve", "--listen",
                          f"127.0.0.1:{port}", "--data", f"{data}/d", "--pool", "0",
                          "--pids", "300"],
                         stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    log.close()

    def up():
        try:
            return request(port, "GET", "/healthz", timeout=2).status == 200
        except OSError:
            return False
    try:
        assert wait_until(lambda: up() or p.poll() is not None, timeout=30) and up(), \
            open(log.name).read()
        r = request(port, "POST", "/v1/sandboxes", {"limits": {"memory": "200M"}})
        assert r.status == 201, r
        b = r.json()
        assert "degraded" not in b and b["limits"]["memory"] == 200 << 20, b
        kids = {c: moat_children(d) for c, d in dirs.items() if c != "cpu"}
        assert all(len(k) == 1 for k in kids.values()), kids
        assert open(os.path.join(kids["memory"][0], "memory.limit_in_bytes")).read().strip() \
            == str(200 << 20)
        assert open(os.path.join(kids["pids"][0], "pids.max")).read().strip() == "300"
        assert request(port, "DELETE", f"/v1/sandboxes/{b['id']}").status == 204
        assert wait_until(lambda: not any(moat_children(d) for d in dirs.values()),
                          timeout=15), kids
    finally:
        # the daemon is the only process left in the delegated cgroups
        for d in dirs.values():
            _kill_members(d, signal.SIGTERM)
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        shutil.rmtree(data, ignore_errors=True)
        try:
            os.unlink(log.name)
        except OSError:
            pass
