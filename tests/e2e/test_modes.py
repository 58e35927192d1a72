"""Files moat makes on the host are its own (issue 9, finding 6).

`moat serve` keeps every sandbox's API `env` and manifest `environment`
values in its SQLite store. A data directory that already exists as 0755
(systemd's StateDirectory=, mkdir -p) used to stay so, with moat.db* 0644:
any local user read the values. Here the daemon starts on such a directory
(and on one holding an older 0644 moat.db) and another user must be unable
to read or list anything under it: as root that user is `nobody` (runuser),
unprivileged the modes are checked. A data directory of another user, or a
symlink, is refused naming the path; `moat run --net-log` writes a 0600
file and refuses a symlink planted at the name.
"""
import os
import sqlite3
import stat
import subprocess
from pathlib import Path

import pytest

from conftest import IS_ROOT, MOAT, moat_env, uid_tag
from test_serve import AGENT, SERVE, Daemon

pytestmark = pytest.mark.skipif(
    not (os.access(SERVE, os.X_OK) and os.access(AGENT, os.X_OK)),
    reason="moat-serve / moat-agent not built next to moat")

SECRET_ENV = "s3cret-env-value-6f1d"
SECRET_MANIFEST = "s3cret-manifest-value-9a2c"


class PreparedDaemon(Daemon):
    """A Daemon whose data directory is laid out by `prepare` first."""

    def __init__(self, prepare, *args, **kw):
        self._prepare = prepare
        super().__init__(*args, **kw)

    def start(self):
        if self.nstart == 0:
            self._prepare(self.data)
        super().start()


def as_nobody(*argv):
    return subprocess.run(["runuser", "-u", "nobody", "--", *argv],
                          capture_output=True, text=True, timeout=60)


def every_path(root):
    """root and everything under it, not following links; the workspace's
    content is the sandbox's own (its directory 0700 keeps others out)."""
    out = [root]
    for d, dirs, files in os.walk(root):
        if Path(d).name == "workspace":
            dirs[:] = []
            continue
        for n in dirs + files:
            out.append(Path(d) / n)
    return out


def assert_private(d):
    """Nothing under d is readable, listable or writable by another user."""
    data = d.data
    st = os.lstat(data)
    assert stat.S_IMODE(st.st_mode) == 0o700, oct(st.st_mode)
    paths = every_path(data)
    names = {p.name for p in paths}
    for want in ("moat.db", "moat.db-wal", "moat.db-shm", "sandboxes", "ctl.sock", "net.log"):
        assert want in names, (want, sorted(names))
    for p in paths:
        m = stat.S_IMODE(os.lstat(p).st_mode)
        if p.name != "workspace":
            assert m & 0o077 == 0, f"{p} is {oct(m)}"
    for p in paths:
        if p.name in ("moat.db", "moat.db-wal", "moat.db-shm", "moat.lock", "net.log"):
            assert stat.S_IMODE(os.lstat(p).st_mode) == 0o600, p
    if IS_ROOT:
        # another local user: nothing listed, nothing read, no value found
        for p in paths:
            if p.is_dir():
                r = as_nobody("ls", "-a", str(p))
            else:
                r = as_nobody("cat", str(p))
            assert r.returncode != 0 and not r.stdout, (p, r)
        r = as_nobody("grep", "-r", "-a", "-e", SECRET_ENV, "-e", SECRET_MANIFEST, str(data))
        assert SECRET_ENV not in r.stdout and SECRET_MANIFEST not in r.stdout, r
        assert r.returncode == 2, r


def create_secret_boxes(d):
    b = d.create(env={"API_KEY": SECRET_ENV},
                 manifest={"environment": {"DB_PASSWORD": SECRET_MANIFEST}, "entries": {}},
                 network={"allow": ["api.example.test"]})
    sid = b["id"]
    out = d.sh(sid, "echo $API_KEY $DB_PASSWORD")
    assert out.split() == [SECRET_ENV, SECRET_MANIFEST]
    # the values are in the store (what the modes protect)
    raw = b"".join(p.read_bytes() for p in d.data.glob("moat.db*"))
    assert SECRET_ENV.encode() in raw or SECRET_MANIFEST.encode() in raw
    return sid


def test_open_data_dir_is_made_private():
    def prepare(data):
        data.mkdir(mode=0o755)
        os.chmod(data, 0o755)

    d = PreparedDaemon(prepare, "--net-allow", "api.example.test", "--pool", "0")
    try:
        sid = create_secret_boxes(d)
        assert_private(d)
        # the sandbox itself still sees its usual modes (umask 022 inside)
        assert d.sh(sid, "umask; stat -c %a /workspace").split() == ["0022", "755"]
        # and the next start keeps it so
        d.term()
        d.start()
        assert sid in d.ids()
        assert_private(d)
    finally:
        d.stop()


def test_old_world_readable_store_is_tightened():
    def prepare(data):
        data.mkdir(mode=0o755)
        os.chmod(data, 0o755)
        db = data / "moat.db"
        con = sqlite3.connect(db)
        con.execute("PRAGMA journal_mode=WAL")
        con.execute("CREATE TABLE old (x)")
        con.commit()
        con.close()
        for n in ("moat.db", "moat.db-wal", "moat.db-shm"):
            p = data / n
            if not p.exists():
                p.touch()
            os.chmod(p, 0o644)
        (data / "sandboxes").mkdir(mode=0o755)
        os.chmod(data / "sandboxes", 0o755)

    d = PreparedDaemon(prepare, "--net-allow", "api.example.test", "--pool", "0")
    try:
        create_secret_boxes(d)
        assert_private(d)
    finally:
        d.stop()


def serve_once(data, timeout=60):
    return subprocess.run([MOAT, "serve", "--listen", "127.0.0.1:99999", "--data", str(data)],
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def scratch():
    base = Path(f"/tmp/moat-e2e-modes-{uid_tag()}")
    base.mkdir(mode=0o755)
    os.chmod(base, 0o755)
    yield base
    subprocess.run(["rm", "-rf", str(base)], check=False)


@pytest.mark.skipif(not IS_ROOT, reason="needs a directory owned by another user (root pass)")
def test_data_dir_of_another_user_is_refused(scratch):
    data = scratch / "data"
    data.mkdir(mode=0o755)
    os.chmod(data, 0o755)
    os.chown(data, 65534, 65534)
    r = serve_once(data)
    assert r.returncode == 125, r
    assert str(data) in r.stderr and "owned by uid 65534" in r.stderr, r.stderr
    # untouched: same mode, nothing made in it
    assert stat.S_IMODE(os.lstat(data).st_mode) == 0o755
    assert os.listdir(data) == []


def test_symlinked_data_dir_is_refused(scratch):
    target = scratch / "target"
    target.mkdir(mode=0o755)
    os.chmod(target, 0o755)
    link = scratch / "data"
    link.symlink_to(target)
    r = serve_once(link)
    assert r.returncode == 125, r
    assert str(link) in r.stderr and "symlink" in r.stderr, r.stderr
    assert stat.S_IMODE(os.lstat(target).st_mode) == 0o755
    assert os.listdir(target) == []


def moat_run(args, ws, umask=0o022, env=None):
    def pre():
        os.umask(umask)
    return subprocess.run([MOAT, "run", "-w", str(ws), *args], capture_output=True, text=True,
                          timeout=120, env=moat_env(env), preexec_fn=pre)


def test_run_net_log_is_private(scratch):
    ws = scratch / "ws"
    ws.mkdir()
    log = scratch / "net.jsonl"
    r = moat_run(["--allow-domain", "api.example.test", "--net-log", str(log), "--",
                  "/bin/sh", "-c", "exit 0"], ws)
    assert r.returncode == 0, r.stderr
    st = os.lstat(log)
    assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600, oct(st.st_mode)


def test_run_net_log_refuses_a_planted_symlink(scratch):
    ws = scratch / "ws"
    ws.mkdir()
    victim = scratch / "victim"
    victim.write_text("keep\n")
    log = scratch / "net.jsonl"
    log.symlink_to(victim)
    r = moat_run(["--allow-domain", "api.example.test", "--net-log", str(log), "--",
                  "/bin/sh", "-c", "echo ran"], ws)
    assert r.returncode == 125, r
    assert "ran" not in r.stdout
    assert str(log) in r.stderr and "symlink" in r.stderr, r.stderr
    assert victim.read_text() == "keep\n"


def test_run_ca_files_readable_by_the_sandbox_under_umask_077(scratch):
    # the gateway's CA (certificates only) is written 0644 whatever the
    # caller's umask: root runs become host uid 65534, which must read it
    ws = scratch / "ws"
    ws.mkdir()
    os.chmod(ws, 0o755)
    # (a secret makes the gateway intercept TLS, so it has a CA)
    r = moat_run(["--allow-domain", "api.example.test", "--secret", "MODES_TOKEN@api.example.test",
                  "--", "/bin/sh", "-c", 'cat "$SSL_CERT_FILE" "$NODE_EXTRA_CA_CERTS" | '
                                         'grep -c "BEGIN CERTIFICATE"; '
                                         'stat -c %a "$NODE_EXTRA_CA_CERTS"'],
                 ws, umask=0o077, env={"MODES_TOKEN": "t0ken"})
    assert r.returncode == 0, r.stderr
    lines = r.stdout.split()
    assert int(lines[0]) >= 2 and lines[-1] == "644", r.stdout


def test_store_survives_a_reader_on_the_host():
    """The store's files get their modes before SQLite opens them, never
    by a descriptor opened (and closed) afterwards: that close drops
    SQLite's POSIX locks, and a reader on the host (sqlite3) then resets
    the WAL index under the daemon, which died of SIGBUS at a later
    write (seen in test_fifty_sandboxes_in_parallel)."""
    import threading
    d = Daemon("--pool", "0")
    stop = threading.Event()

    def reader():
        while not stop.is_set():
            try:
                con = sqlite3.connect(f"file:{d.data / 'moat.db'}?mode=ro", uri=True, timeout=5)
                try:
                    con.execute("SELECT count(*) FROM sandboxes").fetchall()
                finally:
                    con.close()
            except sqlite3.Error:
                pass

    t = threading.Thread(target=reader)
    t.start()
    try:
        for i in range(40):
            sid = d.create(metadata={"pad": "x" * 3000})["id"]
            d.rm(sid)
            assert d.proc.poll() is None, d.log()
    finally:
        stop.set()
        t.join()
        d.stop()
