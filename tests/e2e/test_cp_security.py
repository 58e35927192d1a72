"""The session token's boundary (docs/control-plane.md, issue 14), asserted
on the host side: a token replayed from the host or from another sandbox
is refused; session A cannot read B's conversation or artifacts; a budget
that is used up stops model calls before they reach the upstream."""
import pytest

from cp_util import CPDaemon, agent_token, cp_json, cp_request, fake_llm, make_session

API_TOKEN = "api-token-for-the-host"


@pytest.fixture
def d():
    dd = CPDaemon(token=API_TOKEN)
    yield dd
    dd.stop()


def test_session_token_is_not_an_api_token(d):
    s = make_session(d)
    tok = agent_token(d, s["id"])
    for path in ("/v1/sandboxes", f"/v1/sessions/{s['id']}", "/v1/sessions"):
        r = d.req("GET", path, headers={"Authorization": f"Bearer {tok}"})
        assert r.status == 401, (path, r)
    r = d.req("POST", f"/v1/sandboxes/{s['sandbox_id']}/exec", {"cmd": ["true"]},
              headers={"Authorization": f"Bearer {tok}"})
    assert r.status == 401, r
    # the host has no route to the listener: it is inside the sandbox only
    import socket
    with socket.socket() as c:
        c.settimeout(2)
        assert c.connect_ex(("127.0.0.1", 7878)) != 0


def test_token_bound_to_its_sandbox(d):
    a, b = make_session(d), make_session(d)
    ta, tb = agent_token(d, a["id"]), agent_token(d, b["id"])
    st, j = cp_json(d, b["id"], "GET", "/v1/session", token=ta)
    assert st == 401 and j["error"]["code"] == "unauthorized", j
    st, j = cp_json(d, b["id"], "GET", "/v1/session", token=None, headers={"x-api-key": ta})
    assert st == 401, j
    st, j = cp_json(d, b["id"], "GET", "/v1/session", token=tb)
    assert st == 200 and j["id"] == b["id"], j
    st, j = cp_json(d, a["id"], "GET", "/v1/session", token=ta)
    assert st == 200 and j["id"] == a["id"], j
    st, j = cp_json(d, a["id"], "GET", "/v1/session", token="moat_st_" + "0" * 64)
    assert st == 401, j


def test_a_cannot_read_b_conversation(d):
    a, b = make_session(d), make_session(d)
    ta = agent_token(d, a["id"])
    st, j = cp_json(d, a["id"], "GET", f"/v1/conversations/{b['id']}", token=ta)
    assert st == 403 and j["error"]["code"] == "forbidden", j
    st, j = cp_json(d, a["id"], "POST", f"/v1/conversations/{b['id']}/turns",
                    {"route": "x", "model": "m", "messages": []}, token=ta)
    assert st == 403, j


def test_a_cannot_use_b_artifacts(d):
    a, b = make_session(d), make_session(d)
    ta = agent_token(d, a["id"])
    st, j = cp_json(d, a["id"], "POST", "/v1/files/upload-url", {"name": "r.txt"}, token=ta)
    assert st == 200, j
    path = j["url"][len("http://127.0.0.1:7878"):]
    # A's ticket on B's listener: refused, and not consumed
    st, body, _ = cp_request(d, b["id"], "PUT", path, b"stolen")
    assert st == 404, body
    st, body, _ = cp_request(d, a["id"], "PUT", path, b"mine")
    assert st == 201, body
    r = d.get(f"/v1/sessions/{b['id']}/artifacts")
    assert r.status == 200 and "r.txt" not in r.body.decode(), r
    r = d.get(f"/v1/sessions/{a['id']}/artifacts/r.txt")
    assert r.status == 200 and r.body == b"mine", r
    # B asks for A's file by name: its own store has none
    tb = agent_token(d, b["id"])
    st, j = cp_json(d, b["id"], "POST", "/v1/files/download-url", {"name": "r.txt"}, token=tb)
    assert st == 404, j


def test_requests_budget_enforced():
    FakeLLM = fake_llm()
    with FakeLLM(key="sk-upstream-real") as up:
        d = CPDaemon(routes={"oa": f"{up.url},family=openai,key=UPKEY"},
                     secrets={"UPKEY": "sk-upstream-real"})
        try:
            s = make_session(d, llm={"routes": ["oa"]}, budget={"requests": 1})
            tok = agent_token(d, s["id"])
            body = {"model": "m1", "messages": [{"role": "user", "content": "one two"}]}
            st, j = cp_json(d, s["id"], "POST", "/llm/oa/v1/chat/completions", body, token=tok)
            assert st == 200, j
            st, j = cp_json(d, s["id"], "POST", "/llm/oa/v1/chat/completions", body, token=tok)
            assert st == 429, j
            assert j["error"]["code"] == "budget_exceeded", j
            assert "budget.requests" in j["error"]["message"], j
            # the upstream saw one call only
            assert len([r for r in up.requests if r["dialect"] == "chat"]) == 1, up.requests
            x = d.session(s["id"])
            assert x["budget_exceeded"] == "requests" and x["usage"]["requests"] == 1, x
            assert x["budget_left"]["requests"] == 0, x
            (be,), = d.db("SELECT budget_exceeded FROM sessions WHERE id = ?", (s["id"],))
            assert be == "requests"
        finally:
            d.stop()


def test_route_and_model_allowlist():
    FakeLLM = fake_llm()
    with FakeLLM(key="sk-upstream-real") as up:
        d = CPDaemon(routes={"oa": f"{up.url},family=openai,key=UPKEY",
                             "ob": f"{up.url},family=openai,key=UPKEY"},
                     secrets={"UPKEY": "sk-upstream-real"})
        try:
            s = make_session(d, llm={"routes": [{"route": "oa", "models": ["m1"]}]})
            tok = agent_token(d, s["id"])
            body = {"model": "m2", "messages": [{"role": "user", "content": "hi"}]}
            st, j = cp_json(d, s["id"], "POST", "/llm/oa/v1/chat/completions", body, token=tok)
            assert st == 403 and "m2" in j["error"]["message"], j
            body["model"] = "m1"
            st, j = cp_json(d, s["id"], "POST", "/llm/ob/v1/chat/completions", body, token=tok)
            assert st == 403 and "ob" in j["error"]["message"], j
            assert not [r for r in up.requests if r["dialect"]], up.requests
        finally:
            d.stop()
