"""One-time file URLs of the control plane (docs/control-plane.md "Files").

From inside a session's sandbox (python3 stdlib only) the agent asks its
control listener for an upload or download URL and uses it; the host
side is checked on disk (<data>/artifacts/<session>/) and through
/v1/sessions/{id}/artifacts. Each refusal is asserted where it matters:
a reused, expired, oversized, badly named or foreign URL leaves the
host's file as it was and stores nothing, not even a temp file.
"""
import hashlib
import json
import os
import stat
import time
import urllib.parse

import pytest

from conftest import wait_until
from test_serve import Daemon, assert_error

CLIENT = r'''
import hashlib, json, sys, urllib.error, urllib.request
def env(name):
    return open("/tmp/.moat-cp-" + name).read()
def call(method, url, data=None, headers=None):
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
op = sys.argv[1]
if op == "post":    # post PATH JSON: with the session token
    st, body = call("POST", env("url") + sys.argv[2], sys.argv[3].encode(),
                    {"Authorization": "Bearer " + env("token"),
                     "Content-Type": "application/json"})
elif op == "put":   # put URL FILE
    st, body = call("PUT", sys.argv[2], open(sys.argv[3], "rb").read(),
                    {"Content-Type": "application/octet-stream"})
elif op == "puthead":   # puthead URL SIZE: the head only, then the answer
    import http.client, urllib.parse
    u = urllib.parse.urlsplit(sys.argv[2])
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    c.putrequest("PUT", u.path)
    c.putheader("Content-Length", sys.argv[3])
    c.endheaders()
    r = c.getresponse()
    st, body = r.status, r.read()
elif op == "get":   # get URL OUT
    st, body = call("GET", sys.argv[2])
    if st == 200:
        open(sys.argv[3], "wb").write(body)
        body = json.dumps({"sha256": hashlib.sha256(body).hexdigest(),
                           "size": len(body)}).encode()
print(json.dumps({"status": st, "body": body.decode("utf-8", "replace")}))
'''

# The agent leaves what it was given where the test's tool processes
# (which never get the token) can read it, then idles.
AGENT = ('umask 077; printf %s "$MOAT_SESSION_TOKEN" > /tmp/.moat-cp-token.t && '
         'mv /tmp/.moat-cp-token.t /tmp/.moat-cp-token && '
         'printf %s "$MOAT_CONTROL_PLANE_URL" > /tmp/.moat-cp-url && '
         'exec sleep 100000')

ARTIFACT_MAX = 2 << 20


class Session:
    def __init__(self, d):
        self.d = d
        r = d.post("/v1/sessions", {"agent": {"cmd": ["/bin/sh", "-c", AGENT]},
                                    "llm": {"routes": []}})
        assert r.status == 201, r
        j = r.json()
        self.id = j["id"]
        self.ready(j["sandbox_id"])

    def ready(self, sb):
        d = self.d
        self.sb = sb
        d.agent_pid(self.sb)
        assert wait_until(lambda: d.ex(self.sb, ["test", "-s", "/tmp/.moat-cp-token"])
                          .get("exit_code") == 0, timeout=30), "the agent did not start"
        d.fput(self.sb, "cpc.py", CLIENT.encode())

    def restart(self):
        r = self.d.post(f"/v1/sessions/{self.id}/restart")
        assert r.status == 200, r
        assert r.json()["sandbox_id"] != self.sb
        self.ready(r.json()["sandbox_id"])

    def run(self, *args):
        j = self.d.ex(self.sb, ["python3", "cpc.py", *args])
        assert j.get("exit_code") == 0, j
        out = json.loads(j["stdout"])
        try:
            out["json"] = json.loads(out["body"])
        except ValueError:
            out["json"] = None
        return out

    def url(self, kind, **body):
        return self.run("post", f"/v1/files/{kind}-url", json.dumps(body))

    def write(self, path, data):
        self.d.fput(self.sb, path, data)

    def put(self, url, path):
        return self.run("put", url, path)

    def get(self, url, out):
        return self.run("get", url, out)

    def store(self):
        return self.d.data / "artifacts" / self.id

    def host_list(self):
        r = self.d.get(f"/v1/sessions/{self.id}/artifacts")
        assert r.status == 200, r
        return r.json()["artifacts"]

    def end(self):
        self.d.delete(f"/v1/sessions/{self.id}")


@pytest.fixture(scope="module")
def d():
    dm = Daemon("--artifact-max", str(ARTIFACT_MAX))
    if dm.post("/v1/sessions", {}).status == 501:
        dm.stop()
        pytest.skip("sessions are not built yet")
    yield dm
    dm.stop()


@pytest.fixture
def s(d):
    ses = Session(d)
    yield ses
    ses.end()


def tmp_left(d):
    t = d.data / "artifacts" / ".tmp"
    return sorted(os.listdir(t)) if t.exists() else []


def err(out, status, contains=None):
    assert out["status"] == status, out
    e = (out["json"] or {}).get("error") or {}
    assert isinstance(e.get("code"), str) and e.get("message"), out
    if contains:
        assert contains in e["message"], out
    return e


# ---- the round trip ---------------------------------------------------------------

def test_upload_then_host_lists_and_fetches_identical_bytes(d, s):
    data = os.urandom(300_000) + b"\x00end"
    s.write("result.bin", data)
    u = s.url("upload", name="result.bin")
    assert u["status"] == 200, u
    j = u["json"]
    assert j["method"] == "PUT" and j["size_max"] == ARTIFACT_MAX, j
    assert j["url"].startswith("http://127.0.0.1:7878/files/"), j
    assert len(j["url"].rsplit("/", 1)[1]) == 64
    assert j["expires_at"] > time.time()
    p = s.put(j["url"], "result.bin")
    assert p["status"] == 201, p
    want = hashlib.sha256(data).hexdigest()
    assert p["json"] == {"name": "result.bin", "size": len(data), "sha256": want}
    # on the host: the file, private, with exactly the bytes
    f = s.store() / "result.bin"
    assert f.read_bytes() == data
    assert stat.S_IMODE(f.stat().st_mode) == 0o600
    assert stat.S_IMODE(s.store().stat().st_mode) == 0o700
    assert tmp_left(d) == []
    [a] = s.host_list()
    assert a["name"] == "result.bin" and a["size"] == len(data) and a["sha256"] == want, a
    assert a["created_at"].endswith("Z")
    r = d.get(f"/v1/sessions/{s.id}/artifacts/result.bin")
    assert r.status == 200, r
    assert r.headers["content-type"] == "application/octet-stream"
    assert int(r.headers["content-length"]) == len(data)
    assert r.body == data
    # and the agent gets it back through a download URL
    g = s.url("download", name="result.bin")
    assert g["status"] == 200, g
    assert g["json"]["method"] == "GET" and g["json"]["size"] == len(data), g
    got = s.get(g["json"]["url"], "back.bin")
    assert got["status"] == 200, got
    assert got["json"] == {"sha256": want, "size": len(data)}
    assert d.fread(s.sb, "back.bin") == data


def test_empty_artifact_and_replace(d, s):
    s.write("e", b"")
    u = s.url("upload", name="e")["json"]
    assert s.put(u["url"], "e")["status"] == 201
    assert (s.store() / "e").read_bytes() == b""
    r = d.get(f"/v1/sessions/{s.id}/artifacts/e")
    assert r.status == 200 and r.body == b"", r
    s.write("e2", b"second")
    u = s.url("upload", name="e")["json"]
    assert s.put(u["url"], "e2")["status"] == 201
    assert (s.store() / "e").read_bytes() == b"second"


def test_host_delete(d, s):
    s.write("f", b"to be deleted")
    u = s.url("upload", name="f")["json"]
    assert s.put(u["url"], "f")["status"] == 201
    r = d.delete(f"/v1/sessions/{s.id}/artifacts/f")
    assert r.status == 204, r
    assert not (s.store() / "f").exists()
    assert s.host_list() == []
    assert_error(d.get(f"/v1/sessions/{s.id}/artifacts/f"), 404, "not_found", "f")
    assert_error(d.delete(f"/v1/sessions/{s.id}/artifacts/f"), 404, "not_found", "f")
    # a download URL for what is not there is refused when asked for
    err(s.url("download", name="f"), 404, "f")


# ---- refusals -----------------------------------------------------------------------

def test_reuse_refused_and_host_file_unchanged(d, s):
    s.write("one", b"the first upload")
    s.write("two", b"a replay trying to overwrite it")
    u = s.url("upload", name="doc.txt")["json"]
    assert s.put(u["url"], "one")["status"] == 201
    e = err(s.put(u["url"], "two"), 404, "already used")
    assert e["code"] == "not_found"
    assert (s.store() / "doc.txt").read_bytes() == b"the first upload"
    assert tmp_left(d) == []
    g = s.url("download", name="doc.txt")["json"]
    assert s.get(g["url"], "a")["status"] == 200
    err(s.get(g["url"], "b"), 404, "already used")
    # a URL of the wrong method is refused without being used up
    u = s.url("upload", name="m.txt")["json"]
    e = err(s.get(u["url"], "c"), 405)
    assert "PUT" in e["message"]
    assert s.put(u["url"], "one")["status"] == 201


def test_unknown_ticket_refused(d, s):
    s.write("x", b"x")
    for t in ("0" * 64, "zz", "A" * 64, "../../v1/session"):
        err(s.put("http://127.0.0.1:7878/files/" + t, "x"), 404)
    assert not s.store().exists() or os.listdir(s.store()) == []


def test_oversized_refused_nothing_stored(d, s):
    s.write("big", b"y" * 101)
    u = s.url("upload", name="big.bin", size_max=100)["json"]
    assert u["size_max"] == 100
    e = err(s.put(u["url"], "big"), 413, "big.bin")
    assert e["code"] == "too_large"
    assert not (s.store() / "big.bin").exists()
    assert tmp_left(d) == []
    # the URL was used by that attempt
    s.write("ok", b"y" * 100)
    err(s.put(u["url"], "ok"), 404, "already used")
    # over --artifact-max (the default size_max): refused from its head,
    # before any of the body is read (none is sent: the answer comes first)
    u = s.url("upload", name="huge.bin")["json"]
    r = s.run("puthead", u["url"], str(ARTIFACT_MAX + 1))
    assert err(r, 413)["code"] == "too_large"
    assert not (s.store() / "huge.bin").exists()
    assert tmp_left(d) == []
    # a size_max over --artifact-max is refused when asked for
    e = err(s.url("upload", name="x", size_max=ARTIFACT_MAX + 1), 400, "size_max")
    assert "--artifact-max" in e["message"]
    err(s.url("upload", name="x", size_max=0), 400, "size_max")
    err(s.url("upload", name="x", size_max="10"), 400, "size_max")
    err(s.url("upload", name="x", extra=1), 400, "extra")
    # exactly size_max is fine
    u = s.url("upload", name="ok.bin", size_max=100)["json"]
    assert s.put(u["url"], "ok")["status"] == 201
    assert (s.store() / "ok.bin").read_bytes() == b"y" * 100


BAD_NAMES = [("slash", "a/b", "'/'"), ("dotdot-path", "../escape", "'/'"),
             ("dotdot", "..", "\"..\""), ("dot", ".", "\".\""),
             ("nul", "a\x00b", "NUL"), ("newline", "a\nb", "control character"),
             ("escape", "\x1b[31mred", "control character"), ("empty", "", "empty"),
             ("long", "n" * 256, "255 bytes")]


@pytest.mark.parametrize("name,why", [b[1:] for b in BAD_NAMES], ids=[b[0] for b in BAD_NAMES])
def test_bad_names_refused(d, s, name, why):
    before = sorted(p.relative_to(d.data) for p in (d.data / "artifacts").rglob("*"))
    for kind in ("upload", "download"):
        e = err(s.url(kind, name=name), 400, why)
        assert e["code"] == "invalid_request"
        assert "artifact name" in e["message"], e
        shown = name[:3].replace("\x00", "\\x00").replace("\n", "\\x0a").replace("\x1b", "\\x1b")
        assert shown in e["message"], e
    after = sorted(p.relative_to(d.data) for p in (d.data / "artifacts").rglob("*"))
    assert after == before
    assert not (d.data / "escape").exists() and not (d.data / "artifacts" / "escape").exists()
    # the host route refuses the same names (one percent-encoded segment)
    if name:
        r = d.get(f"/v1/sessions/{s.id}/artifacts/{urllib.parse.quote(name, safe='')}")
        assert_error(r, 400, "invalid_request", why)


def test_name_not_a_string_refused(d, s):
    err(s.url("upload"), 400, "name")
    err(s.url("upload", name=5), 400, "name")


def test_other_sessions_url_refused_and_still_usable_by_it(d, s):
    b = Session(d)
    try:
        s.write("a-bytes", b"from A's sandbox")
        b.write("b-bytes", b"from B's sandbox")
        u = b.url("upload", name="owned-by-b")["json"]
        err(s.put(u["url"], "a-bytes"), 404)
        assert not (b.store() / "owned-by-b").exists()
        assert not (s.store() / "owned-by-b").exists()
        # not consumed: B uses it
        assert b.put(u["url"], "b-bytes")["status"] == 201
        assert (b.store() / "owned-by-b").read_bytes() == b"from B's sandbox"
        assert [a["name"] for a in b.host_list()] == ["owned-by-b"]
        assert all(a["name"] != "owned-by-b" for a in s.host_list())
        # the same for a download URL: A cannot fetch B's artifact
        g = b.url("download", name="owned-by-b")["json"]
        err(s.get(g["url"], "stolen"), 404)
        assert d.ex(s.sb, ["test", "-e", "stolen"])["exit_code"] != 0
        assert b.get(g["url"], "mine")["status"] == 200
        # and A asking for B's artifact by name gets its own store's answer
        err(s.url("download", name="owned-by-b"), 404)
    finally:
        b.end()


def test_artifacts_and_urls_outlive_a_restart(d, s):
    data = os.urandom(4096)
    s.write("keep.bin", data)
    u = s.url("upload", name="keep.bin")["json"]
    assert s.put(u["url"], "keep.bin")["status"] == 201
    pending = s.url("upload", name="later.txt")["json"]
    old = s.sb
    s.restart()
    assert d.get(f"/v1/sandboxes/{old}").status == 404
    # the store is the session's, not the sandbox's
    assert (s.store() / "keep.bin").read_bytes() == data
    g = s.url("download", name="keep.bin")["json"]
    got = s.get(g["url"], "keep.bin")
    assert got["status"] == 200 and got["json"]["sha256"] == hashlib.sha256(data).hexdigest()
    # a URL asked for before the restart works in the session's new sandbox
    s.write("later.txt", b"after the restart")
    assert s.put(pending["url"], "later.txt")["status"] == 201
    assert (s.store() / "later.txt").read_bytes() == b"after the restart"


def test_host_routes_unknown_session(d):
    for m, p in (("GET", "/v1/sessions/ses_nosuchsession00/artifacts"),
                 ("GET", "/v1/sessions/ses_nosuchsession00/artifacts/x"),
                 ("DELETE", "/v1/sessions/ses_nosuchsession00/artifacts/x")):
        assert_error(d.req(m, p), 404, "not_found", "ses_nosuchsession00")


def test_purge_removes_the_store(d):
    a = Session(d)
    a.write("f", b"purged")
    u = a.url("upload", name="p")["json"]
    assert a.put(u["url"], "f")["status"] == 201
    assert (a.store() / "p").exists()
    r = d.delete(f"/v1/sessions/{a.id}?purge=true")
    assert r.status == 200, r
    assert not a.store().exists()


# ---- expiry and a daemon restart ----------------------------------------------------------

def test_expired_refused():
    dm = Daemon("--artifact-url-ttl", "1")
    try:
        if dm.post("/v1/sessions", {}).status == 501:
            pytest.skip("sessions are not built yet")
        a = Session(dm)
        a.write("f", b"too late")
        u = a.url("upload", name="late.txt")["json"]
        assert u["expires_at"] <= time.time() + 2
        # past the expiry (whole seconds, as the URL says)
        while time.time() < u["expires_at"] + 1.1:
            time.sleep(0.2)
        e = err(a.put(u["url"], "f"), 404, "expired")
        assert e["code"] == "not_found"
        assert not (a.store() / "late.txt").exists()
        assert tmp_left(dm) == []
        a.end()
    finally:
        dm.stop()


def test_killed_daemon_temp_files_swept(d):
    tmp = d.data / "artifacts" / ".tmp"
    (tmp / "ses_x.0123456789abcdef").write_bytes(b"half an upload")
    d.kill9()
    d.start()
    assert tmp_left(d) == []
