"""End-to-end tests of the MCP door's edges found in review: an exec that
streams progress (SSE) whose client hangs up, is cancelled, whose session is
deleted or whose sandbox is deleted mid-call; a cancel naming another
session's request; read_file's bound; no host-file
existence oracle in a manifest's local sources. Each time the process is gone on the
host, the daemon keeps serving, and (at the end) no sanitizer report."""
import json
import socket
import time

from conftest import pids_with, sleep_marker, sleep_started, wait_until
from test_mcp import TOKEN, Mcp, _call_in_thread, box, mcp, srv  # noqa: F401 (fixtures)

def raw_sse_exec(srv, mcp, box, cmd):
    body = json.dumps({"jsonrpc": "2.0", "id": 777, "method": "tools/call", "params": {
        "name": "exec", "_meta": {"progressToken": "p"}, "arguments": {"id": box, "cmd": cmd}}}).encode()
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=20)
    s.sendall((f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\n"
               f"Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
               f"Mcp-Session-Id: {mcp.sid}\r\n"
               f"Content-Length: {len(body)}\r\n\r\n").encode() + body)
    got = b""
    while b"notifications/progress" not in got:
        c = s.recv(65536)
        assert c, got
        got += c
    return s

def test_mcp_review_sse_hangup(srv, mcp, box):
    marker = sleep_marker()
    s = raw_sse_exec(srv, mcp, box, f"echo hi; sleep {marker}")
    assert sleep_started(marker)
    s.close()
    assert wait_until(lambda: not pids_with(marker), timeout=10), pids_with(marker)
    assert mcp.rpc("ping")["result"] == {}

def test_mcp_review_sse_cancel(srv, mcp, box):
    marker = sleep_marker()
    s = raw_sse_exec(srv, mcp, box, f"echo hi; sleep {marker}")
    assert sleep_started(marker)
    r = mcp.post({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 777}})
    assert r.status == 202
    s.settimeout(10)
    rest = b""
    while not rest.endswith(b"0\r\n\r\n"):
        c = s.recv(65536)
        if not c:
            break
        rest += c
    s.close()
    # no answer to a cancelled request: the stream just ends
    assert b'"id":777' not in rest, rest
    assert wait_until(lambda: not pids_with(marker), timeout=10), pids_with(marker)
    assert mcp.rpc("ping")["result"] == {}

def read_rest(s, timeout=10):
    """What a raw SSE answer still sends until its last chunk (or timeout); closes s."""
    s.settimeout(timeout)
    rest = b""
    try:
        while not rest.endswith(b"0\r\n\r\n"):
            c = s.recv(65536)
            if not c:
                break
            rest += c
    except socket.timeout:
        pass
    s.close()
    return rest


def test_mcp_review_sse_session_delete(srv, box):
    m = Mcp(srv)
    marker = sleep_marker()
    s = raw_sse_exec(srv, m, box, f"echo hi; sleep {marker}")
    assert sleep_started(marker)
    assert m.delete().status == 204
    rest = read_rest(s)
    assert b"ended" in rest, rest
    assert wait_until(lambda: not pids_with(marker), timeout=10)

def test_mcp_review_cross_session_cancel(srv, mcp, box):
    """Session B cancelling request id N does not touch session A's N."""
    other = Mcp(srv)
    msg = mcp.req("tools/call", {"name": "exec", "arguments": {"id": box, "cmd": "sleep 1; echo done"}})
    t, out = _call_in_thread(mcp, msg)
    time.sleep(0.3)
    r = other.post({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": msg["id"]}})
    assert r.status == 202
    t.join(20)
    assert out["r"].status == 200, out
    assert out["r"].json()["result"]["structuredContent"]["stdout"] == "done\n", out
    other.delete()

def test_mcp_review_sandbox_delete_mid_exec(srv, mcp, box):
    other = Mcp(srv)
    marker = sleep_marker()
    msg = mcp.req("tools/call", {"name": "exec", "arguments": {"id": box, "cmd": f"sleep {marker}"}})
    t, out = _call_in_thread(mcp, msg)
    assert sleep_started(marker)
    other.ok("sandbox_delete", {"id": box})
    t.join(20)
    assert not t.is_alive()
    res = out["r"].json()["result"]
    assert res["isError"] is True and box in res["content"][0]["text"], res
    assert wait_until(lambda: not pids_with(marker), timeout=10)
    assert mcp.rpc("ping")["result"] == {}
    other.delete()

def test_mcp_review_sandbox_delete_mid_sse(srv, mcp, box):
    other = Mcp(srv)
    marker = sleep_marker()
    s = raw_sse_exec(srv, mcp, box, f"echo hi; sleep {marker}")
    other.ok("sandbox_delete", {"id": box})
    rest = read_rest(s)
    assert b'"isError":true' in rest and b'"id":777' in rest, rest
    assert wait_until(lambda: not pids_with(marker), timeout=10)
    assert mcp.rpc("ping")["result"] == {}
    other.delete()

def test_mcp_review_read_file_is_bounded(srv, mcp, box):
    """A big file is an error naming its size, not gigabytes of daemon
    memory (its text goes out twice, control bytes escaped 6 to 1)."""
    mcp.ok("exec", {"id": box, "cmd": "head -c 5000000 /dev/zero | tr '\\0' '\\1' > big; "
                                      "head -c 1000000 /dev/zero | tr '\\0' a > ok"})
    t = mcp.error("read_file", {"id": box, "path": "big"}, "5000000 bytes", "4194304", "too_large")
    assert "\x01" not in t
    res = mcp.ok("read_file", {"id": box, "path": "ok"})
    assert res["structuredContent"]["size"] == 1000000
    # the file is there, as /v1 sees it
    r = srv.get(f"/v1/sandboxes/{box}/files/stat?path=big")
    assert r.status == 200 and r.json()["size"] == 5000000, r
    assert mcp.rpc("ping")["result"] == {}


def test_mcp_review_host_paths_are_no_oracle(srv, mcp):
    """A manifest's local_file outside every --allow-host-path directory is
    refused the same way whether the host file exists or not: the model
    writing sandbox_create's arguments learns nothing of the host."""
    answers = []
    for p in ["/etc/hostname", "/nonexistent-" + TOKEN + "/id_rsa"]:
        res = mcp.call("sandbox_create", {"manifest": {"entries": {"x": {"type": "local_file",
                                                                      "src": p}}}})
        assert res.get("isError") is True, res
        answers.append((res["structuredContent"]["error"]["code"],
                        res["structuredContent"]["error"]["message"].replace(p, "P")))
        # /v1 answers alike
        r = srv.post("/v1/sandboxes", {"manifest": {"entries": {"x": {"type": "local_file",
                                                                       "src": p}}}})
        assert r.status == 403, r
    assert answers[0] == answers[1], answers
    assert "not under an --allow-host-path directory" in answers[0][1], answers
    # and an image: a host directory, a file, a missing path are one answer
    answers = []
    for p in ["/root", "/etc/hostname", "/nonexistent-" + TOKEN]:
        res = mcp.call("sandbox_create", {"image": p})
        assert res.get("isError") is True, res
        answers.append((res["structuredContent"]["error"]["code"],
                        res["structuredContent"]["error"]["message"].replace(p, "P")))
    assert answers[0] == answers[1] == answers[2], answers
    assert answers[0][0] == "forbidden", answers


def test_zz_mcp_review_clean(srv):
    srv.stop()
    for mark in ("AddressSanitizer", "LeakSanitizer", "runtime error:"):
        assert mark not in srv.log(), srv.log()[-3000:]
