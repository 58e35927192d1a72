"""Back-pressure of the daemon's streams (src/serve/core.c: a stream's next
wait to the agent is held while the door's client has more than
CORE_BACKLOG_HIGH bytes unread).

A client that starts a stream of endless output and never reads must not
make the daemon's memory grow without bound: the agent keeps at most
max_output and drops the rest, the daemon holds. Asserted on the daemon's
VmRSS, then that it still serves (healthz, a normal exec) once the client
left. Before back-pressure the daemon grew by ~25 MB/s here.
"""
import json
import os
import socket
import time

import pytest

from test_e2b_envd import API_KEY, ENVD_PORT, create_sandbox, envelope, stdout_of
from test_serve import AGENT, SERVE, Daemon, request

pytestmark = pytest.mark.skipif(
    not (os.access(SERVE, os.X_OK) and os.access(AGENT, os.X_OK)),
    reason="moat-serve / moat-agent not found")

STALL_S = 8
MAX_GROWTH_KB = 150 * 1024


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError(f"no VmRSS for {pid}")


@pytest.fixture(scope="module")
def e2b():
    d = Daemon(token=API_KEY)
    yield d
    d.stop()


def stalled_client(port, head, body):
    """A client that sends its request and then does not read (a small
    receive buffer, so the kernel does not absorb the stream either)."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)
    s.connect(("127.0.0.1", port))
    s.sendall(head.encode() + body)
    return s


def watch_rss(d):
    pid = d.proc.pid
    before = rss_kb(pid)
    peak = before
    t0 = time.monotonic()
    while time.monotonic() - t0 < STALL_S:
        time.sleep(0.25)
        assert d.proc.poll() is None, d.log()
        peak = max(peak, rss_kb(pid))
    return before, peak


def read_some(s, n=1 << 20):
    s.settimeout(10)
    got = 0
    while got < n:
        b = s.recv(65536)
        if not b:
            break
        got += len(b)
    return got


def still_serves(d, e):
    assert request(d.port, "GET", "/healthz", timeout=10).status == 200
    msg = {"process": {"cmd": "/bin/bash", "args": ["-c", "echo still here"]}}
    h = {"Content-Type": "application/connect+json", "Connect-Protocol-Version": "1"}
    r = e.raw("POST", "/process.Process/Start", envelope(msg), h, timeout=30)
    assert r.status == 200, r
    from test_e2b_envd import frames
    assert stdout_of(frames(r.body)) == b"still here\n"


def test_envd_stream_of_an_unread_client_is_bounded(e2b):
    e = create_sandbox(e2b)
    body = envelope({"process": {"cmd": "/bin/bash",
                                 "args": ["-c", "timeout 25 cat /dev/zero"]}})
    head = ("POST /process.Process/Start HTTP/1.1\r\n"
            f"Host: 127.0.0.1:{e2b.port}\r\n"
            f"E2b-Sandbox-Id: {e.sid}\r\nE2b-Sandbox-Port: {ENVD_PORT}\r\n"
            f"X-Access-Token: {e.token}\r\n"
            "Content-Type: application/connect+json\r\nConnect-Protocol-Version: 1\r\n"
            f"Content-Length: {len(body)}\r\n\r\n")
    s = stalled_client(e2b.port, head, body)
    try:
        before, peak = watch_rss(e2b)
        assert peak - before < MAX_GROWTH_KB, \
            f"daemon RSS grew {(peak - before) // 1024} MB in {STALL_S} s of an unread stream"
        # the stream still flows once read
        assert read_some(s) >= 1 << 20
    finally:
        s.close()
    still_serves(e2b, e)
    request(e2b.port, "DELETE", f"/sandboxes/{e.sid}", None, {"X-API-KEY": API_KEY})


def test_sse_exec_of_an_unread_client_is_bounded(e2b):
    r = request(e2b.port, "POST", "/v1/sandboxes", {},
                {"Authorization": f"Bearer {API_KEY}"})
    assert r.status in (200, 201), r
    sid = r.json()["id"]
    # the default max_output (1 MiB): one agent reply may carry all the
    # agent buffered (up to max_output, x6 as JSON "\u0000"), a bound of
    # its own that back-pressure does not lower
    body = json.dumps({"cmd": "timeout 25 cat /dev/zero"}).encode()
    head = (f"POST /v1/sandboxes/{sid}/exec HTTP/1.1\r\n"
            f"Host: 127.0.0.1:{e2b.port}\r\nAuthorization: Bearer {API_KEY}\r\n"
            "Accept: text/event-stream\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n")
    s = stalled_client(e2b.port, head, body)
    try:
        before, peak = watch_rss(e2b)
        assert peak - before < MAX_GROWTH_KB, \
            f"daemon RSS grew {(peak - before) // 1024} MB in {STALL_S} s of an unread stream"
        assert read_some(s) >= 1 << 20
    finally:
        s.close()
    assert request(e2b.port, "GET", "/healthz", timeout=10).status == 200
    r = request(e2b.port, "POST", f"/v1/sandboxes/{sid}/exec", {"cmd": "echo ok"},
                {"Authorization": f"Bearer {API_KEY}"}, timeout=30)
    assert r.status == 200 and r.json()["stdout"] == "ok\n", r
    request(e2b.port, "DELETE", f"/v1/sandboxes/{sid}", None,
            {"Authorization": f"Bearer {API_KEY}"})
