"""Conversation mode of the control plane (docs/control-plane.md): an agent
in a session's sandbox sends only its new messages to
POST $MOAT_CONTROL_PLANE_URL/v1/conversations/<session>/turns; the daemon
sends the stored history with them upstream (the fake upstream,
tests/e2e/fake_llm.py, records what it got), relays the answer and stores
the turn only when the answer came whole.

Every call to the control plane is made from inside the sandbox (the only
place its listener exists), with the token the agent command was given
(the agent writes it to /workspace/.tok for the test's tool processes);
what was stored is checked on the upstream's side (the bodies the fake
recorded) and through the host API."""
import json
import os

import pytest

from conftest import PY
from fake_llm import FakeLLM
from test_serve import Daemon, wait_until

KEY_OA = "sk-test-openai-CONV"
KEY_AN = "sk-ant-test-CONV"

# Runs inside the sandbox: one HTTP/1.1 request to the control listener,
# by hand (stdlib only, and so that a reply cut short is seen as such).
# argv: method path body-json [token|""] [read-limit bytes of body, -1 all]
CLIENT = r'''
import json, socket, sys
method, path, body = sys.argv[1], sys.argv[2], sys.argv[3]
tok = sys.argv[4] if len(sys.argv) > 4 and sys.argv[4] else open("/workspace/.tok").read().strip()
limit = int(sys.argv[5]) if len(sys.argv) > 5 else -1
data = body.encode() if body else b""
s = socket.create_connection(("127.0.0.1", 7878), timeout=30)
head = "%s %s HTTP/1.1\r\nHost: 127.0.0.1:7878\r\nAuthorization: Bearer %s\r\nConnection: close\r\n" % (method, path, tok)
if data:
    head += "Content-Type: application/json\r\nContent-Length: %d\r\n" % len(data)
s.sendall(head.encode() + b"\r\n" + data)
raw = b""
while b"\r\n\r\n" not in raw:
    c = s.recv(65536)
    if not c:
        break
    raw += c
hdr, _, rest = raw.partition(b"\r\n\r\n")
lines = hdr.decode("latin-1").split("\r\n")
status = int(lines[0].split()[1])
headers = {}
for l in lines[1:]:
    k, _, v = l.partition(":")
    headers[k.strip().lower()] = v.strip()
got = rest
while limit < 0 or len(got) < limit:
    try:
        c = s.recv(65536)
    except OSError:
        break
    if not c:
        break
    got += c
s.close()
complete = True
if headers.get("transfer-encoding", "").lower() == "chunked":
    out, i, complete = b"", 0, False
    while True:
        j = got.find(b"\r\n", i)
        if j < 0:
            break
        n = int(got[i:j].split(b";")[0] or b"0", 16)
        if n == 0:
            complete = True
            break
        if j + 2 + n > len(got):
            out += got[j + 2:]
            break
        out += got[j + 2:j + 2 + n]
        i = j + 2 + n + 2
    got = out
elif "content-length" in headers:
    complete = len(got) >= int(headers["content-length"])
print(json.dumps({"status": status, "ctype": headers.get("content-type", ""),
                  "body": got.decode("utf-8", "replace"), "complete": complete}))
'''


class Cp:
    """A daemon with the fake upstream behind two routes (oa: OpenAI, an:
    Anthropic) and helpers to run sessions and talk to the control plane
    from inside them."""

    def __init__(self, tmp):
        self.fake = FakeLLM(key=KEY_OA, anthropic_key=KEY_AN)
        self.secrets = os.path.join(tmp, "secrets")
        with open(self.secrets, "w") as f:
            f.write(f"OA_KEY={KEY_OA}\nAN_KEY={KEY_AN}\n")
        os.chmod(self.secrets, 0o600)
        self.d = Daemon("--llm-route", f"oa={self.fake.url},key=OA_KEY",
                        "--llm-route", f"an={self.fake.url},family=anthropic,key=AN_KEY",
                        "--secrets-file", self.secrets)

    def close(self):
        try:
            self.d.stop()
        finally:
            self.fake.stop()

    def session(self, routes=("oa", "an")):
        r = self.d.post("/v1/sessions", {
            "agent": {"cmd": ["/bin/sh", "-c",
                              'printf %s "$MOAT_SESSION_TOKEN" > /workspace/.tok; '
                              "exec sleep 600"]},
            "llm": {"routes": list(routes)}})
        assert r.status == 201, r
        s = r.json()
        self.wait_token(s["sandbox_id"])
        return s

    def wait_token(self, sbid):
        def ok():
            j = self.d.ex(sbid, ["/bin/sh", "-c", "test -s /workspace/.tok"])
            return j.get("exit_code") == 0
        assert wait_until(ok, timeout=20), "the agent never wrote its token"

    def token(self, sbid):
        return self.d.sh(sbid, "cat /workspace/.tok").strip()

    def call(self, sbid, method, path, body=None, token="", limit=-1):
        j = self.d.ex(sbid, [PY, "-c", CLIENT, method, path,
                             json.dumps(body) if body is not None else "", token, str(limit)],
                      timeout_ms=60000)
        assert j.get("exit_code") == 0, j
        return json.loads(j["stdout"])

    def turn(self, s, body, **kw):
        return self.call(s["sandbox_id"], "POST", f"/v1/conversations/{s['id']}/turns", body,
                         **kw)

    def history(self, s):
        r = self.call(s["sandbox_id"], "GET", f"/v1/conversations/{s['id']}")
        assert r["status"] == 200, r
        return json.loads(r["body"])


@pytest.fixture
def cp(tmp_path):
    c = Cp(str(tmp_path))
    try:
        yield c
    finally:
        c.close()


def user(text):
    return {"role": "user", "content": text}


def test_conv_turn_stores_and_history_goes_up(cp):
    s = cp.session()
    r = cp.turn(s, {"route": "oa", "model": "gpt-4o-mini", "messages": [user("one two")]})
    assert r["status"] == 200, r
    a1 = json.loads(r["body"])
    assert a1["choices"][0]["message"]["content"] == "you said: one two"
    r = cp.turn(s, {"route": "oa", "model": "gpt-4o-mini", "temperature": 0,
                    "messages": [user("three")]})
    assert r["status"] == 200, r
    # the second call upstream carried the whole conversation, in order,
    # and none of the control plane's own keys
    up = cp.fake.requests[-1]["body"]
    assert up["messages"] == [user("one two"),
                              {"role": "assistant", "content": "you said: one two"},
                              user("three")], up
    assert up["temperature"] == 0
    for k in ("route", "dialect", "turn_id"):
        assert k not in up
    assert cp.fake.requests[-1]["headers"]["authorization"] == f"Bearer {KEY_OA}"
    h = cp.history(s)
    assert h["session"] == s["id"]
    assert h["turns"] == 2
    assert [m["role"] for m in h["messages"]] == ["user", "assistant", "user", "assistant"]
    assert h["messages"][3]["content"] == "you said: three"
    # the host sees the same
    r = cp.d.get(f"/v1/sessions/{s['id']}/conversation")
    assert r.status == 200, r
    assert r.json()["messages"] == h["messages"]
    # both calls are accounted with the upstream's own usage fields
    r = cp.d.get(f"/v1/sessions/{s['id']}/usage")
    assert r.status == 200, r
    u = r.json()["usage"]
    assert u["requests"] == 2, u
    assert u["tokens_in"] == sum(q["usage"]["in"] for q in cp.fake.requests) == 2 + 7, u
    assert u["tokens_out"] == sum(q["usage"]["out"] for q in cp.fake.requests) == 4 + 3, u


def test_conv_streamed_tool_call_anthropic(cp):
    s = cp.session()
    cp.fake.push({"tool_call": {"name": "run", "arguments": {"cmd": "ls -l"}}})
    r = cp.turn(s, {"route": "an", "model": "claude-sonnet-4-5", "max_tokens": 100,
                    "stream": True, "system": "be terse", "messages": [user("list files")]})
    assert r["status"] == 200 and r["complete"], r
    assert r["ctype"].startswith("text/event-stream"), r
    assert "message_stop" in r["body"]
    assert cp.fake.requests[-1]["headers"]["x-api-key"] == KEY_AN
    assert cp.fake.requests[-1]["headers"].get("anthropic-version")
    h = cp.history(s)
    assert h["turns"] == 1
    assert h["messages"][0] == user("list files")
    blocks = h["messages"][1]["content"]
    tool = [b for b in blocks if b["type"] == "tool_use"]
    assert len(tool) == 1 and tool[0]["name"] == "run", h
    assert tool[0]["input"] == {"cmd": "ls -l"}, "the input assembled from its JSON pieces"
    # the tool's result goes up after the stored tool_use
    r = cp.turn(s, {"route": "an", "model": "claude-sonnet-4-5", "max_tokens": 100,
                    "messages": [{"role": "user", "content": [
                        {"type": "tool_result", "tool_use_id": tool[0]["id"],
                         "content": "a b"}]}]})
    assert r["status"] == 200, r
    up = cp.fake.requests[-1]["body"]
    assert [m["role"] for m in up["messages"]] == ["user", "assistant", "user"]
    # a turn's parameters are its own: only messages are kept between turns
    assert "system" not in up and up["max_tokens"] == 100


def test_conv_streamed_chat_and_responses(cp):
    s = cp.session()
    r = cp.turn(s, {"route": "oa", "model": "m", "stream": True, "messages": [user("a b")]})
    assert r["status"] == 200 and r["complete"], r
    assert "[DONE]" in r["body"]
    # usage was asked for upstream
    assert cp.fake.requests[-1]["body"]["stream_options"]["include_usage"] is True
    r = cp.turn(s, {"route": "oa", "dialect": "responses", "model": "m", "stream": True,
                    "input": [user("c d")]})
    assert r["status"] == 200 and r["complete"], r
    assert "response.completed" in r["body"]
    up = cp.fake.requests[-1]["body"]
    assert cp.fake.requests[-1]["path"].endswith("/v1/responses")
    assert up["input"][:2] == [user("a b"), {"role": "assistant", "content": "you said: a b"}]
    h = cp.history(s)
    assert h["turns"] == 2
    assert h["messages"][3]["type"] == "message", h  # a Responses output item
    # a dialect the route does not speak is refused before any call
    n = len(cp.fake.requests)
    r = cp.turn(s, {"route": "an", "dialect": "chat", "model": "m", "messages": [user("x")]})
    assert r["status"] == 400 and "dialect" in r["body"], r
    assert len(cp.fake.requests) == n


def test_conv_retry_turn_id_not_stored_twice(cp):
    s = cp.session()
    body = {"route": "oa", "model": "m", "turn_id": "turn-1", "messages": [user("once")]}
    r1 = cp.turn(s, body)
    assert r1["status"] == 200, r1
    n = len(cp.fake.requests)
    r2 = cp.turn(s, body)
    assert r2["status"] == 200, r2
    assert r2["body"] == r1["body"], "the stored answer, as sent the first time"
    assert len(cp.fake.requests) == n, "no upstream call for a stored turn"
    h = cp.history(s)
    assert h["turns"] == 1 and len(h["messages"]) == 2, h
    # a streamed turn replays as a stream
    sb = dict(body, turn_id="turn-2", stream=True, messages=[user("twice")])
    r1 = cp.turn(s, sb)
    assert r1["status"] == 200 and r1["complete"], r1
    r2 = cp.turn(s, sb)
    assert r2["status"] == 200 and r2["ctype"].startswith("text/event-stream"), r2
    assert r2["body"] == r1["body"]
    assert len(cp.fake.requests) == n + 1
    assert cp.history(s)["turns"] == 2
    # a bad turn_id names itself
    r = cp.turn(s, dict(body, turn_id="x" * 129))
    assert r["status"] == 400 and "turn_id" in r["body"], r


def test_conv_cut_mid_stream_stores_nothing(cp):
    s = cp.session()
    cp.fake.push({"text": "w1 w2 w3 w4 w5 w6", "cut_after": 3})
    r = cp.turn(s, {"route": "oa", "model": "m", "stream": True, "turn_id": "cut",
                    "messages": [user("first")]})
    assert r["status"] == 200, r
    # the agent sees the stream break: no [DONE], an error event instead
    assert "[DONE]" not in r["body"] and '"error"' in r["body"], r
    assert cp.fake.requests[-1].get("cut"), cp.fake.requests[-1]
    h = cp.history(s)
    assert h["turns"] == 0 and h["messages"] == [], h
    # the retry of the same turn_id calls upstream again (nothing was stored)
    n = len(cp.fake.requests)
    r = cp.turn(s, {"route": "oa", "model": "m", "stream": True, "turn_id": "cut",
                    "messages": [user("first")]})
    assert r["status"] == 200 and r["complete"], r
    assert len(cp.fake.requests) == n + 1
    up = cp.fake.requests[-1]["body"]
    assert up["messages"] == [user("first")], "no half turn in the history"
    assert cp.history(s)["turns"] == 1


def test_conv_hangup_mid_stream_stores_nothing(cp):
    s = cp.session()
    cp.fake.push({"text": "a b c d e f g h", "delay": 0.3})
    # the agent reads the first bytes of the stream and hangs up
    r = cp.turn(s, {"route": "oa", "model": "m", "stream": True, "messages": [user("go")]},
                limit=1)
    assert not r["complete"], r
    assert cp.fake.wait_over(-1, timeout=20), "the upstream call was not dropped"
    assert cp.fake.requests[-1].get("disconnected"), cp.fake.requests[-1]
    h = cp.history(s)
    assert h["turns"] == 0 and h["messages"] == [], h


def test_conv_upstream_error_passed_on_not_stored(cp):
    s = cp.session()
    cp.fake.push({"status": 500, "error": "upstream broke"})
    r = cp.turn(s, {"route": "oa", "model": "m", "messages": [user("x")]})
    assert r["status"] == 500, r
    assert "upstream broke" in r["body"], "the upstream's error, in its shape"
    assert cp.history(s)["turns"] == 0


def test_conv_restart_keeps_history(cp):
    s = cp.session()
    r = cp.turn(s, {"route": "oa", "model": "m", "messages": [user("remember me")]})
    assert r["status"] == 200, r
    old_tok = cp.token(s["sandbox_id"])
    r = cp.d.post(f"/v1/sessions/{s['id']}/restart")
    assert r.status == 200, r
    s2 = r.json()
    assert s2["id"] == s["id"] and s2["sandbox_id"] != s["sandbox_id"]
    cp.wait_token(s2["sandbox_id"])
    h = cp.history(s2)
    assert h["turns"] == 1
    assert h["messages"][0] == user("remember me")
    # the old sandbox's token is worthless in the new one
    r = cp.call(s2["sandbox_id"], "GET", f"/v1/conversations/{s['id']}", token=old_tok)
    assert r["status"] == 401, r
    r = cp.turn(s2, {"route": "oa", "model": "m", "messages": [user("again")]})
    assert r["status"] == 200, r
    assert cp.fake.requests[-1]["body"]["messages"][0] == user("remember me")


def test_conv_other_session_forbidden(cp):
    a = cp.session()
    b = cp.session()
    r = cp.turn(a, {"route": "oa", "model": "m", "messages": [user("secret plans")]})
    assert r["status"] == 200, r
    n = len(cp.fake.requests)
    # B, with its own valid token, asks for A's conversation
    r = cp.call(b["sandbox_id"], "GET", f"/v1/conversations/{a['id']}")
    assert r["status"] == 403, r
    assert "secret plans" not in r["body"]
    r = cp.call(b["sandbox_id"], "POST", f"/v1/conversations/{a['id']}/turns",
                {"route": "oa", "model": "m", "messages": [user("x")]})
    assert r["status"] == 403, r
    assert len(cp.fake.requests) == n, "no upstream call"
    assert cp.history(a)["turns"] == 1
    assert cp.history(b)["turns"] == 0


def test_conv_bad_turns(cp):
    s = cp.session(routes=("oa",))
    n = len(cp.fake.requests)
    for body, status, needle in [
            ({"model": "m", "messages": []}, 400, "route"),
            ({"route": "nope", "model": "m", "messages": []}, 404, "nope"),
            ({"route": "oa", "messages": []}, 400, "model"),
            ({"route": "oa", "model": "m"}, 400, "messages"),
            ({"route": "oa", "model": "m", "messages": [3]}, 400, "messages[0]"),
            ({"route": "oa", "model": "m", "dialect": "x", "messages": []}, 400, "dialect"),
            ({"route": "an", "model": "m", "messages": [user("x")]}, 403, "an")]:
        r = cp.turn(s, body)
        assert r["status"] == status and needle in r["body"], (body, r)
    assert len(cp.fake.requests) == n
    r = cp.call(s["sandbox_id"], "DELETE", f"/v1/conversations/{s['id']}")
    assert r["status"] == 405, r
    assert cp.history(s)["turns"] == 0


def test_conv_daemon_killed_mid_stream_stores_nothing(cp):
    import threading
    s = cp.session()
    r = cp.turn(s, {"route": "oa", "model": "m", "messages": [user("kept")]})
    assert r["status"] == 200, r
    cp.fake.push({"text": "s1 s2 s3 s4 s5 s6 s7 s8", "delay": 0.5})
    n = len(cp.fake.requests)

    def streamed():
        try:
            cp.turn(s, {"route": "oa", "model": "m", "stream": True, "turn_id": "k9",
                        "messages": [user("lost")]})
        except (OSError, AssertionError):
            pass  # the daemon went away under the exec
    t = threading.Thread(target=streamed, daemon=True)
    t.start()
    assert cp.fake.wait_requests(n + 1, timeout=30), "the streamed turn never went up"
    cp.d.kill9()
    t.join(timeout=30)
    cp.d.start()

    def back():
        r = cp.d.get(f"/v1/sessions/{s['id']}")
        return r.status == 200 and r.json().get("state") == "running" and r.json()["sandbox_id"]
    assert wait_until(back, timeout=30), cp.d.get(f"/v1/sessions/{s['id']}")
    # a fresh sandbox for the session (the agent's way back after a crash)
    r = cp.d.post(f"/v1/sessions/{s['id']}/restart")
    assert r.status == 200, r
    s2 = r.json()
    cp.wait_token(s2["sandbox_id"])
    h = cp.history(s2)
    assert h["turns"] == 1 and h["messages"][0] == user("kept"), h
    # the agent asks again: it goes upstream (nothing was stored) and stores once
    r = cp.turn(s2, {"route": "oa", "model": "m", "turn_id": "k9", "messages": [user("lost")]})
    assert r["status"] == 200, r
    assert cp.fake.requests[-1]["body"]["messages"][:2] == [
        user("kept"), {"role": "assistant", "content": "you said: kept"}]
    assert cp.history(s2)["turns"] == 2
