"""The control plane's LLM proxy, pass-through mode (docs/control-plane.md),
end to end: an agent in a session's sandbox calls /llm/<route>/v1/... on its
control listener with its session token; the daemon calls the fake upstream
(tests/e2e/fake_llm.py) on the host's loopback with the route's key.

Asserted on the host side: what the fake upstream received (the key, never
the token; the body unchanged but for llm_req_prepare), what the agent got
back (the upstream's status, type and bytes; 502/504 in /v1's shape when the
upstream never answered), the daemon's record of each call (conv_calls:
complete or not) and the session's usage; the key is nowhere in the
sandbox (environment, /proc, files), under the data dir, in the daemon's log
or in any answer; a sandbox cannot reach the upstream but through the proxy.
"""
import base64
import json
import os
import secrets
import socket
from pathlib import Path

import pytest

from conftest import wait_until
from cp_util import CPDaemon, agent_env, agent_token, fake_llm, make_session, sandbox_of

KEY_OA = "sk-upstream-openai-" + secrets.token_hex(16)
KEY_AN = "sk-upstream-anthropic-" + secrets.token_hex(16)
MSGS = [{"role": "user", "content": "hello there proxy"}]  # 3 words: 3 input tokens


def closed_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def cp():
    FakeLLM = fake_llm()
    fake = FakeLLM(key=KEY_OA, anthropic_key=KEY_AN)
    d = CPDaemon(routes={"oa": f"{fake.url},key=OA_KEY",
                         "an": f"{fake.url}/,family=anthropic,key=AN_KEY",
                         "slow": f"{fake.url},key=OA_KEY,timeout=1",
                         "down": f"http://127.0.0.1:{closed_port()}"},
                 secrets={"OA_KEY": KEY_OA, "AN_KEY": KEY_AN})
    try:
        s = make_session(d, llm={"routes": ["oa", "an", "slow", "down"]})
        tok = agent_token(d, s["id"])
        yield type("CP", (), {"d": d, "sid": s["id"], "tok": tok, "fake": fake,
                              "box": sandbox_of(d, s["id"]), "answers": []})
    finally:
        d.stop()
        fake.stop()


# A client inside the sandbox: one request to the control listener, the
# answer read as it comes (SSE events split at blank lines); stop_after N
# events hangs up then.
_CLIENT = r"""
import base64, http.client, json, sys
a = json.loads(sys.argv[1])
c = http.client.HTTPConnection("127.0.0.1", 7878, timeout=60)
c.request(a["method"], a["path"], base64.b64decode(a["body"]), a["headers"])
r = c.getresponse()
out = {"status": r.status, "ctype": r.getheader("Content-Type") or "", "events": [],
       "chunked": (r.getheader("Transfer-Encoding") or "") == "chunked"}
raw = b""
stop = a.get("stop_after")
while True:
    b = r.read1(65536) if stop else r.read()
    if not b:
        break
    raw += b
    if stop:
        evs = [e for e in raw.split(b"\n\n")[:-1] if e.strip()]
        if len(evs) >= stop:
            c.sock.shutdown(2)
            c.sock.close()
            break
out["body"] = base64.b64encode(raw).decode()
print(json.dumps(out))
"""


class Answer:
    def __init__(self, j):
        self.status = j["status"]
        self.ctype = j["ctype"]
        self.chunked = j["chunked"]
        self.body = base64.b64decode(j["body"])

    def json(self):
        return json.loads(self.body)

    def events(self):
        """(event name or None, data as JSON or the raw string) of an SSE body."""
        out = []
        for block in self.body.decode().split("\n\n"):
            name, data = None, []
            for line in block.splitlines():
                if line.startswith("event:"):
                    name = line[6:].strip()
                elif line.startswith("data:"):
                    data.append(line[5:].strip())
            if not data:
                continue
            d = "\n".join(data)
            try:
                d = json.loads(d)
            except ValueError:
                pass
            out.append((name, d))
        return out

    def __repr__(self):
        return f"<{self.status} {self.ctype} {self.body[:300]!r}>"


def call(cp, path, body, method="POST", anthropic=False, token=None, headers=None,
         stop_after=None):
    tok = cp.tok if token is None else token
    h = {"Content-Type": "application/json"}
    h["x-api-key" if anthropic else "Authorization"] = tok if anthropic else f"Bearer {tok}"
    h.update(headers or {})
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    arg = {"method": method, "path": path, "headers": h,
           "body": base64.b64encode(raw).decode(), "stop_after": stop_after}
    j = cp.d.ex(cp.box, ["python3", "-c", _CLIENT, json.dumps(arg)])
    assert j.get("exit_code") == 0, j
    a = Answer(json.loads(j["stdout"]))
    cp.answers.append(a.body)
    return a


def usage(cp):
    r = cp.d.get(f"/v1/sessions/{cp.sid}/usage")
    assert r.status == 200, r
    return r.json()["usage"]


def records(cp):
    return cp.d.db("SELECT status, complete, tokens_in, tokens_out, request FROM conv_calls"
                   " WHERE session_id = ? ORDER BY id", (cp.sid,))


def last_upstream(cp, n_before):
    reqs = cp.fake.wait_requests(n_before + 1)
    assert len(reqs) == n_before + 1, [r["path"] for r in reqs[n_before:]]
    return cp.fake.wait_over(n_before)


# ---- the three dialects, JSON and streamed ------------------------------------------

def test_chat_json(cp):
    n, u0, r0 = len(cp.fake.requests), usage(cp), len(records(cp))
    cp.fake.push({"text": "one two three four"})
    body = {"model": "gpt-x", "messages": MSGS, "temperature": 0.7}
    a = call(cp, "/llm/oa/v1/chat/completions", body)
    assert a.status == 200, a
    assert a.ctype.startswith("application/json")
    j = a.json()
    assert j["object"] == "chat.completion"
    assert j["choices"][0]["message"]["content"] == "one two three four"
    assert j["usage"] == {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}
    up = last_upstream(cp, n)
    assert up["path"] == "/v1/chat/completions"
    assert up["headers"]["authorization"] == f"Bearer {KEY_OA}"
    assert up["headers"]["content-type"] == "application/json"
    assert up["raw"] == json.dumps(body).encode()  # not re-encoded: nothing to add
    u1 = usage(cp)
    assert (u1["tokens_in"] - u0["tokens_in"], u1["tokens_out"] - u0["tokens_out"]) == (3, 4)
    assert u1["requests"] == u0["requests"] + 1
    assert u1["bytes_in"] - u0["bytes_in"] == len(json.dumps(body))
    assert u1["bytes_out"] - u0["bytes_out"] == len(a.body)
    rec = records(cp)
    assert len(rec) == r0 + 1
    assert rec[-1][:4] == (200, 1, 3, 4)
    assert json.loads(rec[-1][4]) == body


def test_chat_stream_asks_for_usage_and_relays_every_chunk(cp):
    n, u0 = len(cp.fake.requests), usage(cp)
    cp.fake.push({"text": "alpha beta gamma"})
    a = call(cp, "/llm/oa/v1/chat/completions",
             {"model": "gpt-x", "messages": MSGS, "stream": True})
    assert a.status == 200, a
    assert a.ctype.startswith("text/event-stream")
    evs = a.events()
    assert evs[-1] == (None, "[DONE]")
    text = "".join(e[1]["choices"][0]["delta"].get("content") or ""
                   for e in evs[:-1] if isinstance(e[1], dict) and e[1]["choices"])
    assert text == "alpha beta gamma"
    assert evs[-2][1]["usage"]["completion_tokens"] == 3  # the last chunk's usage
    up = last_upstream(cp, n)
    # llm_req_prepare asked the upstream for usage in the last chunk
    assert up["body"]["stream_options"] == {"include_usage": True}
    assert up["body"]["messages"] == MSGS
    u1 = usage(cp)
    assert (u1["tokens_in"] - u0["tokens_in"], u1["tokens_out"] - u0["tokens_out"]) == (3, 3)
    assert records(cp)[-1][:4] == (200, 1, 3, 3)


def test_responses_json_and_stream(cp):
    n, u0 = len(cp.fake.requests), usage(cp)
    cp.fake.push({"text": "a b"}, {"text": "c d e"})
    a = call(cp, "/llm/oa/v1/responses", {"model": "gpt-x", "input": "four words of input"})
    assert a.status == 200, a
    j = a.json()
    assert j["object"] == "response" and j["status"] == "completed"
    assert j["output"][0]["content"][0]["text"] == "a b"
    s = call(cp, "/llm/oa/v1/responses",
             {"model": "gpt-x", "input": "four words of input", "stream": True})
    assert s.status == 200 and s.ctype.startswith("text/event-stream"), s
    names = [e[0] for e in s.events()]
    assert names[0] == "response.created" and names[-1] == "response.completed"
    deltas = "".join(e[1]["delta"] for e in s.events() if e[0] == "response.output_text.delta")
    assert deltas == "c d e"
    assert cp.fake.wait_requests(n + 2)[n]["path"] == "/v1/responses"
    u1 = usage(cp)
    assert (u1["tokens_in"] - u0["tokens_in"], u1["tokens_out"] - u0["tokens_out"]) == (8, 5)
    assert [r[:4] for r in records(cp)[-2:]] == [(200, 1, 4, 2), (200, 1, 4, 3)]


def test_messages_json_and_stream_with_x_api_key(cp):
    n, u0 = len(cp.fake.requests), usage(cp)
    cp.fake.push({"text": "bonjour"}, {"text": "un deux"})
    body = {"model": "claude-x", "max_tokens": 100, "messages": MSGS}
    a = call(cp, "/llm/an/v1/messages", body, anthropic=True)
    assert a.status == 200, a
    assert a.json()["content"] == [{"type": "text", "text": "bonjour"}]
    s = call(cp, "/llm/an/v1/messages", dict(body, stream=True), anthropic=True,
             headers={"anthropic-version": "2023-01-01", "anthropic-beta": "tools-2024"})
    assert s.status == 200 and s.ctype.startswith("text/event-stream"), s
    names = [e[0] for e in s.events()]
    assert names[0] == "message_start" and names[-1] == "message_stop"
    assert "".join(e[1]["delta"]["text"] for e in s.events()
                   if e[0] == "content_block_delta") == "un deux"
    reqs = cp.fake.wait_requests(n + 2)
    j, st = reqs[n], reqs[n + 1]
    assert j["path"] == "/v1/messages"  # the route's trailing slash is not doubled
    assert j["headers"]["x-api-key"] == KEY_AN
    assert "authorization" not in j["headers"]
    assert j["headers"]["anthropic-version"] == "2023-06-01"  # the default
    assert st["headers"]["anthropic-version"] == "2023-01-01"  # the client's
    assert st["headers"]["anthropic-beta"] == "tools-2024"
    u1 = usage(cp)
    assert (u1["tokens_in"] - u0["tokens_in"], u1["tokens_out"] - u0["tokens_out"]) == (6, 3)


# ---- tool calls ------------------------------------------------------------------

TOOL = {"name": "run_shell", "arguments": {"cmd": "ls -l /work"}}


def test_tool_calls_relayed_in_every_dialect(cp):
    cp.fake.push({"tool_call": TOOL})
    a = call(cp, "/llm/oa/v1/chat/completions", {"model": "m", "messages": MSGS, "tools": []})
    tc = a.json()["choices"][0]["message"]["tool_calls"][0]
    assert tc["function"]["name"] == "run_shell"
    assert json.loads(tc["function"]["arguments"]) == TOOL["arguments"]
    assert a.json()["choices"][0]["finish_reason"] == "tool_calls"

    cp.fake.push({"tool_call": TOOL})
    s = call(cp, "/llm/oa/v1/chat/completions", {"model": "m", "messages": MSGS, "stream": True})
    args = "".join(tc["function"].get("arguments", "") for _, e in s.events()
                   if isinstance(e, dict) and e["choices"]
                   for tc in e["choices"][0]["delta"].get("tool_calls", []))
    assert json.loads(args) == TOOL["arguments"]

    cp.fake.push({"tool_call": TOOL})
    r = call(cp, "/llm/oa/v1/responses", {"model": "m", "input": "x", "stream": True})
    done = [e[1]["item"] for e in r.events() if e[0] == "response.output_item.done"]
    assert done[0]["type"] == "function_call" and done[0]["name"] == "run_shell"
    assert json.loads(done[0]["arguments"]) == TOOL["arguments"]

    cp.fake.push({"tool_call": TOOL})
    m = call(cp, "/llm/an/v1/messages", {"model": "c", "max_tokens": 9, "messages": MSGS},
             anthropic=True)
    block = m.json()["content"][0]
    assert block["type"] == "tool_use" and block["input"] == TOOL["arguments"]
    assert m.json()["stop_reason"] == "tool_use"

    cp.fake.push({"tool_call": TOOL})
    ms = call(cp, "/llm/an/v1/messages",
              {"model": "c", "max_tokens": 9, "messages": MSGS, "stream": True}, anthropic=True)
    part = "".join(e[1]["delta"]["partial_json"] for e in ms.events()
                   if e[0] == "content_block_delta")
    assert json.loads(part) == TOOL["arguments"]


# ---- upstream errors, down, timeouts, hang-ups ---------------------------------------

def test_upstream_error_passed_on_with_its_body(cp):
    cp.fake.push({"status": 500, "error": "the model is on fire"})
    a = call(cp, "/llm/oa/v1/chat/completions", {"model": "m", "messages": MSGS})
    assert a.status == 500, a
    assert a.json()["error"]["message"] == "the model is on fire"
    assert a.json()["error"]["type"] == "server_error"  # the upstream's shape, not /v1's
    cp.fake.push({"status": 429, "error": "slow down"})
    m = call(cp, "/llm/an/v1/messages", {"model": "c", "max_tokens": 9, "messages": MSGS},
             anthropic=True)
    assert m.status == 429, m
    assert m.json() == {"type": "error",
                        "error": {"type": "rate_limit_error", "message": "slow down"}}
    assert [r[:2] for r in records(cp)[-2:]] == [(500, 1), (429, 1)]


def test_upstream_down_is_502(cp):
    u0 = usage(cp)
    a = call(cp, "/llm/down/v1/chat/completions", {"model": "m", "messages": MSGS})
    assert a.status == 502, a
    assert a.json()["error"]["code"] == "upstream_error"
    assert "down" in a.json()["error"]["message"]
    assert records(cp)[-1][:2] == (0, 0)  # recorded: no answer, not complete
    assert usage(cp)["requests"] == u0["requests"] + 1


def test_upstream_hang_is_504_after_the_route_timeout(cp):
    n = len(cp.fake.requests)
    cp.fake.push({"hang": 30})
    a = call(cp, "/llm/slow/v1/chat/completions", {"model": "m", "messages": MSGS})
    assert a.status == 504, a
    assert a.json()["error"]["code"] == "timeout"
    assert "1000 ms" in a.json()["error"]["message"]
    # the daemon dropped the upstream connection
    assert cp.fake.wait_over(n)["disconnected"]
    assert records(cp)[-1][:2] == (0, 0)


def test_upstream_cut_mid_stream_ends_with_an_error_event(cp):
    cp.fake.push({"text": "w " * 20, "cut_after": 4})
    a = call(cp, "/llm/an/v1/messages",
             {"model": "c", "max_tokens": 9, "messages": MSGS, "stream": True}, anthropic=True)
    assert a.status == 200, a
    evs = a.events()
    assert evs[0][0] == "message_start"
    assert evs[-1][0] == "error" and evs[-1][1]["type"] == "error", evs[-1]
    assert "message_stop" not in [e[0] for e in evs]
    rec = records(cp)[-1]
    assert rec[:3] == (200, 0, 3)  # incomplete; the input tokens of message_start counted


def test_client_hangup_mid_stream_cancels_the_upstream_call(cp):
    n, u0, r0 = len(cp.fake.requests), usage(cp), len(records(cp))
    cp.fake.push({"text": "x " * 50, "hang_after": 3, "hang": 30})
    a = call(cp, "/llm/an/v1/messages",
             {"model": "c", "max_tokens": 9, "messages": MSGS, "stream": True}, anthropic=True,
             stop_after=3)
    assert a.status == 200
    assert len([e for e in a.body.split(b"\n\n") if e.strip()]) >= 3
    up = cp.fake.wait_over(n, timeout=20)
    assert up["disconnected"], "the daemon kept the upstream call after the agent left"
    assert up["events"] == 3
    assert wait_until(lambda: len(records(cp)) == r0 + 1, timeout=10)
    rec = records(cp)[-1]
    assert rec[:2] == (200, 0), rec  # recorded, incomplete
    u1 = usage(cp)
    assert u1["tokens_in"] - u0["tokens_in"] == 3  # what message_start said
    assert u1["requests"] == u0["requests"] + 1


# ---- the door's own errors ------------------------------------------------------------

@pytest.mark.parametrize("method,path,code,culprit", [
    ("POST", "/llm/oa/v1/embeddings", 404, "/v1/embeddings"),
    ("GET", "/llm/oa/v1/chat/completions", 405, "POST"),
    ("POST", "/llm/nosuch/v1/chat/completions", 404, "nosuch"),
    ("POST", "/llm/an/v1/chat/completions", 404, "route an"),
    ("POST", "/llm/oa/v1/messages", 404, "route oa"),
])
def test_bad_paths_named(cp, method, path, code, culprit):
    n = len(cp.fake.requests)
    a = call(cp, path, {"model": "m", "messages": MSGS}, method=method)
    assert a.status == code, a
    assert culprit in a.json()["error"]["message"], a
    assert len(cp.fake.requests) == n


@pytest.mark.parametrize("body,culprit", [
    (b"{not json", "JSON"),
    ({"messages": MSGS}, "model"),
    ({"model": "m"}, "messages"),
    ({"model": 5, "messages": MSGS}, "model"),
])
def test_bad_bodies_named(cp, body, culprit):
    n = len(cp.fake.requests)
    a = call(cp, "/llm/oa/v1/chat/completions", body)
    assert a.status == 400, a
    assert culprit in a.json()["error"]["message"], a
    assert len(cp.fake.requests) == n


def test_wrong_token_is_401_and_nothing_goes_up(cp):
    n = len(cp.fake.requests)
    a = call(cp, "/llm/oa/v1/chat/completions", {"model": "m", "messages": MSGS},
             token="moat_st_" + "0" * 64)
    assert a.status == 401, a
    assert len(cp.fake.requests) == n


def test_route_outside_the_session_is_403(cp):
    d = cp.d
    s = make_session(d, llm={"routes": [{"route": "oa", "models": ["gpt-ok"]}]})
    tok = agent_token(d, s["id"])
    other = type("CP", (), {"d": d, "sid": s["id"], "tok": tok, "fake": cp.fake,
                            "box": sandbox_of(d, s["id"]), "answers": cp.answers})
    n = len(cp.fake.requests)
    a = call(other, "/llm/an/v1/messages", {"model": "c", "max_tokens": 9, "messages": MSGS},
             anthropic=True)
    assert a.status == 403 and "an" in a.json()["error"]["message"], a
    b = call(other, "/llm/oa/v1/chat/completions", {"model": "gpt-bad", "messages": MSGS})
    assert b.status == 403 and "gpt-bad" in b.json()["error"]["message"], b
    assert len(cp.fake.requests) == n
    ok = call(other, "/llm/oa/v1/chat/completions", {"model": "gpt-ok", "messages": MSGS})
    assert ok.status == 200, ok
    assert d.delete(f"/v1/sessions/{s['id']}").status == 200


# ---- secrets: neither the key in, nor the token out ---------------------------------------

def test_sandbox_cannot_reach_the_upstream_directly(cp):
    n = len(cp.fake.requests)
    code = (f"import socket\n"
            f"for h in ('127.0.0.1', 'localhost'):\n"
            f"    try:\n"
            f"        socket.create_connection((h, {cp.fake.port}), timeout=3).close()\n"
            f"        print('connected', h)\n"
            f"    except OSError as e:\n"
            f"        print('refused', h, e)\n")
    j = cp.d.ex(cp.box, ["python3", "-c", code])
    assert j.get("exit_code") == 0, j
    assert "connected" not in j["stdout"], j
    assert j["stdout"].count("refused") == 2
    assert len(cp.fake.requests) == n  # the fake saw nothing


def test_the_key_never_reaches_the_sandbox_and_the_token_never_goes_up(cp):
    # run last in the module's order: every call above has been made
    assert cp.answers, "no answers collected"
    keys = [KEY_OA.encode(), KEY_AN.encode()]
    for body in cp.answers:
        for k in keys:
            assert k not in body
    # the agent's environment and every process's, and files, seen from inside
    env = agent_env(cp.d, cp.sid)
    assert not any(KEY_OA in v or KEY_AN in v for v in env.values())
    scan = (r"""
import os, sys
keys = [k.encode() for k in sys.argv[1:]]
hits = []
for pid in os.listdir('/proc'):
    if pid.isdigit():
        for f in ('environ', 'cmdline'):
            try:
                b = open(f'/proc/{pid}/{f}', 'rb').read()
            except OSError:
                continue
            if any(k in b for k in keys):
                hits.append(f'/proc/{pid}/{f}')
for top in ('/tmp', '/home', '/root', '/work', '/var/tmp', '/run'):
    for dp, dn, fn in os.walk(top):
        for n in fn:
            p = os.path.join(dp, n)
            try:
                if os.path.isfile(p) and os.path.getsize(p) < (64 << 20):
                    if any(k in open(p, 'rb').read() for k in keys):
                        hits.append(p)
            except OSError:
                pass
print(repr(hits))
""")
    # the key arguments of the scan would be seen in its own cmdline: split
    # them so that the scanner looks for halves joined at run time
    half = [(k[:10].decode(), k[10:].decode()) for k in keys]
    code = scan.replace("keys = [k.encode() for k in sys.argv[1:]]",
                        "a = sys.argv[1:]; keys = [(a[i] + a[i+1]).encode() "
                        "for i in range(0, len(a), 2)]")
    j = cp.d.ex(cp.box, ["python3", "-c", code] + [p for h in half for p in h])
    assert j.get("exit_code") == 0, j
    assert j["stdout"].strip() == "[]", j["stdout"]
    # every file under the daemon's data dir (sandboxes' files, the records)
    hits = []
    for dp, dn, fn in os.walk(cp.d.data):
        for n in fn:
            p = Path(dp) / n
            try:
                if p.is_file() and not p.is_symlink() and p.stat().st_size < (256 << 20):
                    data = p.read_bytes()
                    if any(k in data for k in keys):
                        hits.append(str(p))
            except OSError:
                pass
    assert hits == []
    assert KEY_OA not in cp.d.log() and KEY_AN not in cp.d.log()
    # the token: in no header and no body the upstream received
    tok = cp.tok.encode()
    assert cp.fake.requests
    for r in cp.fake.requests:
        assert not any(cp.tok in v for v in r["headers"].values()), r["headers"]
        assert tok not in r["raw"]


# ---- the operator's --llm-route -------------------------------------------------------

@pytest.mark.parametrize("args,culprit", [
    (["--llm-route", "oa"], "NAME=URL"),
    (["--llm-route", "OA=http://127.0.0.1:1"], "the name OA"),
    (["--llm-route", "oa=ftp://127.0.0.1:1"], "ftp://"),
    (["--llm-route", "oa=http://u:pw@127.0.0.1:1"], "user info"),
    (["--llm-route", "oa=http://127.0.0.1:1,family=gemini"], "family=gemini"),
    (["--llm-route", "oa=http://127.0.0.1:1,timeout=-1"], "timeout=-1"),
    (["--llm-route", "oa=http://127.0.0.1:1,tls=off"], "tls"),
    (["--llm-route", "oa=http://127.0.0.1:1,key=NOPE"], "key=NOPE is not in the secret store"),
    (["--llm-route", "oa=http://127.0.0.1:1", "--llm-route", "oa=http://127.0.0.1:2"], "twice"),
])
def test_bad_llm_route_refused_at_start(tmp_path, args, culprit):
    from conftest import MOAT
    import subprocess
    data = tmp_path / "data"
    r = subprocess.run([MOAT, "serve", "--listen", "127.0.0.1:1", "--data", str(data)] + args,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 125, (r.returncode, r.stderr)
    assert culprit in r.stderr, r.stderr
