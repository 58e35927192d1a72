"""End-to-end tests of the API client (`moat create|ls|exec|cp|patch|ps|kill|rm`,
binary moat-client) against a real `moat serve` on a free loopback port.

The daemon and the client are found next to $MOAT_BIN (moat-serve,
moat-client, moat-agent); the module is skipped when they are not there.
Every command goes through `moat`, which execs moat-client, as a user would.
"""
import json
import os
import re
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from conftest import IS_ROOT, MOAT, force_rmtree, uid_tag, wait_until

BIN_DIR = os.path.dirname(MOAT)
CLIENT = os.path.join(BIN_DIR, "moat-client")
SERVE = os.path.join(BIN_DIR, "moat-serve")
TIMEOUT = 60

pytestmark = pytest.mark.skipif(
    not (os.access(CLIENT, os.X_OK) and os.access(SERVE, os.X_OK)),
    reason=f"moat-client / moat-serve not found next to {MOAT}")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def comm(pid):
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def healthy(url):
    try:
        with urllib.request.urlopen(url + "/healthz", timeout=2) as r:
            return r.status == 200
    except (OSError, urllib.error.URLError):
        return False


class Daemon:
    """`moat serve` on a free port with a private --data directory."""

    def __init__(self, token=None):
        self.dir = Path(f"/tmp/moat-e2e-client-{uid_tag()}")
        self.dir.mkdir(mode=0o755)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.token = token
        env = {k: v for k, v in os.environ.items() if k != "MOAT_API_TOKEN"}
        if token:
            env["MOAT_API_TOKEN"] = token
        self.log = open(self.dir / "serve.log", "wb")
        # No pool: pre-started sandboxes are not listed, so stop() could not
        # remove them, and they outlive the daemon by design.
        self.proc = subprocess.Popen(
            [MOAT, "serve", "--listen", f"127.0.0.1:{self.port}",
             "--data", str(self.dir / "data"), "--pool", "0"],
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT,
            env=env)
        if not wait_until(lambda: healthy(self.url) or self.proc.poll() is not None,
                          timeout=20) or not healthy(self.url):
            self.stop()
            pytest.fail(f"moat serve did not come up on {self.url}:\n{self.output()}")

    def output(self):
        try:
            return (self.dir / "serve.log").read_text(errors="replace")
        except OSError:
            return ""

    def agents(self):
        """Pids of the agents (one per sandbox) whose mounts come from our
        --data directory, whether or not the daemon is still their parent."""
        found = []
        for name in os.listdir("/proc"):
            if not name.isdigit() or comm(name) != "moat-agent":
                continue
            try:
                with open(f"/proc/{name}/mountinfo") as f:
                    if f" {self.dir}/" in f.read():
                        found.append(int(name))
            except OSError:
                pass
        return found

    def api(self, method, path):
        req = urllib.request.Request(self.url + path, method=method)
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.loads(r.read() or b"null")

    def stop(self):
        # Sandboxes outlive a stopped daemon (it restores them on restart):
        # remove whatever a failed test left before the data goes.
        try:
            for b in self.api("GET", "/v1/sandboxes")["sandboxes"]:
                self.api("DELETE", f"/v1/sandboxes/{b['id']}")
        except (OSError, ValueError, KeyError):
            pass
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        # Anything the API could not remove: by pid, never by name.
        for pid in self.agents():
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        self.log.close()
        force_rmtree(self.dir)


@pytest.fixture(scope="module")
def daemon():
    d = Daemon()
    yield d
    d.stop()


def moat(url, *args, input=None, token=None, timeout=TIMEOUT, env_extra=None):
    """Run `moat ARGS` as a client of url; bytes in, bytes out."""
    env = {k: v for k, v in os.environ.items() if k != "MOAT_API_TOKEN"}
    env["MOAT_URL"] = url
    if token:
        env["MOAT_API_TOKEN"] = token
    if env_extra:
        env.update(env_extra)
    return subprocess.run(
        [MOAT] + [str(a) for a in args], env=env, timeout=timeout,
        input=input, stdin=None if input is not None else subprocess.DEVNULL,
        capture_output=True)


@pytest.fixture
def cli(daemon):
    return lambda *a, **kw: moat(daemon.url, *a, **kw)


@pytest.fixture
def box(cli):
    """A fresh sandbox; removed afterwards."""
    r = cli("create", "--metadata", f"test={uid_tag()}")
    assert r.returncode == 0, r.stderr
    sid = r.stdout.decode().strip()
    yield sid
    cli("rm", sid)


def err(r):
    return r.stderr.decode(errors="replace")


def assert_api_error(r, cmd, code, status):
    assert r.returncode == 125, (r.returncode, err(r))
    e = err(r)
    assert e.startswith(f"moat {cmd}: "), e
    assert f"({code}, HTTP {status})" in e, e


# ---- create / ls ---------------------------------------------------------------

def test_create_prints_id_and_ls_lists_it(cli):
    tag = uid_tag()
    r = cli("create", "--metadata", f"owner={tag}", "--metadata", "kind=test")
    assert r.returncode == 0, err(r)
    assert re.fullmatch(rb"[a-z0-9]+\n", r.stdout), r.stdout
    sid = r.stdout.decode().strip()
    try:
        r = cli("ls")
        assert r.returncode == 0, err(r)
        lines = r.stdout.decode().splitlines()
        assert lines[0].split() == ["ID", "STATE", "CREATED", "METADATA"]
        row = [ln for ln in lines[1:] if ln.split()[0] == sid]
        assert len(row) == 1, lines
        assert row[0].split()[1] == "running"
        assert f"owner={tag}" in row[0] and "kind=test" in row[0]

        r = cli("ls", "--json")
        assert r.returncode == 0, err(r)
        boxes = {b["id"]: b for b in json.loads(r.stdout)["sandboxes"]}
        assert boxes[sid]["metadata"] == {"owner": tag, "kind": "test"}

        r = cli("ls", "--json", "--metadata", f"owner={tag}")
        assert [b["id"] for b in json.loads(r.stdout)["sandboxes"]] == [sid]
    finally:
        cli("rm", sid)


def ls_filtered(cli, key, val):
    """Ids listed by `moat ls --metadata KEY=VAL` among two fresh sandboxes
    labelled KEY=VAL and KEY=other, and the id of the first."""
    ids = []
    try:
        for v in (val, "other"):
            r = cli("create", "--metadata", f"{key}={v}")
            assert r.returncode == 0, err(r)
            ids.append(r.stdout.decode().strip())
        r = cli("ls", "--json", "--metadata", f"{key}={val}")
        assert r.returncode == 0, err(r)
        return [b["id"] for b in json.loads(r.stdout)["sandboxes"]], ids[0]
    finally:
        cli("rm", *ids)


def test_ls_metadata_value_is_url_encoded(cli):
    key = f"k{uid_tag()}"
    for val in ("v w", "x&y=z", "?q#f", "50%+é"):
        listed, want = ls_filtered(cli, key, val)
        assert listed == [want], val


def test_ls_metadata_key_is_url_encoded(cli):
    listed, want = ls_filtered(cli, f"k&{uid_tag()} x", "v")
    assert listed == [want]


def test_create_env_limits_and_manifest(cli, tmp_path):
    man = tmp_path / "manifest.json"
    man.write_text(json.dumps({
        "root": "/workspace",
        "entries": {"README.md": {"type": "file", "content": "hello manifest\n"},
                    "src": {"type": "dir", "children": {
                        "main.py": {"type": "file", "content": "print(1)\n"}}}},
        "environment": {"FROM_MANIFEST": "m"}}))
    r = cli("create", "--manifest", man, "--env", "FOO=bar baz")
    assert r.returncode == 0, err(r)
    sid = r.stdout.decode().strip()
    try:
        r = cli("exec", sid, "--", "sh", "-c",
                'cat README.md src/main.py; echo "$FOO|$FROM_MANIFEST"')
        assert r.returncode == 0, err(r)
        assert r.stdout == b"hello manifest\nprint(1)\nbar baz|m\n"
    finally:
        cli("rm", sid)


@pytest.mark.skipif(not IS_ROOT, reason="cgroup limits need root (or a delegated cgroup)")
def test_create_limits_and_timeouts(cli):
    r = cli("create", "--memory", "256M", "--pids", "64", "--cpus", "1.5",
            "--disk", "64M", "--timeout", "600", "--idle-timeout", "300")
    assert r.returncode == 0, err(r)
    sid = r.stdout.decode().strip()
    try:
        boxes = {b["id"]: b for b in json.loads(cli("ls", "--json").stdout)["sandboxes"]}
        b = boxes[sid]
        # (limits.quotas: every per-user ceiling, tests/e2e/test_quotas.py)
        assert {k: v for k, v in b["limits"].items() if k != "quotas"} == {
            "memory": 256 << 20, "pids": 64, "cpus": 1.5, "disk": 64 << 20}
        assert (b["timeout_s"], b["idle_timeout_s"]) == (600, 300)
        r = cli("exec", sid, "--", "df", "-k", "/workspace")
        assert r.returncode == 0, err(r)
        assert r.stdout.decode().splitlines()[1].split()[1] == str(64 << 10)
    finally:
        cli("rm", sid)


def test_create_invalid_value_is_server_error(cli):
    r = cli("create", "--memory", "lots")
    assert_api_error(r, "create", "invalid_request", 400)


def test_create_bad_manifest_file(cli, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    r = cli("create", "--manifest", bad)
    assert r.returncode == 125
    assert "--manifest" in err(r)


# ---- exec -------------------------------------------------------------------------

def test_exec_status_and_output(cli, box):
    script = "printf 'out\\n'; printf 'err\\n' >&2; exit 7"
    for extra in ([], ["--no-stream"]):
        r = cli("exec", *extra, box, "--", "sh", "-c", script)
        assert r.returncode == 7, err(r)
        assert r.stdout == b"out\n"
        assert r.stderr == b"err\n"


def test_exec_argv_is_not_a_shell_line(cli, box):
    r = cli("exec", box, "--", "printf", "%s|", "a b", "$HOME", "'q'", "*", "é")
    assert r.returncode == 0, err(r)
    assert r.stdout == "a b|$HOME|'q'|*|é|".encode()


def test_exec_without_double_dash(cli, box):
    r = cli("exec", box, "echo", "hi")
    assert r.returncode == 0, err(r)
    assert r.stdout == b"hi\n"


def test_exec_stdin_is_sent(cli, box):
    data = "line one\nline two é\n" * 1000
    r = cli("exec", box, "--", "cat", input=data.encode())
    assert r.returncode == 0, err(r)
    assert r.stdout == data.encode()


def test_exec_no_trailing_newline_and_empty_output(cli, box):
    r = cli("exec", box, "--", "printf", "no newline")
    assert (r.returncode, r.stdout, r.stderr) == (0, b"no newline", b"")
    r = cli("exec", box, "--", "true")
    assert (r.returncode, r.stdout, r.stderr) == (0, b"", b"")


def test_exec_cwd_and_env(cli, box):
    assert cli("exec", box, "--", "mkdir", "-p", "sub/dir").returncode == 0
    r = cli("exec", "--cwd", "/workspace/sub", "--env", "FOO=bar", box, "--",
            "sh", "-c", 'pwd; echo "$FOO"')
    assert r.returncode == 0, err(r)
    assert r.stdout == b"/workspace/sub\nbar\n"


def test_exec_signal_exit_status(cli, box):
    r = cli("exec", box, "--", "sh", "-c", "kill -TERM $$")
    assert r.returncode == 128 + signal.SIGTERM, err(r)


def test_exec_timeout(cli, box):
    t0 = time.monotonic()
    r = cli("exec", "--timeout-ms", "500", box, "--", "sleep", "30")
    assert time.monotonic() - t0 < 20
    assert r.returncode == 128 + signal.SIGKILL, err(r)
    assert "timed out" in err(r)


def test_exec_command_not_found(cli, box):
    r = cli("exec", box, "--", "/no/such/command")
    assert r.returncode == 127, err(r)


def test_exec_streams_output(daemon, box):
    """The first line shows up long before the command ends."""
    env = dict(os.environ, MOAT_URL=daemon.url)
    env.pop("MOAT_API_TOKEN", None)
    p = subprocess.Popen([MOAT, "exec", box, "--", "sh", "-c",
                          "echo first; sleep 4; echo second"],
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=env)
    try:
        t0 = time.monotonic()
        first = p.stdout.readline()
        elapsed = time.monotonic() - t0
        rest = p.stdout.read()
        assert p.wait(timeout=TIMEOUT) == 0, p.stderr.read()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        p.stdout.close()
        p.stderr.close()
    assert first == b"first\n"
    assert rest == b"second\n"
    assert elapsed < 3, f"first line took {elapsed:.1f}s: output is not streamed"


def test_exec_sandbox_removed_meanwhile(daemon, cli, box):
    env = dict(os.environ, MOAT_URL=daemon.url)
    env.pop("MOAT_API_TOKEN", None)
    p = subprocess.Popen([MOAT, "exec", box, "--", "sh", "-c", "echo start; sleep 30"],
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=env)
    try:
        assert p.stdout.readline() == b"start\n"
        assert cli("rm", box).returncode == 0
        assert p.wait(timeout=TIMEOUT) == 125
        assert p.stderr.read().decode().startswith("moat exec: ")
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        p.stdout.close()
        p.stderr.close()


# ---- cp -----------------------------------------------------------------------------

def test_cp_both_ways_byte_exact(cli, box, tmp_path):
    blob = bytes(range(256)) * 64 + os.urandom(100000)
    src = tmp_path / "blob.bin"
    src.write_bytes(blob)
    r = cli("cp", src, f"{box}:data/blob.bin")
    assert r.returncode == 0, err(r)
    assert r.stdout == b""

    back = tmp_path / "back.bin"
    r = cli("cp", f"{box}:data/blob.bin", back)
    assert r.returncode == 0, err(r)
    assert back.read_bytes() == blob

    # Absolute path inside the sandbox, to stdout.
    r = cli("cp", f"{box}:/workspace/data/blob.bin", "-")
    assert r.returncode == 0, err(r)
    assert r.stdout == blob

    # From stdin; the command inside sees it.
    r = cli("cp", "-", f"{box}:from-stdin.txt", input=b"via stdin\n")
    assert r.returncode == 0, err(r)
    r = cli("exec", box, "--", "cat", "/workspace/from-stdin.txt")
    assert r.stdout == b"via stdin\n"


def test_cp_large_file(cli, box, tmp_path):
    blob = os.urandom(8 << 20)
    src = tmp_path / "big"
    src.write_bytes(blob)
    assert cli("cp", src, f"{box}:big").returncode == 0
    r = cli("cp", f"{box}:big", "-")
    assert r.returncode == 0, err(r)
    assert r.stdout == blob


def test_cp_empty_file(cli, box, tmp_path):
    src = tmp_path / "empty"
    src.write_bytes(b"")
    assert cli("cp", src, f"{box}:empty").returncode == 0
    dst = tmp_path / "empty-back"
    r = cli("cp", f"{box}:empty", dst)
    assert r.returncode == 0, err(r)
    assert dst.read_bytes() == b""


def test_cp_directories_take_the_file_name(cli, box, tmp_path):
    src = tmp_path / "name.txt"
    src.write_bytes(b"named\n")
    # A sandbox path ending in / and an existing sandbox directory.
    assert cli("cp", src, f"{box}:d1/").returncode == 0
    assert cli("exec", box, "--", "mkdir", "d2").returncode == 0
    r = cli("cp", src, f"{box}:d2")
    assert r.returncode == 0, err(r)
    r = cli("exec", box, "--", "cat", "d1/name.txt", "d2/name.txt")
    assert r.stdout == b"named\nnamed\n", err(r)
    # A local directory as destination.
    out = tmp_path / "out"
    out.mkdir()
    r = cli("cp", f"{box}:d1/name.txt", out)
    assert r.returncode == 0, err(r)
    assert (out / "name.txt").read_bytes() == b"named\n"


def test_cp_errors(cli, box, tmp_path):
    dst = tmp_path / "never"
    r = cli("cp", f"{box}:no/such/file", dst)
    assert_api_error(r, "cp", "not_found", 404)
    assert not dst.exists(), "a failed download must not create the file"

    r = cli("cp", tmp_path, f"{box}:x")
    assert r.returncode == 125
    assert "is a directory" in err(r)

    r = cli("cp", tmp_path / "missing", f"{box}:x")
    assert r.returncode == 125
    assert "missing" in err(r)

    for args in (["a", "b"], [f"{box}:a", f"{box}:b"], ["only-one"]):
        r = cli("cp", *args)
        assert r.returncode == 125, args
        assert err(r).startswith("moat cp: "), err(r)


def test_cp_path_is_url_encoded(cli, box):
    name = "we ird/a&b?c=d#e%20é+.txt"
    r = cli("cp", "-", f"{box}:{name}", input=b"odd\n")
    assert r.returncode == 0, err(r)
    r = cli("exec", box, "--", "cat", name)
    assert (r.returncode, r.stdout) == (0, b"odd\n"), err(r)
    r = cli("cp", f"{box}:{name}", "-")
    assert (r.returncode, r.stdout) == (0, b"odd\n"), err(r)


def test_cp_refused_path(cli, box, tmp_path):
    src = tmp_path / "f"
    src.write_bytes(b"x")
    r = cli("cp", src, f"{box}:/proc/x")
    assert_api_error(r, "cp", "invalid_path", 400)


# ---- patch --------------------------------------------------------------------------

def test_patch_applies_and_lists_files(cli, box, tmp_path):
    r = cli("cp", "-", f"{box}:a.py", input=b"def f():\n    return 1\n")
    assert r.returncode == 0, err(r)
    patch = ("*** Begin Patch\n"
             "*** Update File: a.py\n"
             "@@\n"
             " def f():\n"
             "-    return 1\n"
             "+    return 2\n"
             "*** Add File: b.txt\n"
             "+new file\n"
             "*** End Patch\n")
    pf = tmp_path / "p.patch"
    pf.write_text(patch)
    r = cli("patch", box, pf)
    assert r.returncode == 0, err(r)
    lines = sorted(r.stdout.decode().splitlines())
    assert lines == ["add /workspace/b.txt", "update /workspace/a.py"]
    r = cli("exec", box, "--", "cat", "a.py", "b.txt")
    assert r.stdout == b"def f():\n    return 2\nnew file\n"


def test_patch_from_stdin_and_failure(cli, box):
    patch = b"*** Begin Patch\n*** Add File: s.txt\n+from stdin\n*** End Patch\n"
    r = cli("patch", box, "-", input=patch)
    assert r.returncode == 0, err(r)
    assert r.stdout == b"add /workspace/s.txt\n"

    bad = (b"*** Begin Patch\n*** Update File: s.txt\n@@\n-not there\n+x\n"
           b"*** Add File: other.txt\n+y\n*** End Patch\n")
    r = cli("patch", box, "-", input=bad)
    assert_api_error(r, "patch", "patch_failed", 422)
    r = cli("exec", box, "--", "sh", "-c", "cat s.txt; ls")
    assert r.stdout.startswith(b"from stdin\n")
    assert b"other.txt" not in r.stdout, "a failed patch changed files"


# ---- ps / kill ------------------------------------------------------------------------

def test_ps_and_kill(daemon, cli, box):
    env = dict(os.environ, MOAT_URL=daemon.url)
    env.pop("MOAT_API_TOKEN", None)
    marker = f"{4000 + int(uid_tag()[:4], 16) % 1000}"
    p = subprocess.Popen([MOAT, "exec", box, "--", "sleep", marker],
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=env)
    try:
        def find():
            r = cli("ps", "--json", box)
            assert r.returncode == 0, err(r)
            for pr in json.loads(r.stdout)["processes"]:
                if pr["running"] and marker in json.dumps(pr["cmd"]):
                    return pr["process_id"]
            return None
        pid = wait_until(find, timeout=20, step=0.2)
        assert pid, "the sleep never showed up in moat ps"
        r = cli("ps", box)
        assert r.returncode == 0
        assert r.stdout.decode().splitlines()[0].split() == ["PID", "RUNNING", "TTY", "CMD"]
        assert re.search(rf"^{pid}\s+yes\s+no\s+sleep {marker}$", r.stdout.decode(), re.M)

        r = cli("kill", box, pid, "TERM")
        assert r.returncode == 0, err(r)
        assert p.wait(timeout=TIMEOUT) == 128 + signal.SIGTERM
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        p.stdout.close()
        p.stderr.close()
    r = cli("kill", box, "999999")
    assert r.returncode == 125
    assert "HTTP 404" in err(r) or "HTTP 409" in err(r), err(r)
    r = cli("kill", box, "notapid")
    assert r.returncode == 125 and "process id" in err(r)


# ---- rm and unknown ids ---------------------------------------------------------------

def test_rm(cli):
    ids = []
    for _ in range(2):
        r = cli("create")
        assert r.returncode == 0, err(r)
        ids.append(r.stdout.decode().strip())
    r = cli("rm", *ids)
    assert r.returncode == 0, err(r)
    listed = [b["id"] for b in json.loads(cli("ls", "--json").stdout)["sandboxes"]]
    assert not set(ids) & set(listed)
    r = cli("rm", ids[0])
    assert_api_error(r, "rm", "not_found", 404)


def test_unknown_id(cli, tmp_path):
    sid = "nosuchbox0"
    f = tmp_path / "f"
    f.write_bytes(b"x")
    cases = [
        ("exec", [sid, "--", "true"]),
        ("cp", [f, f"{sid}:x"]),
        ("cp", [f"{sid}:x", tmp_path / "out"]),
        ("patch", [sid, f]),
        ("ps", [sid]),
        ("kill", [sid, "1"]),
        ("rm", [sid]),
    ]
    for cmd, args in cases:
        r = cli(cmd, *args)
        assert_api_error(r, cmd, "not_found", 404)
    assert not (tmp_path / "out").exists()


# ---- usage, help, server down, auth ------------------------------------------------------

@pytest.mark.parametrize("cmd", ["create", "ls", "exec", "cp", "patch", "ps", "kill", "rm"])
def test_help(cli, cmd):
    r = cli(cmd, "--help")
    assert r.returncode == 0, err(r)
    assert r.stdout.decode().startswith(f"usage: moat {cmd}")


@pytest.mark.parametrize("args,needle", [
    (["create", "--bogus"], "--bogus"),
    (["create", "--pids", "many"], "--pids"),
    (["create", "--memory"], "--memory"),
    (["create", "--env", "=x"], "--env"),
    (["create", "extra"], "extra"),
    (["ls", "--bogus"], "--bogus"),
    (["exec", "--timeout-ms", "soon", "abc", "--", "true"], "--timeout-ms"),
    (["exec", "--bogus", "abc", "--", "true"], "--bogus"),
    (["exec"], "sandbox id"),
    (["exec", "abc"], "command"),
    (["cp", "x"], "SRC"),
    (["patch", "abc"], "FILE"),
    (["kill", "abc"], "PID"),
    (["rm"], "id"),
])
def test_bad_usage(args, needle):
    # No server at all: usage errors are found before any request.
    r = moat(f"http://127.0.0.1:{free_port()}", *args)
    assert r.returncode == 125, err(r)
    assert err(r).startswith(f"moat {args[0]}: "), err(r)
    assert needle in err(r), err(r)
    assert "cannot reach" not in err(r)


@pytest.mark.parametrize("args", [["ls"], ["create"], ["exec", "abc", "--", "true"],
                                  ["rm", "abc"], ["cp", "abc:x", "-"]])
def test_server_down(args):
    url = f"http://127.0.0.1:{free_port()}"
    r = moat(url, *args)
    assert r.returncode == 125
    assert f"cannot reach moat serve at {url}" in err(r), err(r)


def test_bearer_token():
    d = Daemon(token="s3cret-" + uid_tag())
    try:
        r = moat(d.url, "ls")
        assert_api_error(r, "ls", "unauthorized", 401)
        r = moat(d.url, "ls", token="wrong")
        assert_api_error(r, "ls", "unauthorized", 401)
        r = moat(d.url, "create", token=d.token)
        assert r.returncode == 0, err(r)
        sid = r.stdout.decode().strip()
        r = moat(d.url, "exec", sid, "--", "echo", "ok", token=d.token)
        assert (r.returncode, r.stdout) == (0, b"ok\n"), err(r)
        assert moat(d.url, "rm", sid, token=d.token).returncode == 0
    finally:
        d.stop()


CLIENT_COMMANDS = ["create", "ls", "exec", "attach", "cp", "patch", "ps", "kill", "rm", "mcp"]


@pytest.mark.parametrize("cmd", CLIENT_COMMANDS)
def test_every_client_help_names_the_server_environment(cmd):
    """`moat CMD --help` of every API command says which variables pick the
    server and its token (issue 12: they were only in moat mcp's)."""
    r = subprocess.run([MOAT, cmd, "--help"], capture_output=True, text=True,
                       timeout=TIMEOUT, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r
    assert r.stdout.startswith(f"usage: moat {cmd}"), r.stdout
    for var in ("MOAT_URL", "MOAT_API_TOKEN"):
        assert var in r.stdout, f"moat {cmd} --help does not mention {var}:\n{r.stdout}"


def test_client_command_list_is_the_dispatchers():
    """CLIENT_COMMANDS above is every command moat hands to moat-client."""
    r = subprocess.run([MOAT, "--help"], capture_output=True, text=True, timeout=TIMEOUT)
    line = next(l for l in r.stdout.splitlines() if "API client" in l)
    listed = [w for w in re.split(r"[\s|]+", line.split("API client")[0]) if w]
    assert set(listed) | {"mcp"} == set(CLIENT_COMMANDS), line
