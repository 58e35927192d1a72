"""docs/API.md is kept true: every endpoint it documents is routed by the
daemon (answers something other than "no such route" / 405 with a real
sandbox), and every route segment the router knows is documented."""
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import tempfile
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
DOC = os.path.join(HERE, "API.md")
ROUTER = os.path.join(HERE, "api.c")


def documented():
    """(method, path) pairs written as `METHOD /path` in the document."""
    text = open(DOC, encoding="utf-8").read()
    out = set()
    for m in re.finditer(r"`(GET|POST|PUT|DELETE) (/[^`?\s]*)", text):
        out.add((m.group(1), m.group(2)))
    return sorted(out)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest.fixture(scope="module")
def daemon():
    binary = os.environ.get("MOAT_BIN")
    if not binary:
        pytest.skip("MOAT_BIN not set")
    data = tempfile.mkdtemp(prefix="moat-apidoc-")
    port = free_port()
    log = open(os.path.join(data, "log"), "w")
    p = subprocess.Popen([binary, "serve", "--listen", f"127.0.0.1:{port}", "--data",
                          os.path.join(data, "d"), "--pool", "0"], stdout=log, stderr=log)
    end = time.monotonic() + 30
    while True:
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/healthz")
            if c.getresponse().status == 200:
                break
        except OSError:
            pass
        if time.monotonic() > end or p.poll() is not None:
            p.kill()
            with open(os.path.join(data, "log")) as f:
                pytest.fail("moat serve did not come up: " + f.read()[-2000:])
        time.sleep(0.05)
    yield port
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("GET", "/v1/sandboxes")
    for sb in json.loads(c.getresponse().read())["sandboxes"]:
        c.request("DELETE", f"/v1/sandboxes/{sb['id']}")
        c.getresponse().read()
    p.send_signal(signal.SIGTERM)
    p.wait(10)
    subprocess.run(["rm", "-rf", data])


def call(port, method, path, body=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
    c.request(method, path, body=body)
    r = c.getresponse()
    return r.status, r.read()


def test_document_lists_the_endpoints():
    eps = documented()
    # the endpoint list, at least
    for need in [("POST", "/v1/sandboxes"), ("GET", "/v1/sandboxes/{id}"),
                 ("POST", "/v1/sandboxes/{id}/exec"), ("POST", "/v1/sandboxes/{id}/patch"),
                 ("GET", "/v1/sandboxes/{id}/image"), ("PUT", "/v1/sandboxes/{id}/archive"),
                 ("GET", "/metrics"), ("GET", "/healthz")]:
        assert need in eps, need
    assert len(eps) >= 20


def test_every_documented_endpoint_is_routed(daemon):
    st, body = call(daemon, "POST", "/v1/sandboxes", b"{}")
    assert st == 201, body
    sid = json.loads(body)["id"]
    st, body = call(daemon, "POST", f"/v1/sandboxes/{sid}/exec",
                    json.dumps({"cmd": "cat", "yield_ms": 10}).encode())
    pid = json.loads(body)["process_id"]
    bodies = {"exec": b'{"cmd":"true"}', "stdin": b'{"data":"x","close":true}',
              "patch": b'{"patch":"*** Begin Patch\\n*** Add File: d.txt\\n+x\\n*** End Patch"}'}
    for method, path in documented():
        if path == "/v1/sandboxes/{id}" and method == "DELETE":
            continue  # last
        real = path.replace("{id}", sid).replace("{pid}", str(pid))
        query = "?path=d.txt" if "/files" in path or "/image" in path else ""
        body = bodies.get(path.rsplit("/", 1)[-1])
        if method == "PUT" and path.endswith("/files"):
            body = b"content"
        st, out = call(daemon, method, real + query, body)
        assert st != 405, (method, path, out)
        if st == 404:
            assert b"no such route" not in out, (method, path, out)
    st, _ = call(daemon, "DELETE", f"/v1/sandboxes/{sid}")
    assert st == 204


def test_every_route_is_documented():
    code = open(ROUTER, encoding="utf-8").read()
    segments = set(re.findall(r'!strcmp\((?:what|sub|seg\[\d\]), "([a-z_]+)"\)', code))
    doc = open(DOC, encoding="utf-8").read()
    assert {"exec", "processes", "files", "patch", "image", "archive", "stdin"} <= segments
    for s in segments:
        assert re.search(r"/" + re.escape(s) + r"\b", doc), f"route segment {s} not in docs/API.md"
