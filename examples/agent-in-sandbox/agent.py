#!/usr/bin/env python3
"""A small agent that lives inside a moat sandbox (standard library only).

It holds nothing but its session token. Everything else is the control
plane's, at MOAT_CONTROL_PLANE_URL (http://127.0.0.1:7878 inside):

  * the model: POST /v1/conversations/<session>/turns (conversation mode:
    only the new messages go out, the control plane adds the history and
    the upstream key, and stores the turn when the answer is whole);
  * its memory: GET /v1/conversations/<session> on start, so that a new
    sandbox (a restart, a daemon restart) carries on where the old one was;
  * files out: a one-time upload URL (POST /v1/files/upload-url, then PUT).

The loop: ask the model (streamed) with the task; run the tool calls it
answers (`run` {"cmd"}: a shell command, `write_file` {"path","content"})
here with subprocess; send their results as the next turn; stop at an
answer without tool calls, upload the result file, exit 0.

Each turn has a turn_id (its index in the conversation), so that a call
cut off mid-stream and retried is stored once: a retry of a turn the
control plane already stored answers the stored answer. A connection that
fails (the daemon restarting) is retried with backoff.

Configuration (the host gives it with `moat session create --env`):
  AGENT_TASK     the task (or --task)
  AGENT_ROUTE    the route to call (default: the session's first)
  AGENT_MODEL    the model to ask for (default: the route's first, or "gpt-4o-mini")
  AGENT_RESULT   the file to upload at the end (default result.txt; when the
                 model did not write it, the final answer is uploaded under that name)
  AGENT_MAX_STEPS  model calls at most (default 20)

Exit status: 0 done; 2 bad configuration; 3 the session's budget is used
up; 4 the control plane refused us (token revoked: the session ended);
5 it stayed unreachable; 6 too many steps.
"""

import argparse
import http.client
import json
import os
import subprocess
import sys
import time
from urllib.parse import quote, urlsplit

# How long the control plane may stay unreachable (a daemon restart) before
# we give up; the backoff between tries doubles up to BACKOFF_MAX.
RETRY_FOR_S = 180.0
BACKOFF_MAX = 2.0
TOOL_TIMEOUT_S = 120
TOOL_OUTPUT_MAX = 16000

SYSTEM = ("You are an agent in a Linux sandbox. Use the tools to do the task: "
          "`run` runs a shell command and answers its exit status and output; "
          "`write_file` writes a file. Answer without a tool call when done.")

TOOLS = [
    {"type": "function", "function": {
        "name": "run", "description": "Run a shell command in the sandbox.",
        "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}},
                       "required": ["cmd"]}}},
    {"type": "function", "function": {
        "name": "write_file", "description": "Write a text file in the sandbox.",
        "parameters": {"type": "object",
                       "properties": {"path": {"type": "string"},
                                      "content": {"type": "string"}},
                       "required": ["path", "content"]}}},
]


def log(*args):
    print("agent:", *args, file=sys.stderr, flush=True)


class Fatal(Exception):
    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


class Retry(Exception):
    """A failure worth trying again (the connection, a cut stream, 5xx)."""


# ---- configuration ----------------------------------------------------------

def session_vars():
    """The three variables: from the environment, or (agent.env_fd) from the
    NAME=VALUE lines of the descriptor MOAT_SESSION_FD names (stdin)."""
    names = ("MOAT_SESSION_ID", "MOAT_CONTROL_PLANE_URL", "MOAT_SESSION_TOKEN")
    got = {n: os.environ.get(n) for n in names}
    fd = os.environ.get("MOAT_SESSION_FD")
    if fd is not None:
        with os.fdopen(int(fd), "r", closefd=True) as f:
            for line in f:
                k, sep, v = line.rstrip("\n").partition("=")
                if sep and k in names:
                    got[k] = v
        # defence in depth: other processes of this user in the sandbox (the
        # tools it runs) could read the token from /proc/<pid>/mem; a
        # non-dumpable process is root's to inspect, not theirs
        try:
            import ctypes
            ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE, 0
        except (OSError, AttributeError):
            pass
    missing = [n for n in names if not got.get(n)]
    if missing:
        raise Fatal(2, "missing %s (run me with `moat session create`)" % ", ".join(missing))
    return got["MOAT_SESSION_ID"], got["MOAT_CONTROL_PLANE_URL"], got["MOAT_SESSION_TOKEN"]


# ---- the control plane ------------------------------------------------------

class ControlPlane:
    def __init__(self, url, token, session):
        u = urlsplit(url)
        if u.scheme != "http" or not u.hostname:
            raise Fatal(2, "MOAT_CONTROL_PLANE_URL %r: expected http://HOST:PORT" % url)
        self.host, self.port = u.hostname, u.port or 80
        self.token, self.session = token, session

    def _conn(self, host=None, port=None):
        return http.client.HTTPConnection(host or self.host, port or self.port, timeout=300)

    def open(self, method, path, body=None, auth=True, headers=None, host=None, port=None):
        """(conn, response) of one request; Retry on a connection failure."""
        hdrs = dict(headers or {})
        if auth:
            hdrs["Authorization"] = "Bearer " + self.token
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
            hdrs["Content-Type"] = "application/json"
        conn = self._conn(host, port)
        try:
            conn.request(method, path, body=body, headers=hdrs)
            return conn, conn.getresponse()
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            raise Retry("%s %s: %s" % (method, path, e or type(e).__name__))

    @staticmethod
    def check(resp, data, what):
        """Raise for an error answer: Fatal for ours, Retry for the server's."""
        if resp.status < 400:
            return
        try:
            err = json.loads(data).get("error") or {}
        except (ValueError, AttributeError):
            err = {}
        msg = "%s: %d %s: %s" % (what, resp.status, err.get("code", ""),
                                 err.get("message") or data[:300])
        if resp.status == 429 and err.get("code") == "budget_exceeded":
            raise Fatal(3, msg)
        if resp.status in (401, 403):
            raise Fatal(4, msg)
        if resp.status >= 500 or resp.status == 429:
            raise Retry(msg)
        raise Fatal(2, msg)

    def json(self, method, path, body=None):
        conn, resp = self.open(method, path, body)
        try:
            data = resp.read()
        except (OSError, http.client.HTTPException) as e:
            raise Retry("%s %s: %s" % (method, path, e))
        finally:
            conn.close()
        self.check(resp, data, "%s %s" % (method, path))
        return json.loads(data or b"null")


def retrying(fn, what):
    """fn() again and again on Retry, with backoff, for RETRY_FOR_S."""
    end = time.monotonic() + RETRY_FOR_S
    delay = 0.05
    while True:
        try:
            return fn()
        except Retry as e:
            if time.monotonic() > end:
                raise Fatal(5, "%s: gave up: %s" % (what, e))
            log("%s failed (%s); retrying in %.2fs" % (what, e, delay))
            time.sleep(delay)
            delay = min(delay * 2, BACKOFF_MAX)


# ---- one turn ---------------------------------------------------------------

def read_sse(resp):
    """The data of each SSE event of resp, as they arrive."""
    data = []
    while True:
        line = resp.readline()
        if not line:
            return
        line = line.decode("utf-8", "replace").rstrip("\r\n")
        if not line:
            if data:
                yield "\n".join(data)
                data = []
        elif line.startswith("data:"):
            data.append(line[5:].lstrip(" "))


def message_of_chunks(resp):
    """Assemble a streamed chat completion into one assistant message;
    Retry when the stream ends before its [DONE] (a cut)."""
    content, calls, done = [], {}, False
    try:
        for data in read_sse(resp):
            if data == "[DONE]":
                done = True
                break
            try:
                ev = json.loads(data)
            except ValueError:
                continue
            if isinstance(ev.get("error"), dict):
                raise Retry("the stream ended with an error: %s" % ev["error"].get("message"))
            for ch in ev.get("choices") or []:
                d = ch.get("delta") or {}
                if d.get("content"):
                    content.append(d["content"])
                for tc in d.get("tool_calls") or []:
                    c = calls.setdefault(tc.get("index", 0),
                                         {"id": "", "type": "function",
                                          "function": {"name": "", "arguments": ""}})
                    c["id"] = tc.get("id") or c["id"]
                    f = tc.get("function") or {}
                    c["function"]["name"] += f.get("name") or ""
                    c["function"]["arguments"] += f.get("arguments") or ""
    except (OSError, http.client.HTTPException) as e:
        raise Retry("the stream broke: %s" % e)
    if not done:
        raise Retry("the stream was cut before its end")
    msg = {"role": "assistant", "content": "".join(content) or None}
    if calls:
        msg["tool_calls"] = [calls[i] for i in sorted(calls)]
    return msg


def message_of_json(obj):
    """The assistant message of a whole answer: a chat.completion, or the
    stored messages of a turn the control plane already had."""
    if isinstance(obj, dict) and obj.get("choices"):
        return obj["choices"][0].get("message") or {}
    msgs = obj.get("messages") if isinstance(obj, dict) else None
    if isinstance(msgs, list):
        for m in reversed(msgs):
            if isinstance(m, dict) and m.get("role") == "assistant":
                return m
    raise Retry("an answer without an assistant message: %.200r" % (obj,))


def turn(cp, route, model, turn_id, messages):
    body = {"route": route, "model": model, "dialect": "chat", "turn_id": turn_id,
            "messages": messages, "tools": TOOLS, "stream": True}
    path = "/v1/conversations/%s/turns" % quote(cp.session, safe="")

    def once():
        conn, resp = cp.open("POST", path, body, headers={"Accept": "text/event-stream"})
        try:
            ctype = (resp.getheader("Content-Type") or "").lower()
            if resp.status < 400 and "text/event-stream" in ctype:
                return message_of_chunks(resp)
            try:
                data = resp.read()
            except (OSError, http.client.HTTPException) as e:
                raise Retry("reading the answer: %s" % e)
            cp.check(resp, data, "turn " + turn_id)
            return message_of_json(json.loads(data))
        finally:
            conn.close()
    return retrying(once, "turn " + turn_id)


# ---- tools ------------------------------------------------------------------

def run_tool(call):
    f = call.get("function") or {}
    try:
        args = json.loads(f.get("arguments") or "{}")
    except ValueError as e:
        return "error: the arguments are not JSON: %s" % e
    name = f.get("name")
    if name == "run":
        cmd = args.get("cmd")
        if not isinstance(cmd, str):
            return "error: run needs {\"cmd\": \"...\"}"
        log("run:", cmd)
        try:
            r = subprocess.run(["/bin/sh", "-c", cmd], capture_output=True,
                               timeout=TOOL_TIMEOUT_S, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            return "error: timed out after %d s" % TOOL_TIMEOUT_S
        out = (r.stdout + r.stderr).decode("utf-8", "replace")
        return "exit %d\n%s" % (r.returncode, out[-TOOL_OUTPUT_MAX:])
    if name == "write_file":
        path, content = args.get("path"), args.get("content")
        if not isinstance(path, str) or not isinstance(content, str):
            return "error: write_file needs {\"path\", \"content\"}"
        log("write_file:", path)
        try:
            d = os.path.dirname(path)
            if d:
                os.makedirs(d, exist_ok=True)
            with open(path, "w") as fh:
                fh.write(content)
        except OSError as e:
            return "error: %s" % e
        return "wrote %d bytes to %s" % (len(content.encode()), path)
    return "error: no tool %r (there are run and write_file)" % name


def tool_results(msg):
    return [{"role": "tool", "tool_call_id": c.get("id", ""), "content": run_tool(c)}
            for c in msg.get("tool_calls") or []]


# ---- the result -------------------------------------------------------------

def upload(cp, name, data):
    """Through a one-time URL: ask for it (token), PUT the bytes (the URL
    is the authority). A URL is single use, so a retry asks for a new one."""
    def once():
        t = cp.json("POST", "/v1/files/upload-url",
                    {"name": name, "size_max": max(1, len(data))})
        u = urlsplit(t["url"])
        conn, resp = cp.open("PUT", u.path, data, auth=False, host=u.hostname, port=u.port,
                             headers={"Content-Type": "application/octet-stream"})
        try:
            got = resp.read()
        except (OSError, http.client.HTTPException) as e:
            raise Retry("PUT %s: %s" % (name, e))
        finally:
            conn.close()
        cp.check(resp, got, "PUT " + name)
        return json.loads(got or b"{}")
    return retrying(once, "upload " + name)


# ---- main -------------------------------------------------------------------

def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--task", default=os.environ.get("AGENT_TASK"))
    ap.add_argument("--route", default=os.environ.get("AGENT_ROUTE"))
    ap.add_argument("--model", default=os.environ.get("AGENT_MODEL"))
    ap.add_argument("--result", default=os.environ.get("AGENT_RESULT", "result.txt"))
    ap.add_argument("--max-steps", type=int,
                    default=int(os.environ.get("AGENT_MAX_STEPS", "20")))
    a = ap.parse_args(argv)
    sid, url, token = session_vars()
    cp = ControlPlane(url, token, sid)

    me = retrying(lambda: cp.json("GET", "/v1/session"), "GET /v1/session")
    routes = me.get("routes") or []
    route = a.route or (routes[0]["route"] if routes else None)
    if not route:
        raise Fatal(2, "the session has no llm route (moat session create --llm-route)")
    models = next((r.get("models") for r in routes if r.get("route") == route), None) or []
    model = a.model or (models[0] if models else "gpt-4o-mini")

    # Memory: the conversation the control plane kept. Its turns are stored
    # whole (the new messages and the answer together), so the last message
    # is an answer: with tool calls, their results are what to send next
    # (the tools run again: a sandbox that died took their results along).
    conv = retrying(lambda: cp.json("GET", "/v1/conversations/%s" % quote(sid, safe="")),
                    "GET the conversation")
    history = conv.get("messages") or []
    turns = int(conv.get("turns") or 0)
    log("session %s: %d turns stored, route %s, model %s" % (sid, turns, route, model))
    last = history[-1] if history else None
    # A new sandbox starts with a fresh workspace: the files the earlier
    # turns wrote are written again from the calls the conversation keeps
    # (commands are not re-run: their results are in the conversation).
    for m in history[:-1]:
        for c in m.get("tool_calls") or [] if m.get("role") == "assistant" else []:
            if (c.get("function") or {}).get("name") == "write_file":
                run_tool(c)
    if last is None:
        if not a.task:
            raise Fatal(2, "no task (AGENT_TASK or --task)")
        pending = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": a.task}]
    elif last.get("role") == "assistant" and last.get("tool_calls"):
        pending = tool_results(last)
    else:
        pending = None  # the final answer is there already
    answer = last
    while pending is not None:
        if turns >= a.max_steps:
            raise Fatal(6, "stopped after %d model calls (AGENT_MAX_STEPS)" % turns)
        # the turn's index is its id: the same after a cut, a restart, anything
        answer = turn(cp, route, model, "turn-%d" % turns, pending)
        turns += 1
        pending = tool_results(answer) if answer.get("tool_calls") else None

    text = (answer or {}).get("content") or ""
    if isinstance(text, list):
        text = "".join(p.get("text", "") for p in text if isinstance(p, dict))
    try:
        with open(a.result, "rb") as fh:
            data = fh.read()
    except FileNotFoundError:
        data = text.encode()
    got = upload(cp, os.path.basename(a.result), data)
    log("uploaded %s (%s bytes); the answer: %s" % (got.get("name"), got.get("size"), text))
    print(text, flush=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except Fatal as e:
        log(str(e))
        sys.exit(e.status)
