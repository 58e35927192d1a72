"""Sessions of the control plane (docs/control-plane.md, issue 14): the
lifecycle of /v1/sessions, bodies refused naming the culprit, the agent's
environment (exactly three variables; sdk_env; env_fd), restart, delete,
and a daemon killed with -9 that finds its sessions again."""
import hashlib
import json
import os
import re

import pytest

from conftest import pids_with, wait_until
from cp_util import (AGENT_CMD, AGENT_FD_CMD, CPDaemon, agent_env, agent_fd, agent_token,
                     cp_json, make_session)

SES_RE = re.compile(r"ses_[a-z0-9]{16}")
TOKEN_RE = re.compile(r"moat_st_[0-9a-f]{64}")
THREE = {"MOAT_SESSION_ID", "MOAT_CONTROL_PLANE_URL", "MOAT_SESSION_TOKEN"}
# an agent that exits 3 once /tmp/stop exists
STOPPABLE = ["sh", "-c", "env > /tmp/moat-agent.env.tmp && mv /tmp/moat-agent.env.tmp "
             "/tmp/moat-agent.env; while [ ! -e /tmp/stop ]; do sleep 0.05; done; exit 3"]


@pytest.fixture
def d():
    dd = CPDaemon()
    yield dd
    dd.stop()


def err(r, status, contains):
    assert r.status == status, r
    j = r.json()
    assert contains in j["error"]["message"], j
    return j["error"]


def test_lifecycle(d):
    s = make_session(d, metadata={"team": "a"})
    assert SES_RE.fullmatch(s["id"]), s
    assert s["state"] == "running" and s["restarts"] == 0, s
    assert s["metadata"] == {"team": "a"}
    assert set(s["usage"]) == {"tokens_in", "tokens_out", "requests", "bytes_in", "bytes_out",
                               "wall_s", "cpu_s", "mem_peak_bytes", "artifacts_bytes"}
    box = s["sandbox_id"]
    assert d.get(f"/v1/sandboxes/{box}").status == 200
    assert d.session(s["id"])["agent"]["pid"] > 0
    ids = [x["id"] for x in d.get("/v1/sessions").json()["sessions"]]
    assert ids == [s["id"]]
    assert d.get("/v1/sessions?state=ended").json()["sessions"] == []
    u = d.get(f"/v1/sessions/{s['id']}/usage").json()
    assert set(u) == {"usage", "budget", "budget_left"}
    # stored: the row is in SQLite, with the token's hash only
    rows = d.db("SELECT state, sandbox_id FROM sessions WHERE id = ?", (s["id"],))
    assert rows == [("running", box)]
    r = d.delete(f"/v1/sessions/{s['id']}")
    assert r.status == 200 and r.json()["state"] == "ended", r
    assert r.json()["ended_reason"] == "deleted" and "ended_at" in r.json()
    assert d.get(f"/v1/sandboxes/{box}").status == 404
    assert d.session(s["id"])["state"] == "ended"
    assert d.db("SELECT state, token_hash FROM sessions WHERE id = ?", (s["id"],)) == [("ended", "")]
    err(d.post(f"/v1/sessions/{s['id']}/restart"), 409, "ended")
    err(d.get("/v1/sessions/ses_nosuchsession00"), 404, "ses_nosuchsession00")


@pytest.mark.parametrize("body,status,culprit", [
    ({"agent": {"cmd": ["true"]}, "bogus": 1}, 400, "bogus"),
    ({}, 400, "agent"),
    ({"agent": {"cmd": "true"}}, 400, "agent.cmd"),
    ({"agent": {"cmd": []}}, 400, "agent.cmd"),
    ({"agent": {"cmd": ["true", 1]}}, 400, "agent.cmd[1]"),
    ({"agent": {"cmd": ["true"], "color": "red"}}, 400, "color"),
    ({"agent": {"cmd": ["true"], "env": {"A": 1}}}, 400, "agent.env"),
    ({"agent": {"cmd": ["true"], "sdk_env": "yes"}}, 400, "agent.sdk_env"),
    ({"agent": {"cmd": ["true"]}, "llm": {"routes": ["nosuchroute"]}}, 400, "nosuchroute"),
    ({"agent": {"cmd": ["true"]}, "llm": {"routes": [{"route": "x", "m": 1}]}}, 400, "\"m\""),
    ({"agent": {"cmd": ["true"]}, "budget": {"tokens": 0}}, 400, "budget.tokens"),
    ({"agent": {"cmd": ["true"]}, "budget": {"requests": "1"}}, 400, "budget.requests"),
    ({"agent": {"cmd": ["true"]}, "budget": {"dollars": 5}}, 400, "dollars"),
    ({"agent": {"cmd": ["true"]}, "network": "host"}, 422, "host"),
    ({"agent": {"cmd": ["true"]}, "mcp": ["docs"]}, 422, "mcp"),
    ({"agent": {"cmd": ["true"]}, "image": "no-such-image-xyz"}, 404, "no-such-image-xyz"),
])
def test_bad_bodies_name_the_culprit(d, body, status, culprit):
    err(d.post("/v1/sessions", body), status, culprit)
    # nothing half-stored: no session, no row, no sandbox
    assert d.get("/v1/sessions").json()["sessions"] == []
    assert d.db("SELECT COUNT(*) FROM sessions") == [(0,)]
    assert d.get("/v1/sandboxes").json()["sandboxes"] == []


def test_agent_env_exactly_three(d):
    s = make_session(d, agent={"cmd": AGENT_CMD, "env": {"MY_SETTING": "x"}})
    env = agent_env(d, s["id"])
    assert env["MOAT_SESSION_ID"] == s["id"]
    assert env["MOAT_CONTROL_PLANE_URL"] == "http://127.0.0.1:7878"
    token = env["MOAT_SESSION_TOKEN"]
    assert TOKEN_RE.fullmatch(token), token
    assert env["MY_SETTING"] == "x"
    # a tool process started through /v1 exec: the sandbox's env, never the token
    tool = d.ex(s["sandbox_id"], ["env"])["stdout"]
    tool_env = dict(l.split("=", 1) for l in tool.splitlines() if "=" in l)
    assert token not in tool
    added = set(env) - set(tool_env) - {"MY_SETTING", "PWD", "SHLVL", "_", "OLDPWD"}
    assert added == THREE, added
    assert not any(k.startswith(("OPENAI_", "ANTHROPIC_")) for k in env)
    # only the hash is stored, nowhere the token itself
    (h,), = d.db("SELECT token_hash FROM sessions WHERE id = ?", (s["id"],))
    assert h == hashlib.sha256(token.encode()).hexdigest()
    for p in d.data.rglob("*"):
        if p.is_file() and not p.is_symlink() and "fs" not in p.relative_to(d.data).parts:
            try:
                assert token.encode() not in p.read_bytes(), p
            except PermissionError:
                pass
    # the token works on its own sandbox's listener
    st, j = cp_json(d, s["id"], "GET", "/v1/session", token=token)
    assert st == 200 and j["id"] == s["id"], j


def test_env_fd(d):
    marker = f"moat-envfd-{os.getpid()}"
    # no exec at its end: the shell (its $0 the marker) stays, with the agent's env
    cmd = ["sh", "-c", AGENT_FD_CMD[2].replace("exec sleep", "sleep"), marker]
    s = make_session(d, agent={"cmd": cmd, "env_fd": True})
    env = agent_env(d, s["id"])
    assert env.get("MOAT_SESSION_FD") == "0"
    assert not (THREE & set(env)), env
    fd = agent_fd(d, s["id"])
    assert set(fd) == THREE, fd
    assert fd["MOAT_SESSION_ID"] == s["id"] and TOKEN_RE.fullmatch(fd["MOAT_SESSION_TOKEN"])
    # host side: the agent's process environment has no token
    pids = wait_until(lambda: pids_with(marker), timeout=10)
    assert pids
    for pid in pids:
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                e = f.read()
        except (PermissionError, FileNotFoundError):
            continue
        assert fd["MOAT_SESSION_TOKEN"].encode() not in e
        assert b"MOAT_SESSION_TOKEN" not in e
    st, j = cp_json(d, s["id"], "GET", "/v1/session", token=fd["MOAT_SESSION_TOKEN"])
    assert st == 200 and j["id"] == s["id"], j


def test_exit_revokes_the_token(d):
    s = make_session(d, agent={"cmd": STOPPABLE})
    token = agent_token(d, s["id"])
    assert cp_json(d, s["id"], "GET", "/v1/session", token=token)[0] == 200
    d.ex(s["sandbox_id"], ["touch", "/tmp/stop"])
    assert wait_until(lambda: d.session(s["id"])["state"] == "exited", timeout=15)
    x = d.session(s["id"])
    assert x["agent"]["exit_code"] == 3 and x["sandbox_id"] == s["sandbox_id"], x
    # the sandbox is kept for inspection; the token is refused in it
    st, j = cp_json(d, s["id"], "GET", "/v1/session", token=token)
    assert st == 401 and j["error"]["code"] == "unauthorized", j


def test_restart_new_sandbox_new_token(d):
    s = make_session(d)
    old_box, old_tok = s["sandbox_id"], agent_token(d, s["id"])
    r = d.post(f"/v1/sessions/{s['id']}/restart")
    assert r.status == 200, r
    n = r.json()
    assert n["id"] == s["id"] and n["restarts"] == 1 and n["state"] == "running", n
    assert n["sandbox_id"] != old_box
    assert d.get(f"/v1/sandboxes/{old_box}").status == 404
    new_tok = agent_token(d, s["id"])
    assert new_tok != old_tok and TOKEN_RE.fullmatch(new_tok)
    st, j = cp_json(d, s["id"], "GET", "/v1/session", token=old_tok)
    assert st == 401, j
    st, j = cp_json(d, s["id"], "GET", "/v1/session", token=new_tok)
    assert st == 200 and j["id"] == s["id"], j


def test_delete_purge(d):
    s = make_session(d)
    r = d.delete(f"/v1/sessions/{s['id']}?purge=true")
    assert r.status == 200 and r.json()["state"] == "ended", r
    c = d.get(f"/v1/sessions/{s['id']}/conversation")
    assert c.status == 200 and c.json().get("messages", []) == [], c


def test_metrics(d):
    s = make_session(d)
    m = d.get("/metrics").body.decode()
    assert 'moat_sessions{state="running"} 1' in m, m
    assert f'moat_session_requests_total{{session="{s["id"]}"}} 0' in m
    assert f'moat_session_tokens_total{{session="{s["id"]}",direction="in"}} 0' in m


def test_kill9_sessions_come_back(d):
    a = make_session(d, agent={"cmd": STOPPABLE})
    b = make_session(d)
    agent_token(d, a["id"])
    # b's sandbox dies while the daemon is down
    pid1 = d.agent_pid(b["sandbox_id"])
    assert pid1
    d.kill9()
    os.kill(pid1, 9)
    d.start()
    # a: the same sandbox, its agent followed again (its exit is seen)
    x = d.session(a["id"])
    assert x["state"] == "running" and x["sandbox_id"] == a["sandbox_id"], x
    d.ex(a["sandbox_id"], ["touch", "/tmp/stop"])
    assert wait_until(lambda: d.session(a["id"])["state"] == "exited", timeout=15)
    assert d.session(a["id"])["agent"]["exit_code"] == 3
    # b: a fresh sandbox, a new token that works there
    assert wait_until(lambda: d.session(b["id"])["state"] == "running" and
                      d.session(b["id"])["sandbox_id"] != b["sandbox_id"], timeout=20)
    y = d.session(b["id"])
    assert y["restarts"] == 1, y
    assert d.get(f"/v1/sandboxes/{b['sandbox_id']}").status == 404
    tok_b = agent_token(d, b["id"])
    assert cp_json(d, b["id"], "GET", "/v1/session", token=tok_b)[0] == 200


def test_kill9_token_still_works(d):
    a = make_session(d)
    tok = agent_token(d, a["id"])
    d.kill9()
    d.start()
    st, j = cp_json(d, a["id"], "GET", "/v1/session", token=tok, timeout=5)
    assert st == 200 and j["id"] == a["id"], (st, j)


def test_sdk_env():
    d = CPDaemon(routes={"an": "http://127.0.0.1:9,family=anthropic",
                         "oa": "http://127.0.0.1:9,family=openai",
                         "ob": "http://127.0.0.1:9,family=openai"})
    try:
        s = make_session(d, agent={"cmd": AGENT_CMD, "sdk_env": True},
                         llm={"routes": ["an", "oa", "ob"]})
        env = agent_env(d, s["id"])
        tok = env["MOAT_SESSION_TOKEN"]
        assert env["OPENAI_BASE_URL"] == "http://127.0.0.1:7878/llm/oa/v1"
        assert env["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:7878/llm/an"
        assert env["OPENAI_API_KEY"] == tok == env["ANTHROPIC_API_KEY"]
        # only the families it has routes of
        s2 = make_session(d, agent={"cmd": AGENT_CMD, "sdk_env": True}, llm={"routes": ["oa"]})
        env2 = agent_env(d, s2["id"])
        assert "OPENAI_BASE_URL" in env2 and "ANTHROPIC_BASE_URL" not in env2
    finally:
        d.stop()
