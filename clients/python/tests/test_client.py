"""The Python client against a real `moat serve` (fixtures in conftest.py)."""

from __future__ import annotations

import io
import json
import re
import socket
import struct
import tarfile
import time
import uuid
import zlib

import pytest

from moat import (Client, Conflict, ExecResult, FileInfo, Forbidden,
                  InvalidPath, InvalidRequest, IsDirectory, LimitReached,
                  MoatConnectionError, MoatError, NotFound, PatchFailed,
                  Process, Sandbox, TooLarge, Unauthorized,
                  UnsupportedMediaType)
from v1api import api


def png(width: int, height: int) -> bytes:
    """A valid RGB PNG, made with zlib and struct."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))
    rows = []
    for y in range(height):
        row = b"".join(bytes((x * 40 % 256, y * 90 % 256, 128)) for x in range(width))
        rows.append(b"\x00" + row)  # filter type 0, then RGB pixels
    raw = b"".join(rows)
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr)
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def tar_of(files: dict, gz: bool = False) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz" if gz else "w") as tf:
        for name, data in files.items():
            if data is None:
                ti = tarfile.TarInfo(name)
                ti.type = tarfile.DIRTYPE
                ti.mode = 0o755
                tf.addfile(ti)
                continue
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            ti.mode = 0o644
            ti.mtime = int(time.time())
            tf.addfile(ti, io.BytesIO(data))
    return buf.getvalue()


def raw_get(url: str, path: str, token: str | None = None):
    return api(url, "GET", path, token=token)


def closed_port() -> int:
    """A loopback port nobody listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- service -------------------------------------------------------------------

def test_health_and_metrics(url):
    c = Client(url)
    assert c.health()["ok"] is True
    with Sandbox.create(url=url) as sb:
        assert sb.exec("true").exit_code == 0
    m = c.metrics()
    assert "moat_execs_total" in m
    assert "moat_http_requests_total" in m


def test_url_from_env(daemon, monkeypatch):
    monkeypatch.setenv("MOAT_URL", daemon.url)
    assert Client().url == daemon.url
    tag = uuid.uuid4().hex[:8]
    with Sandbox.create(metadata={"envurl": tag}) as sb:
        assert [s.id for s in Sandbox.list(metadata={"envurl": tag})] == [sb.id]


def test_connection_failure_names_url():
    url = "http://127.0.0.1:%d" % closed_port()
    with pytest.raises(MoatConnectionError) as ei:
        Sandbox.list(url=url)
    assert isinstance(ei.value, MoatError)
    assert ei.value.status is None
    assert url in str(ei.value)


# -- sandboxes -----------------------------------------------------------------

def test_create_get_list_delete(url):
    tag = uuid.uuid4().hex
    sb = Sandbox.create(url=url, metadata={"suite": tag, "who": "me"},
                        limits={"memory": "512M", "pids": 128},
                        timeout_s=600, idle_timeout_s=300)
    try:
        assert re.fullmatch(r"[a-z0-9]+", sb.id)
        assert sb.state == "running"
        assert sb.workspace == "/workspace"
        assert sb.metadata == {"suite": tag, "who": "me"}
        assert sb.info["image"] == "host"
        assert sb.info["timeout_s"] == 600
        assert sb.info["idle_timeout_s"] == 300
        assert "created_at" in sb.info

        other = Sandbox.create(url=url, metadata={"suite": tag, "who": "you"})
        try:
            ids = {s.id for s in Sandbox.list(url=url, metadata={"suite": tag})}
            assert ids == {sb.id, other.id}
            mine = Sandbox.list(url=url, metadata={"suite": tag, "who": "me"})
            assert [s.id for s in mine] == [sb.id]
            assert Sandbox.list(url=url, metadata={"suite": "nope-" + tag}) == []
            assert sb.id in {s.id for s in Sandbox.list(url=url)}
        finally:
            other.delete()

        again = Sandbox.connect(sb.id, url=url)
        assert again.id == sb.id
        assert again.metadata["who"] == "me"
        assert again.refresh()["state"] == "running"
    finally:
        sb.delete()
    with pytest.raises(NotFound) as ei:
        Sandbox.connect(sb.id, url=url)
    assert ei.value.status == 404 and ei.value.code == "not_found"
    assert sb.id not in {s.id for s in Sandbox.list(url=url)}


def test_context_manager_deletes(url):
    with Sandbox.create(url=url) as sb:
        sid = sb.id
        assert sb.exec("echo in").stdout == "in\n"
        assert raw_get(url, "/v1/sandboxes/" + sid)[0] == 200
    status, body = raw_get(url, "/v1/sandboxes/" + sid)
    assert status == 404
    assert json.loads(body)["error"]["code"] == "not_found"


def test_context_manager_deletes_on_exception(url):
    with pytest.raises(RuntimeError):
        with Sandbox.create(url=url) as sb:
            sid = sb.id
            raise RuntimeError("boom")
    assert raw_get(url, "/v1/sandboxes/" + sid)[0] == 404


def test_delete_inside_with_is_fine(url):
    with Sandbox.create(url=url) as sb:
        sb.delete()
        with pytest.raises(NotFound):
            sb.refresh()


def test_manifest_env_and_environment(url):
    manifest = {
        "root": "/workspace",
        "entries": {
            "README.md": {"type": "file", "content": "hello\n"},
            "src": {"type": "dir", "children": {
                "main.py": {"type": "file", "content": "print(1)\n"}}},
        },
        "environment": {"FROM_MANIFEST": "m"},
    }
    with Sandbox.create(url=url, manifest=manifest,
                        env={"FROM_ENV": "e"}) as sb:
        assert sb.files.read("README.md") == b"hello\n"
        assert sb.files.read("/workspace/src/main.py") == b"print(1)\n"
        assert sb.files.stat("src").type == "dir"
        r = sb.exec('echo "$FROM_ENV $FROM_MANIFEST"')
        assert r.stdout == "e m\n"
        r = sb.exec("python3 src/main.py")
        assert (r.exit_code, r.stdout) == (0, "1\n")


def test_bad_manifest_names_entry(url):
    manifest = {"root": "/workspace",
                "entries": {"src": {"type": "dir", "children": {
                    "x": {"type": "bogus"}}}}}
    with pytest.raises(InvalidRequest) as ei:
        Sandbox.create(url=url, manifest=manifest)
    assert ei.value.status == 400
    assert "manifest.entries.src.children.x" in ei.value.message


def test_local_file_outside_allowed_is_forbidden(url):
    manifest = {"root": "/workspace",
                "entries": {"p": {"type": "local_file", "src": "/etc/hostname"}}}
    with pytest.raises(Forbidden) as ei:
        Sandbox.create(url=url, manifest=manifest)
    assert (ei.value.status, ei.value.code) == (403, "forbidden")


def test_create_bad_value(url):
    with pytest.raises(InvalidRequest) as ei:
        Sandbox.create(url=url, limits={"memory": "lots"})
    assert (ei.value.status, ei.value.code) == (400, "invalid_request")


def test_unknown_field_rejected(url):
    c = Client(url)
    with pytest.raises(InvalidRequest) as ei:
        c.request_json("POST", "/v1/sandboxes", {"bogus_field": 1})
    assert "bogus_field" in ei.value.message


def test_unknown_route_and_method(url):
    c = Client(url)
    with pytest.raises(NotFound):
        c.request("GET", "/v1/nothing-here")
    with pytest.raises(MoatError) as ei:
        c.request("PUT", "/v1/sandboxes")
    assert (ei.value.status, ei.value.code) == (405, "method_not_allowed")


def test_operations_on_missing_sandbox(url):
    ghost = Sandbox(Client(url), {"id": "doesnotexist0"})
    for call in (lambda: ghost.exec("true"), lambda: ghost.files.read("x"),
                 ghost.processes, ghost.download_archive, ghost.delete):
        with pytest.raises(NotFound) as ei:
            call()
        assert ei.value.code == "not_found"


# -- exec ----------------------------------------------------------------------

def test_exec_string(sb):
    r = sb.exec("echo hi")
    assert isinstance(r, ExecResult)
    assert (r.exit_code, r.stdout, r.stderr) == (0, "hi\n", "")
    assert r.timed_out is False and r.truncated is False
    assert isinstance(r.duration_ms, int) and 0 <= r.duration_ms < 30000
    assert r.ok


def test_exec_argv_no_shell(sb):
    r = sb.exec(["printf", "%s|", "a b", "$HOME", "c;d"])
    assert r.stdout == "a b|$HOME|c;d|"


def test_exec_exit_code_and_stderr(sb):
    r = sb.exec("echo out; echo err >&2; exit 3")
    assert (r.exit_code, r.stdout, r.stderr) == (3, "out\n", "err\n")
    assert not r.ok


def test_exec_signal_exit(sb):
    r = sb.exec("kill -TERM $$")
    assert r.exit_code == 128 + 15


def test_exec_cwd_env_stdin(sb):
    sb.files.mkdir("sub/dir")
    assert sb.exec("pwd", cwd="/workspace/sub/dir").stdout == "/workspace/sub/dir\n"
    assert sb.exec("pwd", cwd="sub").stdout.strip() == "/workspace/sub"
    assert sb.exec("pwd").stdout == "/workspace\n"
    assert sb.exec('echo "$FOO-$BAR"', env={"FOO": "x", "BAR": "y z"}).stdout == "x-y z\n"
    assert sb.exec("cat", stdin="line1\nline2\n").stdout == "line1\nline2\n"
    assert sb.exec("wc -c", stdin=b"12345").stdout.strip() == "5"
    # stdin is closed after the data: cat ends rather than hangs
    assert sb.exec("cat", timeout_ms=10000).timed_out is False


def test_exec_timeout(sb):
    t0 = time.monotonic()
    r = sb.exec("echo started; sleep 30", timeout_ms=500)
    assert time.monotonic() - t0 < 15
    assert r.timed_out is True
    assert r.exit_code == 128 + 9 and r.signal == 9
    assert r.stdout == "started\n"


def test_exec_truncated(sb):
    r = sb.exec("head -c 100000 /dev/zero | tr '\\0' a; echo done >&2",
                max_output_bytes=1000)
    assert r.truncated is True
    assert 0 < len(r.stdout) <= 1000 and set(r.stdout) == {"a"}
    assert r.stderr == "done\n"
    assert r.exit_code == 0


def test_exec_invalid_utf8_replaced(sb):
    r = sb.exec(["printf", "a\\377b"])
    assert r.stdout == "a\ufffdb"


def test_exec_tty(sb):
    r = sb.exec("test -t 1 && echo tty || echo notty", tty=True)
    assert r.exit_code == 0 and "tty" in r.stdout and "notty" not in r.stdout
    r = sb.exec("test -t 1 && echo tty || echo notty")
    assert r.stdout == "notty\n"


def test_exec_tty_size(sb):
    r = sb.exec("stty size", tty=True, cols=100, rows=30)
    assert r.exit_code == 0 and r.stdout.split() == ["30", "100"]


def test_exec_missing_command(sb):
    r = sb.exec(["definitely-not-a-command-xyz"])
    assert r.exit_code == 127


def test_exec_bad_request(sb):
    with pytest.raises(InvalidRequest):
        sb.exec("true", timeout_ms=-5)


def test_exec_on_deleted_sandbox(url):
    sb = Sandbox.create(url=url)
    sb.delete()
    with pytest.raises(NotFound):
        sb.exec("true")


# -- processes -----------------------------------------------------------------

def test_yield_finishes_quickly_returns_result(sb):
    r = sb.exec("echo quick", yield_ms=5000)
    assert isinstance(r, ExecResult)
    assert (r.exit_code, r.stdout) == (0, "quick\n")


def test_yield_and_write_stdin_with_cat(sb):
    p = sb.exec("cat", yield_ms=200)
    assert isinstance(p, Process)
    assert p.running and isinstance(p.process_id, int)
    listed = {q["process_id"]: q for q in sb.processes()}
    assert p.process_id in listed
    assert listed[p.process_id]["running"] is True
    assert listed[p.process_id]["tty"] is False
    assert "cat" in " ".join(listed[p.process_id]["cmd"])

    out = p.write_stdin("hello\n", yield_ms=1000)
    assert out.running is True
    assert out.stdout == "hello\n"
    out = p.write_stdin(b"second\n", yield_ms=1000)
    assert out.stdout == "second\n"
    # a handle from the listing reaches the same process
    other = sb.process(p.process_id)
    assert other.write_stdin("via handle\n", yield_ms=1000).stdout == "via handle\n"

    out = p.write_stdin("last", yield_ms=3000, close=True)
    if out.running:
        res = p.wait(timeout=20)
    else:
        res = out.result
    assert res.exit_code == 0
    assert p.stdout == "hello\nsecond\nlast"
    assert res.stdout == "hello\nsecond\nlast"
    assert other.stdout == "via handle\n"
    # the ended process's record is dropped once its exit was reported
    assert p.process_id not in {q["process_id"] for q in sb.processes()}


def test_interactive_shell_and_kill(sb):
    p = sb.exec("sh", yield_ms=100)
    assert isinstance(p, Process)
    out = p.write_stdin("echo $((6*7))\n", yield_ms=1000)
    assert out.stdout == "42\n"
    out = p.write_stdin("echo oops >&2\n", yield_ms=1000)
    assert out.stderr == "oops\n" and out.stdout == ""
    p.kill(signal="TERM")
    res = p.wait(timeout=20)
    assert res.exit_code == 128 + 15 and res.signal == 15
    assert not p.running


def test_python_repl(sb):
    p = sb.exec(["python3", "-i", "-q", "-u"], yield_ms=300)
    assert isinstance(p, Process)
    text = ""
    out = p.write_stdin("print(6*7)\n", yield_ms=1000)
    text += out.stdout
    deadline = time.monotonic() + 10
    while "42" not in text and time.monotonic() < deadline:
        text += p.read(yield_ms=500).stdout
    assert "42" in text
    p.close_stdin()
    assert p.wait(timeout=20).exit_code == 0


def test_kill_default_and_wait(sb):
    p = sb.exec("sleep 60", yield_ms=50)
    assert isinstance(p, Process)
    sb.kill(p.process_id)
    res = p.wait(timeout=20)
    assert res.exit_code == 128 + 9


def test_kill_by_number(sb):
    p = sb.exec("sleep 60", yield_ms=50)
    p.kill(signal=2)
    assert p.wait(timeout=20).exit_code == 128 + 2


def test_wait_timeout_raises(sb):
    p = sb.exec("sleep 60", yield_ms=50)
    with pytest.raises(TimeoutError):
        p.wait(timeout=0.5, poll_ms=200)
    p.kill()
    p.wait(timeout=20)


def test_process_not_found(sb):
    with pytest.raises(NotFound):
        sb.kill(999999)
    with pytest.raises(NotFound):
        sb.process(999999).write_stdin("x")


def test_stdin_after_exit_reported(sb):
    p = sb.exec("read x; echo got $x", yield_ms=100)
    assert isinstance(p, Process)
    out = p.write_stdin("v\n", yield_ms=3000)
    if out.running:
        p.wait(timeout=20)
    assert p.result.exit_code == 0 and p.stdout == "got v\n"
    with pytest.raises((NotFound, Conflict)):
        p.write_stdin("more\n")


def test_delete_sandbox_kills_processes(url):
    sb = Sandbox.create(url=url)
    p = sb.exec("sleep 600", yield_ms=50)
    assert isinstance(p, Process)
    t0 = time.monotonic()
    sb.delete()
    assert time.monotonic() - t0 < 20
    with pytest.raises(NotFound):
        p.read()


# -- streaming -----------------------------------------------------------------

def test_exec_stream(sb):
    events = list(sb.exec_stream("echo a; echo b >&2; echo c; exit 4"))
    assert events[-1].type == "exit"
    res = events[-1].data
    assert isinstance(res, ExecResult) and res.exit_code == 4
    out = "".join(d for t, d in events if t == "stdout")
    err = "".join(d for t, d in events if t == "stderr")
    assert (out, err) == ("a\nc\n", "b\n")
    assert (res.stdout, res.stderr) == ("a\nc\n", "b\n")
    assert {t for t, _ in events} <= {"stdout", "stderr", "exit"}


def test_exec_stream_is_incremental(sb):
    t0 = time.monotonic()
    first = None
    kinds = []
    for ev in sb.exec_stream("echo one; sleep 2; echo two"):
        if first is None and ev.type == "stdout":
            first = time.monotonic() - t0
        kinds.append(ev)
    total = time.monotonic() - t0
    assert total >= 2
    assert first is not None and first < total - 1.0, (first, total)
    assert "".join(d for t, d in kinds if t == "stdout") == "one\ntwo\n"
    assert kinds[-1] == ("exit", kinds[-1].data) and kinds[-1].data.exit_code == 0


def test_exec_stream_timeout_and_stdin(sb):
    events = list(sb.exec_stream("cat; sleep 30", stdin="fed\n", timeout_ms=500))
    assert ("stdout", "fed\n") in events or \
        "".join(d for t, d in events if t == "stdout") == "fed\n"
    assert events[-1].data.timed_out is True


def test_exec_stream_abandoned(sb):
    stream = sb.exec_stream("while :; do echo tick; sleep 0.05; done",
                            timeout_ms=20000)
    first = next(stream)
    assert first == ("stdout", "tick\n")
    stream.close()  # hang up mid-stream
    assert sb.exec("echo still here").stdout == "still here\n"
    # docs/API.md does not say whether a hang-up ends the command; whatever
    # is left is listed and can be killed.
    for p in sb.processes():
        if p["running"]:
            sb.kill(p["process_id"])
    deadline = time.monotonic() + 10
    while any(p["running"] for p in sb.processes()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(p["running"] for p in sb.processes())


def test_exec_stream_error(url):
    ghost = Sandbox(Client(url), {"id": "doesnotexist0"})
    with pytest.raises(NotFound):
        list(ghost.exec_stream("true"))


# -- files ---------------------------------------------------------------------

def test_files_roundtrip_text_and_binary(sb):
    sb.files.write("hello.txt", "héllo\n")
    assert sb.files.read("hello.txt") == "héllo\n".encode()
    assert sb.files.read_text("/workspace/hello.txt") == "héllo\n"
    blob = bytes(range(256)) * 64 + b"\x00\xff\x00"
    sb.files.write("bin/blob.dat", blob)
    assert sb.files.read("bin/blob.dat") == blob
    assert sb.exec("wc -c < bin/blob.dat").stdout.strip() == str(len(blob))
    sb.files.write("empty", b"")
    assert sb.files.read("empty") == b""
    sb.files.write("hello.txt", b"replaced")
    assert sb.files.read("hello.txt") == b"replaced"


def test_files_visible_to_exec_and_back(sb):
    sb.exec("printf 'from exec' > made.txt")
    assert sb.files.read("made.txt") == b"from exec"
    sb.files.write("deep/er/x.txt", "x")
    assert sb.exec("cat deep/er/x.txt").stdout == "x"


def test_files_path_encoding(sb):
    name = "we ird&name=1%2F?#+ü.txt"
    sb.files.write(name, b"odd")
    assert sb.files.read(name) == b"odd"
    assert sb.exec(["cat", name]).stdout == "odd"
    assert name in [e.name for e in sb.files.list(".")]


def test_files_list_and_stat(sb):
    sb.files.write("a.txt", "12345")
    sb.files.mkdir("d/e")
    sb.files.write("d/f.txt", "x")
    sb.files.write("d/e/g.txt", "y")
    sb.exec("ln -s a.txt link")

    top = {e.name: e for e in sb.files.list(".")}
    assert {"a.txt", "d", "link"} <= set(top)
    assert "f.txt" not in top and "g.txt" not in top
    a = top["a.txt"]
    assert isinstance(a, FileInfo)
    assert (a.type, a.size, a.path) == ("file", 5, "/workspace/a.txt")
    assert a.is_file and not a.is_dir
    assert isinstance(a.mode, int) and a.mode <= 0o7777  # permission bits only
    assert a.mode & 0o600 == 0o600
    assert abs(a.mtime - time.time()) < 600
    assert a["size"] == 5
    assert top["d"].type == "dir" and top["d"].is_dir
    assert top["link"].type == "symlink"

    deep = {e.path for e in sb.files.list("/workspace", depth=3)}
    assert {"/workspace/d/f.txt", "/workspace/d/e/g.txt", "/workspace/d/e"} <= deep
    d1 = {e.path for e in sb.files.list("d")}
    assert d1 == {"/workspace/d/f.txt", "/workspace/d/e"}

    st = sb.files.stat("d/e/g.txt")
    assert (st.name, st.path, st.type, st.size) == ("g.txt", "/workspace/d/e/g.txt", "file", 1)
    assert sb.files.stat("/workspace/d").type == "dir"
    assert sb.files.exists("a.txt") and not sb.files.exists("nope.txt")


def test_files_mode_from_exec(sb):
    sb.exec("touch run.sh && chmod 0750 run.sh")
    assert sb.files.stat("run.sh").mode & 0o7777 == 0o750


def test_files_remove_and_mkdir(sb):
    sb.files.mkdir("x/y/z")
    assert sb.files.stat("x/y/z").type == "dir"
    sb.files.mkdir("x/y/z")  # existing: fine
    sb.files.write("x/y/z/f", "1")
    sb.files.write("solo", "1")
    sb.files.remove("solo")
    assert not sb.files.exists("solo")
    with pytest.raises(Conflict) as ei:
        sb.files.remove("x")  # not empty, not recursive
    assert ei.value.status == 409
    assert sb.files.read("x/y/z/f") == b"1"
    sb.files.remove("x", recursive=True)
    assert not sb.files.exists("x")
    with pytest.raises(NotFound):
        sb.files.remove("never-was")


def test_files_errors(sb):
    with pytest.raises(NotFound) as ei:
        sb.files.read("missing.txt")
    assert (ei.value.status, ei.value.code) == (404, "not_found")
    sb.files.mkdir("adir")
    with pytest.raises(IsDirectory) as ei:
        sb.files.read("adir")
    assert (ei.value.status, ei.value.code) == (400, "is_directory")
    with pytest.raises(InvalidPath) as ei:
        sb.files.read("")
    assert ei.value.code == "invalid_path"
    for bad in ("/proc/self/environ", "/sys/kernel", "/dev/null"):
        with pytest.raises(InvalidPath):
            sb.files.read(bad)
    with pytest.raises(Forbidden) as ei:
        sb.files.write("/usr/evil", "x")
    assert ei.value.status == 403
    with pytest.raises(Forbidden):
        sb.files.write(".git/hooks/pre-commit", "x")


def test_files_nul_in_path(sb):
    sb.files.write("a", "decoy")
    with pytest.raises(InvalidPath) as ei:
        sb.files.read("a\0b")
    assert (ei.value.status, ei.value.code) == (400, "invalid_path")
    with pytest.raises(InvalidPath):
        sb.files.write("a\0b", "x")
    assert sb.files.read("a") == b"decoy"


def test_files_cannot_reach_host(sb, tmp_path):
    # The host's /tmp is not the sandbox's: a file written here is invisible.
    marker = tmp_path / "host-secret.txt"
    marker.write_text("secret")
    with pytest.raises(MoatError) as ei:
        sb.files.read(str(marker))
    assert ei.value.status in (400, 403, 404)
    with pytest.raises(MoatError):
        sb.files.read("../../../../" + str(marker))


# -- apply_patch ---------------------------------------------------------------

def test_apply_patch(sb):
    sb.files.write("a.py", "def f():\n    return 1\n\nprint(f())\n")
    sb.files.write("mv.txt", "one\ntwo\n")
    patch = (
        "*** Begin Patch\n"
        "*** Update File: a.py\n"
        "@@ def f():\n"
        "-    return 1\n"
        "+    return 2\n"
        "*** Add File: pkg/new.py\n"
        "+x = 1\n"
        "+y = 2\n"
        "*** Update File: mv.txt\n"
        "*** Move to: moved/mv2.txt\n"
        "@@\n"
        " one\n"
        "-two\n"
        "+three\n"
        "*** End Patch"
    )
    files = sb.apply_patch(patch)
    got = {(f["path"], f["op"]) for f in files}
    assert ("/workspace/a.py", "update") in got
    assert ("/workspace/pkg/new.py", "add") in got
    assert any(p.endswith("/moved/mv2.txt") for p, _ in got)
    assert len(files) == 3
    assert sb.files.read("a.py") == b"def f():\n    return 2\n\nprint(f())\n"
    assert sb.files.read("pkg/new.py") == b"x = 1\ny = 2\n"
    assert not sb.files.exists("mv.txt")
    assert sb.files.read("moved/mv2.txt") == b"one\nthree\n"
    assert sb.exec("python3 a.py").stdout == "2\n"


def test_apply_patch_delete(sb):
    sb.files.write("old.txt", "bye\n")
    sb.files.write("stays.txt", "hi\n")
    files = sb.apply_patch(
        "*** Begin Patch\n*** Delete File: old.txt\n*** End Patch")
    assert files == [{"path": "/workspace/old.txt", "op": "delete"}]
    assert not sb.files.exists("old.txt")
    assert sb.exec("test -e old.txt").exit_code == 1
    assert sb.files.read("stays.txt") == b"hi\n"


def test_apply_patch_failure_changes_nothing(sb):
    original = b"alpha\nbeta\ngamma\n"
    sb.files.write("keep.txt", original)
    patch = (
        "*** Begin Patch\n"
        "*** Add File: should-not-exist.txt\n"
        "+nope\n"
        "*** Update File: keep.txt\n"
        "@@\n"
        " alpha\n"
        "-delta\n"
        "+epsilon\n"
        "*** End Patch"
    )
    with pytest.raises(PatchFailed) as ei:
        sb.apply_patch(patch)
    e = ei.value
    assert (e.status, e.code) == (422, "patch_failed")
    assert "keep.txt" in e.message
    assert sb.files.read("keep.txt") == original
    assert not sb.files.exists("should-not-exist.txt")


def test_apply_patch_malformed(sb):
    with pytest.raises(MoatError) as ei:
        sb.apply_patch("this is not a patch")
    assert ei.value.status in (400, 422)


# -- images --------------------------------------------------------------------

def test_view_image_png(sb):
    data = png(3, 2)
    sb.files.write("img/tiny.png", data)
    img = sb.view_image("img/tiny.png")
    assert img["mime"] == "image/png"
    assert (img["width"], img["height"]) == (3, 2)
    assert img["data"] == data


def test_view_image_not_an_image(sb):
    sb.files.write("notimg.png", "just text, not a png\n")
    with pytest.raises(UnsupportedMediaType) as ei:
        sb.view_image("notimg.png")
    assert (ei.value.status, ei.value.code) == (415, "unsupported_media_type")
    with pytest.raises(NotFound):
        sb.view_image("missing.png")


def test_view_image_too_large(sb):
    big = png(1, 1) + b"\0" * (10 * 1024 * 1024 + 1)
    sb.files.write("big.png", big)
    assert sb.files.stat("big.png").size == len(big)
    with pytest.raises(TooLarge) as ei:
        sb.view_image("big.png")
    assert (ei.value.status, ei.value.code) == (413, "too_large")


# -- archives ------------------------------------------------------------------

def test_download_archive(sb):
    sb.files.write("top.txt", "top\n")
    sb.files.write("sub/inner.bin", bytes(range(256)))
    data = sb.download_archive()
    with tarfile.open(fileobj=io.BytesIO(data)) as tf:
        members = {m.name.lstrip("./").rstrip("/"): m for m in tf.getmembers()}
        assert "top.txt" in members and "sub/inner.bin" in members
        assert tf.extractfile(members["top.txt"]).read() == b"top\n"
        assert tf.extractfile(members["sub/inner.bin"]).read() == bytes(range(256))
        assert all(not m.name.startswith("/") and ".." not in m.name.split("/")
                   for m in tf.getmembers())


def test_archive_roundtrip_between_sandboxes(url, sb):
    sb.files.write("proj/main.py", "print('moved')\n")
    sb.files.write("proj/data.bin", b"\x00\x01\x02\xff")
    data = sb.download_archive()
    with Sandbox.create(url=url) as other:
        other.files.write("stale.txt", "old")
        other.upload_archive(data)
        assert other.files.read("proj/data.bin") == b"\x00\x01\x02\xff"
        assert other.exec("python3 proj/main.py").stdout == "moved\n"
        assert not other.files.exists("stale.txt")  # replaced, not merged


def test_upload_archive_plain_and_gzip(sb):
    sb.files.write("old.txt", "old")
    sb.upload_archive(tar_of({"new": None, "new/x.txt": b"x\n",
                              "bin.dat": bytes(range(256))}))
    assert sb.files.read("new/x.txt") == b"x\n"
    assert sb.files.read("bin.dat") == bytes(range(256))
    assert not sb.files.exists("old.txt")
    sb.upload_archive(io.BytesIO(tar_of({"gz.txt": b"zipped"}, gz=True)))
    assert sb.files.read("gz.txt") == b"zipped"
    assert not sb.files.exists("new/x.txt")


def test_upload_archive_refuses_escape(sb):
    sb.files.write("keep.txt", "keep")
    for bad in ({"../evil.txt": b"x"}, {"/abs.txt": b"x"}):
        with pytest.raises(MoatError) as ei:
            sb.upload_archive(tar_of(bad))
        assert ei.value.status == 400
        assert sb.files.read("keep.txt") == b"keep"
    with pytest.raises(MoatError) as ei:
        sb.upload_archive(b"this is not a tar archive at all" * 40)
    assert ei.value.status == 400
    assert sb.files.read("keep.txt") == b"keep"


def test_upload_archive_refuses_hardlink_and_symlink_out(sb):
    sb.files.write("keep.txt", "keep")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        ti = tarfile.TarInfo("out")
        ti.type = tarfile.SYMTYPE
        ti.linkname = "../../etc/passwd"
        tf.addfile(ti)
    with pytest.raises(MoatError) as ei:
        sb.upload_archive(buf.getvalue())
    assert ei.value.status == 400
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        ti = tarfile.TarInfo("a")
        ti.size = 1
        tf.addfile(ti, io.BytesIO(b"a"))
        ti = tarfile.TarInfo("b")
        ti.type = tarfile.LNKTYPE
        ti.linkname = "a"
        tf.addfile(ti)
    with pytest.raises(MoatError) as ei:
        sb.upload_archive(buf.getvalue())
    assert ei.value.status == 400
    assert sb.files.read("keep.txt") == b"keep"


# -- auth ----------------------------------------------------------------------

def test_token_required(token_daemon, monkeypatch):
    url, token = token_daemon.url, token_daemon.token
    assert Client(url).health()["ok"] is True  # no auth on /healthz
    with pytest.raises(Unauthorized) as ei:
        Sandbox.list(url=url)
    assert (ei.value.status, ei.value.code) == (401, "unauthorized")
    with pytest.raises(Unauthorized):
        Sandbox.create(url=url)
    with pytest.raises(Unauthorized):
        Sandbox.list(url=url, token="wrong-" + token)
    assert raw_get(url, "/v1/sandboxes")[0] == 401

    with Sandbox.create(url=url, token=token) as sb:
        assert sb.exec("echo authed").stdout == "authed\n"
        sb.files.write("f", b"1")
        assert sb.files.read("f") == b"1"
        sid = sb.id
    assert raw_get(url, "/v1/sandboxes/" + sid, token)[0] == 404

    monkeypatch.setenv("MOAT_API_TOKEN", token)
    monkeypatch.setenv("MOAT_URL", url)
    with Sandbox.create() as sb:
        assert sb.id in {s.id for s in Sandbox.list()}
        with pytest.raises(Unauthorized):
            Sandbox.connect(sb.id, token="bad")


def test_stream_requires_token(token_daemon):
    with Sandbox.create(url=token_daemon.url, token=token_daemon.token) as sb:
        ghost = Sandbox(Client(token_daemon.url), {"id": sb.id})
        with pytest.raises(Unauthorized):
            list(ghost.exec_stream("echo x"))
        assert [e.data for e in sb.exec_stream("echo x") if e.type == "stdout"] == ["x\n"]


# -- daemon options: limits, host paths ---------------------------------------

def test_local_file_and_dir_copied(limited_daemon):
    host = limited_daemon.host_dir
    manifest = {"root": "/workspace", "entries": {
        "data.csv": {"type": "local_file", "src": host + "/data.csv"},
        "lib": {"type": "local_dir", "src": host + "/lib"}}}
    with Sandbox.create(url=limited_daemon.url, manifest=manifest) as sb:
        assert sb.files.read("data.csv") == b"a,b\n1,2\n"
        assert sb.files.read("lib/sub/deep.txt") == b"deep\n"
        assert sb.exec("cd lib && python3 -c 'import util; print(util.X)'").stdout == "42\n"
        # copied, never mounted: writes stay inside
        sb.files.write("data.csv", "changed")
    with open(host + "/data.csv", "rb") as f:
        assert f.read() == b"a,b\n1,2\n"


def test_image_outside_allowed(limited_daemon):
    # 403 per docs/API.md; a daemon that supports only "host" answers 400.
    with pytest.raises(MoatError) as ei:
        Sandbox.create(url=limited_daemon.url, image="/usr")
    assert (ei.value.status, ei.value.code) in ((403, "forbidden"),
                                                (400, "invalid_request"))
    # A relative name is an image reference looked up in the store now.
    with pytest.raises(NotFound):
        Sandbox.create(url=limited_daemon.url, image="relative/rootfs")


def test_max_sandboxes(limited_daemon):
    url = limited_daemon.url
    with Sandbox.create(url=url), Sandbox.create(url=url):
        with pytest.raises(LimitReached) as ei:
            Sandbox.create(url=url)
        assert (ei.value.status, ei.value.code) == (429, "limit_reached")
    with Sandbox.create(url=url) as sb:  # room again once deleted
        assert sb.exec("true").exit_code == 0


def test_max_file_and_archive(limited_daemon):
    with Sandbox.create(url=limited_daemon.url) as sb:
        sb.files.write("ok.bin", b"\1" * 1000)
        with pytest.raises(TooLarge) as ei:
            sb.files.write("big.bin", b"\1" * (65 * 1024))
        assert (ei.value.status, ei.value.code) == (413, "too_large")
        assert not sb.files.exists("big.bin")
        with pytest.raises(TooLarge):
            sb.upload_archive(tar_of({"f%d" % i: b"\1" * 60000 for i in range(5)}))
        assert sb.files.read("ok.bin") == b"\1" * 1000
