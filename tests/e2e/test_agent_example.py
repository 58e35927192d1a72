"""Issue 14's "Done when": examples/agent-in-sandbox/agent.py, an agent that
lives in a moat sandbox holding nothing but its session token, does real
work through the control plane (a run tool, a write_file tool, an upload
through a one-time URL) against a fake upstream model (fake_llm.py), and
survives both having the daemon kill -9'd and its sandbox replaced
(POST /v1/sessions/{id}/restart), each in the middle of a streamed model
call. Checked on the host: the conversation holds each turn exactly once,
the artifact has the content the tools made, the usage was counted, the
upstream got the real key, and that key is nowhere inside the sandbox
(the processes' environments, the sandbox's files on the host, what the
control plane answered the agent)."""
import json
import os
import secrets
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from conftest import wait_until  # noqa: E402
from fake_llm import FakeLLM  # noqa: E402
from test_serve import Daemon  # noqa: E402


def agent_source():
    """agent.py: next to this file (run.sh copies it as agent_example.py), or
    in the checkout."""
    for p in (HERE / "agent_example.py",
              HERE.parent.parent / "examples" / "agent-in-sandbox" / "agent.py"):
        if p.exists():
            return p.read_text()
    pytest.skip("examples/agent-in-sandbox/agent.py not found")


SECRET = "sk-upstream-" + secrets.token_hex(16)
RESULT = "forty-two = 42\n"


@pytest.fixture
def env(tmp_path_factory):
    fake = FakeLLM(key=SECRET)
    sec = tmp_path_factory.mktemp("secrets") / "secrets"
    sec.write_text(f"upkey={SECRET}\n")
    os.chmod(sec, 0o600)
    d = Daemon("--pool", "0", "--secrets-file", str(sec),
               "--llm-route", f"oa={fake.url},family=openai,key=upkey")
    try:
        yield d, fake
    finally:
        try:
            r = d.get("/v1/sessions", timeout=20)
            for s in (r.json().get("sessions", []) if r.status == 200 else []):
                d.delete(f"/v1/sessions/{s['id']}?purge=true", timeout=30)
        except OSError:
            pass
        d.stop()
        fake.stop()


def session(d, sid):
    r = d.get(f"/v1/sessions/{sid}")
    assert r.status == 200, r
    return r.json()


def mid_stream(fake, i, events=2):
    """Request i (0-based) has been answered `events` SSE events and hangs."""
    fake.wait_requests(i + 1, timeout=60)
    assert wait_until(lambda: fake.requests[i]["events"] >= events, timeout=30), \
        fake.requests[i]


def no_secret_inside(d, sb):
    """The upstream key is in no process environment inside and in no file
    of the sandbox (looked at from the host), while the agent's own
    environment (read from inside) does carry its session token."""
    out = d.sh(sb, "for p in /proc/[0-9]*; do tr '\\0' '\\n' < $p/environ; done 2>/dev/null;"
                   " env; true")
    assert SECRET not in out
    hits = []
    for root, _, files in os.walk(d.sbdir(sb)):
        for f in files:
            p = os.path.join(root, f)
            try:
                if os.path.islink(p) or os.path.getsize(p) > (64 << 20):
                    continue
                with open(p, "rb") as fh:
                    if SECRET.encode() in fh.read():
                        hits.append(p)
            except OSError:
                pass
    assert not hits, hits
    return out


def agent_logs(d):
    """What the agents of every sandbox said, and the daemon's logs."""
    out = []
    for p in sorted(Path(d.data).glob("sandboxes/*/fs/workspace/agent.log")):
        out.append(f"--- {p}:\n{p.read_text(errors='replace')[-3000:]}")
    for n in range(1, d.nstart + 1):
        out.append(f"--- serve-{n}.log:\n{d.log(n)[-3000:]}")
    return "\n".join(out)


@pytest.fixture
def logs_on_failure(env):
    """(pytest shows a test's output only when it fails)"""
    yield
    print(agent_logs(env[0]))


def test_agent_survives_a_daemon_kill_and_a_restart_mid_stream(env, logs_on_failure):
    d, fake = env
    run_cmd = "echo forty-two = $((6*7)) > calc.txt; cat calc.txt"
    fake.push(
        # turn-0: a command to run
        {"tool_call": {"name": "run", "arguments": {"cmd": run_cmd}}},
        # turn-1: a file to write, streamed, hanging after two events: the
        # daemon is kill -9'd here; then the same turn, retried, whole
        {"tool_call": {"name": "write_file",
                       "arguments": {"path": "result.txt", "content": RESULT}},
         "hang_after": 2, "hang": 60},
        {"tool_call": {"name": "write_file",
                       "arguments": {"path": "result.txt", "content": RESULT}}},
        # turn-2: the final answer, hanging mid-stream: the sandbox is
        # replaced here; then the same turn from the new sandbox's agent
        {"text": "done: the answer is forty two", "hang_after": 2, "hang": 60},
        {"text": "done: the answer is forty two"},
    )
    r = d.post("/v1/sessions", {
        "manifest": {"root": "/workspace",
                     "entries": {"agent.py": {"type": "file", "content": agent_source()}}},
        # (its stderr in a file of the workspace: shown when the test fails)
        "agent": {"cmd": ["sh", "-c", "exec python3 /workspace/agent.py 2>>/workspace/agent.log"],
                  "cwd": "/workspace",
                  "env": {"AGENT_TASK": "compute six times seven into result.txt",
                          "AGENT_MODEL": "fake-1"}},
        "llm": {"routes": [{"route": "oa", "models": ["fake-1"]}]},
        "budget": {"tokens": 100000, "requests": 50},
    })
    assert r.status == 201, r
    ses = r.json()
    sid, sb1 = ses["id"], ses["sandbox_id"]
    assert ses["state"] == "running"

    # turn-0 done, turn-1 in the middle of its stream: kill -9 the daemon
    mid_stream(fake, 1)
    inside = no_secret_inside(d, sb1)
    assert "MOAT_SESSION_TOKEN=moat_st_" in inside, "the agent's env was not read"
    d.kill9()
    d.start()
    # the agent retries turn-1 (same turn_id), then turn-2 hangs mid-stream
    mid_stream(fake, 3)
    assert session(d, sid)["state"] == "running"
    r = d.post(f"/v1/sessions/{sid}/restart")
    assert r.status == 200, r
    ses = r.json()
    sb2 = ses["sandbox_id"]
    assert sb2 != sb1 and ses["restarts"] == 1

    assert wait_until(lambda: session(d, sid)["state"] != "running", timeout=120), \
        session(d, sid)
    ses = session(d, sid)
    assert ses["state"] == "exited" and ses["agent"]["exit_code"] == 0, ses
    assert len(fake.requests) == 5, [r["body"] for r in fake.requests]

    # the conversation: each turn once, in order
    conv = d.get(f"/v1/sessions/{sid}/conversation").json()
    assert conv["turns"] == 3, conv
    msgs = conv["messages"]
    roles = [m["role"] for m in msgs]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "tool",
                     "assistant"], roles
    calls = [c["function"]["name"] for m in msgs for c in m.get("tool_calls") or []]
    assert calls == ["run", "write_file"], calls
    assert "forty-two = 42" in msgs[3]["content"]       # the run's real output
    assert "done: the answer is forty two" in msgs[-1]["content"]
    # what went upstream each time: the history the control plane kept plus
    # the new messages (the retried turns carry the same history)
    assert [len(r["body"]["messages"]) for r in fake.requests] == [2, 4, 4, 6, 6]

    # the artifact, uploaded through a one-time URL by the new sandbox's agent
    r = d.get(f"/v1/sessions/{sid}/artifacts")
    assert r.status == 200, r
    assert [a["name"] for a in r.json()["artifacts"]] == ["result.txt"]
    r = d.get(f"/v1/sessions/{sid}/artifacts/result.txt")
    assert r.status == 200 and r.body == RESULT.encode(), r

    # usage: counted, persisted over the daemon's restart
    u = d.get(f"/v1/sessions/{sid}/usage").json()
    assert u["usage"]["tokens_in"] > 0 and u["usage"]["tokens_out"] > 0, u
    assert 3 <= u["usage"]["requests"] <= 5, u
    assert u["usage"]["artifacts_bytes"] >= len(RESULT), u

    # the key: sent upstream every time, never the agent's token
    for rq in fake.requests:
        assert rq["headers"].get("authorization") == f"Bearer {SECRET}", rq["headers"]
    tokens = set()
    for line in inside.splitlines():
        if line.startswith("MOAT_SESSION_TOKEN="):
            tokens.add(line.split("=", 1)[1])
    assert tokens and not any(t in json.dumps(r["headers"]) + r["raw"].decode("utf-8", "replace")
                              for t in tokens for r in fake.requests)
    # nowhere inside the new sandbox either (it is kept after the agent exits)
    no_secret_inside(d, sb2)
    assert SECRET not in json.dumps(conv)


def test_agent_reads_its_variables_from_stdin_with_env_fd(env, logs_on_failure):
    """agent.env_fd: the three variables come on the agent's stdin; the
    agent (MOAT_SESSION_FD) reads them there and does its work, while no
    process inside has the token in its environment."""
    d, fake = env
    fake.push({"text": "read from fd"})
    r = d.post("/v1/sessions", {
        "manifest": {"root": "/workspace",
                     "entries": {"agent.py": {"type": "file", "content": agent_source()}}},
        "agent": {"cmd": ["sh", "-c", "env > /workspace/env.txt; "
                          "exec python3 /workspace/agent.py 2>>/workspace/agent.log"],
                  "env_fd": True, "env": {"AGENT_TASK": "hi"}},
        "llm": {"routes": ["oa"]},
    })
    assert r.status == 201, r
    sid, sb = r.json()["id"], r.json()["sandbox_id"]
    assert wait_until(lambda: session(d, sid)["state"] != "running", timeout=60), session(d, sid)
    ses = session(d, sid)
    assert ses["state"] == "exited" and ses["agent"]["exit_code"] == 0, ses
    env_txt = (d.ws(sb) / "env.txt").read_text()
    assert "MOAT_SESSION_FD=0" in env_txt and "MOAT_SESSION_TOKEN" not in env_txt, env_txt
    assert "moat_st_" not in no_secret_inside(d, sb)
    assert d.get(f"/v1/sessions/{sid}/artifacts/result.txt").body == b"read from fd"


def test_agent_stops_with_status_3_when_the_budget_is_used_up(env, logs_on_failure):
    """A budget of one model call: the agent's second turn is refused 429
    budget_exceeded (no upstream call), the agent exits 3 saying so, and the
    session records which budget ran out."""
    d, fake = env
    fake.push({"tool_call": {"name": "run", "arguments": {"cmd": "true"}}})
    r = d.post("/v1/sessions", {
        "manifest": {"root": "/workspace",
                     "entries": {"agent.py": {"type": "file", "content": agent_source()}}},
        "agent": {"cmd": ["sh", "-c", "exec python3 /workspace/agent.py 2>>/workspace/agent.log"],
                  "env": {"AGENT_TASK": "loop"}},
        "llm": {"routes": ["oa"]}, "budget": {"requests": 1},
    })
    assert r.status == 201, r
    sid, sb = r.json()["id"], r.json()["sandbox_id"]
    assert wait_until(lambda: session(d, sid)["state"] != "running", timeout=60), session(d, sid)
    ses = session(d, sid)
    assert ses["agent"]["exit_code"] == 3, ses
    assert ses["budget_exceeded"] == "requests", ses
    assert len(fake.requests) == 1
    log = (d.ws(sb) / "agent.log").read_text()
    assert "budget_exceeded" in log and "budget.requests" in log, log
    assert d.get(f"/v1/sessions/{sid}/conversation").json()["turns"] == 1
