"""A fake upstream model server for the control plane's tests and benches.

Stdlib only. It listens on 127.0.0.1 (port 0: a free one) and speaks the three
dialects the LLM proxy relays, in their real shapes, as JSON or SSE streams:

  POST /v1/chat/completions   OpenAI Chat Completions (chat.completion, or
                              chat.completion.chunk events then `data: [DONE]`;
                              usage in a last chunk with choices [] when
                              stream_options.include_usage)
  POST /v1/responses          OpenAI Responses (response object, or
                              response.created ... response.output_text.delta
                              ... response.completed with usage)
  POST /v1/messages           Anthropic Messages (message, or message_start
                              (usage.input_tokens), content_block_start/delta/
                              stop, message_delta (usage.output_tokens),
                              message_stop)

A prefix before /v1 is accepted (a route's URL may carry one): the dialect is
picked by the path's end.

Keys: OpenAI paths want `Authorization: Bearer <key>`, /v1/messages wants
`x-api-key: <anthropic_key>` (anthropic_key None: the same key); anything else
gets 401 in the dialect's error shape. key None: no check at all.

Every request is recorded (FakeLLM.requests, a list of dicts, appended when the
request has been read, before it is answered):
  {"method", "path", "headers": {lower-case name: value}, "body": parsed JSON
   or None, "raw": bytes, "dialect": "chat"|"responses"|"messages"|None,
   "status": answered status, "usage": {"in", "out"} as reported or None,
   "events": SSE events written, "completed": the whole answer was written,
   "disconnected": the client went away before the end, "cut": closed by a
   cut_after step}

Answers come from a script, a queue of steps (FakeLLM.push); each request takes
the next one; an empty queue gives the default answer (an echo of the last user
message: "you said: <text>"). A step is a dict:
  {"text": "..."}                        an answer with this text
  {"tool_call": {"name": "f", "arguments": {...} | "json string"}}
  {"tool_calls": [{...}, ...]}           several
  {"status": 500, "error": "message"}    an error in the dialect's shape
  {"status": 200, "body": "raw", "content_type": "text/plain"}   verbatim
  {"redirect": "http://elsewhere/"}      a 307 with that Location
  {"hang": seconds}                      wait that long before answering (the
                                         client's close is noticed and recorded;
                                         stop() ends the wait)
  {"hang_after": n, "hang": seconds}     a stream: wait after n events instead
  {"cut_after": n}                       close the connection after n SSE events
                                         (a JSON answer: after n bytes of body)
  {"delay": seconds}                     between SSE events
and combinations ({"text": "a b c", "cut_after": 2, "delay": 0.01}). An error
step with "stream" may still be asked for: errors are always JSON.

Usage is deterministic so that tests can assert it: input tokens = the number
of whitespace-separated words in the request's message texts (count_words),
output tokens = the words of the answered text (a tool call: the words of its
arguments' JSON), so "one two three" answers 3 output tokens.

Class API: FakeLLM(key="k-openai", anthropic_key=None, delay=0.0), .url,
.port, .push(step), .requests, .wait_requests(n, timeout), .wait_over(i,
timeout), .clear(), .stop(). Also usable as a context manager.
CLI for benches: python3 tests/e2e/fake_llm.py --port N --key K
  [--anthropic-key K] [--delay S]; it prints "listening on URL" and serves
until killed. POST /__push (a step as JSON) and GET /__requests (the records,
without raw bodies) script it from another process.
"""
import argparse
import http.server
import itertools
import json
import select
import socket
import sys
import threading
import time

DIALECTS = {
    "/v1/chat/completions": "chat",
    "/v1/responses": "responses",
    "/v1/messages": "messages",
}
_ids = itertools.count(1)


def _dialect_of(path):
    path = path.split("?", 1)[0]
    for suffix, d in DIALECTS.items():
        if path.endswith(suffix):
            return d
    return None


def _words(x):
    """Words of the texts of a message tree: strings under content / text /
    input / output / system keys (not roles, ids or types)."""
    if isinstance(x, str):
        return len(x.split())
    if isinstance(x, list):
        return sum(_words(v) for v in x)
    if isinstance(x, dict):
        return sum(_words(v) for k, v in x.items()
                   if k in ("content", "text", "input", "output", "system"))
    return 0


def count_words(dialect, body):
    """The input tokens the fake reports for a request body."""
    if not isinstance(body, dict):
        return 0
    if dialect == "responses":
        n = _words(body.get("input"))
        if isinstance(body.get("instructions"), str):
            n += _words(body["instructions"])
        return n
    n = _words(body.get("messages"))
    if dialect == "messages":
        n += _words(body.get("system"))
    return n


def _last_user_text(dialect, body):
    if not isinstance(body, dict):
        return ""
    msgs = body.get("input") if dialect == "responses" else body.get("messages")
    if isinstance(msgs, str):
        return msgs
    if not isinstance(msgs, list):
        return ""
    for m in reversed(msgs):
        if isinstance(m, dict) and m.get("role") == "user":
            c = m.get("content")
            if isinstance(c, str):
                return c
            if isinstance(c, list):
                return " ".join(p.get("text", "") for p in c
                                if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def _chunks_of(text):
    """The deltas of a streamed text: one word (with its space) each."""
    out, word = [], ""
    for ch in text:
        word += ch
        if ch == " ":
            out.append(word)
            word = ""
    if word:
        out.append(word)
    return out or [""]


class _Closed(Exception):
    pass


class _Cut(Exception):
    pass


class FakeLLM:
    def __init__(self, key="k-openai", anthropic_key=None, delay=0.0, port=0):
        self.key = key
        self.anthropic_key = anthropic_key if anthropic_key is not None else key
        self.delay = delay
        self.requests = []
        self._steps = []
        self._cond = threading.Condition()
        self._stopping = threading.Event()
        fake = self

        class Handler(_Handler):
            pass
        Handler.fake = fake
        self._srv = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._srv.daemon_threads = True
        self.port = self._srv.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._srv.serve_forever,
                                        kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    # ---- script and records ----
    def push(self, *steps):
        with self._cond:
            self._steps.extend(steps)

    def _next_step(self):
        with self._cond:
            return self._steps.pop(0) if self._steps else {}

    def _record(self, rec):
        with self._cond:
            self.requests.append(rec)
            self._cond.notify_all()

    def _update(self, rec, **kw):
        with self._cond:
            rec.update(kw)
            self._cond.notify_all()

    def clear(self):
        with self._cond:
            self.requests.clear()
            self._steps.clear()

    def wait_requests(self, n=1, timeout=10.0):
        """Wait until n requests were recorded; returns the list."""
        with self._cond:
            if not self._cond.wait_for(lambda: len(self.requests) >= n, timeout):
                raise AssertionError(f"fake upstream: {len(self.requests)} requests, wanted {n}")
            return list(self.requests)

    def wait_over(self, i=-1, timeout=10.0):
        """Wait until request i is answered or its client has gone."""
        def over():
            try:
                r = self.requests[i]
            except IndexError:
                return False
            return r["completed"] or r["disconnected"] or r["cut"]
        with self._cond:
            if not self._cond.wait_for(over, timeout):
                raise AssertionError("fake upstream: the request is not over")
            return self.requests[i]

    def stop(self):
        self._stopping.set()
        self._srv.shutdown()
        self._srv.server_close()

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.stop()


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    fake = None

    def log_message(self, *a):
        pass

    # ---- reading ----
    def _read_body(self):
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            data = b""
            while True:
                line = self.rfile.readline()
                n = int(line.split(b";")[0].strip() or b"0", 16)
                if n == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return data
                data += self.rfile.read(n)
                self.rfile.readline()
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def do_GET(self):
        if self.path == "/__requests":
            with self.fake._cond:
                recs = [{k: v for k, v in r.items() if k != "raw"} for r in self.fake.requests]
            return self._send_json(200, recs)
        self._send_json(404, {"error": {"message": f"no such path: {self.path}",
                                        "type": "invalid_request_error", "param": None,
                                        "code": "not_found"}})

    def do_POST(self):
        raw = self._read_body()
        if self.path == "/__push":
            self.fake.push(json.loads(raw))
            return self._send_json(200, {"ok": True})
        dialect = _dialect_of(self.path)
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        rec = {"method": "POST", "path": self.path,
               "headers": {k.lower(): v for k, v in self.headers.items()},
               "body": body, "raw": raw, "dialect": dialect, "status": None,
               "usage": None, "events": 0, "completed": False, "disconnected": False,
               "cut": False}
        self.fake._record(rec)
        self.rec = rec
        try:
            self._answer(dialect, body)
        except _Cut:
            pass
        except (_Closed, BrokenPipeError, ConnectionResetError):
            self.fake._update(rec, disconnected=True)
            self.close_connection = True

    # ---- the answer ----
    def _answer(self, dialect, body):
        fake = self.fake
        if dialect is None:
            return self._error("chat", 404, f"no such path: {self.path}", "not_found")
        if fake.key is not None:
            if dialect == "messages":
                ok = self.headers.get("x-api-key") == fake.anthropic_key
            else:
                ok = self.headers.get("Authorization") == f"Bearer {fake.key}"
            if not ok:
                return self._error(dialect, 401, "invalid api key", "invalid_api_key")
        step = fake._next_step()
        stream = isinstance(body, dict) and body.get("stream") is True
        if "hang" in step and "hang_after" not in step:
            self._hang(step["hang"])
        if "redirect" in step:
            self.send_response(307)
            self.send_header("Location", step["redirect"])
            self.send_header("Content-Length", "0")
            self.end_headers()
            return self._over(307)
        status = step.get("status", 200)
        if "body" in step:
            data = step["body"].encode() if isinstance(step["body"], str) else step["body"]
            return self._send_raw(status, step.get("content_type", "application/json"), data)
        if status != 200 or "error" in step:
            return self._error(dialect, status, step.get("error", "upstream error"), None)
        if not isinstance(body, dict):
            return self._error(dialect, 400, "the body is not a JSON object", None)
        model = body.get("model") if isinstance(body.get("model"), str) else "fake-model"
        calls = step.get("tool_calls") or ([step["tool_call"]] if "tool_call" in step else [])
        calls = [{"name": c["name"],
                  "arguments": c["arguments"] if isinstance(c.get("arguments"), str)
                  else json.dumps(c.get("arguments", {}))} for c in calls]
        if calls:
            text = step.get("text", "")
        else:
            text = step.get("text")
            if text is None:
                text = "you said: " + " ".join(_last_user_text(dialect, body).split()[:50])
        usage = {"in": count_words(dialect, body),
                 "out": len(text.split()) + sum(len(c["arguments"].split()) for c in calls)}
        ans = {"id": next(_ids), "model": model, "text": text, "calls": calls,
               "usage": usage, "created": int(time.time())}
        fake._update(self.rec, usage=usage)
        if stream:
            self._stream(dialect, body, ans, step)
        else:
            data = json.dumps(getattr(self, f"_json_{dialect}")(ans)).encode()
            self._send_raw(200, "application/json", data, cut=step.get("cut_after"))

    def _hang(self, seconds):
        """Wait, noticing the client's close (EOF on the socket) or stop()."""
        end = time.monotonic() + seconds
        while time.monotonic() < end and not self.fake._stopping.is_set():
            r, _, _ = select.select([self.connection], [], [], 0.05)
            if r:
                try:
                    if self.connection.recv(1, socket.MSG_PEEK) == b"":
                        raise _Closed()
                except (ConnectionResetError, OSError):
                    raise _Closed() from None
                time.sleep(0.05)  # pipelined bytes: not a close
        if self.fake._stopping.is_set():
            raise _Closed()

    def _over(self, status):
        self.fake._update(self.rec, status=status, completed=True)

    def _send_json(self, status, obj):
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _send_raw(self, status, ctype, data, cut=None):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.fake._update(self.rec, status=status)
        if cut is not None:
            self.wfile.write(data[:cut])
            self.wfile.flush()
            self._cut()
        self.wfile.write(data)
        self.wfile.flush()
        self._over(status)

    def _cut(self):
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.close_connection = True
        self.fake._update(self.rec, cut=True)
        raise _Cut()

    def _error(self, dialect, status, message, code):
        if dialect == "messages":
            etype = {400: "invalid_request_error", 401: "authentication_error",
                     403: "permission_error", 404: "not_found_error",
                     413: "request_too_large", 429: "rate_limit_error",
                     529: "overloaded_error"}.get(status, "api_error")
            obj = {"type": "error", "error": {"type": etype, "message": message}}
        else:
            etype = {400: "invalid_request_error", 401: "invalid_request_error",
                     404: "invalid_request_error", 429: "rate_limit_exceeded"}.get(status,
                                                                                   "server_error")
            obj = {"error": {"message": message, "type": etype, "param": None, "code": code}}
        data = json.dumps(obj).encode()
        self._send_raw(status, "application/json", data)

    # ---- JSON answers ----
    def _json_chat(self, a):
        msg = {"role": "assistant", "content": a["text"] if not a["calls"] or a["text"] else None,
               "refusal": None}
        if a["calls"]:
            msg["tool_calls"] = [{"id": f"call_{a['id']}_{i}", "type": "function",
                                  "function": {"name": c["name"], "arguments": c["arguments"]}}
                                 for i, c in enumerate(a["calls"])]
        u = a["usage"]
        return {"id": f"chatcmpl-{a['id']}", "object": "chat.completion", "created": a["created"],
                "model": a["model"], "system_fingerprint": "fp_fake",
                "choices": [{"index": 0, "message": msg, "logprobs": None,
                             "finish_reason": "tool_calls" if a["calls"] else "stop"}],
                "usage": {"prompt_tokens": u["in"], "completion_tokens": u["out"],
                          "total_tokens": u["in"] + u["out"]}}

    def _resp_items(self, a):
        items = []
        if a["text"] or not a["calls"]:
            items.append({"type": "message", "id": f"msg_{a['id']}", "status": "completed",
                          "role": "assistant",
                          "content": [{"type": "output_text", "text": a["text"],
                                       "annotations": []}]})
        for i, c in enumerate(a["calls"]):
            items.append({"type": "function_call", "id": f"fc_{a['id']}_{i}",
                          "call_id": f"call_{a['id']}_{i}", "name": c["name"],
                          "arguments": c["arguments"], "status": "completed"})
        return items

    def _resp_obj(self, a, status, output, usage):
        u = a["usage"]
        return {"id": f"resp_{a['id']}", "object": "response", "created_at": a["created"],
                "status": status, "error": None, "incomplete_details": None,
                "instructions": None, "model": a["model"], "output": output,
                "parallel_tool_calls": True, "tool_choice": "auto", "tools": [],
                "usage": {"input_tokens": u["in"], "output_tokens": u["out"],
                          "total_tokens": u["in"] + u["out"],
                          "input_tokens_details": {"cached_tokens": 0},
                          "output_tokens_details": {"reasoning_tokens": 0}} if usage else None}

    def _json_responses(self, a):
        return self._resp_obj(a, "completed", self._resp_items(a), True)

    def _msg_blocks(self, a):
        blocks = []
        if a["text"] or not a["calls"]:
            blocks.append({"type": "text", "text": a["text"]})
        for i, c in enumerate(a["calls"]):
            try:
                inp = json.loads(c["arguments"])
            except ValueError:
                inp = {}
            blocks.append({"type": "tool_use", "id": f"toolu_{a['id']}_{i}", "name": c["name"],
                           "input": inp})
        return blocks

    def _json_messages(self, a):
        u = a["usage"]
        return {"id": f"msg_{a['id']}", "type": "message", "role": "assistant",
                "model": a["model"], "content": self._msg_blocks(a),
                "stop_reason": "tool_use" if a["calls"] else "end_turn", "stop_sequence": None,
                "usage": {"input_tokens": u["in"], "output_tokens": u["out"]}}

    # ---- streams ----
    def _stream(self, dialect, body, a, step):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.fake._update(self.rec, status=200)
        delay = step.get("delay", self.fake.delay)
        cut = step.get("cut_after")
        hang_after = step.get("hang_after")
        n = 0
        for ev in getattr(self, f"_events_{dialect}")(body, a):
            if cut is not None and n >= cut:
                self._cut()
            if hang_after is not None and n == hang_after:
                self._hang(step.get("hang", 3600))
            if n and delay:
                time.sleep(delay)
            self._chunk(ev)
            n += 1
            self.fake._update(self.rec, events=n)
        if cut is not None and n >= cut:
            self._cut()
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()
        self._over(200)

    def _chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    @staticmethod
    def _sse(event, obj):
        data = json.dumps(obj)
        if event is None:
            return f"data: {data}\n\n".encode()
        return f"event: {event}\ndata: {data}\n\n".encode()

    def _events_chat(self, body, a):
        opts = body.get("stream_options")
        usage = isinstance(opts, dict) and opts.get("include_usage") is True
        base = {"id": f"chatcmpl-{a['id']}", "object": "chat.completion.chunk",
                "created": a["created"], "model": a["model"], "system_fingerprint": "fp_fake"}

        def chunk(delta, finish=None):
            c = dict(base, choices=[{"index": 0, "delta": delta, "logprobs": None,
                                     "finish_reason": finish}])
            if usage:
                c["usage"] = None
            return self._sse(None, c)
        yield chunk({"role": "assistant", "content": "", "refusal": None})
        if a["text"]:
            for piece in _chunks_of(a["text"]):
                yield chunk({"content": piece})
        for i, c in enumerate(a["calls"]):
            yield chunk({"tool_calls": [{"index": i, "id": f"call_{a['id']}_{i}",
                                         "type": "function",
                                         "function": {"name": c["name"], "arguments": ""}}]})
            for piece in _chunks_of(c["arguments"]):
                yield chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]})
        yield chunk({}, "tool_calls" if a["calls"] else "stop")
        if usage:
            u = a["usage"]
            yield self._sse(None, dict(base, choices=[], usage={
                "prompt_tokens": u["in"], "completion_tokens": u["out"],
                "total_tokens": u["in"] + u["out"]}))
        yield b"data: [DONE]\n\n"

    def _events_responses(self, body, a):
        seq = itertools.count()

        def ev(t, **kw):
            return self._sse(t, dict({"type": t, "sequence_number": next(seq)}, **kw))
        yield ev("response.created", response=self._resp_obj(a, "in_progress", [], False))
        yield ev("response.in_progress", response=self._resp_obj(a, "in_progress", [], False))
        items = self._resp_items(a)
        for oi, item in enumerate(items):
            if item["type"] == "message":
                iid = item["id"]
                yield ev("response.output_item.added", output_index=oi,
                         item=dict(item, status="in_progress", content=[]))
                part = {"type": "output_text", "text": "", "annotations": []}
                yield ev("response.content_part.added", item_id=iid, output_index=oi,
                         content_index=0, part=part)
                for piece in _chunks_of(a["text"]):
                    if piece:
                        yield ev("response.output_text.delta", item_id=iid, output_index=oi,
                                 content_index=0, delta=piece)
                yield ev("response.output_text.done", item_id=iid, output_index=oi,
                         content_index=0, text=a["text"])
                yield ev("response.content_part.done", item_id=iid, output_index=oi,
                         content_index=0, part=dict(part, text=a["text"]))
            else:
                iid = item["id"]
                yield ev("response.output_item.added", output_index=oi,
                         item=dict(item, status="in_progress", arguments=""))
                for piece in _chunks_of(item["arguments"]):
                    yield ev("response.function_call_arguments.delta", item_id=iid,
                             output_index=oi, delta=piece)
                yield ev("response.function_call_arguments.done", item_id=iid,
                         output_index=oi, arguments=item["arguments"])
            yield ev("response.output_item.done", output_index=oi, item=item)
        yield ev("response.completed", response=self._resp_obj(a, "completed", items, True))

    def _events_messages(self, body, a):
        u = a["usage"]
        yield self._sse("message_start", {"type": "message_start", "message": {
            "id": f"msg_{a['id']}", "type": "message", "role": "assistant",
            "model": a["model"], "content": [], "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": u["in"], "output_tokens": 1}}})
        blocks = self._msg_blocks(a)
        for bi, b in enumerate(blocks):
            if b["type"] == "text":
                yield self._sse("content_block_start", {"type": "content_block_start",
                                                        "index": bi,
                                                        "content_block": {"type": "text",
                                                                          "text": ""}})
                if bi == 0:
                    yield self._sse("ping", {"type": "ping"})
                for piece in _chunks_of(b["text"]):
                    yield self._sse("content_block_delta", {
                        "type": "content_block_delta", "index": bi,
                        "delta": {"type": "text_delta", "text": piece}})
            else:
                yield self._sse("content_block_start", {
                    "type": "content_block_start", "index": bi,
                    "content_block": {"type": "tool_use", "id": b["id"], "name": b["name"],
                                      "input": {}}})
                for piece in _chunks_of(json.dumps(b["input"])):
                    yield self._sse("content_block_delta", {
                        "type": "content_block_delta", "index": bi,
                        "delta": {"type": "input_json_delta", "partial_json": piece}})
            yield self._sse("content_block_stop", {"type": "content_block_stop", "index": bi})
        yield self._sse("message_delta", {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use" if a["calls"] else "end_turn",
                      "stop_sequence": None},
            "usage": {"output_tokens": u["out"]}})
        yield self._sse("message_stop", {"type": "message_stop"})


def main():
    ap = argparse.ArgumentParser(description="a fake upstream model server (loopback)")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--key", default="k-openai")
    ap.add_argument("--anthropic-key", default=None)
    ap.add_argument("--delay", type=float, default=0.0, help="seconds between SSE events")
    args = ap.parse_args()
    fake = FakeLLM(key=args.key, anthropic_key=args.anthropic_key, delay=args.delay,
                   port=args.port)
    print(f"listening on {fake.url}", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        fake.stop()


if __name__ == "__main__":
    sys.exit(main())
