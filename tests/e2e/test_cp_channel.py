"""The control plane's channel (docs/control-plane.md): a session's sandbox
has a listener on 127.0.0.1:7878 in its own network namespace, served by
the daemon. It exists only in sessions' sandboxes, is not on the host,
survives a daemon restart (the agent keeps a copy), a pause and a
hibernation, and comes anew with a restart of the session."""
import json
import socket

import pytest

from conftest import wait_until
from test_serve import Daemon

CP = "http://127.0.0.1:7878"
AGENT = ["sh", "-c", 'printf %s "$MOAT_SESSION_TOKEN" > /tmp/tok; exec sleep 100000']

# Run inside a sandbox: GET /v1/session with the token (or none) -> "status body"
PROBE = r'''
import sys, urllib.request, urllib.error
tok = open("/tmp/tok").read() if sys.argv[1] == "tok" else sys.argv[1]
req = urllib.request.Request("http://127.0.0.1:7878/v1/session")
if tok:
    req.add_header("Authorization", "Bearer " + tok)
try:
    with urllib.request.urlopen(req, timeout=10) as r:
        print(r.status, r.read().decode())
except urllib.error.HTTPError as e:
    print(e.code, e.read().decode())
except OSError as e:
    print("oserror", e)
'''


@pytest.fixture(scope="module")
def d():
    dm = Daemon()
    yield dm
    dm.stop()


def session(d, **kw):
    body = {"agent": {"cmd": AGENT}, **kw}
    r = d.post("/v1/sessions", body)
    assert r.status == 201, r
    s = r.json()
    assert wait_until(lambda: d.ex(s["sandbox_id"], "test -s /tmp/tok")["exit_code"] == 0,
                      timeout=20), "the agent never wrote its token"
    return s


def probe(d, sid, tok="tok"):
    out = d.ex(sid, ["python3", "-c", PROBE, tok])["stdout"].strip()
    code, _, body = out.partition(" ")
    return code, body


def host_listens(port):
    want = f":{port:04X}"
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(path) as f:
                for line in f.readlines()[1:]:
                    parts = line.split()
                    if parts[1].endswith(want) and parts[3] == "0A":
                        return True
        except OSError:
            pass
    return False


def test_listener_answers_the_token_in_a_sessions_sandbox(d):
    s = session(d)
    code, body = probe(d, s["sandbox_id"])
    assert code == "200", body
    assert json.loads(body)["id"] == s["id"]
    # without a token: 401, and a made-up one too
    assert probe(d, s["sandbox_id"], "")[0] == "401"
    assert probe(d, s["sandbox_id"], "moat_st_" + "0" * 64)[0] == "401"
    d.delete(f"/v1/sessions/{s['id']}")


def test_a_plain_sandbox_has_no_listener(d):
    b = d.create()
    code, body = probe(d, b["id"], "")
    assert code == "oserror", (code, body)
    # Landlock refuses the connect (EACCES) where it can, else no one listens
    assert "refused" in body.lower() or "permission denied" in body.lower(), body
    d.rm(b["id"])


def test_the_listener_is_not_on_the_host(d):
    s = session(d)
    assert not host_listens(7878)
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", 7878), timeout=2).close()
    d.delete(f"/v1/sessions/{s['id']}")


def test_the_token_is_not_accepted_by_the_daemons_own_api(d):
    s = session(d)
    tok = d.sh(s["sandbox_id"], "cat /tmp/tok")
    # with a daemon token configured, the session token is no API token
    dt = Daemon(token="daemon-secret-token")
    try:
        r = dt.get("/v1/sandboxes", headers={"Authorization": f"Bearer {tok}"})
        assert r.status == 401, r
    finally:
        dt.stop()
    d.delete(f"/v1/sessions/{s['id']}")


def test_listener_survives_a_daemon_kill9(d):
    s = session(d)
    d.kill9()
    d.start()
    assert wait_until(lambda: d.get(f"/v1/sessions/{s['id']}").status == 200, timeout=20)
    got = d.get(f"/v1/sessions/{s['id']}").json()
    assert got["sandbox_id"] == s["sandbox_id"], got  # its sandbox lived on
    code, body = probe(d, s["sandbox_id"])
    assert code == "200", body
    d.delete(f"/v1/sessions/{s['id']}")


def test_restart_gives_a_new_listener_and_refuses_the_old_token(d):
    s = session(d)
    old_tok = d.sh(s["sandbox_id"], "cat /tmp/tok")
    r = d.post(f"/v1/sessions/{s['id']}/restart")
    assert r.status == 200, r
    n = r.json()
    assert n["sandbox_id"] != s["sandbox_id"]
    assert wait_until(lambda: d.ex(n["sandbox_id"], "test -s /tmp/tok")["exit_code"] == 0,
                      timeout=20)
    assert probe(d, n["sandbox_id"])[0] == "200"
    assert probe(d, n["sandbox_id"], old_tok)[0] == "401"
    assert d.get(f"/v1/sandboxes/{s['sandbox_id']}").status == 404
    d.delete(f"/v1/sessions/{s['id']}")


def test_pause_and_hibernation_keep_the_channel(d):
    s = session(d)
    sid = s["sandbox_id"]
    r = d.post(f"/v1/sandboxes/{sid}/pause")
    if r.status == 422:
        pytest.skip(f"no freezer here: {r.text}")
    assert r.status in (200, 204), r
    assert d.post(f"/v1/sandboxes/{sid}/resume").status in (200, 204)
    assert probe(d, sid)[0] == "200"
    r = d.post(f"/v1/sandboxes/{sid}/pause", {"release": True})
    assert r.status in (200, 204), r
    assert d.post(f"/v1/sandboxes/{sid}/resume").status in (200, 204)
    # a hibernated sandbox starts again: its listener is a new one, served
    code, body = probe(d, sid, "")
    assert code == "401", (code, body)
    d.delete(f"/v1/sessions/{s['id']}")


def test_a_pooled_sessions_sandbox_serves_its_session():
    dp = Daemon("--pool-sessions", "1", "--pool", "0")
    try:
        def pooled():
            return [i for i, _, st in dp.db_rows() if st == "pooled"]
        assert wait_until(lambda: pooled(), timeout=30), "the pool was never filled"
        ready = pooled()
        s = session(dp)
        assert s["sandbox_id"] in ready  # the pre-started one, listener and all
        code, body = probe(dp, s["sandbox_id"])
        assert code == "200", body
        dp.delete(f"/v1/sessions/{s['id']}")
    finally:
        dp.stop()
