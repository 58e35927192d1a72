"""Regression tests for what the fuzz targets (tests/fuzz, `make fuzz`) found
in `moat serve`, against a real daemon: error answers that quote the client
keep the API's JSON shape whatever bytes they quote, and a path or query
parameter that is not UTF-8 is the client's error, not the sandbox's."""
import socket

import pytest

from test_serve import Daemon, assert_error, pytestmark  # noqa: F401 (skip rule)


@pytest.fixture(scope="module")
def srv():
    d = Daemon()
    yield d
    d.stop()


def raw_request(port, head):
    """Send a request head byte for byte (http.client would escape it)."""
    with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
        s.sendall(head)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), body


def test_route_with_bytes_that_are_not_utf8(srv):
    # was: 500 "out of memory", the body ending in a NUL byte
    status, body = raw_request(
        srv.port, b"GET /v1/\xff\xfe/x HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
    assert status == 404, body
    assert body.startswith(b'{"error":{"code":"not_found"'), body
    assert b"\0" not in body, body
    status, body = raw_request(
        srv.port, b"GET /v1/sandboxes/\xc3 HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
    assert status == 404 and b'"not_found"' in body and b"\0" not in body, body


def test_unknown_field_cut_inside_a_character(srv):
    # the message quotes 64 bytes of the key: the cut fell inside an "é"
    key = "a" + "é" * 40
    r = srv.post("/v1/sandboxes", {key: 1})
    assert_error(r, 400, "invalid_request", "unknown field")
    r = srv.post("/v1/sandboxes", {"limits": {key: 1}})
    assert_error(r, 400, "invalid_request", "limits: unknown field")
    assert srv.ids() == []


def test_parameters_that_are_not_utf8(srv):
    sid = srv.create()["id"]
    try:
        # was: 409 "sandbox ... is not running" (the agent's request could
        # not be made), for a sandbox that runs
        for path in ("files", "files/stat", "files/list", "image"):
            r = srv.get(f"/v1/sandboxes/{sid}/{path}?path=%ff")
            assert_error(r, 400, "invalid_path", "UTF-8")
        r = srv.put(f"/v1/sandboxes/{sid}/files?path=a%c3", b"x")
        assert_error(r, 400, "invalid_path", "UTF-8")
        r = srv.delete(f"/v1/sandboxes/{sid}/processes/7?signal=%ff")
        assert_error(r, 400, "invalid_request", "UTF-8")
        r = srv.get(f"/v1/sandboxes/{sid}")
        assert r.status == 200 and r.json()["state"] == "running", r
        assert srv.fput(sid, "é.txt", b"ok") is not None
        assert srv.fread(sid, "é.txt") == b"ok"
    finally:
        srv.delete(f"/v1/sandboxes/{sid}")


def test_agent_error_cut_inside_a_character(srv):
    # the agent's message quotes the path and is cut at 1023 bytes: cut
    # inside an "é" it was no JSON string, and the agent closed the
    # daemon's connection (409 "stopped", every other call failed with it)
    sid = srv.create()["id"]
    try:
        for pre in ("a", "ab"):
            r = srv.fget(sid, pre + "é" * 700)
            assert 400 <= r.status < 500 and r.status != 409, r
            assert_error(r, r.status)
        assert srv.ex(sid, ["true"])["exit_code"] == 0
    finally:
        srv.delete(f"/v1/sandboxes/{sid}")
