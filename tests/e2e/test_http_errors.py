"""Every error of `moat serve` is the API's JSON shape, also those libevent
(2.1) would answer itself with an HTML page: a body announced or grown
(chunked) over a route's limit, a malformed request head, an unknown
method, an odd framing. A refused body is not buffered: the answer comes right
after the head (or the chunk size) that said too much; a body of known
framing is then dropped as it comes and the connection lives on, a malformed
head ends the connection.
"""
import json
import os
import re
import socket

import pytest

from test_serve import AGENT, SERVE, Daemon, healthz_ok, raw_http

pytestmark = pytest.mark.skipif(
    not (os.access(SERVE, os.X_OK) and os.access(AGENT, os.X_OK)),
    reason="moat-serve / moat-agent not built next to moat")

TOKEN = "t0ken-for-http-errors"
CHUNKED = b"Transfer-Encoding: chunked\r\n"


@pytest.fixture(scope="module")
def d():
    d = Daemon("--max-file", "64K", "--pool", "0")
    yield d
    d.stop()


@pytest.fixture(scope="module")
def tokd():
    d = Daemon("--pool", "0", token=TOKEN)
    yield d
    d.stop()


def responses(out):
    """[(status, headers (lower-case), body)] of a byte stream of replies."""
    res = []
    while out:
        head, sep, rest = out.partition(b"\r\n\r\n")
        if not sep:
            raise AssertionError(f"truncated reply: {out[:300]!r}")
        lines = head.split(b"\r\n")
        m = re.match(rb"HTTP/1\.[01] (\d{3}) ", lines[0])
        assert m, lines[0]
        hdrs = {}
        for l in lines[1:]:
            k, _, v = l.partition(b":")
            hdrs[k.strip().lower().decode()] = v.strip().decode()
        n = int(hdrs.get("content-length", "0"))
        res.append((int(m.group(1)), hdrs, rest[:n]))
        out = rest[n:]
    return res


def one_error(out, status, code, closed=True):
    """A single JSON error reply with that status and code; with closed,
    the connection was closed after it."""
    rs = responses(out)
    assert len(rs) == 1, out[:600]
    st, h, body = rs[0]
    assert st == status, out[:600]
    assert h["content-type"] == "application/json", out[:600]
    assert json.loads(body)["error"]["code"] == code, body
    if closed:
        assert h.get("connection", "").lower() == "close", h
    return json.loads(body)["error"]["message"]


def statuses(out):
    rs = responses(out)
    for st, h, body in rs:
        assert h.get("content-type", "application/json") == "application/json", h
        if st >= 400:
            assert json.loads(body)["error"]["code"], body
    return [r[0] for r in rs]


def put_head(sid, length, extra=b""):
    return (f"PUT /v1/sandboxes/{sid}/files?path=big.bin HTTP/1.1\r\nHost: x\r\n"
            f"Content-Length: {length}\r\n").encode() + extra + b"\r\n"


def read_replies(s, n):
    """Read until n complete replies came (the connection stays open)."""
    out = b""
    while True:
        try:
            if len(responses(out)) >= n:
                return out
        except AssertionError:
            pass
        chunk = s.recv(65536)
        if not chunk:
            return out
        out += chunk


def test_body_announced_over_1gib(d):
    # only the head is sent: the answer cannot have waited for the body
    out = raw_http(d.port, b"PUT /v1/sandboxes/x/files?path=a HTTP/1.1\r\nHost: x\r\n"
                           b"Content-Length: 4294967296\r\n\r\n")
    one_error(out, 413, "too_large", closed=False)
    # asking to close: closed right after the answer
    out = raw_http(d.port, b"PUT /v1/sandboxes/x/files?path=a HTTP/1.1\r\nHost: x\r\n"
                           b"Connection: close\r\nContent-Length: 4294967296\r\n\r\n",
                   until_close=True)
    one_error(out, 413, "too_large")
    healthz_ok(d)


def test_body_announced_over_the_routes_limit(d):
    sid = d.create()["id"]
    try:
        # --max-file 64K: a file one byte over is refused on its head alone
        msg = one_error(raw_http(d.port, put_head(sid, (64 << 10) + 1)), 413, "too_large",
                        closed=False)
        assert "65536" in msg, msg
        # JSON routes: 16 MiB
        out = raw_http(d.port, b"POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\n"
                               b"Content-Length: 16777217\r\n\r\n")
        one_error(out, 413, "too_large", closed=False)
        # with Expect: 100-continue the client is told before it sends
        out = raw_http(d.port, put_head(sid, 1 << 20, b"Expect: 100-continue\r\n"))
        assert b"100 Continue" not in out
        one_error(out, 413, "too_large", closed=False)
        # the limit itself passes
        d.fput(sid, "ok.bin", b"y" * (64 << 10))
        assert d.fread(sid, "ok.bin") == b"y" * (64 << 10)
        assert d.sh(sid, "ls").split() == ["ok.bin"]
    finally:
        d.rm(sid)


def test_refused_body_sent_anyway_keeps_the_connection(d):
    """A client that sends the whole refused body before reading gets the
    answer, and its next request on the connection is served: the body was
    dropped as it came (framed by its length), not buffered, not parsed."""
    sid = d.create()["id"]
    try:
        inner = put_head(sid, 5) + b"owned"  # a request hidden in the body
        body = inner + b"x" * ((200 << 10) - len(inner))
        s = socket.create_connection(("127.0.0.1", d.port), timeout=30)
        try:
            s.sendall(put_head(sid, len(body)) + body +
                      b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            out = read_replies(s, 2)
            assert statuses(out) == [413, 200], out[:800]
        finally:
            s.close()
        # chunked: over the limit, then the rest of its chunks, then another
        chunk = b"8000\r\n" + b"z" * 0x8000 + b"\r\n"
        head = (f"PUT /v1/sandboxes/{sid}/files?path=c.bin HTTP/1.1\r\nHost: x\r\n").encode()
        s = socket.create_connection(("127.0.0.1", d.port), timeout=30)
        try:
            s.sendall(head + CHUNKED + b"\r\n" + chunk * 6 + b"0\r\nX-T: 1\r\n\r\n" +
                      b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            out = read_replies(s, 2)
            assert statuses(out) == [413, 200], out[:800]
        finally:
            s.close()
        assert d.sh(sid, "ls").split() == [], "nothing of the refused uploads was written"
    finally:
        d.rm(sid)


def test_chunked_body_over_the_limit(d):
    sid = d.create()["id"]
    try:
        # a files PUT: 64 KiB in chunks passes, one byte more is refused
        chunk = b"4000\r\n" + b"z" * 0x4000 + b"\r\n"
        head = (f"PUT /v1/sandboxes/{sid}/files?path=c.bin HTTP/1.1\r\nHost: x\r\n").encode()
        out = raw_http(d.port, head + CHUNKED + b"\r\n" + chunk * 4 + b"0\r\n\r\n")
        assert responses(out)[0][0] == 204, out[:300]
        assert d.fread(sid, "c.bin") == b"z" * (64 << 10)
        out = raw_http(d.port, head + CHUNKED + b"\r\n" + chunk * 4 + b"1\r\n")
        one_error(out, 413, "too_large", closed=False)
        # a single chunk announced over the JSON limit
        out = raw_http(d.port, b"POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\n" + CHUNKED +
                       b"\r\n1000001\r\n")
        one_error(out, 413, "too_large", closed=False)
        # nothing of the refused upload was written
        assert d.sh(sid, "ls").split() == ["c.bin"]
        assert d.fread(sid, "c.bin") == b"z" * (64 << 10)
    finally:
        d.rm(sid)


def test_oversized_after_a_served_request_on_one_connection(d):
    s = socket.create_connection(("127.0.0.1", d.port), timeout=30)
    try:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert statuses(read_replies(s, 1)) == [200]
        # the same (kept-alive) connection: a second, oversized request
        s.sendall(b"PUT /v1/sandboxes/x/files?path=a HTTP/1.1\r\nHost: x\r\n"
                  b"Content-Length: 2147483648\r\n\r\n")
        one_error(read_replies(s, 1), 413, "too_large", closed=False)
    finally:
        s.close()
    # pipelined: answered in order
    body = b"{" * (17 << 20)
    out = raw_http(d.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
                           b"POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\n" +
                           f"Content-Length: {len(body)}\r\n\r\n".encode() + body +
                           b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                   until_close=True, timeout=60)
    assert statuses(out) == [200, 413, 200], out[:800]
    # a chunked refusal after a good chunked request on the same connection
    out = raw_http(d.port, b"POST /v1/sandboxes/none/exec HTTP/1.1\r\nHost: x\r\n" + CHUNKED +
                   b"\r\n2\r\n{}\r\n0\r\n\r\n"
                   b"POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\n" + CHUNKED +
                   b"\r\n1000001\r\n", timeout=5, until_close=True)
    assert statuses(out) == [404, 413], out[:800]
    healthz_ok(d)


MALFORMED = [
    (b"FOO / HTTP/1.1\r\nHost: x\r\n\r\n", 405, "method_not_allowed"),
    (b"GET /healthz HTTP/9.9\r\nHost: x\r\n\r\n", 400, "invalid_request"),
    (b"GARBAGE\r\n\r\n", 400, "invalid_request"),
    (b"GET /healthz HTTP/1.1\r\nHost: x\r\n folded\r\n\r\n", 400, "invalid_request"),
    (b"GET /healthz HTTP/1.1\r\nHost: x\r\nNo-Colon\r\n\r\n", 400, "invalid_request"),
    (b"GET /healthz HTTP/1.1\r\nHost: x\r\nX: a\rb\r\n\r\n", 400, "invalid_request"),
    (b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 70000 + b"\r\n\r\n",
     400, "invalid_request"),
    (b"GET /healthz HTTP/1.1\r\nHost: x\r\nExpect: magic\r\n\r\n", 400, "invalid_request"),
    (b"POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n"
     b"Content-Length: 3\r\n\r\n{}", 400, "invalid_request"),
    (b"POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nContent-Length: +2\r\n\r\n{}",
     400, "invalid_request"),
    (b"POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n" + CHUNKED +
     b"\r\n2\r\n{}\r\n0\r\n\r\n", 400, "invalid_request"),
    (b"POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n",
     400, "invalid_request"),
    (b"HEAD /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nGET /", 400,
     "invalid_request"),
    # evhttp would not see "\tchunked" as chunked: the framings would differ
    (b"POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nTransfer-Encoding:\tchunked\r\n\r\n"
     b"40\r\nPUT /v1/sandboxes/x/files?path=a HTTP/1.1\r\nContent-Length: 99999999999\r\n\r\n",
     400, "invalid_request"),
    # chunked framings evhttp would read its own way (or answer in HTML)
    (b"POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\n" + CHUNKED + b"\r\n2;ext=1\r\n{}\r\n0\r\n\r\n",
     400, "invalid_request"),
    (b"POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\n" + CHUNKED + b"\r\n0x2\r\n{}\r\n0\r\n\r\n",
     400, "invalid_request"),
    (b"POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\n" + CHUNKED + b"\r\nZZ\r\n", 400,
     "invalid_request"),
    (b"POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\n" + CHUNKED + b"\r\n2\r\n{}xx\r\n0\r\n\r\n",
     400, "invalid_request"),
]


@pytest.mark.parametrize("raw,status,code", MALFORMED,
                         ids=[f"m{i}" for i in range(len(MALFORMED))])
def test_malformed_requests_get_json_errors(d, raw, status, code):
    out = raw_http(d.port, raw, until_close=True)
    assert b"<HTML" not in out.upper(), out[:400]
    one_error(out, status, code)
    healthz_ok(d)


def test_refusals_respect_the_token(tokd):
    big = (b"PUT /v1/sandboxes/x/files?path=a HTTP/1.1\r\nHost: x\r\n"
           b"Content-Length: 4294967296\r\n")
    # no token: 401 (nothing about the route), still JSON
    one_error(raw_http(tokd.port, big + b"\r\n"), 401, "unauthorized", closed=False)
    auth = f"Authorization: Bearer {TOKEN}\r\n".encode()
    one_error(raw_http(tokd.port, big + auth + b"\r\n"), 413, "too_large", closed=False)
    # a malformed head is refused before any token check
    one_error(raw_http(tokd.port, b"FOO / HTTP/1.1\r\n\r\n", until_close=True),
              405, "method_not_allowed")
    healthz_ok(tokd)


@pytest.fixture(scope="module")
def smalld():
    d = Daemon("--max-file", "8", "--pool", "0")
    yield d
    d.stop()


def test_two_refusals_in_one_read_are_both_answered(smalld):
    """Two over-limit requests arriving together (one read, before the router
    saw the first): each is answered as refused. Found by fuzz_http_guard:
    the second refusal overwrote the first, whose stand-in then went to the
    router as an ordinary request."""
    body = b"123456789"  # one over --max-file 8
    req = put_head("x", len(body)) + body
    s = socket.create_connection(("127.0.0.1", smalld.port), timeout=30)
    try:
        s.sendall(req + req)
        out = read_replies(s, 2)
    finally:
        s.close()
    rs = responses(out)
    assert [r[0] for r in rs] == [413, 413], out[:800]
    for st, h, b in rs:
        assert json.loads(b)["error"]["code"] == "too_large", b
    healthz_ok(smalld)
