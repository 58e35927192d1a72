/* libFuzzer target: the E2B door's envd data plane (src/serve/e2b_envd*.c)
 * with the real Connect codec, multipart parser and http.c, behind a
 * stand-in operation core whose answers come from the input, in the order
 * the door asked. The request is a real evhttp_request.
 *
 * Input: byte 0 = method (bits 0-2) | right X-Access-Token (bit 3) | a
 * Basic user (bit 4: "root", bit 5: "mallory"); byte 1 = the Content-Type
 * (one of ctypes[]); then the request target up to "\n"; the body up to
 * "\x1e"; then the core's answers, each a JSON text and its data split at
 * "\x1f", separated by "\x1e". An answer {"error":{"status","code","msg"}}
 * fails the op; for exec ops {"started":N} / {"out":s,"err":s} / {"exit":N,
 * "signal":N,"timed_out":b}; for watches {"started":1} / {"event":{...}}.
 *
 * Checks: every request is answered exactly once, never after it was
 * freed; a stream is whole envelopes, all data frames but the last, which
 * is the end-stream frame; a JSON answer is JSON; an error answer has the
 * Connect shape {"code":name,"message"} or the REST one {"code":status,
 * "message"}. */
#define _GNU_SOURCE
#include "serve/box.h"
#include "serve/core.h"
#include "serve/e2b.h"
#include "serve/e2b_int.h"
#include "serve/http.h"

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/http_struct.h>
#include <event2/keyvalq_struct.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* ---- the stand-in core ------------------------------------------------------ */

enum fop_kind { F_DONE, F_EXEC, F_WATCH };
struct core_op {
	enum fop_kind kind;
	core_done_cb done;
	const struct core_exec_cbs *ecbs;
	const struct core_watch_cbs *wcbs;
	void *arg;
	bool queued;
};
#define MAX_OPS 64
static struct core_op *ops[MAX_OPS];
static size_t nops;
static struct core_config cfg;

const struct core_config *core_config(void)
{
	return &cfg;
}

static struct core_op *op_new(enum fop_kind k, void *arg, struct core_err *e)
{
	if (nops == MAX_OPS) {
		e->status = 429;
		snprintf(e->code, sizeof e->code, "limit_reached");
		snprintf(e->msg, sizeof e->msg, "too many ops");
		return NULL;
	}
	struct core_op *op = calloc(1, sizeof *op);
	if (!op)
		abort();
	op->kind = k;
	op->arg = arg;
	op->queued = true;
	ops[nops++] = op;
	return op;
}

static void op_unqueue(struct core_op *op)
{
	for (size_t i = 0; i < nops; i++)
		if (ops[i] == op) {
			memmove(ops + i, ops + i + 1, (--nops - i) * sizeof *ops);
			return;
		}
	abort(); /* cancelled twice, or after its final callback */
}

void core_op_cancel(struct core_op *op)
{
	op_unqueue(op);
	free(op);
}

static struct core_op *done_op(core_done_cb cb, void *arg, struct core_err *e)
{
	struct core_op *op = op_new(F_DONE, arg, e);
	if (op)
		op->done = cb;
	return op;
}

struct core_op *core_exec(struct box *b, const struct core_exec_req *r,
			  const struct core_exec_cbs *cbs, void *arg, struct core_err *e)
{
	if (!json_is_array(r->argv) || !json_array_size(r->argv) || (r->env && !json_is_object(r->env)))
		abort();
	struct core_op *op = op_new(F_EXEC, arg, e);
	if (op)
		op->ecbs = cbs;
	return op;
}
struct core_op *core_attach(struct box *b, int64_t pid, bool stream, int64_t yield_ms,
			    const struct core_exec_cbs *cbs, void *arg, struct core_err *e)
{
	struct core_op *op = op_new(F_EXEC, arg, e);
	if (op)
		op->ecbs = cbs;
	return op;
}
struct core_op *core_watch(struct box *b, const char *path, const char *user, bool recursive,
			   bool include_entry, const struct core_watch_cbs *cbs, void *arg,
			   struct core_err *e)
{
	struct core_op *op = op_new(F_WATCH, arg, e);
	if (op)
		op->wcbs = cbs;
	return op;
}

static void path_ok(const char *p)
{
	if (!p || p[0] != '/' || strstr(p, "//") || strstr(p, "/./") || strstr(p, "/../"))
		abort(); /* the door hands the core clean absolute paths */
}

#define DONE(name, params, check)                                                    \
	struct core_op *name params                                                  \
	{                                                                            \
		check;                                                               \
		return done_op(cb, arg, e);                                          \
	}
DONE(core_stdin, (struct box *b, int64_t pid, const void *d, size_t len, bool close,
		  core_done_cb cb, void *arg, struct core_err *e), (void)0)
DONE(core_signal, (struct box *b, int64_t pid, const char *sig, core_done_cb cb, void *arg,
		   struct core_err *e), (void)0)
DONE(core_resize, (struct box *b, int64_t pid, unsigned cols, unsigned rows, core_done_cb cb,
		   void *arg, struct core_err *e), (void)0)
DONE(core_ps, (struct box *b, core_done_cb cb, void *arg, struct core_err *e), (void)0)
DONE(core_read, (struct box *b, const char *path, const char *user, uint64_t max,
		 core_done_cb cb, void *arg, struct core_err *e), path_ok(path))
DONE(core_write, (struct box *b, const char *path, const void *d, size_t len,
		  const struct core_write_opts *o, core_done_cb cb, void *arg, struct core_err *e),
     path_ok(path))
DONE(core_remove, (struct box *b, const char *path, const char *user, bool recursive,
		   core_done_cb cb, void *arg, struct core_err *e), path_ok(path))
DONE(core_mkdir, (struct box *b, const char *path, const char *user, bool parents,
		  bool exist_ok, core_done_cb cb, void *arg, struct core_err *e), path_ok(path))
DONE(core_list, (struct box *b, const char *path, const char *user, int depth, core_done_cb cb,
		 void *arg, struct core_err *e), path_ok(path))
DONE(core_stat, (struct box *b, const char *path, const char *user, core_done_cb cb, void *arg,
		 struct core_err *e), path_ok(path))
DONE(core_move, (struct box *b, const char *src, const char *dst, const char *user,
		 core_done_cb cb, void *arg, struct core_err *e), (path_ok(src), path_ok(dst)))
DONE(core_watch_create, (struct box *b, const char *path, const char *user, bool recursive,
			 bool include_entry, core_done_cb cb, void *arg, struct core_err *e),
     path_ok(path))
DONE(core_watch_events, (struct box *b, int64_t id, core_done_cb cb, void *arg,
			 struct core_err *e), (void)0)
DONE(core_watch_remove, (struct box *b, int64_t id, core_done_cb cb, void *arg,
			 struct core_err *e), (void)0)

/* ---- the rest of the door and the sandbox --------------------------------------- */

struct box {
	int unused;
};
static struct box the_box;

const char *e2b_access_token(const struct box *b)
{
	return "tok";
}
/* http.c's hooks into the door's routing (e2b.c: its own target) */
bool e2b_claims(struct evhttp_request *req)
{
	return false;
}

void e2b_route(struct evhttp_request *req)
{
	abort();
}

void e2b_refuse(struct evhttp_request *req, int status, const char *msg)
{
	abort();
}

uint64_t e2b_body_limit(struct evhttp_request *req, uint64_t dflt)
{
	return dflt;
}

bool e2b_equal(const char *a, const char *b)
{
	return a && b && !strcmp(a, b);
}
void e2b_api_error(struct evhttp_request *req, int status, const char *fmt, ...)
{
	char m[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(m, sizeof m, fmt, ap);
	va_end(ap);
	json_t *ms = json_string(m);
	http_json(req, status, json_pack("{s:i,s:o}", "code", status, "message",
					 ms ? ms : json_string("?")));
}
void e2b_not_found_502(struct evhttp_request *req, const char *id)
{
	http_json(req, 502, json_pack("{s:s,s:s,s:i}", "sandboxId", id, "message", "not found", "code", 502));
}
json_t *box_env(const struct box *b, json_t *extra)
{
	return json_pack("{s:s}", "A", "b");
}

/* ---- the answer ------------------------------------------------------------------ */

static struct evhttp_request *live;
static bool streaming;
static struct evbuffer *stream_body;

static void check_frames(const unsigned char *s, size_t n)
{
	size_t off = 0;
	bool ended = false;
	while (off < n) {
		if (ended || n - off < 5)
			abort();
		uint8_t flags = s[off];
		size_t len = (size_t)s[off + 1] << 24 | (size_t)s[off + 2] << 16 |
			     (size_t)s[off + 3] << 8 | s[off + 4];
		if (n - off - 5 < len || (flags != 0 && flags != 2))
			abort();
		json_t *j = json_loadb((const char *)s + off + 5, len, 0, NULL);
		if (!json_is_object(j))
			abort();
		if (flags == 2) {
			json_t *err = json_object_get(j, "error");
			if (err && (!json_is_string(json_object_get(err, "code")) ||
				    !json_is_string(json_object_get(err, "message"))))
				abort();
			ended = true;
		}
		json_decref(j);
		off += 5 + len;
	}
	if (!ended)
		abort(); /* a stream without its end-stream frame */
}

static void answered(struct evhttp_request *req)
{
	if (req != live)
		abort();
	live = NULL;
	streaming = false;
	evhttp_request_free(req);
}

void evhttp_send_reply(struct evhttp_request *req, int code, const char *reason,
		       struct evbuffer *databuf)
{
	if (req != live || streaming || code < 200 || code > 599 || !reason)
		abort();
	size_t n = databuf ? evbuffer_get_length(databuf) : 0;
	const char *s = n ? (const char *)evbuffer_pullup(databuf, -1) : "";
	const char *ct = evhttp_find_header(evhttp_request_get_output_headers(req), "Content-Type");
	if (getenv("FUZZ_ENVD_SHOW"))
		fprintf(stderr, "%d %s %.*s\n", code, ct ? ct : "-", (int)(n < 300 ? n : 300), s);
	if (ct && !strcmp(ct, "application/connect+json")) {
		if (code != 200)
			abort();
		check_frames((const unsigned char *)s, n);
	} else if (ct && !strcmp(ct, "application/json")) {
		json_t *j = json_loadb(s, n, 0, NULL);
		if (!j)
			abort();
		if (code >= 400) {
			json_t *c = json_object_get(j, "code");
			if (!json_is_string(json_object_get(j, "message")) ||
			    !(json_is_string(c) || (json_is_integer(c) && json_integer_value(c) == code)))
				abort();
		}
		json_decref(j);
	} else if (code >= 400 || (code == 204 && n)) {
		abort();
	}
	answered(req);
}

void evhttp_send_reply_start(struct evhttp_request *req, int code, const char *reason)
{
	if (req != live || streaming || code != 200)
		abort();
	streaming = true;
	evbuffer_drain(stream_body, evbuffer_get_length(stream_body));
}

void evhttp_send_reply_chunk(struct evhttp_request *req, struct evbuffer *databuf)
{
	if (req != live || !streaming)
		abort();
	evbuffer_add_buffer(stream_body, databuf);
}

void evhttp_send_reply_end(struct evhttp_request *req)
{
	if (req != live || !streaming)
		abort();
	size_t n = evbuffer_get_length(stream_body);
	check_frames(n ? evbuffer_pullup(stream_body, -1) : (const unsigned char *)"", n);
	answered(req);
}

/* ---- driver ------------------------------------------------------------------- */

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	cfg.base = event_base_new();
	cfg.max_file = 1u << 20;
	stream_body = evbuffer_new();
	if (!cfg.base || !stream_body)
		abort();
	return 0;
}

static const enum evhttp_cmd_type methods[] = {
	EVHTTP_REQ_POST, EVHTTP_REQ_POST, EVHTTP_REQ_POST, EVHTTP_REQ_GET,
	EVHTTP_REQ_GET,  EVHTTP_REQ_PUT,  EVHTTP_REQ_HEAD, EVHTTP_REQ_DELETE};
static const char *const ctypes[] = {
	"application/json", "application/connect+json", "multipart/form-data; boundary=XX",
	"application/octet-stream", "text/plain", NULL, "application/json; charset=utf-8",
	"multipart/form-data"};

static const uint8_t *field(const uint8_t *p, const uint8_t *end, uint8_t sep)
{
	const uint8_t *q = memchr(p, sep, (size_t)(end - p));
	return q ? q : end;
}

static void fail_op(struct core_op *op, const char *code, int status, const char *msg)
{
	struct core_err e = {.status = status};
	snprintf(e.code, sizeof e.code, "%s", code);
	snprintf(e.msg, sizeof e.msg, "%s", msg);
	op_unqueue(op);
	void *arg = op->arg;
	enum fop_kind k = op->kind;
	core_done_cb done = op->done;
	const struct core_exec_cbs *ecbs = op->ecbs;
	const struct core_watch_cbs *wcbs = op->wcbs;
	free(op);
	if (k == F_DONE)
		done(arg, NULL, NULL, 0, &e);
	else if (k == F_EXEC)
		ecbs->failed(arg, &e);
	else
		wcbs->failed(arg, &e);
}

/* One answer to the first op waiting. */
static void answer(struct core_op *op, json_t *j, const char *d, size_t dl)
{
	json_t *err = json_object_get(j, "error");
	if (!json_is_object(j) || err) {
		const char *c = json_string_value(json_object_get(err, "code"));
		const char *m = json_string_value(json_object_get(err, "msg"));
		int st = (int)json_integer_value(json_object_get(err, "status"));
		fail_op(op, c ? c : "internal", st ? st : 500, m ? m : "error");
		return;
	}
	void *arg = op->arg;
	if (op->kind == F_DONE) {
		core_done_cb cb = op->done;
		op_unqueue(op);
		free(op);
		cb(arg, j, d, dl, NULL);
		return;
	}
	if (op->kind == F_WATCH) {
		const struct core_watch_cbs *w = op->wcbs;
		json_t *ev = json_object_get(j, "event");
		/* re-queued at the back: it goes on until it fails */
		op_unqueue(op);
		ops[nops++] = op;
		if (ev)
			w->event(arg, ev);
		else
			w->started(arg);
		return;
	}
	const struct core_exec_cbs *x = op->ecbs;
	json_t *v;
	if ((v = json_object_get(j, "exit"))) {
		struct core_exit ex = {.pid = 7, .exit_code = (int)json_integer_value(v),
				       .signal = (int)json_integer_value(json_object_get(j, "signal")),
				       .timed_out = json_is_true(json_object_get(j, "timed_out"))};
		op_unqueue(op);
		free(op);
		x->ended(arg, &ex);
		return;
	}
	op_unqueue(op);
	ops[nops++] = op;
	if ((v = json_object_get(j, "started")) && x->started) {
		x->started(arg, json_integer_value(v));
		return;
	}
	const char *o = json_string_value(json_object_get(j, "out"));
	const char *e = json_string_value(json_object_get(j, "err"));
	x->output(arg, o ? o : d, o ? strlen(o) : dl, e ? e : "", e ? strlen(e) : 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 3)
		return 0;
	const uint8_t *end = data + size, *p = data + 2;
	const uint8_t *uend = field(p, end, '\n');
	char *uri = strndup((const char *)p, (size_t)(uend - p));
	struct evhttp_uri *u = evhttp_uri_parse_with_flags(uri, EVHTTP_URI_NONCONFORMANT);
	if (!u || strlen(uri) != (size_t)(uend - p) || !evhttp_uri_get_path(u)) {
		if (u)
			evhttp_uri_free(u);
		free(uri);
		return 0;
	}
	struct evhttp_request *req = evhttp_request_new(NULL, NULL);
	req->kind = EVHTTP_REQUEST;
	req->type = methods[data[0] & 7];
	req->uri = uri;
	req->uri_elems = u;
	struct evkeyvalq *h = req->input_headers;
	if (data[0] & 8)
		evhttp_add_header(h, "X-Access-Token", "tok");
	if (data[0] & 16)
		evhttp_add_header(h, "Authorization", "Basic cm9vdDo="); /* root: */
	else if (data[0] & 32)
		evhttp_add_header(h, "Authorization", "Basic bWFsbG9yeTo="); /* mallory: */
	if (data[0] & 64)
		evhttp_add_header(h, "X-Metadata-k", "v");
	evhttp_add_header(h, "Connect-Timeout-Ms", (data[0] & 128) ? "100" : "x");
	const char *ct = ctypes[data[1] & 7];
	if (ct)
		evhttp_add_header(h, "Content-Type", ct);
	p = uend < end ? uend + 1 : end;
	const uint8_t *bend = field(p, end, 0x1e);
	evbuffer_add(req->input_buffer, p, (size_t)(bend - p));
	p = bend < end ? bend + 1 : end;

	nops = 0;
	live = req;
	streaming = false;
	e2b_envd_route(req, &the_box, "sb", E2B_ENVD_PORT, evhttp_uri_get_path(u));
	for (int turns = 0; nops && turns < 256; turns++) {
		struct core_op *op = ops[0];
		if (p >= end) {
			fail_op(op, "unavailable", 503, "the sandbox stopped");
			continue;
		}
		const uint8_t *rend = field(p, end, 0x1e);
		const uint8_t *jend = field(p, rend, 0x1f);
		json_t *j = json_loadb((const char *)p, (size_t)(jend - p), 0, NULL);
		size_t dl = jend < rend ? (size_t)(rend - jend - 1) : 0;
		char *d = malloc(dl + 1);
		if (!d)
			abort();
		memcpy(d, jend + 1 <= rend ? jend + 1 : jend, dl);
		p = rend < end ? rend + 1 : end;
		answer(op, j, d, dl);
		json_decref(j);
		free(d);
	}
	while (nops) /* still waiting after 256 turns: the sandbox goes */
		fail_op(ops[0], "unavailable", 503, "the sandbox stopped");
	if (live)
		abort(); /* never answered */
	return 0;
}
