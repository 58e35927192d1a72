/* moat's own door, /v1 (docs/API.md): parse the request, call the
 * operation core (core.h), shape the answer. Requests that wait keep a
 * `struct pend` until the core answers or the client goes away. */
#define _GNU_SOURCE
#include "session.h"
#include "api.h"
#include "api_snap.h"

#include "api_life.h"
#include "attach.h"
#include "box.h"
#include "core.h"
#include "http.h"
#include "jfield.h"
#include "metrics.h"
#include "../base/util.h"
#include "../proto/entries.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const struct api_config *conf;
void api_init(const struct api_config *c)
{
	conf = c;
}

static void fail(struct evhttp_request *req, const struct core_err *e)
{
	http_error(req, e->status ? e->status : 500, e->code[0] ? e->code : "internal", "%s",
		   e->msg);
}

/* ---- small helpers -------------------------------------------------------- */

/* ---- pending requests ----------------------------------------------------- */

enum pend_kind { P_CREATE, P_EXEC, P_STDIN, P_PLAIN, P_NOCONTENT, P_READ, P_IMAGE, P_PACK,
		 P_LIST, P_STAT, P_PS };

struct pend {
	struct evhttp_request *req;
	struct box *b;
	struct core_op *op;   /* until the core answered */
	enum pend_kind kind;
	bool sse;
	int64_t pid;
	struct moat_buf out, err; /* output collected for the answer */
	struct http_wait wait; /* the client leaving while we wait */
};

static void pend_free(struct pend *p)
{
	http_wait_stop(&p->wait);
	core_op_cancel(p->op); /* an exec bound to the request is killed */
	moat_buf_free(&p->out);
	moat_buf_free(&p->err);
	free(p);
}

static void on_client_gone(void *arg)
{
	pend_free(arg);
}

static struct pend *pend_new(struct evhttp_request *req, struct box *b, enum pend_kind k)
{
	struct pend *p = calloc(1, sizeof *p);
	if (!p)
		return NULL;
	p->req = req;
	p->b = b;
	p->kind = k;
	http_wait_start(&p->wait, conf->base, req, on_client_gone, p);
	return p;
}

/* Stop watching the client before answering; the core's op has answered
 * (it frees itself). */
static void pend_done(struct pend *p)
{
	p->op = NULL;
	http_wait_stop(&p->wait);
}

/* The core refused at once (op NULL): answer and free p. */
static void started(struct pend *p, struct core_op *op, const struct core_err *e)
{
	if (op) {
		p->op = op;
		return;
	}
	pend_done(p);
	fail(p->req, e);
	pend_free(p);
}

void api_sse_event(struct evhttp_request *req, const char *event, json_t *data)
{
	char *s = json_dumps(data, JSON_COMPACT);
	json_decref(data);
	struct evbuffer *b = evbuffer_new();
	if (b && s) {
		evbuffer_add_printf(b, "event: %s\ndata: %s\n\n", event, s);
		evhttp_send_reply_chunk(req, b);
	}
	if (b)
		evbuffer_free(b);
	free(s);
}

/* ---- processes ------------------------------------------------------------------ */

static void x_started(void *arg, int64_t pid)
{
	struct pend *p = arg;
	p->pid = pid;
	if (p->sse)
		http_wait_stream(&p->wait, "text/event-stream");
}

static void x_output(void *arg, const char *out, size_t olen, const char *err, size_t elen)
{
	struct pend *p = arg;
	if (p->wait.streaming) {
		if (olen)
			api_sse_event(p->req, "stdout", json_pack("{s:o}", "data", jf_text(out, olen)));
		if (elen)
			api_sse_event(p->req, "stderr", json_pack("{s:o}", "data", jf_text(err, elen)));
		return;
	}
	/* the agent bounds what it sends (max_output_bytes) */
	if (moat_buf_add(&p->out, out, olen) < 0 || moat_buf_add(&p->err, err, elen) < 0)
		return;
}

static json_t *collected(struct pend *p, json_t *o)
{
	json_object_set_new(o, "stdout", jf_text(p->out.p, p->out.len));
	json_object_set_new(o, "stderr", jf_text(p->err.p, p->err.len));
	return o;
}

static void x_yielded(void *arg, const struct core_exit *x)
{
	struct pend *p = arg;
	pend_done(p);
	json_t *o = json_pack("{s:b,s:I}", "running", 1, "process_id", (json_int_t)x->pid);
	collected(p, o);
	json_object_set_new(o, "truncated", json_boolean(x->truncated));
	http_json(p->req, 200, o);
	pend_free(p);
}

static void x_ended(void *arg, const struct core_exit *x)
{
	struct pend *p = arg;
	pend_done(p);
	json_t *o = jf_exit(x, p->kind == P_STDIN);
	if (p->wait.streaming) {
		json_object_set_new(o, "truncated", json_boolean(x->truncated));
		api_sse_event(p->req, "exit", o);
		evhttp_send_reply_end(p->req);
	} else {
		collected(p, o);
		json_object_set_new(o, "truncated", json_boolean(x->truncated));
		http_json(p->req, 200, o);
	}
	pend_free(p);
}

static void x_failed(void *arg, const struct core_err *e)
{
	struct pend *p = arg;
	pend_done(p);
	if (p->wait.streaming) {
		api_sse_event(p->req, "error",
			  json_pack("{s:{s:s,s:s}}", "error", "code", e->code, "message", e->msg));
		evhttp_send_reply_end(p->req);
	} else {
		fail(p->req, e);
	}
	pend_free(p);
}

/* What the client has not read yet (back-pressure of an SSE stream). */
static size_t x_backlog(void *arg)
{
	struct pend *p = arg;
	return http_wait_backlog(&p->wait);
}

static const struct core_exec_cbs exec_cbs = {.started = x_started, .output = x_output,
					      .yielded = x_yielded, .ended = x_ended,
					      .failed = x_failed, .backlog = x_backlog};

static void h_exec(struct evhttp_request *req, struct box *b)
{
	json_t *body = http_body_json(req, false);
	if (!body)
		return;
	static const char *const keys[] = {"cmd", "cwd", "env", "stdin", "timeout_ms", "yield_ms",
					   "max_output_bytes", "tty", "cols", "rows", NULL};
	json_t *argv = NULL;
	int64_t timeout = 0, yield = -1, maxout = 0, cols = 0, rows = 0;
	bool tty = false;
	struct core_err e = {0};
	if (!jf_only_keys(&e, body, "body", keys))
		goto bad;
	json_t *cmd = json_object_get(body, "cmd");
	if (json_is_string(cmd) && json_string_length(cmd) &&
	    strlen(json_string_value(cmd)) == json_string_length(cmd)) {
		argv = json_pack("[s,s,O]", "/bin/sh", "-c", cmd);
	} else if (json_is_array(cmd) && json_array_size(cmd) > 0) {
		argv = json_incref(cmd);
	} else if (!cmd) {
		/* none: an image sandbox runs its image's Entrypoint + Cmd */
	} else {
		cerr(&e, 400, "invalid_request", "cmd must be a non-empty string or array of strings");
		goto bad;
	}
	json_t *cwdv = json_object_get(body, "cwd");
	if (cwdv && !json_is_null(cwdv) && (!json_is_string(cwdv) || !json_string_length(cwdv))) {
		cerr(&e, 400, "invalid_request", "cwd must be a path");
		goto bad;
	}
	json_t *st = json_object_get(body, "stdin");
	if (st && !json_is_null(st) && !json_is_string(st)) {
		cerr(&e, 400, "invalid_request", "stdin must be a string");
		goto bad;
	}
	if (!jf_string_map(&e, json_object_get(body, "env"), "env", true) ||
	    !jf_int(&e, body, "timeout_ms", 86400000LL * 30, &timeout) ||
	    !jf_int(&e, body, "yield_ms", 3600000, &yield) ||
	    !jf_int(&e, body, "max_output_bytes", 64 << 20, &maxout) ||
	    !jf_int(&e, body, "cols", 9999, &cols) || !jf_int(&e, body, "rows", 9999, &rows) ||
	    !jf_bool(&e, body, "tty", &tty))
		goto bad;
	struct pend *p = pend_new(req, b, P_EXEC);
	if (!p) {
		cerr(&e, 500, "internal", "out of memory");
		goto bad;
	}
	const char *accept = evhttp_find_header(evhttp_request_get_input_headers(req), "Accept");
	p->sse = accept && strstr(accept, "text/event-stream");
	bool yields = yield >= 0 && !p->sse;
	json_t *envv = json_object_get(body, "env");
	struct core_exec_req r = {
		.argv = argv,
		.env = json_is_object(envv) ? envv : NULL,
		.cwd = json_string_value(cwdv),
		.tty = tty,
		.cols = (unsigned)cols,
		.rows = (unsigned)rows,
		.stdin_mode = yields ? CORE_STDIN_PIPE : CORE_STDIN_CLOSED,
		.stdin_data = st && json_is_string(st) ? json_string_value(st) : "",
		.stdin_len = st && json_is_string(st) ? json_string_length(st) : 0,
		.timeout_ms = timeout,
		.max_output = maxout,
		.stream = p->sse,
		.yield_ms = yields ? yield : -1,
		.detached = yields,
	};
	started(p, core_exec(b, &r, &exec_cbs, p, &e), &e);
	goto out;
bad:
	fail(req, &e);
out:
	json_decref(argv);
	json_decref(body);
}

static bool parse_pid(struct evhttp_request *req, const char *s, int64_t *out)
{
	char *end;
	long long v = strtoll(s, &end, 10);
	if (!*s || *end || v <= 0 || v > 2000000000) {
		http_error(req, 404, "not_found", "no process %.32s", s);
		return false;
	}
	*out = v;
	return true;
}

static void ignore(void *arg, json_t *result, const char *data, size_t len,
		   const struct core_err *e)
{
}

static void h_stdin(struct evhttp_request *req, struct box *b, const char *pids)
{
	int64_t pid, yield = 250;
	bool close = false;
	if (!parse_pid(req, pids, &pid))
		return;
	json_t *body = http_body_json(req, true);
	if (!body)
		return;
	static const char *const keys[] = {"data", "yield_ms", "close", NULL};
	json_t *d = json_object_get(body, "data");
	struct core_err e = {0};
	if (!jf_only_keys(&e, body, "body", keys) || !jf_int(&e, body, "yield_ms", 3600000, &yield) ||
	    !jf_bool(&e, body, "close", &close)) {
		fail(req, &e);
		goto out;
	}
	if (d && !json_is_null(d) && !json_is_string(d)) {
		http_error(req, 400, "invalid_request", "data must be a string");
		goto out;
	}
	/* write, then collect what it printed for yield_ms (both in order on
	 * one connection: the agent answers the write first); the write's own
	 * ack is not waited for: a failure (the process ended) shows in the
	 * wait's answer */
	const char *data = d && json_is_string(d) ? json_string_value(d) : "";
	size_t len = d && json_is_string(d) ? json_string_length(d) : 0;
	if (!core_stdin(b, pid, data, len, close, ignore, NULL, &e)) {
		fail(req, &e);
		goto out;
	}
	struct pend *p = pend_new(req, b, P_STDIN);
	if (!p) {
		http_error(req, 500, "internal", "out of memory");
		goto out;
	}
	started(p, core_attach(b, pid, false, yield ? yield : 1, &exec_cbs, p, &e), &e);
out:
	json_decref(body);
}

/* ---- simple operations ------------------------------------------------------------ */

static void on_done(void *arg, json_t *result, const char *data, size_t len,
		    const struct core_err *e)
{
	struct pend *p = arg;
	struct evhttp_request *req = p->req;
	pend_done(p);
	if (e) {
		fail(req, e);
		pend_free(p);
		return;
	}
	switch (p->kind) {
	case P_READ:
		http_raw(req, 200, "application/octet-stream", data, len);
		break;
	case P_PACK:
		http_raw(req, 200, "application/x-tar", data, len);
		break;
	case P_NOCONTENT:
		http_no_content(req);
		break;
	case P_STAT: {
		json_t *en = json_object_get(result, "entry");
		http_json(req, 200, json_incref(en ? en : result));
		break;
	}
	default:
		json_object_del(result, "id");
		http_json(req, 200, json_incref(result));
		break;
	}
	pend_free(p);
}

/* A pend for a simple op; NULL after answering 500. */
static struct pend *simple_pend(struct evhttp_request *req, struct box *b, enum pend_kind k)
{
	struct pend *p = pend_new(req, b, k);
	if (!p)
		http_error(req, 500, "internal", "out of memory");
	return p;
}

#define SIMPLE(kind, call)                                                                   \
	do {                                                                                  \
		struct pend *p_ = simple_pend(req, b, kind);                                  \
		if (p_) {                                                                     \
			struct core_err e_ = {0};                                             \
			void *arg = p_;                                                       \
			core_done_cb cb = on_done;                                            \
			struct core_err *e = &e_;                                             \
			started(p_, call, e);                                                 \
		}                                                                             \
	} while (0)

static void h_signal(struct evhttp_request *req, struct box *b, const char *pids)
{
	int64_t pid;
	if (!parse_pid(req, pids, &pid))
		return;
	char *sig = http_query(req, "signal");
	SIMPLE(P_NOCONTENT, core_signal(b, pid, sig ? sig : "KILL", cb, arg, e));
	free(sig);
}

/* ---- files -------------------------------------------------------------------- */

static char *need_path(struct evhttp_request *req)
{
	/* a NUL would end the decoded C string early: refuse, not truncate */
	const struct evhttp_uri *u = evhttp_request_get_evhttp_uri(req);
	const char *q = u ? evhttp_uri_get_query(u) : NULL;
	if (q && strcasestr(q, "%00")) {
		http_error(req, 400, "invalid_path", "a path must not contain NUL");
		return NULL;
	}
	char *p = http_query(req, "path");
	if (!p || !*p) {
		free(p);
		http_error(req, 400, "invalid_path", "the path query parameter is required");
		return NULL;
	}
	json_t *utf8 = json_string(p); /* the agent's request is JSON */
	if (!utf8) {
		free(p);
		http_error(req, 400, "invalid_path", "a path must be UTF-8");
		return NULL;
	}
	json_decref(utf8);
	return p;
}

static void h_files(struct evhttp_request *req, struct box *b, const char *sub)
{
	enum evhttp_cmd_type m = evhttp_request_get_command(req);
	bool known = !sub || !strcmp(sub, "mkdir") || !strcmp(sub, "list") || !strcmp(sub, "stat");
	if (!known) {
		http_error(req, 404, "not_found", "no such route");
		return;
	}
	char *path = need_path(req);
	if (!path)
		return;
	if (!sub && m == EVHTTP_REQ_GET) {
		SIMPLE(P_READ, core_read(b, path, NULL, conf->max_file, cb, arg, e));
	} else if (!sub && m == EVHTTP_REQ_PUT) {
		size_t len;
		const char *data = http_body(req, &len);
		SIMPLE(P_NOCONTENT, core_write(b, path, data, len, NULL, cb, arg, e));
	} else if (!sub && m == EVHTTP_REQ_DELETE) {
		char *rec = http_query(req, "recursive");
		bool r = rec && (!strcmp(rec, "true") || !strcmp(rec, "1"));
		free(rec);
		SIMPLE(P_NOCONTENT, core_remove(b, path, NULL, r, cb, arg, e));
	} else if (sub && !strcmp(sub, "mkdir") && m == EVHTTP_REQ_POST) {
		SIMPLE(P_NOCONTENT, core_mkdir(b, path, NULL, true, true, cb, arg, e));
	} else if (sub && !strcmp(sub, "list") && m == EVHTTP_REQ_GET) {
		char *d = http_query(req, "depth");
		char *end = NULL;
		long depth = d ? strtol(d, &end, 10) : 1;
		if (d && (*end || depth < 1 || depth > 64))
			http_error(req, 400, "invalid_request", "depth must be 1 to 64");
		else
			SIMPLE(P_LIST, core_list(b, path, NULL, (int)depth, cb, arg, e));
		free(d);
	} else if (sub && !strcmp(sub, "stat") && m == EVHTTP_REQ_GET) {
		SIMPLE(P_STAT, core_stat(b, path, NULL, cb, arg, e));
	} else {
		http_error(req, 405, "method_not_allowed", "no such route");
	}
	free(path);
}

static void h_patch(struct evhttp_request *req, struct box *b)
{
	json_t *body = http_body_json(req, false);
	if (!body)
		return;
	static const char *const keys[] = {"patch", NULL};
	json_t *pt = json_object_get(body, "patch");
	struct core_err ke = {0};
	if (!jf_only_keys(&ke, body, "body", keys))
		fail(req, &ke);
	else if (!json_is_string(pt) || !json_string_length(pt))
		http_error(req, 400, "invalid_request", "patch must be a non-empty string");
	else
		SIMPLE(P_PLAIN,
		       core_patch(b, json_string_value(pt), json_string_length(pt), cb, arg, e));
	json_decref(body);
}

static void h_image(struct evhttp_request *req, struct box *b)
{
	char *path = need_path(req);
	if (!path)
		return;
	SIMPLE(P_PLAIN, core_image(b, path, cb, arg, e));
	free(path);
}

static void h_archive(struct evhttp_request *req, struct box *b)
{
	if (evhttp_request_get_command(req) == EVHTTP_REQ_GET) {
		SIMPLE(P_PACK, core_pack(b, cb, arg, e));
		return;
	}
	size_t len;
	const char *tar = http_body(req, &len);
	SIMPLE(P_NOCONTENT, core_unpack(b, tar, len, cb, arg, e));
}

/* ---- sandboxes -------------------------------------------------------------- */

static void on_created(void *arg, struct box *b, const struct core_err *e)
{
	struct pend *p = arg;
	pend_done(p);
	if (b)
		http_json(p->req, 201, box_json(b));
	else
		fail(p->req, e);
	pend_free(p);
}

static void h_create(struct evhttp_request *req)
{
	json_t *body = http_body_json(req, true);
	if (!body)
		return;
	/* "users": a computer with root and user (as E2B's sandboxes), a
	 * door's option rather than the core's body */
	struct core_create_opts o = {0};
	struct core_err e = {0};
	json_t *u = json_object_get(body, "users");
	if (u && !json_is_boolean(u)) {
		http_error(req, 400, "invalid_request", "users must be true or false");
		json_decref(body);
		return;
	}
	o.users = json_is_true(u);
	json_object_del(body, "users");
	struct pend *p = pend_new(req, NULL, P_CREATE);
	if (!p)
		http_error(req, 500, "internal", "out of memory");
	else
		started(p, core_create(body, &o, on_created, p, &e), &e);
	json_decref(body);
}

struct list_ctx {
	json_t *out, *filter;
};

static void list_one(struct box *b, void *arg)
{
	struct list_ctx *c = arg;
	const char *k;
	json_t *v;
	json_object_foreach(c->filter, k, v)
	{
		json_t *have = json_object_get(box_metadata(b), k);
		if (!have || !json_equal(have, v))
			return;
	}
	json_array_append_new(c->out, box_json(b));
}

static void h_list(struct evhttp_request *req)
{
	struct list_ctx c = {json_array(), http_query_prefixed(req, "metadata.")};
	box_each(list_one, &c);
	json_decref(c.filter);
	http_json(req, 200, json_pack("{s:o}", "sandboxes", c.out));
}

/* The gateway's decisions for this sandbox, JSON lines (written by the
 * daemon's gateway, not by the sandbox). */
static void h_netlog(struct evhttp_request *req, struct box *b)
{
	char path[128];
	snprintf(path, sizeof path, "%s/net.log", box_dir(b));
	FILE *f = fopen(path, "re");
	char *buf = NULL;
	size_t len = 0;
	FILE *m = open_memstream(&buf, &len);
	if (f && m) {
		char chunk[65536];
		size_t got;
		while ((got = fread(chunk, 1, sizeof chunk, f)) > 0 && len < (64u << 20))
			fwrite(chunk, 1, got, m);
	}
	if (m)
		fclose(m);
	if (f)
		fclose(f);
	http_raw(req, 200, "application/x-ndjson", buf ? buf : "", buf ? len : 0);
	free(buf);
}

static void h_ps(struct evhttp_request *req, struct box *b)
{
	SIMPLE(P_PS, core_ps(b, cb, arg, e));
}

/* ---- routing ------------------------------------------------------------------- */

uint64_t api_body_limit(enum evhttp_cmd_type m, const char *path)
{
	/* PUT /v1/sandboxes/ID/files and /archive take raw bodies; every
	 * other route a JSON one (or none) */
	char buf[512];
	snprintf(buf, sizeof buf, "%s", path);
	char *seg[5], *save = NULL;
	int n = 0;
	for (char *s = strtok_r(buf, "/", &save); s && n < 5; s = strtok_r(NULL, "/", &save))
		seg[n++] = s;
	if (m == EVHTTP_REQ_PUT && n == 4 && !strcmp(seg[0], "v1") && !strcmp(seg[1], "sandboxes")) {
		if (!strcmp(seg[3], "files"))
			return conf->max_file;
		if (!strcmp(seg[3], "archive"))
			return HTTP_MAX_BODY;
	}
	if (m == EVHTTP_REQ_POST && n == 3 && !strcmp(seg[0], "v1") &&
	    (!strcmp(seg[1], "images") || !strcmp(seg[1], "snapshots")) && !strcmp(seg[2], "import"))
		return HTTP_MAX_BODY;
	return HTTP_MAX_JSON_BODY;
}

void api_route(struct evhttp_request *req)
{
	const struct evhttp_uri *u = evhttp_request_get_evhttp_uri(req);
	const char *path = u ? evhttp_uri_get_path(u) : NULL;
	enum evhttp_cmd_type m = evhttp_request_get_command(req);
	metrics_request();
	box_activity();
	if (!path) {
		http_error(req, 400, "invalid_request", "bad request URI");
		return;
	}
	char buf[512];
	if (strlen(path) >= sizeof buf) {
		http_error(req, 404, "not_found", "no such route");
		return;
	}
	snprintf(buf, sizeof buf, "%s", path);
	char *seg[8];
	int n = 0;
	for (char *s = strtok(buf, "/"); s && n < 8; s = strtok(NULL, "/"))
		seg[n++] = s;
	if (n == 1 && (!strcmp(seg[0], "healthz") || !strcmp(seg[0], "metrics")) &&
	    m != EVHTTP_REQ_GET && m != EVHTTP_REQ_HEAD) {
		http_not_allowed(req);
		return;
	}
	if (n == 1 && !strcmp(seg[0], "healthz")) {
		http_json(req, 200, json_pack("{s:b,s:I}", "ok", 1, "sandboxes",
					      (json_int_t)box_count()));
		return;
	}
	if (n == 1 && !strcmp(seg[0], "metrics")) {
		char *t = metrics_text();
		http_raw(req, 200, "text/plain; version=0.0.4", t, strlen(t));
		free(t);
		return;
	}
	if (n >= 2 && !strcmp(seg[0], "v1") && !strcmp(seg[1], "images")) {
		api_images_route(req, conf->base, seg, n);
		return;
	}
	if (n >= 2 && !strcmp(seg[0], "v1") && !strcmp(seg[1], "snapshots")) {
		api_snap_route(req, seg, n);
		return;
	}
	if (n >= 2 && !strcmp(seg[0], "v1") && !strcmp(seg[1], "sessions")) {
		session_route(req, seg, n);
		return;
	}
	if (n < 2 || strcmp(seg[0], "v1") || strcmp(seg[1], "sandboxes")) {
		http_error(req, 404, "not_found", "no such route: %.200s", path);
		return;
	}
	if (n == 2) {
		http_collection(req, h_create, h_list);
		return;
	}
	struct box *b = box_find(seg[2]);
	if (!b) {
		http_error(req, 404, "not_found", "no sandbox %.64s", seg[2]);
		return;
	}
	box_touch(b);
	if (n == 3) {
		if (m == EVHTTP_REQ_GET) {
			http_json(req, 200, box_json(b));
		} else if (m == EVHTTP_REQ_DELETE) {
			core_delete(b);
			http_no_content(req);
		} else {
			http_not_allowed(req);
		}
		return;
	}
	const char *what = seg[3];
	if (api_snap_box_route(req, b, what, n))
		return;
	if (!strcmp(what, "exec") && n == 4)
		m == EVHTTP_REQ_POST ? h_exec(req, b) : http_not_allowed(req);
	else if (!strcmp(what, "processes") && n == 4)
		m == EVHTTP_REQ_GET ? h_ps(req, b) : http_not_allowed(req);
	else if (!strcmp(what, "processes") && n == 6 && !strcmp(seg[5], "stdin"))
		m == EVHTTP_REQ_POST ? h_stdin(req, b, seg[4]) : http_not_allowed(req);
	else if (!strcmp(what, "processes") && n == 6 && !strcmp(seg[5], "attach"))
		attach_route(req, b, seg[4]);
	else if (!strcmp(what, "processes") && n == 5)
		m == EVHTTP_REQ_DELETE ? h_signal(req, b, seg[4]) : http_not_allowed(req);
	else if (!strcmp(what, "files") && (n == 4 || n == 5))
		h_files(req, b, n == 5 ? seg[4] : NULL);
	else if (!strcmp(what, "patch") && n == 4)
		m == EVHTTP_REQ_POST ? h_patch(req, b) : http_not_allowed(req);
	else if (!strcmp(what, "image") && n == 4)
		m == EVHTTP_REQ_GET ? h_image(req, b) : http_not_allowed(req);
	else if (!strcmp(what, "netlog") && n == 4)
		m == EVHTTP_REQ_GET ? h_netlog(req, b) : http_not_allowed(req);
	else if ((!strcmp(what, "pause") || !strcmp(what, "resume")) && n == 4)
		api_life_route(req, b, what);
	else if (!strcmp(what, "archive") && n == 4)
		(m == EVHTTP_REQ_GET || m == EVHTTP_REQ_PUT) ? h_archive(req, b) : http_not_allowed(req);
	else
		http_error(req, 404, "not_found", "no such route: %.200s", path);
}
