"""End-to-end tests of the MCP door (src/serve/mcp*.c): MCP's Streamable
HTTP transport at /mcp, over raw HTTP so that each protocol edge is what
is sent, not what an SDK happens to send (the TypeScript SDK's own tests
are tests/mcp).

What is asserted: bearer auth (401, moat's error shape); the session rules
(Mcp-Session-Id minted by initialize, 400 without it, 404 unknown or ended,
DELETE, GET 405, the bound on open sessions and idle expiry); the Origin
check; 202 for notifications and responses; JSON-RPC errors for malformed
messages; the 413 of an oversize body; every tool's effect checked through
moat's /v1 API or on the host, structuredContent equal to /v1's answer;
isError results naming the culprit; and a cancelled or abandoned exec
killed (its process gone on the host and from /v1's process list). The
daemon keeps serving after every bad request.
"""
import base64
import json
import os
import socket
import threading
import time

import pytest

from conftest import pids_with, sleep_marker, sleep_started, uid_tag, wait_until
from test_serve import AGENT, SERVE, Daemon, make_png, q, request

pytestmark = pytest.mark.skipif(
    not (os.access(SERVE, os.X_OK) and os.access(AGENT, os.X_OK)),
    reason="moat-serve / moat-agent not found")

TOKEN = "mcp-" + uid_tag()
VERSIONS = ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"]


# ---- the wire -------------------------------------------------------------------------

class Mcp:
    """One MCP session with a daemon, over raw HTTP."""

    def __init__(self, d, version="2025-06-18"):
        self.d = d
        self.n = 0
        self.sid = None
        r = self.post(self.req("initialize", {"protocolVersion": version, "capabilities": {},
                                              "clientInfo": {"name": "e2e", "version": "1"}}),
                      sid=None)
        assert r.status == 200, r
        self.sid = r.headers.get("mcp-session-id")
        assert self.sid, r
        self.init = r.json()["result"]
        r = self.post({"jsonrpc": "2.0", "method": "notifications/initialized"})
        assert r.status == 202 and r.body == b"", r

    def req(self, method, params=None):
        self.n += 1
        m = {"jsonrpc": "2.0", "id": self.n, "method": method}
        if params is not None:
            m["params"] = params
        return m

    def post(self, msg, sid="same", headers=None, auth=True, timeout=60):
        h = {"Content-Type": "application/json",
             "Accept": "application/json, text/event-stream"}
        if auth:
            h["Authorization"] = f"Bearer {self.d.token}"
        s = self.sid if sid == "same" else sid
        if s:
            h["Mcp-Session-Id"] = s
        h.update(headers or {})
        body = msg if isinstance(msg, (bytes, str)) else json.dumps(msg)
        return request(self.d.port, "POST", "/mcp", body, h, timeout)

    def rpc(self, method, params=None, **kw):
        """A request answered 200 with one JSON-RPC message for its id."""
        m = self.req(method, params)
        r = self.post(m, **kw)
        assert r.status == 200, r
        assert r.headers["content-type"].startswith("application/json"), r
        j = r.json()
        assert j["jsonrpc"] == "2.0" and j["id"] == m["id"], j
        return j

    def call(self, name, args=None, **kw):
        """tools/call: the CallToolResult (not a JSON-RPC error)."""
        j = self.rpc("tools/call", {"name": name, "arguments": args or {}}, **kw)
        assert "result" in j, j
        res = j["result"]
        assert isinstance(res["content"], list) and res["content"], res
        return res

    def ok(self, name, args=None, **kw):
        res = self.call(name, args, **kw)
        assert not res.get("isError"), res
        return res

    def error(self, name, args, *needles):
        """An isError result whose text names each needle."""
        res = self.call(name, args)
        assert res.get("isError") is True, res
        t = text(res)
        for n in needles:
            assert n in t, (n, t)
        return t

    def delete(self, sid="same"):
        h = {"Authorization": f"Bearer {self.d.token}"}
        s = self.sid if sid == "same" else sid
        if s:
            h["Mcp-Session-Id"] = s
        return request(self.d.port, "DELETE", "/mcp", None, h)


def text(res):
    return "\n".join(c.get("text", "") for c in res["content"] if c["type"] == "text")


def rpc_error(r, status, code, *needles):
    """A transport or protocol refusal: HTTP status and a JSON-RPC error."""
    assert r.status == status, r
    j = r.json()
    assert j["jsonrpc"] == "2.0" and "result" not in j, j
    assert j["error"]["code"] == code, j
    for n in needles:
        assert n in j["error"]["message"], (n, j)
    return j


def v1_procs(d, sid):
    r = d.get(f"/v1/sandboxes/{sid}/processes")
    assert r.status == 200, r
    return r.json()["processes"]


# ---- fixtures -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def srv():
    d = Daemon("--pool", "0", token=TOKEN)
    yield d
    d.stop()


@pytest.fixture
def mcp(srv):
    m = Mcp(srv)
    yield m
    m.delete()


@pytest.fixture
def box(srv, mcp, request):
    res = mcp.ok("sandbox_create", {})
    sid = res["structuredContent"]["id"]
    srv.agent_pid(sid)
    yield sid
    try:
        srv.delete(f"/v1/sandboxes/{sid}", timeout=20)
    except OSError:
        pass


# ---- auth, sessions, the transport ----------------------------------------------------

def test_mcp_auth_401(srv):
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "x", "version": "1"}}}
    for h in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}):
        r = request(srv.port, "POST", "/mcp", init, h)
        assert r.status == 401, r
        assert r.json()["error"]["code"] == "unauthorized", r
        assert "mcp-session-id" not in r.headers, r
        for m in ("GET", "DELETE"):
            assert request(srv.port, m, "/mcp", None, h).status == 401
    # and with it
    r = request(srv.port, "POST", "/mcp", init, {"Authorization": f"Bearer {TOKEN}"})
    assert r.status == 200 and r.headers.get("mcp-session-id"), r


def test_mcp_initialize_and_versions(srv):
    for v in VERSIONS:
        m = Mcp(srv, version=v)
        assert m.init["protocolVersion"] == v
        m.delete()
    # an unknown version: the newest served, the client decides
    m = Mcp(srv, version="2099-01-01")
    assert m.init["protocolVersion"] == VERSIONS[0]
    i = m.init
    assert i["capabilities"] == {"tools": {"listChanged": False}}, i
    assert i["serverInfo"]["name"] == "moat" and i["serverInfo"]["version"], i
    assert "sandbox_create" in i["instructions"], i
    assert len(m.sid) == 32 and all(c in "0123456789abcdef" for c in m.sid), m.sid
    assert m.rpc("ping")["result"] == {}
    m.delete()
    # each initialize is a new session
    a, b = Mcp(srv), Mcp(srv)
    assert a.sid != b.sid
    a.delete()
    b.delete()
    # protocolVersion missing
    r = request(srv.port, "POST", "/mcp",
                {"jsonrpc": "2.0", "id": 5, "method": "initialize", "params": {}},
                {"Authorization": f"Bearer {TOKEN}"})
    rpc_error(r, 200, -32602, "protocolVersion")
    assert "mcp-session-id" not in r.headers


def test_mcp_session_rules(srv, mcp):
    msg = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    rpc_error(mcp.post(msg, sid=None), 400, -32000, "Mcp-Session-Id")
    rpc_error(mcp.post(msg, sid="0" * 32), 404, -32001, "initialize again")
    rpc_error(mcp.post(msg, sid="not-a-session"), 404, -32001)
    # a notification needs one too
    r = mcp.post({"jsonrpc": "2.0", "method": "notifications/initialized"}, sid=None)
    rpc_error(r, 400, -32000)
    # GET: no server-initiated stream
    r = request(srv.port, "GET", "/mcp", None,
                {"Authorization": f"Bearer {TOKEN}", "Accept": "text/event-stream",
                 "Mcp-Session-Id": mcp.sid})
    assert r.status == 405 and r.headers.get("allow") == "POST, DELETE", r
    r = request(srv.port, "PUT", "/mcp", "{}", {"Authorization": f"Bearer {TOKEN}"})
    assert r.status == 405, r
    # an unsupported MCP-Protocol-Version header
    r = mcp.post(msg, headers={"MCP-Protocol-Version": "1999-01-01"})
    rpc_error(r, 400, -32000, "MCP-Protocol-Version")
    r = mcp.post(msg, headers={"MCP-Protocol-Version": "2025-06-18"})
    assert r.status == 200, r
    # DELETE ends it: then 404, for DELETE too
    other = Mcp(srv)
    assert other.delete().status == 204
    rpc_error(other.post(msg), 404, -32001)
    assert other.delete().status == 404
    assert mcp.delete(sid=None).status == 400
    # the first session is untouched
    assert mcp.rpc("tools/list")["result"]["tools"]


def test_mcp_origin_check(srv, mcp):
    msg = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    for o in ("http://evil.example", f"http://evil.example:{srv.port}", "null",
              "http://127.0.0.1.evil.example", "file://"):
        r = mcp.post(msg, headers={"Origin": o})
        # refused by the HTTP layer for every door (test_browser.py)
        assert r.status == 403 and b"Origin" in r.body, r
    # a page cannot open a session either
    r = request(srv.port, "POST", "/mcp",
                {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                 "params": {"protocolVersion": "2025-06-18"}},
                {"Authorization": f"Bearer {TOKEN}", "Origin": "http://evil.example"})
    assert r.status == 403 and "mcp-session-id" not in r.headers, r
    for o in (f"http://127.0.0.1:{srv.port}", f"http://localhost:{srv.port}", "http://[::1]"):
        assert mcp.post(msg, headers={"Origin": o}).status == 200, o


def test_mcp_notifications_and_responses_202(srv, mcp):
    for m in ({"jsonrpc": "2.0", "method": "notifications/initialized"},
              {"jsonrpc": "2.0", "method": "notifications/whatever", "params": {"x": 1}},
              {"jsonrpc": "2.0", "method": "notifications/cancelled",
               "params": {"requestId": 424242}},
              {"jsonrpc": "2.0", "id": 77, "result": {}},
              {"jsonrpc": "2.0", "id": "x", "error": {"code": 1, "message": "no"}}):
        r = mcp.post(m)
        assert r.status == 202 and r.body == b"", (m, r)


def test_mcp_malformed_jsonrpc(srv, mcp):
    rpc_error(mcp.post(b"{not json"), 400, -32700, "parse error")
    rpc_error(mcp.post(b""), 400, -32700)
    rpc_error(mcp.post(b"[]"), 400, -32600, "batch")
    rpc_error(mcp.post([{"jsonrpc": "2.0", "id": 1, "method": "ping"}]), 400, -32600, "batch")
    rpc_error(mcp.post(b"42"), 400, -32600)
    rpc_error(mcp.post({"id": 1, "method": "ping"}), 400, -32600, "jsonrpc")
    rpc_error(mcp.post({"jsonrpc": "2.0", "id": None, "method": "ping"}), 400, -32600, "id")
    rpc_error(mcp.post({"jsonrpc": "2.0", "id": 1.5, "method": "ping"}), 400, -32600, "id")
    rpc_error(mcp.post({"jsonrpc": "2.0", "id": 1, "method": 3}), 400, -32600, "method")
    rpc_error(mcp.post({"jsonrpc": "2.0", "id": 1}), 400, -32600)
    # the id is echoed when it could be read
    j = rpc_error(mcp.post({"jsonrpc": "2.0", "id": 1, "method": 3}), 400, -32600)
    assert j["id"] == 1, j
    j = rpc_error(mcp.post({"jsonrpc": "2.0", "id": "q", "method": "nope/nope"}), 200, -32601,
                  "nope/nope")
    assert j["id"] == "q"
    rpc_error(mcp.post({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": [1]}),
              200, -32602, "params")
    # tools/call's own params are protocol errors
    rpc_error(mcp.post({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                        "params": {"name": "nope", "arguments": {}}}), 200, -32602, "nope")
    rpc_error(mcp.post({"jsonrpc": "2.0", "id": 4, "method": "tools/call",
                        "params": {"arguments": {}}}), 200, -32602, "name")
    rpc_error(mcp.post({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
                        "params": {"name": "exec", "arguments": [1]}}), 200, -32602,
              "arguments")
    # still serving, same session
    assert mcp.rpc("ping")["result"] == {}


def test_mcp_oversize_body_413(srv, mcp):
    """A body announced over the JSON limit is refused from its head, in
    moat's shape, before it is read; the daemon keeps serving."""
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=20)
    try:
        s.sendall((f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                   f"Authorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\n"
                   f"Mcp-Session-Id: {mcp.sid}\r\n"
                   f"Content-Length: {17 << 20}\r\n\r\n").encode())
        s.sendall(b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","a":"')
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    finally:
        s.close()
    assert data.startswith(b"HTTP/1.1 413"), data[:200]
    assert mcp.rpc("ping")["result"] == {}


def test_mcp_tools_list(srv, mcp):
    tools = {t["name"]: t for t in mcp.rpc("tools/list")["result"]["tools"]}
    assert sorted(tools) == sorted(["sandbox_create", "sandbox_list", "sandbox_delete", "exec",
                                    "write_stdin", "read_file", "write_file", "list_files",
                                    "apply_patch", "view_image"])
    req = {n: set(t["inputSchema"].get("required", [])) for n, t in tools.items()}
    assert req["exec"] == {"id", "cmd"} and req["sandbox_create"] == set(), req
    assert req["write_stdin"] == {"id", "process_id", "data"}, req
    assert req["list_files"] == {"id"}, req
    for t in tools.values():
        assert t["inputSchema"]["additionalProperties"] is False, t
        assert t["description"], t


# ---- the tools, checked through /v1 ------------------------------------------------------

def test_mcp_sandbox_create_list_delete(srv, mcp):
    res = mcp.ok("sandbox_create", {"manifest": {"entries": {
        "hello.txt": {"type": "file", "content": "from the manifest\n"}}}})
    sc = res["structuredContent"]
    sid = sc["id"]
    srv.agent_pid(sid)
    assert sid in text(res), res
    # the same sandbox object as /v1's
    r = srv.get(f"/v1/sandboxes/{sid}")
    assert r.status == 200 and r.json() == sc, (r, sc)
    assert srv.fread(sid, "hello.txt") == b"from the manifest\n"
    lst = mcp.ok("sandbox_list")
    assert lst["structuredContent"] == srv.get("/v1/sandboxes").json()
    assert sid in text(lst)
    res = mcp.ok("sandbox_delete", {"id": sid})
    assert res["structuredContent"] == {"id": sid, "deleted": True}, res
    assert srv.get(f"/v1/sandboxes/{sid}").status == 404
    assert not srv.sbdir(sid).exists()
    mcp.error("sandbox_delete", {"id": sid}, sid, "id")
    # a bad create body: moat's message naming the field
    mcp.error("sandbox_create", {"manifest": {"entries": {"../x": {"type": "file"}}}},
              "manifest")
    mcp.error("sandbox_create", {"image": "relative/dir"}, "image")


def test_mcp_exec(srv, mcp, box):
    res = mcp.ok("exec", {"id": box, "cmd": "echo out; echo err >&2; echo made > f.txt; exit 3"})
    sc = res["structuredContent"]
    assert sc["exit_code"] == 3 and sc["stdout"] == "out\n" and sc["stderr"] == "err\n", sc
    assert set(sc) == {"exit_code", "signal", "stdout", "stderr", "duration_ms", "timed_out",
                       "truncated"}, sc
    t = text(res)
    assert t.splitlines()[0] == "exit code 3", t
    assert "stdout:\nout\n" in t and "stderr:\nerr\n" in t, t
    # its effect, through /v1 and on the host
    assert srv.fread(box, "f.txt") == b"made\n"
    assert (srv.ws(box) / "f.txt").read_bytes() == b"made\n"
    # argv form, cwd
    srv.fmkdir(box, "sub")
    sc = mcp.ok("exec", {"id": box, "cmd": ["/bin/sh", "-c", "pwd"], "cwd": "sub"})[
        "structuredContent"]
    assert sc["stdout"] == "/workspace/sub\n", sc
    # the same shape /v1 answers for the same command
    v1 = srv.ex(box, "printf 'a\\377b'")
    sc = mcp.ok("exec", {"id": box, "cmd": "printf 'a\\377b'"})["structuredContent"]
    assert sc["stdout"] == v1["stdout"] and set(sc) == set(v1), (sc, v1)
    # timeout_ms kills
    sc = mcp.ok("exec", {"id": box, "cmd": "sleep 30", "timeout_ms": 300})["structuredContent"]
    assert sc["timed_out"] is True and sc["exit_code"] == 137, sc


def test_mcp_exec_yield_and_write_stdin(srv, mcp, box):
    res = mcp.ok("exec", {"id": box, "cmd": "echo ready; read x; echo got $x; exit 4",
                          "yield_ms": 300})
    sc = res["structuredContent"]
    assert sc["running"] is True and sc["stdout"] == "ready\n", sc
    pid = sc["process_id"]
    assert text(res).startswith(f"process {pid} is still running (write_stdin with process_id "
                                f"{pid})"), res
    # detached: /v1 sees it running
    procs = {p["process_id"]: p for p in v1_procs(srv, box)}
    assert procs[pid]["running"] is True, procs
    res = mcp.ok("write_stdin", {"id": box, "process_id": pid, "data": "yes\n",
                                 "yield_ms": 3000})
    sc = res["structuredContent"]
    assert sc["running"] is False and sc["process_id"] == pid, sc
    assert sc["exit_code"] == 4 and sc["stdout"] == "got yes\n", sc
    assert text(res).splitlines()[0] == "exit code 4", res
    assert pid not in {p["process_id"] for p in v1_procs(srv, box)}
    # a process that is gone: moat's error, naming it
    mcp.error("write_stdin", {"id": box, "process_id": pid, "data": "x"}, str(pid))


def test_mcp_files(srv, mcp, box):
    res = mcp.ok("write_file", {"id": box, "path": "dir/a.txt", "content": "héllo\n"})
    assert res["structuredContent"] == {"path": "/workspace/dir/a.txt",
                                        "size": len("héllo\n".encode())}, res
    assert srv.fread(box, "dir/a.txt") == "héllo\n".encode()
    assert (srv.ws(box) / "dir" / "a.txt").read_bytes() == "héllo\n".encode()
    srv.fput(box, "b.txt", b"from v1\n")
    res = mcp.ok("read_file", {"id": box, "path": "b.txt"})
    assert text(res) == "from v1\n"
    assert res["structuredContent"] == {"path": "b.txt", "size": 8, "content": "from v1\n"}
    # binary: refused, naming the file and its size
    srv.fput(box, "bin.dat", b"\x00\xff\xfe")
    mcp.error("read_file", {"id": box, "path": "bin.dat"}, "bin.dat", "binary", "3 bytes")
    mcp.error("read_file", {"id": box, "path": "missing.txt"}, "missing.txt")
    # list_files: /v1's listing
    res = mcp.ok("list_files", {"id": box, "depth": 2})
    v1 = srv.flist(box, ".", depth=2).json()
    assert res["structuredContent"] == v1, (res, v1)
    t = text(res)
    assert "/workspace/dir/a.txt" in t and "/workspace/b.txt" in t, t
    res = mcp.ok("list_files", {"id": box, "path": "dir"})
    assert [e["name"] for e in res["structuredContent"]["entries"]] == ["a.txt"], res


def test_mcp_apply_patch(srv, mcp, box):
    srv.fput(box, "p.py", b"a = 1\nb = 2\n")
    patch = ("*** Begin Patch\n*** Update File: p.py\n@@\n a = 1\n-b = 2\n+b = 3\n"
             "*** Add File: new.txt\n+new\n*** End Patch\n")
    res = mcp.ok("apply_patch", {"id": box, "patch": patch})
    v = res["structuredContent"]
    assert sorted((f["path"], f["op"]) for f in v["files"]) == [
        ("/workspace/new.txt", "add"), ("/workspace/p.py", "update")], v
    assert srv.fread(box, "p.py") == b"a = 1\nb = 3\n"
    assert srv.fread(box, "new.txt") == b"new\n"
    # all or nothing: the failing hunk changes no file
    bad = ("*** Begin Patch\n*** Add File: other.txt\n+x\n*** Update File: p.py\n@@\n"
           "-no such line\n+y\n*** End Patch\n")
    mcp.error("apply_patch", {"id": box, "patch": bad}, "p.py", "patch_failed")
    assert srv.fread(box, "p.py") == b"a = 1\nb = 3\n"
    assert srv.fstat(box, "other.txt").status == 404


def test_mcp_view_image(srv, mcp, box):
    png = make_png(3, 2)
    srv.fput(box, "i.png", png)
    res = mcp.ok("view_image", {"id": box, "path": "i.png"})
    img = [c for c in res["content"] if c["type"] == "image"]
    assert len(img) == 1 and img[0]["mimeType"] == "image/png", res
    assert base64.b64decode(img[0]["data"]) == png
    v1 = srv.get(f"/v1/sandboxes/{box}/image?path=i.png").json()
    # /v1's answer without the bytes: they are in the image content once
    assert base64.b64decode(v1.pop("data")) == png
    assert res["structuredContent"] == v1, (res, v1)
    srv.fput(box, "t.txt", b"not an image")
    mcp.error("view_image", {"id": box, "path": "t.txt"}, "unsupported_media_type")


def test_mcp_tool_errors_name_the_culprit(srv, mcp, box):
    mcp.error("exec", {"id": "nosuchbox", "cmd": "true"}, "nosuchbox", '"id"')
    mcp.error("read_file", {"id": "nosuchbox", "path": "a"}, "nosuchbox")
    mcp.error("exec", {"id": box}, 'missing argument "cmd"')
    mcp.error("exec", {"id": box, "cmd": "true", "timeout_ms": "soon"}, '"timeout_ms"')
    mcp.error("exec", {"id": box, "cmd": "true", "shell": "bash"}, '"shell"')
    mcp.error("exec", {"id": box, "cmd": []}, '"cmd"')
    mcp.error("list_files", {"id": box, "depth": 100}, '"depth"')
    mcp.error("write_stdin", {"id": box, "process_id": -1, "data": ""}, '"process_id"')
    mcp.error("read_file", {"id": box, "path": "/proc/self/environ"}, "/proc/self/environ",
              "invalid_path")
    mcp.error("write_file", {"id": box, "path": "/etc/passwd", "content": "x"}, "/etc/passwd")
    mcp.error("exec", {"id": box, "cmd": "pwd", "cwd": "/proc"}, "/proc")
    # none of it reached the host or the sandbox
    assert b"root:" in open("/etc/passwd", "rb").read()
    assert mcp.rpc("ping")["result"] == {}


# ---- cancellation -----------------------------------------------------------------------

def _call_in_thread(mcp, msg):
    out = {}

    def run():
        try:
            out["r"] = mcp.post(msg, timeout=60)
        except Exception as e:  # noqa: BLE001 - reported by the test
            out["e"] = e
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out


def test_mcp_cancel_kills_the_exec(srv, mcp, box):
    marker = sleep_marker()
    msg = mcp.req("tools/call", {"name": "exec",
                                 "arguments": {"id": box, "cmd": f"sleep {marker}"}})
    t, out = _call_in_thread(mcp, msg)
    pids = sleep_started(marker)
    assert pids, "the command never started"
    assert any(p["running"] for p in v1_procs(srv, box))
    r = mcp.post({"jsonrpc": "2.0", "method": "notifications/cancelled",
                  "params": {"requestId": msg["id"], "reason": "test"}})
    assert r.status == 202, r
    t.join(20)
    assert not t.is_alive() and "r" in out, out
    # no answer to a cancelled request: its exchange ends with 202, no body
    assert out["r"].status == 202 and out["r"].body == b"", out["r"]
    assert wait_until(lambda: not pids_with(marker), timeout=10), pids_with(marker)
    assert wait_until(lambda: not any(p["running"] for p in v1_procs(srv, box)), timeout=10)
    # the session goes on
    assert mcp.ok("exec", {"id": box, "cmd": "echo on"})["structuredContent"]["stdout"] == "on\n"


def test_mcp_client_gone_kills_the_exec(srv, mcp, box):
    marker = sleep_marker()
    body = json.dumps(mcp.req("tools/call", {"name": "exec", "arguments": {
        "id": box, "cmd": f"sleep {marker}"}})).encode()
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=20)
    s.sendall((f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\n"
               f"Content-Type: application/json\r\nMcp-Session-Id: {mcp.sid}\r\n"
               f"Content-Length: {len(body)}\r\n\r\n").encode() + body)
    assert sleep_started(marker), "the command never started"
    s.close()
    assert wait_until(lambda: not pids_with(marker), timeout=10), pids_with(marker)
    assert mcp.rpc("ping")["result"] == {}


def test_mcp_yielded_exec_outlives_its_call(srv, mcp, box):
    """A detached exec (yield_ms) is not killed by a cancel: like /v1's."""
    marker = sleep_marker()
    res = mcp.ok("exec", {"id": box, "cmd": f"sleep {marker}", "yield_ms": 100})
    pid = res["structuredContent"]["process_id"]
    assert sleep_started(marker)
    mcp.post({"jsonrpc": "2.0", "method": "notifications/cancelled",
              "params": {"requestId": mcp.n}})
    time.sleep(0.3)
    assert pids_with(marker)
    assert srv.delete(f"/v1/sandboxes/{box}/processes/{pid}").status == 204
    assert wait_until(lambda: not pids_with(marker), timeout=10)


def test_mcp_session_end_cancels_its_calls(srv, box):
    m = Mcp(srv)
    marker = sleep_marker()
    msg = m.req("tools/call", {"name": "exec", "arguments": {"id": box, "cmd": f"sleep {marker}"}})
    t, out = _call_in_thread(m, msg)
    assert sleep_started(marker)
    assert m.delete().status == 204
    t.join(20)
    rpc_error(out["r"], 404, -32001, "ended")
    assert wait_until(lambda: not pids_with(marker), timeout=10)


# ---- progress over SSE --------------------------------------------------------------------

def sse_messages(body):
    out = []
    for block in body.decode().split("\n\n"):
        data = [ln[5:].strip() for ln in block.splitlines() if ln.startswith("data:")]
        if data:
            out.append(json.loads("\n".join(data)))
    return out


def test_mcp_exec_progress_as_sse(srv, mcp, box):
    m = mcp.req("tools/call", {"name": "exec", "_meta": {"progressToken": "tok1"},
                               "arguments": {"id": box,
                                             "cmd": "for i in 1 2 3; do echo $i; sleep 0.2; done"}})
    m["params"]["_meta"] = {"progressToken": "tok1"}
    r = mcp.post(m)
    assert r.status == 200 and r.headers["content-type"] == "text/event-stream", r
    msgs = sse_messages(r.body)
    prog = [x for x in msgs if x.get("method") == "notifications/progress"]
    assert prog and all(p["params"]["progressToken"] == "tok1" for p in prog), msgs
    vals = [p["params"]["progress"] for p in prog]
    assert vals == sorted(vals) and len(set(vals)) == len(vals), vals
    assert "".join(p["params"]["message"] for p in prog) == "1\n2\n3\n", prog
    last = msgs[-1]
    assert last["id"] == m["id"] and last["result"]["structuredContent"]["stdout"] == "1\n2\n3\n"
    # without text/event-stream in Accept: one JSON answer
    m2 = mcp.req("tools/call", {"name": "exec", "_meta": {"progressToken": 2},
                                "arguments": {"id": box, "cmd": "echo a"}})
    r = mcp.post(m2, headers={"Accept": "application/json"})
    assert r.status == 200 and r.headers["content-type"].startswith("application/json"), r


# ---- limits ----------------------------------------------------------------------------------

def test_mcp_session_bound_and_idle_expiry():
    d = Daemon("--pool", "0", "--mcp-sessions", "3", "--mcp-idle", "2", token=TOKEN)
    try:
        a, b, c = Mcp(d), Mcp(d), Mcp(d)
        init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                "params": {"protocolVersion": "2025-06-18"}}
        r = request(d.port, "POST", "/mcp", init, {"Authorization": f"Bearer {TOKEN}"})
        rpc_error(r, 503, -32000, "too many MCP sessions")
        assert r.headers.get("retry-after"), r
        assert "mcp-session-id" not in r.headers
        assert b.delete().status == 204
        e = Mcp(d)  # room again
        # sessions in use stay; idle ones end
        for _ in range(3):
            time.sleep(0.8)
            assert a.rpc("ping")["result"] == {}
        rpc_error(c.post({"jsonrpc": "2.0", "id": 9, "method": "ping"}), 404, -32001)
        rpc_error(e.post({"jsonrpc": "2.0", "id": 9, "method": "ping"}), 404, -32001)
        assert a.rpc("ping")["result"] == {}
        Mcp(d)
    finally:
        d.stop()


# ---- last: the module's daemon stops cleanly -------------------------------------------------

SANITIZER_MARKS = ("AddressSanitizer", "LeakSanitizer", "runtime error:", "UndefinedBehavior")


def test_zz_mcp_daemon_stops_cleanly(srv):
    """After the tests above, with sessions still open and a call in
    flight: SIGTERM ends the daemon with status 0 and no sanitizer report
    (the ASan build's leak check at exit covers the door's state)."""
    m = Mcp(srv)
    sid = m.ok("sandbox_create")["structuredContent"]["id"]
    srv.agent_pid(sid)
    marker = sleep_marker()
    t, out = _call_in_thread(m, m.req("tools/call", {"name": "exec", "arguments": {
        "id": sid, "cmd": f"sleep {marker}"}}))
    assert sleep_started(marker)
    rc = srv.term()
    t.join(20)
    log = srv.log()
    assert not [s for s in SANITIZER_MARKS if s in log], log[-6000:]
    assert rc == 0, (rc, log[-3000:])
