"""moat.Sandbox as a Deep Agents-style backend (execute, upload_files,
download_files) and session_state()/resume(), against a real `moat serve`.
Effects are checked through moat's HTTP API directly (urllib), not only
through the client, and on the host for confinement."""

from __future__ import annotations

import json
import os
import tempfile
import time
import urllib.request

import pytest

from moat import (Client, Conflict, ExecuteResponse, FileDownloadResponse,
                  FileUploadResponse, MoatError, NotFound, Sandbox)
from v1api import api


def file_of(url, sid, path, token=None):
    st, body = api(url, "GET", "/v1/sandboxes/%s/files?path=%s"
                   % (sid, urllib.request.quote(path, safe="/")), token=token)
    return body if st == 200 else st


def test_execute_output_order_exit_codes(sb, url):
    r = sb.execute("echo one; echo two >&2; echo three; pwd")
    assert r == ExecuteResponse(output="one\ntwo\nthree\n/workspace\n",
                                exit_code=0, truncated=False)
    assert sb.execute("exit 3") == ExecuteResponse("", 3, False)
    nf = sb.execute("no-such-command-xyz")
    assert nf.exit_code == 127
    assert nf.output.endswith("sh: 1: no-such-command-xyz: not found\n")
    sb.execute("mkdir -p out && printf made > out/f.txt")
    assert file_of(url, sb.id, "/workspace/out/f.txt") == b"made"
    with pytest.raises(TypeError, match="command must be a str"):
        sb.execute(["ls"])


def test_execute_truncation_and_timeout(sb):
    t = sb.execute("head -c 100000 /dev/zero | tr '\\0' x; exit 4",
                   max_output_bytes=1000)
    assert t.truncated is True and t.exit_code == 4
    assert 0 < len(t.output) <= 1000 and set(t.output) == {"x"}
    s = sb.execute("echo started; sleep 30", timeout=0.5)
    assert s.exit_code == 137
    assert s.output == "started\n[moat: the command was killed after 0.5 s]"
    assert [p for p in sb.processes() if p["running"]] == []
    with pytest.raises(ValueError, match="timeout must be seconds"):
        sb.execute("true", timeout=-1)
    assert sb.execute("sleep 0.2; echo slow-ok", timeout=0).output == "slow-ok\n"


def test_upload_files_bytes_and_per_file_errors(sb, url):
    blob = bytes(range(256))
    res = sb.upload_files([
        ("/workspace/bin/all.bytes", blob),
        ("notes/rel.txt", b"relative\n"),
        ("/workspace", b"x"),
        ("/proc/self/moat", b"x"),
        ("/usr/moat-py-test", b"x"),
        ("", b"x"),
        ("/workspace/bin/all.bytes/under", b"x"),
        ("/workspace/after.txt", bytearray(b"ok")),
    ])
    assert res == [
        FileUploadResponse("/workspace/bin/all.bytes", None),
        FileUploadResponse("notes/rel.txt", None),
        FileUploadResponse("/workspace", "is_directory"),
        FileUploadResponse("/proc/self/moat", "invalid_path"),
        FileUploadResponse("/usr/moat-py-test", "permission_denied"),
        FileUploadResponse("", "invalid_path"),
        FileUploadResponse("/workspace/bin/all.bytes/under", "file_not_found"),
        FileUploadResponse("/workspace/after.txt", None),
    ]
    assert file_of(url, sb.id, "/workspace/bin/all.bytes") == blob
    assert file_of(url, sb.id, "/workspace/notes/rel.txt") == b"relative\n"
    assert file_of(url, sb.id, "/workspace/after.txt") == b"ok"
    assert file_of(url, sb.id, "/usr/moat-py-test") == 404
    # checked before anything is written
    with pytest.raises(TypeError, match=r"files\[1\] \('/workspace/y'\): content must be bytes"):
        sb.upload_files([("/workspace/x", b"1"), ("/workspace/y", "text")])
    assert file_of(url, sb.id, "/workspace/x") == 404


def test_download_files_bytes_and_per_file_errors(sb, url):
    blob = b"\x00\xff\n\r\x80\xfe\x00\x01"
    st, _ = api(url, "PUT", "/v1/sandboxes/%s/files?path=/workspace/blob.bin"
                % sb.id, blob)
    assert st == 204
    can_read = sb.execute("printf s > locked && chmod 000 locked && mkdir d && "
                          "cat locked >/dev/null 2>&1; echo $?").output.strip() == "0"
    res = sb.download_files(["/workspace/blob.bin", "/workspace/missing",
                             "/workspace/d", "/proc/self/environ",
                             "/workspace/locked", ""])
    assert res[0] == FileDownloadResponse("/workspace/blob.bin", blob, None)
    assert [(r.path, r.content, r.error) for r in res[1:4]] == [
        ("/workspace/missing", None, "file_not_found"),
        ("/workspace/d", None, "is_directory"),
        ("/proc/self/environ", None, "invalid_path"),
    ]
    assert res[4].error == (None if can_read else "permission_denied")
    assert res[5] == FileDownloadResponse("", None, "invalid_path")
    with pytest.raises(TypeError):
        sb.download_files("/workspace/blob.bin")
    # the sandbox gone is not a per-file answer
    sb.delete()
    with pytest.raises(NotFound, match="no sandbox"):
        sb.download_files(["/workspace/blob.bin"])
    with pytest.raises(NotFound, match="no sandbox"):
        sb.upload_files([("/workspace/blob.bin", b"x")])


def test_confinement_host_file_unchanged(sb, url):
    host = tempfile.mkdtemp(prefix="moat-py-deep-")
    try:
        secret = os.path.join(host, "secret.txt")
        with open(secret, "w") as f:
            f.write("host secret\n")
        before = os.stat(secret)
        assert sb.download_files([secret])[0].error == "file_not_found"
        assert sb.upload_files([(secret, b"pwned")])[0].error is None
        sb.upload_files([("../../../.." + secret, b"pwned via ..")])
        r = sb.execute("cat %s; echo appended >> %s" % (secret, secret))
        assert "host secret" not in r.output
        assert sb.download_files(["/proc/1/root" + secret])[0].error == "invalid_path"
        # the writes went to the sandbox's own /tmp
        assert file_of(url, sb.id, secret) == b"pwned via ..appended\n"
        with open(secret) as f:
            assert f.read() == "host secret\n"
        after = os.stat(secret)
        assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    finally:
        import shutil
        shutil.rmtree(host, ignore_errors=True)


def test_session_state_resume(url):
    sb = Sandbox.create(url=url, metadata={"test": "resume"})
    try:
        sb.files.write("state.txt", "kept\n")
        state = sb.session_state()
        assert state == {"type": "moat.sandbox", "version": 1,
                         "sandbox_id": sb.id, "base_url": url}
        text = json.dumps(state)  # JSON-able, as is
        again = Sandbox.resume(json.loads(text), url=url)
        assert again.id == sb.id
        assert again.files.read("state.txt") == b"kept\n"
        assert again.execute("cat state.txt").output == "kept\n"
        # the same daemon by an equivalent URL
        assert Sandbox.resume(state, url=url + "/").id == sb.id
    finally:
        sb.delete()
    with pytest.raises(NotFound, match="sandbox %s of the session state is gone "
                       "from moat at %s" % (sb.id, url)):
        Sandbox.resume(state, url=url)


def test_resume_refuses_another_daemon_and_bad_states(url, monkeypatch):
    sb = Sandbox.create(url=url)
    try:
        state = sb.session_state()
        other = dict(state, base_url="http://127.0.0.1:1")
        with pytest.raises(ValueError, match="names the moat daemon at "
                           "http://127.0.0.1:1, but this client talks to"):
            Sandbox.resume(other, url=url)
        # told so, it reattaches through the caller's own URL
        assert Sandbox.resume(other, url=url, allow_other_daemon=True).id == sb.id
        # the caller's configuration comes from the environment by default
        monkeypatch.setenv("MOAT_URL", url)
        assert Sandbox.resume(state).id == sb.id
        for bad, why in [
                ("x", "must be a dict"),
                (dict(state, type="e2b"), "type must be"),
                (dict(state, version=2), "unsupported version 2"),
                (dict(state, sandbox_id="../x"), "sandbox_id must be"),
                (dict(state, base_url=""), "base_url must be"),
                (dict(state, token="t"), "unknown field 'token'")]:
            with pytest.raises(ValueError, match=why):
                Sandbox.resume(bad, url=url)
    finally:
        sb.delete()


def test_session_state_never_holds_the_token(token_daemon):
    url, token = token_daemon.url, token_daemon.token
    sb = Sandbox.create(url=url, token=token)
    try:
        state = sb.session_state()
        assert token not in json.dumps(state)
        # resuming needs the caller's own token
        with pytest.raises(MoatError) as e:
            Sandbox.resume(state, url=url)
        assert e.value.status == 401
        again = Sandbox.resume(state, client=Client(url, token))
        assert again.execute("echo ok").output == "ok\n"
        st, _ = api(url, "GET", "/v1/sandboxes/" + sb.id, token=token)
        assert st == 200
    finally:
        sb.delete()


def _agents_of(pid):
    """The moat-agent processes descending from pid (from /proc)."""
    parent = {}
    for n in os.listdir("/proc"):
        if n.isdigit():
            try:
                with open("/proc/%s/stat" % n) as f:
                    st = f.read()
                parent[int(n)] = int(st[st.rindex(")") + 2:].split()[1])
            except (OSError, ValueError):
                pass
    out, grew = set(), True
    while grew:
        grew = False
        for p, pp in parent.items():
            if (pp == pid or pp in out) and p not in out:
                out.add(p)
                grew = True
    def comm(p):
        try:
            with open("/proc/%d/comm" % p) as f:
                return f.read().strip()
        except OSError:
            return ""
    return [p for p in out if comm(p) == "moat-agent"]


def test_resume_a_stopped_sandbox_is_a_conflict():
    from conftest import Daemon, _stop_and_check
    d = Daemon()  # its own daemon: its only agent is this sandbox's
    try:
        sb = Sandbox.create(url=d.url)
        state = sb.session_state()
        agents = _agents_of(d.proc.pid)
        assert agents, "no moat-agent under the daemon"
        for p in agents:
            os.kill(p, 9)
        deadline = time.monotonic() + 20
        while Sandbox.connect(sb.id, url=d.url).state == "running":
            assert time.monotonic() < deadline, "the sandbox never stopped"
            time.sleep(0.1)
        with pytest.raises(Conflict, match="sandbox %s of the session state is "
                           "stopped" % sb.id):
            Sandbox.resume(state, url=d.url)
        sb.delete()
    finally:
        _stop_and_check(d)
