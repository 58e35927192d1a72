"""Shared helpers of the control-plane tests (docs/control-plane.md).

- CPDaemon(*args, routes={NAME: URL or "URL,family=...,key=SECRET"},
  secrets={NAME: VALUE}): `moat serve` with --llm-route per route and a
  --secrets-file holding the secrets; its stop() deletes every session
  first (a session's lost sandbox would otherwise be replaced).
- make_session(d, **body): POST /v1/sessions (201 asserted), the session;
  agent defaults to AGENT_CMD, which writes its environment to
  /tmp/moat-agent.env inside and then sleeps.
- agent_env(d, sid) / agent_token(d, sid): that environment (a dict) and
  the token in it, read from inside the sandbox with d.ex; agent_fd(d,
  sid): what an env_fd agent (AGENT_FD_CMD) read from its fd 0.
- inside(d, sid, code): python3 -c code in the session's sandbox (the ex
  answer). cp_request(d, sid, method, path, body=None, token=None,
  headers=None): an HTTP request from inside to the control listener,
  returns (status, body bytes, headers dict).
- fake_llm(): the FakeLLM class of tests/e2e/fake_llm.py, or a pytest skip
  when it is not there yet.
"""
import base64
import json
import os

import pytest

from conftest import wait_until
from test_serve import Daemon

CP_URL = "http://127.0.0.1:7878"
ENV_FILE = "/tmp/moat-agent.env"
FD_FILE = "/tmp/moat-agent.fd"
# the agent of most tests: its environment on a file, then it waits
AGENT_CMD = ["sh", "-c", f"env > {ENV_FILE}.tmp && mv {ENV_FILE}.tmp {ENV_FILE}; exec sleep 3600"]
# an env_fd agent: what fd 0 carried, then its environment
AGENT_FD_CMD = ["sh", "-c",
                f"cat > {FD_FILE}.tmp && mv {FD_FILE}.tmp {FD_FILE}; "
                f"env > {ENV_FILE}.tmp && mv {ENV_FILE}.tmp {ENV_FILE}; exec sleep 3600"]


def fake_llm():
    try:
        from fake_llm import FakeLLM
    except ImportError:
        pytest.skip("tests/e2e/fake_llm.py (H-proxy's fake upstream) is not there yet")
    return FakeLLM


class CPDaemon(Daemon):
    def __init__(self, *args, routes=None, secrets=None, **kw):
        extra = list(args)
        self._secrets = dict(secrets or {})
        for name, spec in (routes or {}).items():
            extra += ["--llm-route", f"{name}={spec}"]
        self._pending_secrets = None
        if self._secrets:
            # the file must exist before the daemon starts: a private place
            # next to the test's base directory, written before super()
            import tempfile
            fd, path = tempfile.mkstemp(prefix="moat-cp-secrets-")
            with os.fdopen(fd, "w") as f:
                for k, v in self._secrets.items():
                    f.write(f"{k}={v}\n")
            os.chmod(path, 0o600)
            self._pending_secrets = path
            extra += ["--secrets-file", path]
        super().__init__(*extra, **kw)

    def stop(self):
        try:
            if self.proc and self.proc.poll() is None:
                try:
                    r = self.get("/v1/sessions", timeout=20)
                    if r.status == 200:
                        for s in r.json().get("sessions", []):
                            if s.get("state") != "ended":
                                self.delete(f"/v1/sessions/{s['id']}", timeout=20)
                except (OSError, AssertionError):
                    pass
        finally:
            if self._pending_secrets:
                try:
                    os.unlink(self._pending_secrets)
                except OSError:
                    pass
                self._pending_secrets = None
            super().stop()

    def session(self, sid):
        r = self.get(f"/v1/sessions/{sid}")
        assert r.status == 200, r
        return r.json()

    def db(self, query, args=()):
        """Rows of the daemon's store (read-only)."""
        import sqlite3
        con = sqlite3.connect(f"file:{self.data / 'moat.db'}?mode=ro", uri=True, timeout=5)
        try:
            return con.execute(query, args).fetchall()
        finally:
            con.close()


def make_session(d, expect=201, **body):
    body.setdefault("agent", {"cmd": AGENT_CMD})
    r = d.post("/v1/sessions", body)
    assert r.status == expect, r
    s = r.json()
    if expect == 201:
        d.agent_pid(s["sandbox_id"])
    return s


def sandbox_of(d, sid):
    r = d.get(f"/v1/sessions/{sid}")
    assert r.status == 200, r
    return r.json()["sandbox_id"]


def read_inside(d, sid, path, timeout=15):
    """The text of path inside the session's sandbox, once it exists."""
    box = sandbox_of(d, sid)
    out = {}

    def got():
        j = d.ex(box, ["cat", path])
        if j.get("exit_code") == 0:
            out["t"] = j["stdout"]
            return True
        return False
    assert wait_until(got, timeout=timeout), f"{path} never appeared in {box}"
    return out["t"]


def parse_env(text):
    env = {}
    for line in text.splitlines():
        k, sep, v = line.partition("=")
        if sep:
            env[k] = v
    return env


def agent_env(d, sid):
    return parse_env(read_inside(d, sid, ENV_FILE))


def agent_fd(d, sid):
    return parse_env(read_inside(d, sid, FD_FILE))


def agent_token(d, sid):
    env = agent_env(d, sid)
    if "MOAT_SESSION_TOKEN" in env:
        return env["MOAT_SESSION_TOKEN"]
    return agent_fd(d, sid)["MOAT_SESSION_TOKEN"]


def inside(d, sid, code, box=None, **kw):
    return d.ex(box or sandbox_of(d, sid), ["python3", "-c", code], **kw)


_CP_CLIENT = r"""
import base64, json, sys, urllib.request, urllib.error
a = json.loads(sys.argv[1])
data = base64.b64decode(a["body"]) if a["body"] is not None else None
req = urllib.request.Request("http://127.0.0.1:7878" + a["path"], data=data,
                             method=a["method"], headers=a["headers"])
try:
    with urllib.request.urlopen(req, timeout=a["timeout"]) as r:
        st, body, hd = r.status, r.read(), dict(r.headers)
except urllib.error.HTTPError as e:
    st, body, hd = e.code, e.read(), dict(e.headers)
except OSError as e:  # no answer (refused, timed out): status 0
    st, body, hd = 0, str(e).encode(), {}
print(json.dumps({"status": st, "body": base64.b64encode(body).decode(), "headers": hd}))
"""


def cp_request(d, sid, method, path, body=None, token=None, headers=None, box=None,
               timeout=30):
    """A request from inside the session's sandbox (or box) to its control
    listener; (status, body bytes, headers); status 0 when nothing answered
    within timeout seconds."""
    h = dict(headers or {})
    if token is not None:
        h.setdefault("Authorization", f"Bearer {token}")
    if isinstance(body, (dict, list)):
        body = json.dumps(body).encode()
        h.setdefault("Content-Type", "application/json")
    elif isinstance(body, str):
        body = body.encode()
    arg = json.dumps({"method": method, "path": path, "headers": h, "timeout": timeout,
                      "body": base64.b64encode(body).decode() if body is not None else None})
    j = d.ex(box or sandbox_of(d, sid), ["python3", "-c", _CP_CLIENT, arg])
    assert j.get("exit_code") == 0, j
    out = json.loads(j["stdout"])
    return out["status"], base64.b64decode(out["body"]), out["headers"]


def cp_json(d, sid, method, path, body=None, token=None, **kw):
    st, b, _ = cp_request(d, sid, method, path, body, token, **kw)
    try:
        return st, json.loads(b)
    except ValueError:
        return st, {"raw": b.decode(errors="replace")}
