"""The Python client's Sessions against a real `moat serve` with a fake
upstream model (tests/e2e/fake_llm.py) and the example agent
(examples/agent-in-sandbox/agent.py) as the session's agent. Effects are
checked through raw /v1 requests (v1api.api) or the data directory."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, Daemon, _stop_and_check

sys.path.insert(0, str(REPO / "tests" / "e2e"))
from fake_llm import FakeLLM  # noqa: E402

from moat import (BudgetExceeded, Client, InvalidRequest, LimitReached,  # noqa: E402
                  MoatError, NotFound, Session, Sessions, UpstreamError,
                  UpstreamTimeout)
from moat.errors import error_from_response  # noqa: E402
from v1api import api  # noqa: E402

KEY = "sk-python-client-upstream"
AGENT = (REPO / "examples" / "agent-in-sandbox" / "agent.py").read_text()


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    fake = FakeLLM(key=KEY)
    sec = tmp_path_factory.mktemp("pysessions") / "secrets"
    sec.write_text("k=%s\n" % KEY)
    os.chmod(sec, 0o600)
    d = Daemon(args=("--pool", "0", "--secrets-file", str(sec),
                     "--llm-route", "oa=%s,family=openai,key=k" % fake.url))
    try:
        yield d, fake
    finally:
        try:
            for s in Sessions(url=d.url).list():
                Sessions(url=d.url).delete(s.id, purge=True)
        except MoatError:
            pass
        _stop_and_check(d)
        fake.stop()


def raw(d, path):
    st, body = api(d.url, "GET", path)
    return st, json.loads(body) if body else None


def wait_exited(ss, sid, timeout=120.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        s = ss.get(sid)
        if s.state != "running":
            return s
        time.sleep(0.1)
    raise AssertionError("session %s still running" % sid)


def make(ss, **kw):
    return ss.create(["python3", "/workspace/agent.py"],
                     manifest={"root": "/workspace",
                               "entries": {"agent.py": {"type": "file", "content": AGENT}}},
                     **kw)


def test_sessions_create_list_get_usage_conversation_artifacts_delete(env):
    d, fake = env
    fake.push({"text": "the python answer"})
    ss = Client(d.url).sessions
    s = make(ss, routes=[("oa", ["fake-9"])], env={"AGENT_TASK": "answer"},
             metadata={"k": "v"}, budget={"tokens": 10000, "requests": 5})
    assert isinstance(s, Session) and s.id.startswith("ses_") and s.state == "running"
    st, body = raw(d, "/v1/sessions/" + s.id)
    assert st == 200 and body["metadata"] == {"k": "v"}
    assert body["llm"]["routes"] == [{"route": "oa", "models": ["fake-9"]}]
    assert body["budget"]["tokens"] == 10000

    s = wait_exited(ss, s.id)
    assert s.exit_code == 0 and s.state == "exited", s.raw
    assert s.id in [x.id for x in ss.list()]
    assert s.id in [x.id for x in ss.list(state="exited")]
    assert s.id not in [x.id for x in ss.list(state="running")]

    u = ss.usage(s)
    assert u == raw(d, "/v1/sessions/%s/usage" % s.id)[1]
    assert u["usage"]["requests"] == 1 and u["budget_left"]["requests"] == 4
    conv = ss.conversation(s.id)
    assert conv["turns"] == 1 and conv["messages"][-1]["content"] == "the python answer"
    arts = ss.artifacts(s)
    assert [(a.name, a.size) for a in arts] == [("result.txt", len("the python answer"))]
    assert ss.artifact(s, "result.txt") == b"the python answer"
    with pytest.raises(NotFound):
        ss.artifact(s, "missing.txt")

    ended = ss.delete(s, purge=True)
    assert ended.state == "ended"
    assert raw(d, "/v1/sessions/" + s.id)[1]["state"] == "ended"
    assert not (Path(d.data) / "artifacts" / s.id).exists()


def test_restart_gives_a_new_sandbox_and_keeps_the_conversation(env):
    d, fake = env
    fake.push({"text": "once"})
    ss = Sessions(url=d.url)
    s = wait_exited(ss, make(ss, routes=["oa"], env={"AGENT_TASK": "t"}).id)
    n = len(fake.requests)
    r = ss.restart(s)
    assert r.sandbox_id != s.sandbox_id and r.restarts == 1
    assert raw(d, "/v1/sandboxes/" + s.sandbox_id)[0] == 404
    r = wait_exited(ss, s.id)
    # the agent found its turn done: no new model call, the same conversation
    assert r.exit_code == 0 and len(fake.requests) == n
    assert ss.conversation(s)["turns"] == 1
    ss.delete(s)


def test_errors_are_typed(env):
    d, _ = env
    ss = Sessions(url=d.url)
    with pytest.raises(InvalidRequest) as ei:
        ss.create(["true"], routes=["nosuch"])
    assert "nosuch" in ei.value.message
    with pytest.raises(InvalidRequest):
        ss.create(["true"], routes=["oa"], budget={"tokens": 0})
    with pytest.raises(NotFound):
        ss.get("ses_nosuchsession00")
    with pytest.raises(ValueError):
        ss.create("python3 agent.py")
    with pytest.raises(TypeError):
        ss.create(["true"], routes=[42])
    # the codes of the control plane map to their classes
    e = error_from_response(429, "budget_exceeded", "the session's token budget is used up")
    assert isinstance(e, BudgetExceeded) and isinstance(e, LimitReached) and e.status == 429
    assert isinstance(error_from_response(502, "upstream_error", "x"), UpstreamError)
    assert isinstance(error_from_response(504, "timeout", "x"), UpstreamTimeout)
