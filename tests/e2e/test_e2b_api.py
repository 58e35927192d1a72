"""End-to-end tests of the E2B door's control plane (docs/e2b.md) and its
routing, over raw HTTP against a real `moat serve` (the Daemon of
test_serve.py: free loopback port, private --data, everything removed
afterwards).

What the SDKs rely on is asserted on the wire: exact statuses (the Python
SDK parses a create only on 201), the JSON error body {"code","message"}
(the JS SDK reads the 404 from it), every key SandboxDetail/ListedSandbox
requires, X-Next-Token paging, the 502 of E2B's proxy for a sandbox that is
not there (header and Host routing), and that the API key is the daemon's
token. envd itself (Connect-RPC, /files) is tested elsewhere.
"""
import json
import os
import re
import stat
import subprocess
import time
import urllib.parse
from datetime import datetime, timezone

import pytest

from conftest import MOAT, wait_until
from test_serve import AGENT, SERVE, Daemon, request

pytestmark = pytest.mark.skipif(
    not (os.access(SERVE, os.X_OK) and os.access(AGENT, os.X_OK)),
    reason=f"moat-serve / moat-agent not found next to {MOAT}")

TOKEN = "e2b_" + "0123456789abcdef" * 2 + "01234567"
ID_RE = re.compile(r"^[a-z0-9]+$")
TIME_RE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")
SANDBOX_KEYS = {"templateID", "sandboxID", "clientID", "envdVersion", "envdAccessToken",
                "domain", "alias"}
# what the Python SDK's SandboxDetail / ListedSandbox from_dict require
DETAIL_KEYS = {"templateID", "sandboxID", "clientID", "startedAt", "endAt", "cpuCount",
               "memoryMB", "diskSizeMB", "state", "envdVersion"}
# what Sandbox.create sends by default (Python SDK 2.45)
SDK_BODY = {"templateID": "base", "timeout": 300, "metadata": {}, "envVars": {},
            "secure": True, "allow_internet_access": True}


@pytest.fixture(scope="module")
def srv():
    d = Daemon(token=TOKEN)
    yield d
    d.stop()


def api(d, method, path, body=None, key=TOKEN, headers=None, timeout=60):
    h = dict(headers or {})
    if key is not None:
        h["X-API-KEY"] = key
    return request(d.port, method, path, body, h, timeout)


def e2b_error(r, status, contains=None):
    """r is E2B's error: the status, {"code": status, "message": text}."""
    assert r.status == status, r
    assert r.headers.get("content-type", "").startswith("application/json"), r
    j = r.json()
    assert j.get("code") == status and isinstance(j.get("message"), str) and j["message"], r
    if contains:
        assert contains in j["message"], r
    return j


def create(d, path="/sandboxes", **over):
    body = dict(SDK_BODY, **over)
    r = api(d, "POST", path, body)
    assert r.status == 201, r
    j = r.json()
    d.agent_pid(j["sandboxID"])
    return j


def kill(d, sid):
    return api(d, "DELETE", f"/sandboxes/{sid}")


def parse_time(s):
    assert TIME_RE.match(s), s
    return datetime.strptime(s[:19], "%Y-%m-%dT%H:%M:%S").replace(
        tzinfo=timezone.utc).timestamp()


def envd(d, sid, path="/health", port=49983, method="GET"):
    return request(d.port, method, path, headers={"E2b-Sandbox-Id": sid,
                                                  "E2b-Sandbox-Port": str(port)})


def assert_502_not_found(r, sid):
    assert r.status == 502, r
    j = r.json()
    assert j == {"sandboxId": sid, "message": "The sandbox was not found", "code": 502}, r


# ---- create ---------------------------------------------------------------------

@pytest.mark.parametrize("path", ["/sandboxes", "/v2/sandboxes"])
def test_create_answers_201_with_every_key(srv, path):
    j = create(srv, path)
    try:
        assert set(j) == SANDBOX_KEYS, j
        assert ID_RE.match(j["sandboxID"]), j
        assert j["templateID"] == "base" and j["alias"] == "base", j
        assert j["clientID"] == "6532622b", j
        assert j["domain"] is None, j
        assert re.match(r"^\d+\.\d+\.\d+$", j["envdVersion"]), j
        assert tuple(int(x) for x in j["envdVersion"].split(".")) >= (0, 1, 0), j
        assert isinstance(j["envdAccessToken"], str) and len(j["envdAccessToken"]) >= 32, j
    finally:
        assert kill(srv, j["sandboxID"]).status == 204


def test_create_minimal_body_and_unknown_fields(srv):
    # the JS SDK 2.51 leaves out timeout and secure; unknown fields are ignored
    r = api(srv, "POST", "/v2/sandboxes", {"templateID": "base", "someFutureField": {"x": 1}})
    assert r.status == 201, r
    sid = r.json()["sandboxID"]
    try:
        info = api(srv, "GET", f"/sandboxes/{sid}").json()
        # the SDKs' default timeout (300 s), not the spec's 15
        life = parse_time(info["endAt"]) - parse_time(info["startedAt"])
        assert 290 <= life <= 310, info
    finally:
        kill(srv, sid)


def test_each_sandbox_gets_its_own_access_token(srv):
    a, b = create(srv), create(srv)
    try:
        assert a["envdAccessToken"] != b["envdAccessToken"]
        assert a["sandboxID"] != b["sandboxID"]
    finally:
        kill(srv, a["sandboxID"])
        kill(srv, b["sandboxID"])


def test_unknown_template_is_e2bs_404(srv):
    r = api(srv, "POST", "/sandboxes", dict(SDK_BODY, templateID="no-such-tpl"))
    e2b_error(r, 404, "template 'no-such-tpl' not found")


@pytest.mark.parametrize("body,word", [
    ({"timeout": -1}, "timeout"),
    ({"timeout": "300"}, "timeout"),
    ({"metadata": {"a": 1}}, "metadata"),
    ({"envVars": ["A=1"]}, "envVars"),
    ({"templateID": 5}, "templateID"),
    ({"autoResume": {"enabled": True}}, "autoResume"),
    ({"network": {"rules": {"api.example.com": [{"transform": {"headers": {"A": "b"}}}]}}},
     "network.rules"),
    ({"network": {"allowOut": "1.1.1.1"}}, "allowOut"),
    ({"volumeMounts": [{"name": "v", "path": "/data"}]}, "volumeMounts"),
])
def test_create_refuses_bad_or_unsupported_options(srv, body, word):
    r = api(srv, "POST", "/sandboxes", dict(SDK_BODY, **body))
    e2b_error(r, 400, word)


def test_malformed_json_is_refused(srv):
    r = request(srv.port, "POST", "/sandboxes", b"{not json",
                {"X-API-KEY": TOKEN, "Content-Type": "application/json"})
    assert 400 <= r.status < 500, r


def test_explicit_egress_without_operator_network_is_refused(srv):
    """Needs core_create's network check (src/serve/core.c): fails against core_stub.c."""
    # the daemon has no --net-allow: an explicit destination cannot be given
    r = api(srv, "POST", "/sandboxes", dict(SDK_BODY, network={
        "allowOut": ["example.com"], "denyOut": ["0.0.0.0/0"]}))
    assert r.status == 403, r
    assert r.json()["code"] == 403, r


def test_internet_access_without_operator_network_means_none(srv):
    # allow_internet_access true (the SDK default) on a daemon without
    # --net-allow: created, without a network (docs/e2b.md)
    j = create(srv, allow_internet_access=True)
    try:
        v1 = srv.get(f"/v1/sandboxes/{j['sandboxID']}").json()
        assert not v1.get("network"), v1
    finally:
        kill(srv, j["sandboxID"])


def test_envvars_and_metadata_reach_the_sandbox(srv):
    j = create(srv, envVars={"E2B_T": "v1"}, metadata={"who": "me"})
    sid = j["sandboxID"]
    try:
        info = api(srv, "GET", f"/sandboxes/{sid}").json()
        assert info["metadata"] == {"who": "me"}, info
        out = srv.ex(sid, "printf %s \"$E2B_T\"")
        assert out["stdout"] == "v1", out
    finally:
        kill(srv, sid)


# ---- auth ---------------------------------------------------------------------------

@pytest.mark.parametrize("method,path", [
    ("POST", "/sandboxes"), ("POST", "/v2/sandboxes"), ("GET", "/v2/sandboxes"),
    ("GET", "/sandboxes"), ("GET", "/sandboxes/abc"), ("DELETE", "/sandboxes/abc"),
    ("POST", "/sandboxes/abc/timeout"), ("POST", "/sandboxes/abc/connect"),
    ("GET", "/health"), ("GET", "/sandboxes/nope/nothing"),
])
@pytest.mark.parametrize("key", [None, "", "e2b_" + "0" * 40, TOKEN + "x", TOKEN[:-1]])
def test_wrong_or_missing_api_key_is_401_json(srv, method, path, key):
    r = api(srv, method, path, SDK_BODY if method == "POST" else None, key=key)
    e2b_error(r, 401)


def test_api_key_by_header_or_bearer(srv):
    assert api(srv, "GET", "/health").status == 204
    r = request(srv.port, "GET", "/health", headers={"Authorization": f"Bearer {TOKEN}"})
    assert r.status == 204, r
    r = request(srv.port, "GET", "/v2/sandboxes", headers={"Authorization": f"Bearer {TOKEN}x"})
    e2b_error(r, 401)


def test_api_key_is_no_credential_for_moats_own_api(srv):
    r = api(srv, "GET", "/v1/sandboxes")
    assert r.status == 401, r
    assert r.json()["error"]["code"] == "unauthorized", r


def test_no_token_daemon_needs_no_key():
    d = Daemon()  # loopback without a token: no auth, as for /v1
    try:
        assert api(d, "GET", "/v2/sandboxes", key=None).status == 200
        assert api(d, "GET", "/health", key="whatever").status == 204
    finally:
        d.stop()


# ---- one sandbox --------------------------------------------------------------------

def test_get_info_has_every_required_key(srv):
    j = create(srv, timeout=120, metadata={"k": "v"})
    sid = j["sandboxID"]
    try:
        r = api(srv, "GET", f"/sandboxes/{sid}")
        assert r.status == 200, r
        info = r.json()
        assert DETAIL_KEYS <= set(info), info
        assert info["sandboxID"] == sid and info["templateID"] == "base", info
        assert info["clientID"] == "6532622b" and info["state"] == "running", info
        assert info["envdVersion"] == j["envdVersion"], info
        assert info["envdAccessToken"] == j["envdAccessToken"], info
        assert info["metadata"] == {"k": "v"}, info
        for k in ("cpuCount", "memoryMB", "diskSizeMB"):
            assert isinstance(info[k], int) and info[k] >= 0, info
        assert info["cpuCount"] >= 1 and info["memoryMB"] >= 1, info
        started, ends = parse_time(info["startedAt"]), parse_time(info["endAt"])
        assert abs(started - time.time()) < 60, info
        assert 115 <= ends - started <= 125, info
    finally:
        kill(srv, sid)


def test_delete_is_204_then_404_json(srv):
    sid = create(srv)["sandboxID"]
    assert kill(srv, sid).status == 204
    e2b_error(kill(srv, sid), 404, sid)
    e2b_error(api(srv, "GET", f"/sandboxes/{sid}"), 404)
    assert_502_not_found(envd(srv, sid), sid)
    assert srv.get(f"/v1/sandboxes/{sid}").status == 404


def test_unknown_sandbox_is_404_json_everywhere(srv):
    for method, path, body in [
            ("GET", "/sandboxes/zzz0", None), ("DELETE", "/sandboxes/zzz0", None),
            ("POST", "/sandboxes/zzz0/connect", {"timeout": 10}),
            ("POST", "/v2/sandboxes/zzz0/connect", {"timeout": 10}),
            ("POST", "/sandboxes/zzz0/timeout", {"timeout": 10}),
            ("GET", "/sandboxes/zzz0/metrics", None),
            ("POST", "/sandboxes/zzz0/pause", {"memory": True})]:
        e2b_error(api(srv, method, path, body), 404)


def test_connect_answers_the_sandbox_and_extends_the_deadline(srv):
    j = create(srv, timeout=60)
    sid = j["sandboxID"]
    try:
        for path in (f"/sandboxes/{sid}/connect", f"/v2/sandboxes/{sid}/connect"):
            r = api(srv, "POST", path, {"timeout": 600})
            assert r.status == 200, r
            c = r.json()
            assert set(c) == SANDBOX_KEYS, c
            assert c["sandboxID"] == sid and c["envdAccessToken"] == j["envdAccessToken"], c
        info = api(srv, "GET", f"/sandboxes/{sid}").json()
        assert parse_time(info["endAt"]) - time.time() > 500, info
        # connect never shortens it
        assert api(srv, "POST", f"/sandboxes/{sid}/connect", {"timeout": 5}).status == 200
        info = api(srv, "GET", f"/sandboxes/{sid}").json()
        assert parse_time(info["endAt"]) - time.time() > 500, info
    finally:
        kill(srv, sid)


def test_set_timeout_then_the_sandbox_dies_at_end_at(srv):
    """Needs box_set_end moving the reaper's deadline (box.c): fails against core_stub.c."""
    j = create(srv, timeout=300)
    sid = j["sandboxID"]
    try:
        r = api(srv, "POST", f"/sandboxes/{sid}/timeout", {"timeout": 2})
        assert r.status == 204, r
        info = api(srv, "GET", f"/sandboxes/{sid}").json()
        assert parse_time(info["endAt"]) - time.time() < 5, info
        assert wait_until(lambda: api(srv, "GET", f"/sandboxes/{sid}").status == 404,
                          timeout=20, step=0.25), "still there 20 s after its endAt"
        e2b_error(api(srv, "GET", f"/sandboxes/{sid}"), 404)
        assert_502_not_found(envd(srv, sid), sid)
        assert srv.get(f"/v1/sandboxes/{sid}").status == 404
    finally:
        kill(srv, sid)


def test_short_create_timeout_is_a_deadline(srv):
    sid = create(srv, timeout=2)["sandboxID"]
    try:
        assert wait_until(lambda: api(srv, "GET", f"/sandboxes/{sid}").status == 404,
                          timeout=20, step=0.25)
    finally:
        kill(srv, sid)


def test_set_timeout_can_extend(srv):
    """Needs box_set_end moving the reaper's deadline (box.c): fails against core_stub.c."""
    sid = create(srv, timeout=3)["sandboxID"]
    try:
        assert api(srv, "POST", f"/sandboxes/{sid}/timeout", {"timeout": 120}).status == 204
        time.sleep(5)
        assert api(srv, "GET", f"/sandboxes/{sid}").status == 200
    finally:
        kill(srv, sid)


def test_timeout_needs_a_number(srv):
    sid = create(srv)["sandboxID"]
    try:
        e2b_error(api(srv, "POST", f"/sandboxes/{sid}/timeout", {}), 400)
        e2b_error(api(srv, "POST", f"/sandboxes/{sid}/timeout", {"timeout": "x"}), 400)
    finally:
        kill(srv, sid)


def test_pause_and_connect(srv):
    sid = create(srv)["sandboxID"]
    try:
        r = api(srv, "POST", f"/sandboxes/{sid}/pause", {"memory": True})
        if os.geteuid() != 0:
            # no freezer delegated to the unprivileged user: a clear error,
            # not 409 (the JS SDK would read that as "already paused")
            e2b_error(r, 422, "freezer")
            assert api(srv, "GET", f"/sandboxes/{sid}").json()["state"] == "running"
            return
        assert r.status == 204, r
        assert api(srv, "GET", f"/sandboxes/{sid}").json()["state"] == "paused"
        r = api(srv, "POST", f"/sandboxes/{sid}/pause", {"memory": True})
        assert r.status == 409 and r.json()["code"] == 409, r
        r = api(srv, "POST", f"/sandboxes/{sid}/connect", {"timeout": 300})
        assert r.status == 201, r
        assert api(srv, "GET", f"/sandboxes/{sid}").json()["state"] == "running"
    finally:
        kill(srv, sid)


def test_metrics(srv):
    sid = create(srv)["sandboxID"]
    try:
        r = api(srv, "GET", f"/sandboxes/{sid}/metrics")
        assert r.status == 200, r
        ms = r.json()
        assert isinstance(ms, list) and ms, ms
        for m in ms:
            assert {"timestamp", "timestampUnix", "cpuCount", "cpuUsedPct", "memUsed",
                    "memTotal", "memCache", "diskUsed", "diskTotal"} <= set(m), m
            assert 0 <= m["cpuUsedPct"] <= 100 and m["memTotal"] > 0, m
            assert abs(m["timestampUnix"] - time.time()) < 60, m
    finally:
        kill(srv, sid)


# ---- lists --------------------------------------------------------------------------------

def list_all(d, query="", limit=None):
    """Every page of GET /v2/sandboxes; returns (items, pages)."""
    items, pages, token = [], 0, None
    while True:
        params = {}
        if limit:
            params["limit"] = str(limit)
        if token:
            params["nextToken"] = token
        qs = urllib.parse.urlencode(params)
        sep = "&" if query and qs else ""
        r = api(d, "GET", f"/v2/sandboxes?{query}{sep}{qs}")
        assert r.status == 200, r
        page = r.json()
        assert isinstance(page, list), r
        for it in page:
            assert DETAIL_KEYS <= set(it), it
        items += page
        pages += 1
        token = r.headers.get("x-next-token")
        if not token:
            return items, pages
        assert pages < 100, "paging does not end"


def sdk_metadata_query(md):
    """What the SDKs send: each key and value URL-encoded, joined as a query
    string, and that whole string URL-encoded as the metadata parameter."""
    inner = urllib.parse.urlencode({urllib.parse.quote(k): urllib.parse.quote(v)
                                    for k, v in md.items()})
    return "metadata=" + urllib.parse.quote(inner, safe="")


def test_list_paging_filters_and_order(srv):
    tag = f"t{int(time.time() * 1000)}"
    made = []
    try:
        for i in range(5):
            made.append(create(srv, metadata={"tag": tag, "i": str(i),
                                              "odd key": "a&b=c"})["sandboxID"])
            time.sleep(0.02)
        q = sdk_metadata_query({"tag": tag})
        items, pages = list_all(srv, q)
        assert sorted(it["sandboxID"] for it in items) == sorted(made), items
        assert pages == 1
        by_i = list(made)  # in creation order: by_i[i] has metadata i
        # a stable order: by start time (seconds), then id
        started = {it["sandboxID"]: parse_time(it["startedAt"]) for it in items}
        made = sorted(made, key=lambda s: (started[s], s))
        assert [it["sandboxID"] for it in items] == made, items
        paged, pages = list_all(srv, q, limit=2)
        assert [it["sandboxID"] for it in paged] == made, paged
        assert pages == 3
        rev = api(srv, "GET", f"/v2/sandboxes?{q}&order=desc")
        assert [it["sandboxID"] for it in rev.json()] == made[::-1], rev
        # the metadata filter keeps only exact matches of every pair
        one, _ = list_all(srv, sdk_metadata_query({"tag": tag, "i": "3"}))
        assert [it["sandboxID"] for it in one] == [by_i[3]]
        odd, _ = list_all(srv, sdk_metadata_query({"tag": tag, "odd key": "a&b=c"}))
        assert len(odd) == 5
        none, _ = list_all(srv, sdk_metadata_query({"tag": tag, "i": "nine"}))
        assert none == []
        # states: only running sandboxes exist
        paused, _ = list_all(srv, q + "&state=paused")
        assert paused == []
        both, _ = list_all(srv, q + "&state=running,paused")
        assert len(both) == 5
        repeated, _ = list_all(srv, q + "&state=paused&state=running")
        assert len(repeated) == 5
        # the old list has the same items, no paging
        r = api(srv, "GET", f"/sandboxes?{q}")
        assert r.status == 200, r
        assert [it["sandboxID"] for it in r.json()] == made
        # a killed one leaves the list
        kill(srv, made[0])
        items, _ = list_all(srv, q)
        assert [it["sandboxID"] for it in items] == made[1:]
    finally:
        for sid in made:
            kill(srv, sid)


def test_list_refuses_bad_parameters(srv):
    for qs in ("limit=0", "limit=101", "limit=x", "nextToken=zz", "state=sleeping"):
        e2b_error(api(srv, "GET", f"/v2/sandboxes?{qs}"), 400)


def test_v1_sandboxes_are_not_the_doors(srv):
    b = srv.create()
    sid = b["id"]
    try:
        items, _ = list_all(srv)
        assert sid not in [it["sandboxID"] for it in items]
        e2b_error(api(srv, "GET", f"/sandboxes/{sid}"), 404)
        e2b_error(api(srv, "POST", f"/sandboxes/{sid}/connect", {"timeout": 10}), 404)
        e2b_error(kill(srv, sid), 404)
        # no access token, so no envd either
        assert_502_not_found(envd(srv, sid), sid)
        assert srv.get(f"/v1/sandboxes/{sid}").status == 200
    finally:
        srv.rm(sid)


# ---- routing ----------------------------------------------------------------------------------

@pytest.mark.parametrize("path", ["/health", "/process.Process/Start", "/files?path=/etc/passwd",
                                  "/filesystem.Filesystem/ListDir", "/anything"])
def test_envd_for_an_unknown_sandbox_is_502_by_header(srv, path):
    assert_502_not_found(envd(srv, "nosuchsandbox0", path, method="POST"), "nosuchsandbox0")
    assert_502_not_found(envd(srv, "nosuchsandbox0", path), "nosuchsandbox0")


@pytest.mark.parametrize("host", ["49983-nosuchsandbox0.localhost",
                                  "49983-nosuchsandbox0.e2b.example:7070",
                                  "49983-nosuchsandbox0.moat"])
def test_envd_for_an_unknown_sandbox_is_502_by_host(srv, host):
    r = request(srv.port, "GET", "/health", headers={"Host": host})
    assert_502_not_found(r, "nosuchsandbox0")


def test_envd_needs_no_api_key_but_reaches_nothing_unknown(srv):
    # envd traffic carries no X-API-KEY (it has per-sandbox tokens): the
    # routing answers before any auth, and never with moat's own API
    r = request(srv.port, "GET", "/v1/sandboxes", headers={"E2b-Sandbox-Id": "abc"})
    assert_502_not_found(r, "abc")


def test_envd_of_a_bad_id_is_502(srv):
    r = request(srv.port, "GET", "/health", headers={"E2b-Sandbox-Id": "ABC-../x"})
    assert r.status == 502, r


def test_other_ports_are_not_open(srv):
    """Needs envd's GET /health (e2b_envd.c): fails against core_stub.c."""
    j = create(srv)
    sid = j["sandboxID"]
    try:
        for r in (envd(srv, sid, port=49999),
                  request(srv.port, "GET", "/", headers={"Host": f"8080-{sid}.localhost"})):
            assert r.status == 502, r
            body = r.json()
            assert body["sandboxId"] == sid and body["code"] == 502, body
            assert body["message"] == "The sandbox is running but port is not open", body
            assert body["port"] in (49999, 8080), body
        # envd's own port reaches envd (its health needs no token)
        assert envd(srv, sid).status == 204
        r = request(srv.port, "GET", "/health", headers={"Host": f"49983-{sid}.localhost"})
        assert r.status == 204, r
    finally:
        kill(srv, sid)


def test_hosts_that_are_not_e2bs_stay_moats(srv):
    for host in ("127.0.0.1", "localhost:1234", "moat-1.example.com", "x-y.z"):
        r = request(srv.port, "GET", "/v1/sandboxes", headers={"Host": host})
        assert r.status == 401, (host, r)
        assert "error" in r.json(), (host, r)


@pytest.mark.parametrize("method,path", [
    ("GET", "/sandboxes/abc/nothing"), ("GET", "/v2/sandboxes/abc"),
    ("POST", "/v2/sandboxes/abc/timeout"), ("GET", "/sandboxes/a/b/c/d"),
])
def test_unknown_routes_are_404_json(srv, method, path):
    e2b_error(api(srv, method, path), 404)


@pytest.mark.parametrize("method,path", [
    ("PUT", "/sandboxes"), ("PATCH", "/v2/sandboxes"), ("GET", "/sandboxes/abc/timeout"),
    ("POST", "/sandboxes/abc/metrics"), ("POST", "/health"),
])
def test_wrong_methods_are_405_json(srv, method, path):
    e2b_error(api(srv, method, path), 405)


# ---- moat token -------------------------------------------------------------------------------

def test_moat_token_prints_an_e2b_key(tmp_path):
    out = subprocess.run([MOAT, "token"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out
    assert re.fullmatch(r"e2b_[0-9a-f]{40}\n", out.stdout), out
    again = subprocess.run([MOAT, "token"], capture_output=True, text=True, timeout=30)
    assert again.stdout != out.stdout


def test_moat_token_write_makes_a_private_file(tmp_path):
    f = tmp_path / "tok"
    out = subprocess.run([MOAT, "token", "--write", str(f)], capture_output=True, text=True,
                         timeout=30)
    assert out.returncode == 0 and out.stdout == "", out
    assert stat.S_IMODE(os.stat(f).st_mode) == 0o600
    tok = f.read_text()
    assert re.fullmatch(r"e2b_[0-9a-f]{40}\n", tok)
    # never replaces one
    out = subprocess.run([MOAT, "token", "--write", str(f)], capture_output=True, text=True,
                         timeout=30)
    assert out.returncode != 0 and f.read_text() == tok, out


def test_a_written_token_is_the_api_key(tmp_path):
    f = tmp_path / "tok"
    subprocess.run([MOAT, "token", "--write", str(f)], check=True, timeout=30)
    tok = f.read_text().strip()
    d = Daemon("--token-file", str(f))
    try:
        assert api(d, "GET", "/health", key=tok).status == 204
        e2b_error(api(d, "GET", "/health", key=TOKEN), 401)
    finally:
        d.stop()
