"""`moat session ...` (src/client/session.c) as a user would run it against
a real `moat serve` with a fake upstream model (fake_llm.py): the agent is
examples/agent-in-sandbox/agent.py. What each command did is checked
through moat's own /v1 API or the daemon's data directory, not through the
CLI's output alone."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from conftest import MOAT, wait_until  # noqa: E402
from fake_llm import FakeLLM  # noqa: E402
from test_agent_example import agent_source  # noqa: E402
from test_serve import Daemon  # noqa: E402

KEY = "sk-cli-upstream-key"


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    fake = FakeLLM(key=KEY)
    top = tmp_path_factory.mktemp("cli-sessions")
    sec = top / "secrets"
    sec.write_text(f"k={KEY}\n")
    os.chmod(sec, 0o600)
    manifest = top / "manifest.json"
    manifest.write_text(json.dumps({"root": "/workspace", "entries": {
        "agent.py": {"type": "file", "content": agent_source()}}}))
    os.chmod(top, 0o755)
    os.chmod(manifest, 0o644)
    d = Daemon("--pool", "0", "--secrets-file", str(sec),
               "--llm-route", f"oa={fake.url},family=openai,key=k")
    try:
        yield d, fake, manifest
    finally:
        try:
            r = d.get("/v1/sessions", timeout=20)
            for s in (r.json().get("sessions", []) if r.status == 200 else []):
                d.delete(f"/v1/sessions/{s['id']}?purge=true", timeout=30)
        except OSError:
            pass
        d.stop()
        fake.stop()


def cli(d, *args, timeout=120):
    env = {k: v for k, v in os.environ.items() if k != "MOAT_API_TOKEN"}
    env["MOAT_URL"] = f"http://127.0.0.1:{d.port}"
    return subprocess.run([MOAT, *map(str, args)], capture_output=True, timeout=timeout,
                          env=env, stdin=subprocess.DEVNULL)


def ok(r):
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
    return r.stdout.decode()


def failed(r, *names):
    """A refusal: exit 125, one line on stderr naming every culprit."""
    assert r.returncode == 125, (r.returncode, r.stdout, r.stderr)
    err = r.stderr.decode()
    assert r.stdout == b"" and err.count("\n") == 1, err
    for n in names:
        assert n in err, (n, err)
    return err


def api(d, path):
    r = d.get(path)
    assert r.status == 200, (path, r)
    return r.json()


def exited(d, sid):
    assert wait_until(lambda: api(d, f"/v1/sessions/{sid}")["state"] != "running",
                      timeout=120), api(d, f"/v1/sessions/{sid}")
    return api(d, f"/v1/sessions/{sid}")


def test_session_create_runs_the_agent_and_the_commands_show_it(env):
    d, fake, manifest = env
    fake.push({"text": "hello from the fake"})
    out = ok(cli(d, "session", "create", "--manifest", manifest,
                 "--llm-route", "oa:fake-1,fake-2", "--budget-tokens", "5000",
                 "--budget-requests", "10", "--metadata", "who=cli",
                 "--env", "AGENT_TASK=say hello", "--cwd", "/workspace",
                 "--", "python3", "/workspace/agent.py"))
    sid = out.strip()
    ses = api(d, f"/v1/sessions/{sid}")
    assert ses["id"] == sid and ses["metadata"] == {"who": "cli"}
    assert ses["llm"]["routes"] == [{"route": "oa", "models": ["fake-1", "fake-2"]}]
    assert ses["budget"]["tokens"] == 5000 and ses["budget"]["requests"] == 10
    assert ses["agent"]["cmd"] == ["python3", "/workspace/agent.py"]
    ses = exited(d, sid)
    assert ses["agent"]["exit_code"] == 0, ses
    # the agent asked the first allowed model, with the daemon's key
    assert fake.requests[-1]["body"]["model"] == "fake-1"
    assert fake.requests[-1]["headers"]["authorization"] == f"Bearer {KEY}"

    listed = json.loads(ok(cli(d, "session", "ls", "--json")))
    assert sid in [s["id"] for s in listed["sessions"]]
    table = ok(cli(d, "session", "ls", "--state", "exited"))
    assert table.splitlines()[0].split()[:3] == ["ID", "STATE", "SANDBOX"]
    assert any(l.split()[:2] == [sid, "exited"] for l in table.splitlines()[1:]), table
    assert sid not in ok(cli(d, "session", "ls", "--state", "running"))

    shown = json.loads(ok(cli(d, "session", "show", sid)))
    assert shown["id"] == sid and shown["state"] == "exited"
    usage = json.loads(ok(cli(d, "session", "usage", sid)))
    assert usage == api(d, f"/v1/sessions/{sid}/usage")
    assert usage["usage"]["requests"] == 1 and usage["usage"]["tokens_out"] > 0
    conv = json.loads(ok(cli(d, "session", "conversation", sid)))
    assert conv["turns"] == 1 and conv["messages"][-1]["content"] == "hello from the fake"

    # the agent uploaded its answer as result.txt (it wrote no such file)
    arts = ok(cli(d, "session", "artifacts", sid))
    assert any(l.split()[:2] == ["result.txt", str(len("hello from the fake"))]
               for l in arts.splitlines()[1:]), arts
    assert json.loads(ok(cli(d, "session", "artifacts", sid, "--json")))["artifacts"][0][
        "name"] == "result.txt"
    assert cli(d, "session", "artifact-get", sid, "result.txt").stdout == b"hello from the fake"
    dest = Path(d.base) / "got.txt"
    ok(cli(d, "session", "artifact-get", sid, "result.txt", "-o", dest))
    assert dest.read_bytes() == b"hello from the fake"
    failed(cli(d, "session", "artifact-get", sid, "nope.txt", "-o", Path(d.base) / "n"),
           "nope.txt")
    assert not (Path(d.base) / "n").exists() and not (Path(d.base) / "n.part").exists()

    # restart: a new sandbox, the agent again (its conversation is whole:
    # it uploads its answer once more and exits, no new model call)
    before = len(fake.requests)
    sb = ok(cli(d, "session", "restart", sid)).strip()
    assert sb and sb != ses["sandbox_id"]
    ses = exited(d, sid)
    assert ses["sandbox_id"] == sb and ses["restarts"] == 1 and ses["agent"]["exit_code"] == 0
    assert len(fake.requests) == before

    # rm --purge: ended, and the artifacts are gone from the data dir
    ok(cli(d, "session", "rm", sid, "--purge"))
    ses = api(d, f"/v1/sessions/{sid}")
    assert ses["state"] == "ended"
    assert not (Path(d.data) / "artifacts" / sid).exists()
    assert d.get(f"/v1/sandboxes/{sb}").status == 404


def test_session_create_refusals_name_the_culprit(env):
    d, _, manifest = env
    failed(cli(d, "session", "create", "--llm-route", "nosuch", "--", "true"), "nosuch")
    failed(cli(d, "session", "create", "--budget-tokens", "0", "--", "true"),
           "--budget-tokens", "'0'")
    failed(cli(d, "session", "create", "--llm-route", "oa:", "--", "true"), "--llm-route")
    failed(cli(d, "session", "create", "--llm-route", "oa"), "no agent command")
    failed(cli(d, "session", "show", "ses_nosuchsession00"), "ses_nosuchsession00")
    failed(cli(d, "session", "rm", "ses_nosuchsession00"), "ses_nosuchsession00")
    failed(cli(d, "session", "frobnicate"), "frobnicate")
    # nothing was made by the refused creates
    assert all(s["agent"]["cmd"] != ["true"] for s in api(d, "/v1/sessions")["sessions"])


def test_every_session_command_has_help(env):
    d, _, _ = env
    for sub in ("create", "ls", "show", "rm", "restart", "usage", "conversation",
                "artifacts", "artifact-get"):
        out = ok(cli(d, "session", sub, "--help"))
        assert out.startswith(f"usage: moat session {sub}"), out
    top = ok(cli(d, "session", "--help"))
    for opt in ("--llm-route", "--budget-tokens", "--env-fd", "--sdk-env", "--purge",
                "--state", "--net-allow"):
        assert opt in top
