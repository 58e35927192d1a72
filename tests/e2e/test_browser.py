"""A web page in the user's browser must not drive moat serve (src/serve/
browser.c, checked in http.c before any door): a foreign Origin is refused
on every door (/v1, /mcp, E2B's), and a daemon without a token also refuses
a foreign Host (a DNS-rebound page's same-origin GET carries no Origin).
Asserted on the daemon's state, not only on the status: no sandbox was
made, the file was not written, the listing did not leave."""
import os
import subprocess

import pytest

from conftest import uid_tag
from test_serve import AGENT, MOAT, SERVE, Daemon, assert_error, q

pytestmark = pytest.mark.skipif(
    not (os.access(SERVE, os.X_OK) and os.access(AGENT, os.X_OK)),
    reason="moat-serve / moat-agent not found")

EVIL = ["http://evil.example", "https://evil.example:7070", "null", "file://",
        "http://127.0.0.1.evil.example", "http://localhost.evil.example", "chrome-extension://x"]


@pytest.fixture(scope="module")
def open_daemon():
    """No token: loopback only, the case a browser page can reach."""
    d = Daemon("--allow-origin", "https://console.example:8443")
    yield d
    d.stop()


@pytest.fixture(scope="module")
def token_daemon():
    d = Daemon(token="tok-" + uid_tag())
    yield d
    d.stop()


def count(d):
    r = d.get("/v1/sandboxes")
    assert r.status == 200, r
    return len(r.json()["sandboxes"])


def test_foreign_origin_refused_on_every_door(open_daemon):
    d = open_daemon
    before = count(d)
    for o in EVIL:
        r = d.post("/v1/sandboxes", {}, headers={"Origin": o})
        assert_error(r, 403, "forbidden", "Origin")
        # a text/plain "simple" POST, which browsers send without a preflight
        r = d.post("/v1/sandboxes", b"{}", headers={"Origin": o, "Content-Type": "text/plain"})
        assert_error(r, 403, "forbidden", "Origin")
        r = d.post("/mcp", {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                            "params": {"protocolVersion": "2025-06-18"}},
                   headers={"Origin": o, "Accept": "application/json, text/event-stream"})
        assert r.status == 403 and "mcp-session-id" not in r.headers, r
        r = d.post("/sandboxes", {"templateID": "base"}, headers={"Origin": o})
        assert r.status == 403, r
    assert count(d) == before


def test_foreign_origin_cannot_touch_a_sandbox(open_daemon):
    d = open_daemon
    sid = d.create()["id"]
    try:
        p = f"/v1/sandboxes/{sid}/files?path={q('planted.txt')}"
        r = d.put(p, b"x", headers={"Origin": "http://evil.example"})
        assert_error(r, 403, "forbidden", "Origin")
        assert not (d.ws(sid) / "planted.txt").exists()
        r = d.post(f"/v1/sandboxes/{sid}/exec", {"cmd": "touch /workspace/ran"},
                   headers={"Origin": "http://evil.example"})
        assert_error(r, 403, "forbidden")
        assert not (d.ws(sid) / "ran").exists()
        r = d.delete(f"/v1/sandboxes/{sid}", headers={"Origin": "http://evil.example"})
        assert_error(r, 403, "forbidden")
        assert d.get(f"/v1/sandboxes/{sid}").status == 200
    finally:
        d.rm(sid)


def test_loopback_and_allowed_origins_pass(open_daemon):
    d = open_daemon
    for o in (f"http://127.0.0.1:{d.port}", f"http://localhost:{d.port}", "http://[::1]",
              "https://console.example:8443", "HTTPS://CONSOLE.EXAMPLE:8443"):
        assert d.get("/v1/sandboxes", headers={"Origin": o}).status == 200, o
    # the allowed origin is exact: another port or host is not it
    for o in ("https://console.example", "https://console.example:8444",
              "http://console.example:8443"):
        assert_error(d.get("/v1/sandboxes", headers={"Origin": o}), 403, "forbidden")


def test_rebound_host_refused_without_a_token(open_daemon):
    d = open_daemon
    sid = d.create()["id"]
    try:
        (d.ws(sid) / "notes.txt").write_text("private\n")
        for h in (f"evil.example:{d.port}", "evil.example", f"127.0.0.1.nip.example:{d.port}",
                  "localhost.evil.example"):
            r = d.get("/v1/sandboxes", headers={"Host": h})
            assert_error(r, 403, "forbidden", "Host")
            assert sid.encode() not in r.body
            r = d.get(f"/v1/sandboxes/{sid}/files?path=notes.txt", headers={"Host": h})
            assert_error(r, 403, "forbidden", "Host")
            assert b"private" not in r.body
        for h in (f"127.0.0.1:{d.port}", f"localhost:{d.port}", "[::1]", "127.0.0.1"):
            assert d.get("/v1/sandboxes", headers={"Host": h}).status == 200, h
    finally:
        d.rm(sid)


def test_a_token_daemon_keeps_any_host_but_no_foreign_origin(token_daemon):
    d = token_daemon
    # a proxy or a DNS name in front of it is fine: the token is the guard
    r = d.get("/v1/sandboxes", headers={"Host": "moat.internal.example"})
    assert r.status == 200, r
    # a page holding the token (pasted into a web app) still cannot
    assert_error(d.get("/v1/sandboxes", headers={"Origin": "http://evil.example"}), 403, "forbidden")
    # and without the token the Host is not what answers
    r = d.get("/v1/sandboxes", headers={"Host": "evil.example"}, auth=False)
    assert_error(r, 401, "unauthorized")


def test_allow_origin_flag_is_checked(tmp_path):
    for bad in ("console.example", "https://console.example/app", "ftp://x", "https://",
                "https://user@console.example"):
        r = subprocess.run([MOAT, "serve", "--listen", "127.0.0.1:0", "--data", str(tmp_path),
                            "--allow-origin", bad], capture_output=True, timeout=30,
                           stdin=subprocess.DEVNULL)
        assert r.returncode != 0, bad
        assert b"--allow-origin " + bad.encode() in r.stderr, r.stderr
