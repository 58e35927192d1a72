"""Shared fixtures and helpers for moat's end-to-end tests.

The suite runs against the binary named by $MOAT_BIN (run.sh sets it), once
as root and once as an unprivileged user. Every test builds what it needs
under a fresh /tmp/moat-e2e-<id>/ directory and removes it afterwards; the
few things planted elsewhere (a key in the caller's ~/.ssh, a file in host
/tmp, ...) carry a unique name and are removed by their fixtures.

Helpers here never run anything privileged on the host other than reading
/proc, and every sandboxed command is given an explicit workspace (-w), so
moat never drops placeholder files into a shared directory such as /tmp.
"""
import fcntl
import hashlib
import os
import pty
import pwd
import select
import shutil
import signal
import stat
import subprocess
import time
import tty
import uuid
from pathlib import Path

import pytest

IS_ROOT = os.geteuid() == 0
DEFAULT_TIMEOUT = 30
PY = "/usr/bin/python3"
SH = "/bin/sh"

# The names moat write-protects inside every writable root (see policy.c).
MANDATORY_DENY = [
    ".bashrc", ".bash_profile", ".bash_login", ".profile", ".bash_logout",
    ".bash_aliases", ".zshrc", ".zprofile", ".zshenv", ".zlogin",
    ".gitconfig", ".gitmodules", ".git/hooks/", ".git/config",
    ".git/config.worktree", ".git/modules/", ".git/worktrees/",
    ".mcp.json", ".vscode/", ".idea/", ".claude/commands/", ".claude/agents/",
    ".claude/hooks/", ".claude/settings.json", ".claude/settings.local.json",
    ".ripgreprc",
]
# Secrets hidden inside every home directory.
HIDDEN_IN_HOME = [".ssh", ".aws", ".gnupg", ".config/gcloud", ".kube",
                  ".docker", ".netrc"]


def _moat_bin():
    b = os.environ.get("MOAT_BIN")
    if not b:
        b = str(Path(__file__).resolve().parents[2] / "build" / "san" / "moat")
    return os.path.abspath(b)


MOAT = _moat_bin()


def uid_tag():
    return uuid.uuid4().hex[:12]


def real_home():
    h = os.environ.get("HOME") or pwd.getpwuid(os.getuid()).pw_dir
    return os.path.realpath(h)


# ---- filesystem helpers ----------------------------------------------------

def force_rmtree(path):
    """rm -rf that also copes with the mode-000 directories moat leaves
    behind when it has a bug (the owner may chmod them back)."""
    path = str(path)
    if not os.path.lexists(path):
        return

    def onerror(func, p, exc):
        try:
            parent = os.path.dirname(p)
            os.chmod(parent, 0o700)
            if os.path.isdir(p) and not os.path.islink(p):
                os.chmod(p, 0o700)
            func(p)
        except OSError:
            pass

    for root, dirs, _ in os.walk(path, topdown=True, onerror=lambda e: None):
        for d in dirs:
            full = os.path.join(root, d)
            try:
                if not os.path.islink(full):
                    os.chmod(full, 0o700)
            except OSError:
                pass
    try:
        if not os.path.islink(path):
            os.chmod(path, 0o700)
    except OSError:
        pass
    shutil.rmtree(path, onerror=onerror)
    if os.path.lexists(path):
        # one more pass after permissions were fixed
        shutil.rmtree(path, ignore_errors=True)


def host_lexists(path):
    """lexists() that does not answer False when a mode-000 directory (a
    placeholder moat left behind) hides the answer: such ancestors, owned
    by us, are opened up first. os.path.lexists would say "absent"."""
    path = os.path.abspath(str(path))
    parts = path.split("/")
    for i in range(2, len(parts)):
        anc = "/".join(parts[:i])
        try:
            st = os.lstat(anc)
        except (FileNotFoundError, NotADirectoryError):
            return False
        if stat.S_ISDIR(st.st_mode) and not os.access(anc, os.X_OK):
            os.chmod(anc, stat.S_IMODE(st.st_mode) | 0o700)
    try:
        os.lstat(path)
        return True
    except (FileNotFoundError, NotADirectoryError):
        return False


def sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def snapshot(root):
    """Everything under root, without following symlinks: type, mode,
    owner, size, content hash or link target. mtimes are left out (moat
    creating and removing placeholders touches directory mtimes)."""
    root = str(root)
    out = {}

    def entry(p):
        st = os.lstat(p)
        m = st.st_mode
        if stat.S_ISLNK(m):
            extra = ("link", os.readlink(p))
        elif stat.S_ISREG(m):
            try:
                extra = ("file", sha(p))
            except OSError as e:
                extra = ("file-unreadable", e.errno)
        elif stat.S_ISDIR(m):
            extra = ("dir",)
        else:
            extra = ("other", stat.S_IFMT(m), st.st_rdev)
        return (stat.S_IMODE(m), st.st_uid, st.st_gid,
                st.st_size if stat.S_ISREG(m) else 0) + extra

    def walk(d, rel):
        try:
            names = sorted(os.listdir(d))
        except OSError as e:
            out[rel + "/<unreadable>"] = e.errno
            return
        for n in names:
            p = os.path.join(d, n)
            r = f"{rel}/{n}" if rel else n
            out[r] = entry(p)
            if stat.S_ISDIR(os.lstat(p).st_mode):
                walk(p, r)

    walk(root, "")
    return out


def diff_snap(before, after):
    lines = []
    for k in sorted(set(before) | set(after)):
        if before.get(k) != after.get(k):
            lines.append(f"{k}: {before.get(k)!r} -> {after.get(k)!r}")
    return "\n".join(lines)


# ---- process helpers -------------------------------------------------------

def proc_cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def pids_with(marker, exclude=()):
    """Host pids whose command line contains marker."""
    me = os.getpid()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        pid = int(name)
        if pid == me or pid in exclude:
            continue
        if marker in proc_cmdline(pid):
            found.append(pid)
    return found


def sleep_started(marker, timeout=10.0):
    """Wait until `sleep MARKER` has been exec'd in a sandbox (by then
    every layer is in place: the supervisor forks the command last).
    Returns the host pids carrying the marker, moat's own excepted."""
    def ready():
        return any(proc_cmdline(p).startswith(f"sleep {marker}")
                   for p in pids_with(marker))
    if not wait_until(ready, timeout=timeout):
        return []
    return pids_with(marker)


def proc_status(pid):
    d = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                k, _, v = line.partition(":")
                d[k] = v.strip()
    except OSError:
        pass
    return d


def alive(pid):
    st = proc_status(pid).get("State", "")
    return bool(st) and not st.startswith("Z")


def kill_pids(pids):
    for p in pids:
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass


def wait_until(pred, timeout=5.0, step=0.05):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = pred()
        if v:
            return v
        time.sleep(step)
    return pred()


def sleep_marker():
    """A unique `sleep` argument: long, and findable in /proc/*/cmdline."""
    return f"4000.{uuid.uuid4().int % 10**9:09d}"


def own_cgroup(controller):
    with open("/proc/self/cgroup") as f:
        for line in f:
            _, ctrls, path = line.rstrip("\n").split(":", 2)
            if controller in ctrls.split(","):
                return path
    return None


def moat_cgroup_dirs(moat_pid):
    """cgroup directories moat (host pid moat_pid) created, any controller."""
    found = []
    for ctl in ("memory", "pids", "cpu"):
        own = own_cgroup(ctl)
        base = f"/sys/fs/cgroup/{ctl}{own if own and own != '/' else ''}"
        try:
            for n in os.listdir(base):
                if n.startswith(f"moat-{moat_pid}-"):
                    found.append(os.path.join(base, n))
        except OSError:
            pass
    # cgroup v2
    own = own_cgroup("")
    if os.path.exists("/sys/fs/cgroup/cgroup.controllers") and own:
        base = f"/sys/fs/cgroup{own if own != '/' else ''}"
        try:
            for n in os.listdir(base):
                if n.startswith(f"moat-{moat_pid}-"):
                    found.append(os.path.join(base, n))
        except OSError:
            pass
    return found


def moat_env(extra=None, drop=()):
    e = dict(os.environ)
    for k in drop:
        e.pop(k, None)
    if extra:
        e.update(extra)
    return e


# ---- running moat ------------------------------------------------------------

class Runner:
    """run(args) -> CompletedProcess of `moat run ARGS` (cwd = workspace).

    run.sh(script, *opts) and run.py(code, *opts) wrap a shell script or a
    Python program: `moat run -w WS OPTS -- /bin/sh -c SCRIPT`."""

    def __init__(self, ws):
        self.ws = str(ws)

    def __call__(self, args, *, cwd=None, input=None, env=None,
                 timeout=DEFAULT_TIMEOUT, pass_fds=(), raw=False):
        cmd = [MOAT, "run"] + [str(a) for a in args]
        kw = dict(cwd=str(cwd or self.ws), input=input, capture_output=True,
                  timeout=timeout, env=env if env is not None else moat_env(),
                  pass_fds=pass_fds)
        if not raw:
            kw.update(text=True, encoding="utf-8", errors="replace")
        return subprocess.run(cmd, **kw)

    def sh(self, script, *opts, ws=None, **kw):
        return self(["-w", ws or self.ws, *opts, "--", SH, "-c", script], **kw)

    def py(self, code, *opts, ws=None, **kw):
        return self(["-w", ws or self.ws, *opts, "--", PY, "-c", code], **kw)

    def popen(self, args, *, cwd=None, env=None, **kw):
        cmd = [MOAT, "run"] + [str(a) for a in args]
        kw.setdefault("stdout", subprocess.PIPE)
        kw.setdefault("stderr", subprocess.PIPE)
        return subprocess.Popen(cmd, cwd=str(cwd or self.ws),
                                env=env if env is not None else moat_env(), **kw)


def run_in_pty(argv, *, cwd, timeout=DEFAULT_TIMEOUT, ctty=False):
    """Run argv with stdin/stdout/stderr on a fresh pty in raw mode.
    ctty: make the pty the controlling terminal of argv's session (as a
    shell would); otherwise it is nobody's controlling terminal, so the
    sandbox could claim it. Returns (exit code, output bytes, bytes left
    pending on the terminal's input side after the run)."""
    master, slave = pty.openpty()
    tty.setraw(slave)

    def pre():
        os.setsid()
        if ctty:
            fcntl.ioctl(slave, __import__("termios").TIOCSCTTY, 0)

    p = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave,
                         cwd=str(cwd), preexec_fn=pre, env=moat_env())
    out = b""
    end = time.monotonic() + timeout
    while True:
        r, _, _ = select.select([master], [], [], 0.05)
        if r:
            try:
                d = os.read(master, 65536)
            except OSError:
                d = b""
            out += d
        if p.poll() is not None and not r:
            break
        if time.monotonic() > end:
            p.kill()
            p.wait()
            break
    # drain what is left
    while select.select([master], [], [], 0.1)[0]:
        try:
            d = os.read(master, 65536)
        except OSError:
            break
        if not d:
            break
        out += d
    fl = fcntl.fcntl(slave, fcntl.F_GETFL)
    fcntl.fcntl(slave, fcntl.F_SETFL, fl | os.O_NONBLOCK)
    try:
        pending = os.read(slave, 4096)
    except (BlockingIOError, OSError):
        pending = b""
    os.close(slave)
    os.close(master)
    return p.returncode, out, pending


# ---- fixtures ------------------------------------------------------------------

@pytest.fixture(scope="session")
def moat():
    if not os.access(MOAT, os.X_OK):
        pytest.exit(f"moat binary {MOAT} is not executable (set MOAT_BIN)", 2)
    return MOAT


@pytest.fixture(scope="session")
def is_root():
    return IS_ROOT


@pytest.fixture
def base(moat):
    """A fresh private directory /tmp/moat-e2e-<id> for one test."""
    d = Path(f"/tmp/moat-e2e-{uid_tag()}")
    d.mkdir(mode=0o755)
    os.chmod(d, 0o755)
    yield d
    force_rmtree(d)


@pytest.fixture
def ws(base):
    """The workspace: base/ws, owned by the user running the tests."""
    w = base / "ws"
    w.mkdir()
    os.chmod(w, 0o755)
    return w


@pytest.fixture
def outside(base):
    """A host directory next to the workspace, not shown by default."""
    o = base / "outside"
    o.mkdir()
    os.chmod(o, 0o755)
    return o


@pytest.fixture
def foreign_ws(base):
    """Root runs only: a workspace owned by another uid (4242)."""
    if not IS_ROOT:
        pytest.skip("needs root to chown a workspace to another uid")
    w = base / "ws4242"
    w.mkdir()
    os.chown(w, 4242, 4242)
    os.chmod(w, 0o755)
    return w


@pytest.fixture
def run(ws):
    return Runner(ws)


@pytest.fixture
def fake_home(base):
    """A home directory of our own (HOME for moat), world-readable, with a
    secret planted in every always-hidden location."""
    h = base / "home"
    h.mkdir()
    os.chmod(h, 0o755)
    secrets = {}
    for name in HIDDEN_IN_HOME:
        tok = f"FAKEHOME-SECRET-{uid_tag()}"
        p = h / name
        if name == ".netrc":
            p.write_text(tok + "\n")
            os.chmod(p, 0o644)
            secrets[name] = (p, tok)
            continue
        p.mkdir(parents=True)
        for d in [p] + list(p.parents):
            if d == h:
                break
            os.chmod(d, 0o755)
        f = p / "credentials"
        f.write_text(tok + "\n")
        os.chmod(f, 0o644)
        secrets[name] = (f, tok)
    return h, secrets


@pytest.fixture
def real_home_secret():
    """A uniquely named private key in the caller's real ~/.ssh (for root:
    /root/.ssh). Removed afterwards, with ~/.ssh if we created it."""
    home = real_home()
    sshdir = os.path.join(home, ".ssh")
    created = not os.path.lexists(sshdir)
    if created:
        os.mkdir(sshdir, 0o700)
    name = f"id_rsa_moat_e2e_{uid_tag()}"
    path = os.path.join(sshdir, name)
    tok = f"-----BEGIN OPENSSH PRIVATE KEY----- MOAT-E2E-{uid_tag()}"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, (tok + "\n").encode())
    os.close(fd)
    yield path, tok
    try:
        os.unlink(path)
    except OSError:
        pass
    if created:
        try:
            os.rmdir(sshdir)
        except OSError:
            pass


@pytest.fixture
def host_sleep():
    """A host process (not in any sandbox) the sandbox must not touch."""
    m = sleep_marker()
    p = subprocess.Popen(["sleep", m])
    yield p
    if p.poll() is None:
        p.kill()
    p.wait()


@pytest.fixture
def reap_marker():
    """Collects markers; after the test, kills (by pid) any host process
    still carrying one so that a failing test leaves nothing running."""
    markers = []
    yield markers
    for m in markers:
        kill_pids(pids_with(m))


def pytest_report_header(config):
    return [f"moat: {MOAT}", f"euid: {os.geteuid()}  HOME: {real_home()}"]


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "slow: long-running test (deselect with -m 'not slow')")
