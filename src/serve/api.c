/* The API's routes (docs/API.md): validate the request, call the
 * sandbox's agent, shape the answer. Requests that wait for an agent keep
 * a `struct pend` until the reply comes or the client goes away. */
#define _GNU_SOURCE
#include "api.h"

#include "archive.h"
#include "gate/addr.h"
#include "gate/policy.h"
#include "box.h"
#include "clone.h"
#include "http.h"
#include "image.h"
#include "job.h"
#include "manifest.h"
#include "metrics.h"
#include "../base/utf8.h"
#include "../base/util.h"
#include "../proto/entries.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define WORKSPACE "/workspace"
#define IMAGE_MAX (10u << 20)

static const struct api_config *conf;

void api_init(const struct api_config *c)
{
	conf = c;
}

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- small helpers -------------------------------------------------------- */

/* Process output as a JSON string: UTF-8, invalid bytes replaced. */
static json_t *text(const char *p, size_t n)
{
	char *out = malloc(n * 3 + 1);
	size_t o = 0;
	if (!out)
		return json_string("");
	for (size_t i = 0; i < n;) {
		unsigned char c = (unsigned char)p[i];
		size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
		bool ok = len && i + len <= n && !(c == 0);
		for (size_t k = 1; ok && k < len; k++)
			ok = ((unsigned char)p[i + k] >> 6) == 2;
		if (ok && len == 2 && c < 0xc2)
			ok = false; /* overlong */
		if (ok && len == 3) {
			unsigned cp = ((c & 15u) << 12) | (((unsigned char)p[i + 1] & 63u) << 6) |
				      ((unsigned char)p[i + 2] & 63u);
			ok = cp >= 0x800 && (cp < 0xd800 || cp > 0xdfff);
		}
		if (ok && len == 4) {
			unsigned cp = ((c & 7u) << 18) | (((unsigned char)p[i + 1] & 63u) << 12) |
				      (((unsigned char)p[i + 2] & 63u) << 6) |
				      ((unsigned char)p[i + 3] & 63u);
			ok = cp >= 0x10000 && cp <= 0x10ffff;
		}
		if (c == 0) { /* NUL is valid UTF-8 but jansson strings stop there: keep it escaped */
			memcpy(out + o, "\xef\xbf\xbd", 3);
			o += 3;
			i++;
			continue;
		}
		if (ok) {
			memcpy(out + o, p + i, len);
			o += len;
			i += len;
		} else {
			memcpy(out + o, "\xef\xbf\xbd", 3);
			o += 3;
			i++;
		}
	}
	json_t *s = json_stringn(out, o);
	free(out);
	return s ? s : json_string("");
}

/* Unknown keys are errors naming the key. */
static bool only_keys(struct evhttp_request *req, json_t *o, const char *what,
		      const char *const *keys)
{
	const char *k;
	json_t *v;
	json_object_foreach(o, k, v)
	{
		bool known = false;
		for (size_t i = 0; keys[i] && !known; i++)
			known = !strcmp(k, keys[i]);
		if (!known) {
			http_error(req, 400, "invalid_request", "%s: unknown field \"%.64s\"", what, k);
			return false;
		}
	}
	return true;
}

/* An optional non-negative integer field. */
static bool get_int(struct evhttp_request *req, json_t *o, const char *key, int64_t max,
		    int64_t *out)
{
	json_t *v = json_object_get(o, key);
	if (!v || json_is_null(v))
		return true;
	if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > max) {
		http_error(req, 400, "invalid_request", "%s must be an integer from 0 to %lld", key,
			   (long long)max);
		return false;
	}
	*out = json_integer_value(v);
	return true;
}

static bool get_bool(struct evhttp_request *req, json_t *o, const char *key, bool *out)
{
	json_t *v = json_object_get(o, key);
	if (!v || json_is_null(v))
		return true;
	if (!json_is_boolean(v)) {
		http_error(req, 400, "invalid_request", "%s must be true or false", key);
		return false;
	}
	*out = json_is_true(v);
	return true;
}

/* An object of strings (env, metadata); NULL key = allowed missing. */
static bool string_map(struct evhttp_request *req, json_t *v, const char *what, bool env)
{
	if (!v || json_is_null(v))
		return true;
	if (!json_is_object(v)) {
		http_error(req, 400, "invalid_request", "%s must be an object of strings", what);
		return false;
	}
	const char *k;
	json_t *x;
	json_object_foreach(v, k, x)
	{
		if (!json_is_string(x) || strlen(json_string_value(x)) != json_string_length(x)) {
			http_error(req, 400, "invalid_request", "%s.%.64s must be a string", what, k);
			return false;
		}
		if (env && (!*k || strchr(k, '=') || strlen(k) > 256)) {
			http_error(req, 400, "invalid_request", "%s: bad variable name \"%.64s\"",
				   what, k);
			return false;
		}
	}
	return true;
}

/* ---- pending requests ----------------------------------------------------- */

enum pend_kind { P_CREATE, P_EXEC, P_WAIT, P_STDIN, P_PLAIN, P_NOCONTENT, P_READ,
		 P_IMAGE, P_PACK, P_LIST, P_STAT, P_PS };

struct pend {
	struct evhttp_request *req;
	struct box *b;
	enum pend_kind kind;
	bool sse;
	bool streaming;  /* SSE headers sent */
	bool yield;      /* exec answers "running" at the yield */
	int64_t yield_ms;
	int64_t pid;
	int64_t started; /* for the exec latency histogram */
	json_t *extra;   /* P_CREATE: the box's answer */
	struct cjob *cj; /* P_CREATE without a box yet: the manifest's job */
	struct box *spawning;     /* P_CREATE: the sandbox being set up */
	struct moat_buf entries;  /* P_CREATE: the manifest, unpacked once it runs */
	struct event *hangup; /* the client closed while we wait */
};

/* A create waiting for its manifest (a git clone) in a forked job. */
#define MAX_MANIFEST_JOBS 4
static int njobs;
struct cjob {
	struct box_spec s; /* network and image owned */
	json_t *env, *body;
	struct job *job;   /* NULL once ended */
	char tmp[32];      /* the job's seed directory (the clones): the workspace to be */
	json_t *repos;     /* the repositories cloned into it (relative paths) */
};

static void pend_free(struct pend *p)
{
	if (p->spawning) /* its client left (or the daemon stops) mid-create */
		box_create_abort(p->spawning);
	moat_buf_free(&p->entries);
	if (p->hangup)
		event_free(p->hangup);
	json_decref(p->extra);
	if (p->cj) {
		njobs--;
		job_cancel(p->cj->job);
		if (p->cj->tmp[0])
			moat_rm_tree(p->cj->tmp);
		json_decref(p->cj->s.network);
		free(p->cj->s.image);
		json_decref(p->cj->env);
		json_decref(p->cj->body);
		json_decref(p->cj->repos);
		free(p->cj);
	}
	free(p);
}

/* An exec bound to its request ends with it, like a command whose
 * terminal went away; its record is not kept. Cancelling the pending call
 * is not enough once the process is known: the agent may have answered
 * that call already (the answer is crossing the cancel), so the process
 * is also killed by its id. */
static void abort_exec(struct pend *p)
{
	box_abort(p->b, p);
	if (p->kind != P_WAIT || p->pid <= 0)
		return;
	json_t *op = json_pack("{s:s,s:I,s:s,s:b}", "op", "signal", "process_id",
			       (json_int_t)p->pid, "signal", "KILL", "forget", 1);
	if (op)
		box_call(p->b, op, NULL, 0, NULL, NULL);
	json_decref(op);
}

static void on_client_gone(struct evhttp_connection *c, void *arg)
{
	struct pend *p = arg;
	if (p->b && (p->kind == P_WAIT || p->kind == P_EXEC) && !p->yield) {
		abort_exec(p);
	} else if (p->b && p->kind == P_CREATE) {
		/* nobody will learn its id: a create ends with its request */
		box_cancel(p->b, p);
		box_delete(p->b);
		p->b = NULL;
	} else if (p->b) {
		box_cancel(p->b, p);
	}
	/* libevent found the connection broken itself (a write of a streamed
	 * reply failed): it hands the request back to us, detached, to end;
	 * ending a detached request frees it */
	struct evhttp_request *req = p->req;
	bool detached = !evhttp_request_get_connection(req);
	bool streaming = p->streaming;
	pend_free(p);
	if (detached && streaming)
		evhttp_send_reply_end(req);
	else if (detached)
		evhttp_send_reply(req, 500, "Client gone", NULL);
}

/* evhttp does not read a connection whose request is being answered, so
 * it would not see the client leave: watch for the peer's close ourselves
 * (EV_CLOSED) and free the connection, which runs on_client_gone. */
static void pend_done(struct pend *p);

static void on_hangup(evutil_socket_t fd, short what, void *arg)
{
	struct pend *p = arg;
	if (p->streaming) {
		/* a started chunked reply: end it (the write fails and evhttp
		 * frees the request and the connection itself) */
		struct evhttp_request *req = p->req;
		if (p->b)
			abort_exec(p);
		pend_done(p);
		pend_free(p);
		evhttp_send_reply_end(req);
		return;
	}
	struct evhttp_connection *c = evhttp_request_get_connection(p->req);
	if (c)
		evhttp_connection_free(c);
}

static struct pend *pend_new(struct evhttp_request *req, struct box *b, enum pend_kind k)
{
	struct pend *p = calloc(1, sizeof *p);
	if (!p)
		return NULL;
	p->req = req;
	p->b = b;
	p->kind = k;
	p->started = now_ms();
	struct evhttp_connection *c = evhttp_request_get_connection(req);
	http_set_closecb(c, on_client_gone, p);
	struct bufferevent *bev = c ? evhttp_connection_get_bufferevent(c) : NULL;
	if (bev && conf->base) {
		p->hangup = event_new(conf->base, bufferevent_getfd(bev), EV_CLOSED, on_hangup, p);
		if (p->hangup && event_add(p->hangup, NULL) < 0) {
			event_free(p->hangup);
			p->hangup = NULL;
		}
	}
	return p;
}

/* Detach from the connection before answering (its close must not free
 * us twice). */
static void pend_done(struct pend *p)
{
	struct evhttp_connection *c = evhttp_request_get_connection(p->req);
	if (c)
		http_set_closecb(c, NULL, NULL);
	if (p->hangup) {
		event_free(p->hangup);
		p->hangup = NULL;
	}
}

static void on_reply(void *arg, json_t *reply, const char *data, size_t len);

/* Send req (stolen) to the agent for p; on failure answer and free p. */
static void call(struct pend *p, json_t *req, const void *data, size_t len)
{
	int rc = box_call(p->b, req, data, len, on_reply, p);
	json_decref(req);
	if (rc < 0) {
		pend_done(p);
		if (p->streaming) {
			evhttp_send_reply_end(p->req);
		} else {
			http_error(p->req, 409, "conflict", "sandbox %s is not running",
				   box_id(p->b));
		}
		pend_free(p);
	}
}

static void wait_for(struct pend *p, int64_t timeout, const char *until)
{
	call(p, json_pack("{s:s,s:I,s:I,s:s}", "op", "wait", "process_id", (json_int_t)p->pid,
			  "timeout_ms", (json_int_t)timeout, "until", until),
	     NULL, 0);
}

static json_t *process_answer(json_t *reply, const char *data, size_t len, bool final)
{
	size_t ol = (size_t)json_integer_value(json_object_get(reply, "stdout_len"));
	size_t el = (size_t)json_integer_value(json_object_get(reply, "stderr_len"));
	if (ol > len || el > len - ol) /* the agent is not trusted */
		ol = el = 0;
	bool running = json_is_true(json_object_get(reply, "running"));
	json_t *o = json_object();
	if (running) {
		json_object_set_new(o, "running", json_true());
		json_object_set(o, "process_id", json_object_get(reply, "process_id"));
	} else {
		if (!final) {
			json_object_set_new(o, "running", json_false());
			json_object_set(o, "process_id", json_object_get(reply, "process_id"));
		}
		const char *keys[] = {"exit_code", "signal", "duration_ms", "timed_out"};
		for (size_t i = 0; i < 4; i++) {
			json_t *v = json_object_get(reply, keys[i]);
			json_object_set_new(o, keys[i], v ? json_incref(v) : json_integer(0));
		}
	}
	json_object_set_new(o, "stdout", text(data, ol));
	json_object_set_new(o, "stderr", text(data + ol, el));
	json_object_set_new(o, "truncated",
			    json_boolean(json_is_true(json_object_get(reply, "truncated"))));
	return o;
}

static void sse_event(struct evhttp_request *req, const char *event, json_t *data)
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

static void sse_output(struct pend *p, json_t *reply, const char *data, size_t len)
{
	size_t ol = (size_t)json_integer_value(json_object_get(reply, "stdout_len"));
	size_t el = (size_t)json_integer_value(json_object_get(reply, "stderr_len"));
	if (ol > len || el > len - ol)
		ol = el = 0;
	if (ol)
		sse_event(p->req, "stdout", json_pack("{s:o}", "data", text(data, ol)));
	if (el)
		sse_event(p->req, "stderr", json_pack("{s:o}", "data", text(data + ol, el)));
}

static void on_reply(void *arg, json_t *reply, const char *data, size_t len)
{
	struct pend *p = arg;
	struct evhttp_request *req = p->req;
	if (!data) /* a reply without data: data + offset stays defined */
		data = "";
	if (!reply) {
		pend_done(p);
		if (p->streaming) {
			sse_event(req, "error",
				  json_pack("{s:{s:s,s:s}}", "error", "code", "conflict", "message",
					    "the sandbox stopped"));
			evhttp_send_reply_end(req);
		} else {
			http_error(req, 409, "conflict", "sandbox %s stopped", box_id(p->b));
		}
		pend_free(p);
		return;
	}
	json_t *err = json_object_get(reply, "error");
	if (err) {
		const char *code = json_string_value(json_object_get(err, "code"));
		const char *msg = json_string_value(json_object_get(err, "message"));
		pend_done(p);
		if (p->kind == P_CREATE) {
			struct box *b = p->b;
			/* a protected name among the entries: 403, as for an archive */
			bool fb = !strcmp(code ? code : "", "forbidden");
			http_error(req, fb ? 403 : !strcmp(code ? code : "", "too_large") ? 413 : 400,
				   fb ? "forbidden" : "invalid_request", "manifest: %s",
				   msg ? msg : "failed");
			box_delete(b);
		} else if (p->streaming) {
			sse_event(req, "error",
				  json_pack("{s:{s:s,s:s}}", "error", "code", code ? code : "internal",
					    "message", msg ? msg : "error"));
			evhttp_send_reply_end(req);
		} else {
			http_error_code(req, code ? code : "internal", msg ? msg : "agent error");
		}
		pend_free(p);
		return;
	}
	switch (p->kind) {
	case P_EXEC: /* started, and (asked in the same message) waited for */
		p->pid = json_integer_value(json_object_get(reply, "process_id"));
		p->kind = P_WAIT;
		metrics_exec_started();
		if (p->sse) {
			struct evkeyvalq *h = evhttp_request_get_output_headers(req);
			evhttp_add_header(h, "Content-Type", "text/event-stream");
			evhttp_add_header(h, "Cache-Control", "no-store");
			evhttp_send_reply_start(req, 200, "OK");
			p->streaming = true;
		}
		if (!json_object_get(reply, "running")) {
			/* an agent that only started it: wait in a second message */
			if (p->sse)
				wait_for(p, 0, "output");
			else
				wait_for(p, p->yield ? (p->yield_ms ? p->yield_ms : 1) : 0, "exit");
			return;
		}
		/* fall through */
	case P_WAIT:
	case P_STDIN: {
		bool running = json_is_true(json_object_get(reply, "running"));
		if (p->streaming) {
			sse_output(p, reply, data, len);
			if (running) {
				wait_for(p, 0, "output");
				return;
			}
			json_t *fin = process_answer(reply, "", 0, true);
			json_object_del(fin, "stdout");
			json_object_del(fin, "stderr");
			sse_event(req, "exit", fin);
			pend_done(p);
			evhttp_send_reply_end(req);
			metrics_exec_done(now_ms() - p->started);
			pend_free(p);
			return;
		}
		pend_done(p);
		if (!running && p->kind == P_WAIT)
			metrics_exec_done(now_ms() - p->started);
		http_json(req, 200, process_answer(reply, data, len, p->kind == P_WAIT && !p->yield));
		pend_free(p);
		return;
	}
	case P_CREATE:
		pend_done(p);
		http_json(req, 201, json_incref(p->extra));
		pend_free(p);
		return;
	case P_READ:
		pend_done(p);
		metrics_bytes(len, 0);
		http_raw(req, 200, "application/octet-stream", data, len);
		pend_free(p);
		return;
	case P_IMAGE: {
		pend_done(p);
		const char *mime;
		uint32_t w, h;
		if (moat_image_sniff(data, len, &mime, &w, &h) < 0) {
			http_error(req, 415, "unsupported_media_type",
				   "not a PNG, JPEG, GIF or WebP image");
		} else {
			char *b64 = moat_base64(data, len);
			if (!b64)
				http_error(req, 500, "internal", "out of memory");
			else
				http_json(req, 200, json_pack("{s:s,s:I,s:I,s:s%}", "mime", mime,
							      "width", (json_int_t)w, "height",
							      (json_int_t)h, "data", b64,
							      strlen(b64)));
			free(b64);
		}
		pend_free(p);
		return;
	}
	case P_PACK: {
		pend_done(p);
		struct moat_buf tar = {0};
		struct moat_err e = {0};
		if (moat_entries_to_archive(data, len, &tar, &e) < 0)
			http_error(req, 500, "internal", "archive: %s", e.msg);
		else
			http_raw(req, 200, "application/x-tar", tar.p, tar.len);
		metrics_bytes(tar.len, 0);
		moat_buf_free(&tar);
		pend_free(p);
		return;
	}
	case P_LIST:
	case P_STAT:
	case P_PS:
	case P_PLAIN: {
		pend_done(p);
		json_object_del(reply, "id");
		json_t *out = p->kind == P_STAT ? json_object_get(reply, "entry") : reply;
		http_json(req, 200, json_incref(out ? out : reply));
		pend_free(p);
		return;
	}
	case P_NOCONTENT:
		pend_done(p);
		http_no_content(req);
		pend_free(p);
		return;
	}
}

/* Start an agent call for req on sandbox b. */
static void simple(struct evhttp_request *req, struct box *b, enum pend_kind k, json_t *op,
		   const void *data, size_t len)
{
	if (!op) { /* a parameter that is no JSON string (not UTF-8) */
		http_error(req, 400, "invalid_request", "a query parameter is not UTF-8");
		return;
	}
	struct pend *p = pend_new(req, b, k);
	if (!p) {
		json_decref(op);
		http_error(req, 500, "internal", "out of memory");
		return;
	}
	call(p, op, data, len);
}

/* ---- sandboxes -------------------------------------------------------------- */

static bool parse_size_field(struct evhttp_request *req, json_t *v, const char *what,
			     uint64_t *out)
{
	if (!v || json_is_null(v))
		return true;
	struct moat_err e = {0};
	if (json_is_integer(v) && json_integer_value(v) > 0) {
		*out = (uint64_t)json_integer_value(v);
		return true;
	}
	if (json_is_string(v) && moat_parse_size(json_string_value(v), out, &e) == 0)
		return true;
	http_error(req, 400, "invalid_request", "%s: expected a size like \"512M\" or bytes%s%s",
		   what, e.msg[0] ? ": " : "", e.msg);
	return false;
}

/* "quotas": {"inotify_instances": 4, ...}: each may lower, never raise,
 * the operator's ceiling (moat serve --quota). */
static bool parse_quotas(struct evhttp_request *req, json_t *q, struct box_spec *s)
{
	if (!q || json_is_null(q))
		return true;
	if (!json_is_object(q)) {
		http_error(req, 400, "invalid_request", "limits.quotas must be an object");
		return false;
	}
	const char *k;
	json_t *v;
	json_object_foreach(q, k, v) {
		int i = moat_quota_find(k);
		if (i < 0) {
			http_error(req, 400, "invalid_request", "limits.quotas.%.64s: unknown quota", k);
			return false;
		}
		struct moat_err e = {0};
		if (!json_is_integer(v) || moat_quota_check(i, json_integer_value(v), &e) < 0) {
			http_error(req, 400, "invalid_request",
				   "limits.quotas.%s: must be an integer from 0 to %lld", k,
				   (long long)moat_quota_info[i].max);
			return false;
		}
		if (json_integer_value(v) > conf->quotas[i]) {
			http_error(req, 400, "invalid_request",
				   "limits.quotas.%s: at most %lld (the operator's limit)", k,
				   (long long)conf->quotas[i]);
			return false;
		}
		s->quotas[i] = json_integer_value(v);
		s->quota_set |= 1u << i;
	}
	return true;
}

static bool parse_limits(struct evhttp_request *req, json_t *l, struct box_spec *s)
{
	if (!l || json_is_null(l))
		return true;
	static const char *const keys[] = {"memory", "pids", "cpus", "disk", "quotas", NULL};
	if (!json_is_object(l)) {
		http_error(req, 400, "invalid_request", "limits must be an object");
		return false;
	}
	if (!only_keys(req, l, "limits", keys))
		return false;
	if (!parse_size_field(req, json_object_get(l, "memory"), "limits.memory", &s->memory) ||
	    !parse_size_field(req, json_object_get(l, "disk"), "limits.disk", &s->disk))
		return false;
	if (s->memory && s->memory < (16u << 20)) {
		http_error(req, 400, "invalid_request", "limits.memory: at least 16M");
		return false;
	}
	int64_t pids = 0;
	if (!get_int(req, l, "pids", 1 << 22, &pids))
		return false;
	s->pids = (uint64_t)pids;
	json_t *c = json_object_get(l, "cpus");
	if (c && !json_is_null(c)) {
		double v = json_number_value(c);
		if (!json_is_number(c) || v <= 0 || v > 1024) {
			http_error(req, 400, "invalid_request", "limits.cpus must be a number > 0");
			return false;
		}
		s->cpu_milli = (uint64_t)(v * 1000 + 0.5);
	}
	return parse_quotas(req, json_object_get(l, "quotas"), s);
}

/* "network": {"allow", "deny", "resolve", "secrets": [{"env", "hosts"}]}.
 * Patterns are checked here (400 naming the entry); an allowlist needs the
 * operator's --net-allow (every connection must pass both); a pinned
 * special address (loopback, private...) needs an IP rule of the operator;
 * a secret must be in the daemon's store. On success env gets the proxy
 * variables, the placeholders and the CA variables, and *out the network
 * object with "placeholders". */
static bool parse_network(struct evhttp_request *req, json_t *n, json_t *env, json_t **out)
{
	*out = NULL;
	if (!n || json_is_null(n))
		return true;
	static const char *const keys[] = {"allow", "deny", "resolve", "secrets", NULL};
	if (!json_is_object(n)) {
		http_error(req, 400, "invalid_request", "network must be an object");
		return false;
	}
	if (!only_keys(req, n, "network", keys))
		return false;
	struct gate_policy tmp;
	gate_policy_init(&tmp);
	struct moat_err e = {0};
	bool ok = true;
	const char *const *lk = gate_list_keys;
	for (int k = 0; k < GATE_LISTS && ok; k++) {
		json_t *a = json_object_get(n, lk[k]);
		if (a && !json_is_array(a)) {
			http_error(req, 400, "invalid_request", "network.%s must be an array of strings", lk[k]);
			ok = false;
			break;
		}
		size_t i;
		json_t *v;
		json_array_foreach(a, i, v)
		{
			const char *s = json_string_value(v);
			int rc = !s ? moat_err_set(&e, MOAT_E_USAGE, 0, "must be a string")
				    : gate_policy_add(&tmp, (enum gate_list)k, s, &e);
			if (rc < 0) {
				http_error(req, 400, "invalid_request", "network.%s[%zu]: %s", lk[k], i, e.msg);
				ok = false;
				break;
			}
		}
	}
	json_t *secrets = json_object_get(n, "secrets");
	if (ok && secrets && !json_is_array(secrets)) {
		http_error(req, 400, "invalid_request", "network.secrets must be an array");
		ok = false;
	}
	if (ok && (tmp.n_allow || json_array_size(secrets)) && !conf->net_ceiling) {
		http_error(req, 403, "forbidden",
			   "network: this daemon gives sandboxes no network (start it with --net-allow)");
		ok = false;
	}
	/* a pin to a special address would reach the host's own services */
	for (size_t i = 0; ok && i < tmp.n_pins; i++)
		for (size_t k = 0; ok && k < tmp.pins[i].n; k++) {
			const struct sockaddr *sa = (const struct sockaddr *)&tmp.pins[i].addr[k];
			char why[GATE_WHY_CAP];
			if (gate_addr_special(sa) &&
			    gate_check_addr(conf->net_ceiling, "", tmp.pins[i].port ? tmp.pins[i].port : 1,
					    sa, why) != GATE_ALLOW) {
				char a[GATE_ADDR_FMT_CAP];
				http_error(req, 403, "forbidden",
					   "network.resolve: %s pins %s, a %s address the operator's "
					   "--net-allow does not cover", tmp.pins[i].host,
					   gate_addr_format(sa, false, a), gate_addr_special_kind(sa));
				ok = false;
			}
		}
	gate_policy_free(&tmp);
	if (!ok)
		return false;
	json_t *ph = json_object();
	size_t i;
	json_t *s;
	json_array_foreach(secrets, i, s)
	{
		const char *name = json_string_value(json_object_get(s, "env"));
		json_t *hosts = json_object_get(s, "hosts");
		size_t k;
		json_t *h;
		bool good = json_is_object(s) && json_object_size(s) == 2 && name && *name &&
			    !strchr(name, '=') && json_is_array(hosts) && json_array_size(hosts);
		json_array_foreach(hosts, k, h) good = good && json_is_string(h) && json_string_length(h);
		if (!good) {
			http_error(req, 400, "invalid_request",
				   "network.secrets[%zu] must be {\"env\": NAME, \"hosts\": [HOST, ...]}", i);
			json_decref(ph);
			return false;
		}
		if (!json_object_get(conf->secrets, name)) {
			http_error(req, 403, "forbidden",
				   "network.secrets[%zu]: %s is not in the daemon's secret store", i, name);
			json_decref(ph);
			return false;
		}
		unsigned char r[16];
		char p[64] = "moat_secret_";
		if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r) {
			http_error(req, 500, "internal", "no randomness for a placeholder");
			json_decref(ph);
			return false;
		}
		for (int b = 0; b < 16; b++)
			snprintf(p + 12 + 2 * b, 3, "%02x", r[b]);
		json_object_set_new(ph, name, json_string(p));
		json_object_set_new(env, name, json_string(p));
	}
	for (size_t k = 0; gate_proxy_env[k][0]; k++)
		json_object_set_new(env, gate_proxy_env[k][0], json_string(gate_proxy_env[k][1]));
	if (json_object_size(ph)) {
		/* written into the sandbox by the daemon once it runs */
		for (size_t k = 0; gate_bundle_env[k]; k++)
			json_object_set_new(env, gate_bundle_env[k], json_string("/tmp/.moat/bundle.pem"));
		json_object_set_new(env, "NODE_EXTRA_CA_CERTS", json_string("/tmp/.moat/ca.pem"));
	}
	*out = json_deep_copy(n);
	json_object_set_new(*out, "placeholders", ph);
	return true;
}

static void manifest_error(struct evhttp_request *req, const struct moat_err *e)
{
	int st = e->errnum == EACCES ? 403 : e->errnum == EFBIG ? 413 : 400;
	http_error(req, st, st == 403 ? "forbidden" : st == 413 ? "too_large" : "invalid_request",
		   "%s", e->msg);
}

static void create_done(struct pend *p, struct box *b, const struct moat_err *e);
static void on_box_created(void *arg, struct box *b, const struct moat_err *e);

/* Start the sandbox of a validated create body; entries (the manifest's)
 * are unpacked into it before the answer. */
static void create_finish(struct evhttp_request *req, struct box_spec *s, json_t *env,
			  json_t *body, const struct moat_buf *entries)
{
	s->env = env;
	s->metadata = json_object_get(body, "metadata");
	if (!s->metadata || json_is_null(s->metadata))
		s->metadata = json_object();
	else
		json_incref(s->metadata);
	struct moat_err e = {0};
	struct pend *p = pend_new(req, NULL, P_CREATE);
	if (p && entries->len && !(p->entries.p = malloc(entries->len))) {
		pend_done(p);
		pend_free(p);
		p = NULL;
	}
	if (!p) {
		json_decref(s->metadata);
		s->metadata = NULL;
		http_error(req, 500, "internal", "out of memory");
		return;
	}
	if (entries->len)
		memcpy(p->entries.p, entries->p, entries->len);
	p->entries.len = entries->len;
	/* the child sets itself up while the loop serves other requests */
	struct box *pending = NULL;
	struct box *b = box_create_start(s, on_box_created, p, &pending, &e);
	json_decref(s->metadata);
	s->metadata = NULL;
	if (pending)
		p->spawning = pending;
	else
		create_done(p, b, &e);
}

/* The sandbox of p runs (b), or could not be made (e): answer, or
 * unpack the manifest first. */
static void create_done(struct pend *p, struct box *b, const struct moat_err *e)
{
	struct evhttp_request *req = p->req;
	if (!b) {
		pend_done(p);
		if (e->errnum == EAGAIN)
			http_error(req, 429, "limit_reached", "%s", e->msg);
		else
			http_error(req, 500, "internal", "cannot start the sandbox: %s", e->msg);
		pend_free(p);
		return;
	}
	metrics_created();
	if (!p->entries.len) {
		pend_done(p);
		http_json(req, 201, box_json(b));
		pend_free(p);
		return;
	}
	p->b = b;
	p->extra = box_json(b);
	struct moat_buf ent = p->entries;
	p->entries = (struct moat_buf){0};
	call(p, json_pack("{s:s,s:s,s:b}", "op", "unpack", "path", WORKSPACE, "replace", 0),
	     ent.p, ent.len);
	moat_buf_free(&ent);
}

static void on_box_created(void *arg, struct box *b, const struct moat_err *e)
{
	struct pend *p = arg;
	p->spawning = NULL;
	create_done(p, b, e);
}

/* In the job's child: the manifest's git_repo entries, collected while it
 * is validated and cloned once all of it is. */
static int collect_git(void *arg, const char *where, const char *rel, const char *repo,
		       const char *src, const char *ref, struct moat_err *e)
{
	json_t *o = json_pack("{s:s,s:s,s:s,s:s?,s:s?}", "where", where, "rel", rel, "repo", repo,
			      "src", src, "ref", ref);
	if (!o || json_array_append_new(arg, o) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "%s", where);
	return 0;
}

/* In the job's child: build the manifest and clone its repositories into
 * the seed directory; write {"ok","errnum","msg","env","repos"} (its
 * length first, 4 bytes) and then the entry stream. */
static int manifest_job(int fd, void *arg)
{
	struct cjob *cj = arg;
	struct moat_buf entries = {0};
	struct moat_err e = {0};
	json_t *gits = json_array(), *repos = json_array();
	manifest_set_git(collect_git, gits);
	int rc = manifest_build(json_object_get(cj->body, "manifest"), conf->host_paths, &entries,
				cj->env, &e);
	/* the clone's sandbox gets what the sandbox will: its limits, else the
	 * operator's defaults, and every quota (nproc bounds its processes).
	 * As root, where cgroups are the daemon's to set, fixed bounds for a
	 * clone besides; unprivileged without delegation a cgroup limit
	 * would refuse every clone (docs/SECURITY.md). */
	bool root = geteuid() == 0;
	struct clone_ctx cc = {
		.network = cj->s.network,
		.ceiling = conf->net_allow,
		.memory = cj->s.memory ?: conf->default_memory ?: root ? CLONE_MEMORY : 0,
		.pids = cj->s.pids ?: conf->default_pids ?: root ? CLONE_PIDS : 0,
		.cpu_milli = cj->s.cpu_milli ?: conf->default_cpu_milli,
	};
	for (int q = 0; q < MOAT_QUOTAS; q++)
		cc.quotas[q] = cj->s.quota_set & (1u << q) ? cj->s.quotas[q] : conf->quotas[q];
	size_t i;
	json_t *g;
	json_array_foreach(gits, i, g)
	{
		if (rc < 0)
			break;
		const char *rel = json_string_value(json_object_get(g, "rel"));
		rc = clone_run(&cc, cj->tmp, json_string_value(json_object_get(g, "where")), rel,
			       json_string_value(json_object_get(g, "repo")),
			       json_string_value(json_object_get(g, "src")),
			       json_string_value(json_object_get(g, "ref")), &e);
		json_array_append_new(repos, json_string(rel));
	}
	json_decref(gits);
	moat_utf8_clean(e.msg); /* quotes a client's path or URL, cut at a byte count */
	json_t *res = rc < 0 ? json_pack("{s:b,s:i,s:s}", "ok", 0, "errnum", e.errnum, "msg", e.msg)
			     : json_pack("{s:b,s:O,s:o}", "ok", 1, "env", cj->env, "repos", repos);
	if (rc < 0)
		json_decref(repos);
	char *js = res ? json_dumps(res, JSON_COMPACT) : NULL;
	uint32_t n = js ? (uint32_t)strlen(js) : 0;
	int w = js && moat_write_all(fd, &n, sizeof n) == 0 && moat_write_all(fd, js, n) == 0 &&
			(rc < 0 || moat_write_all(fd, entries.p, entries.len) == 0)
		    ? 0
		    : -1;
	return w;
}

static void on_manifest_job(void *arg, int status, const char *out, size_t len)
{
	struct pend *p = arg;
	struct cjob *cj = p->cj;
	cj->job = NULL; /* ended: nothing left to cancel */
	pend_done(p);
	struct evhttp_request *req = p->req;
	uint32_t n = 0;
	json_t *res = NULL;
	if (status == 0 && len >= sizeof n) {
		memcpy(&n, out, sizeof n);
		if (n <= len - sizeof n)
			res = json_loadb(out + sizeof n, n, 0, NULL);
	}
	json_t *env = json_object_get(res, "env");
	if (!res || (json_is_true(json_object_get(res, "ok")) && !json_is_object(env))) {
		http_error(req, 500, "internal", "the manifest's job failed (status %d)", status);
	} else if (!json_is_true(json_object_get(res, "ok"))) {
		struct moat_err e = {.errnum = (int)json_integer_value(json_object_get(res, "errnum"))};
		snprintf(e.msg, sizeof e.msg, "%s", json_string_value(json_object_get(res, "msg")) ?: "?");
		manifest_error(req, &e);
	} else {
		struct moat_buf entries = {.p = (char *)out + sizeof n + n,
					   .len = len - sizeof n - n};
		/* the clones are in the seed: it becomes the workspace */
		cj->repos = json_incref(json_object_get(res, "repos"));
		cj->s.seed = cj->tmp;
		cj->s.repos = cj->repos;
		create_finish(req, &cj->s, env, cj->body, &entries);
	}
	json_decref(res);
	pend_free(p);
}

static void h_create(struct evhttp_request *req)
{
	json_t *body = http_body_json(req, true);
	if (!body)
		return;
	static const char *const keys[] = {"manifest", "image",	 "env",	     "limits",
					   "timeout_s", "idle_timeout_s", "metadata", "network",
					   NULL};
	struct box_spec s = {.idle_timeout_s = 1200};
	struct moat_buf entries = {0};
	json_t *env = NULL;
	if (!only_keys(req, body, "body", keys))
		goto out;
	json_t *img = json_object_get(body, "image");
	if (img && !json_is_null(img) &&
	    (!json_is_string(img) || strcmp(json_string_value(img), "host") != 0)) {
		const char *ip = json_string_value(img);
		if (!ip || ip[0] != '/') {
			http_error(req, 400, "invalid_request",
				   "image must be \"host\" or the absolute path of a root "
				   "filesystem directory");
			goto out;
		}
		char *real = realpath(ip, NULL);
		struct stat st;
		if (!real || stat(real, &st) < 0 || !S_ISDIR(st.st_mode)) {
			free(real);
			http_error(req, 400, "invalid_request", "image %.200s: not a directory", ip);
			goto out;
		}
		bool allowed = false;
		for (size_t i = 0; conf->host_paths && conf->host_paths[i] && !allowed; i++)
			allowed = moat_path_within(real, conf->host_paths[i]);
		if (!allowed) {
			free(real);
			http_error(req, 403, "forbidden",
				   "image %.200s is not under an --allow-host-path directory", ip);
			goto out;
		}
		s.image = real;
	}
	if (!string_map(req, json_object_get(body, "env"), "env", true) ||
	    !string_map(req, json_object_get(body, "metadata"), "metadata", false) ||
	    !parse_limits(req, json_object_get(body, "limits"), &s) ||
	    !get_int(req, body, "timeout_s", 10LL * 365 * 86400, &s.timeout_s) ||
	    !get_int(req, body, "idle_timeout_s", 10LL * 365 * 86400, &s.idle_timeout_s))
		goto out;
	env = json_object();
	json_object_set_new(env, "PATH", json_string("/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"));
	json_object_set_new(env, "HOME", json_string("/home/sandbox"));
	json_object_set_new(env, "LANG", json_string("C.UTF-8"));
	json_object_set_new(env, "TERM", json_string("xterm-256color"));
	json_object_set_new(env, "MOAT_SANDBOX", json_string("1"));
	if (json_object_get(body, "env"))
		json_object_update(env, json_object_get(body, "env"));
	if (!parse_network(req, json_object_get(body, "network"), env, &s.network))
		goto out;
	json_t *m = json_object_get(body, "manifest");
	if (m && json_is_object(m)) {
		/* what a clone may fetch, refused before anything starts */
		struct moat_err e = {0};
		if (clone_check(m, s.network, conf->net_ceiling, s.disk != 0, &e) < 0) {
			manifest_error(req, &e);
			goto out;
		}
	}
	if (m && !json_is_null(m) && manifest_is_slow(m)) {
		/* a clone may take minutes: off the event loop, a few at a time,
		 * and not for a create that would be refused anyway */
		if (box_at_limit() || njobs >= MAX_MANIFEST_JOBS) {
			http_error(req, 429, "limit_reached",
				   box_at_limit() ? "at the limit of sandboxes"
						  : "too many manifests being cloned at once (%d)",
				   MAX_MANIFEST_JOBS);
			goto out;
		}
		struct cjob *cj = calloc(1, sizeof *cj);
		struct pend *p = cj ? pend_new(req, NULL, P_CREATE) : NULL;
		if (!p) {
			free(cj);
			http_error(req, 500, "internal", "out of memory");
			goto out;
		}
		p->cj = cj;
		njobs++;
		struct moat_err se = {0};
		if (clone_seed_dir(cj->tmp, sizeof cj->tmp, &se) < 0) {
			pend_done(p);
			http_error(req, 500, "internal", "%s", se.msg);
			pend_free(p);
			goto out;
		}
		cj->s = s;
		cj->env = env;
		cj->body = body;
		s.network = NULL;
		s.image = NULL;
		env = body = NULL;
		cj->job = job_start(conf->base, manifest_job, cj, on_manifest_job, p);
		if (!cj->job) {
			pend_done(p);
			http_error(req, 500, "internal", "cannot start the manifest's job: %s",
				   strerror(errno));
			pend_free(p);
		}
		goto out;
	}
	if (m && !json_is_null(m)) {
		struct moat_err e = {0};
		if (manifest_build(m, conf->host_paths, &entries, env, &e) < 0) {
			manifest_error(req, &e);
			goto out;
		}
	}
	create_finish(req, &s, env, body, &entries);
out:
	json_decref(s.network);
	free(s.image);
	json_decref(env);
	moat_buf_free(&entries);
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

/* ---- exec and processes ----------------------------------------------------- */

static void h_exec(struct evhttp_request *req, struct box *b)
{
	json_t *body = http_body_json(req, false);
	if (!body)
		return;
	static const char *const keys[] = {"cmd", "cwd", "env", "stdin", "timeout_ms", "yield_ms",
					   "max_output_bytes", "tty", "cols", "rows", NULL};
	json_t *argv = NULL, *env = NULL;
	int64_t timeout = 0, yield = -1, maxout = 0, cols = 0, rows = 0;
	bool tty = false;
	if (!only_keys(req, body, "body", keys))
		goto out;
	json_t *cmd = json_object_get(body, "cmd");
	if (json_is_string(cmd) && json_string_length(cmd) &&
	    strlen(json_string_value(cmd)) == json_string_length(cmd)) {
		argv = json_pack("[s,s,O]", "/bin/sh", "-c", cmd);
	} else if (json_is_array(cmd) && json_array_size(cmd) > 0) {
		size_t i;
		json_t *v;
		json_array_foreach(cmd, i, v) if (!json_is_string(v) ||
						  strlen(json_string_value(v)) !=
							  json_string_length(v))
		{
			http_error(req, 400, "invalid_request", "cmd[%zu] must be a string", i);
			goto out;
		}
		argv = json_incref(cmd);
	} else {
		http_error(req, 400, "invalid_request",
			   "cmd must be a non-empty string or array of strings");
		goto out;
	}
	json_t *cwdv = json_object_get(body, "cwd");
	const char *cwd = WORKSPACE;
	if (cwdv && !json_is_null(cwdv)) {
		if (!json_is_string(cwdv) || !json_string_length(cwdv)) {
			http_error(req, 400, "invalid_request", "cwd must be a path");
			goto out;
		}
		cwd = json_string_value(cwdv);
	}
	char cwdbuf[4200];
	if (cwd[0] != '/') {
		snprintf(cwdbuf, sizeof cwdbuf, WORKSPACE "/%s", cwd);
		cwd = cwdbuf;
	}
	json_t *st = json_object_get(body, "stdin");
	if (st && !json_is_null(st) && !json_is_string(st)) {
		http_error(req, 400, "invalid_request", "stdin must be a string");
		goto out;
	}
	if (!string_map(req, json_object_get(body, "env"), "env", true) ||
	    !get_int(req, body, "timeout_ms", 86400000LL * 30, &timeout) ||
	    !get_int(req, body, "yield_ms", 3600000, &yield) ||
	    !get_int(req, body, "max_output_bytes", 64 << 20, &maxout) ||
	    !get_int(req, body, "cols", 9999, &cols) || !get_int(req, body, "rows", 9999, &rows) ||
	    !get_bool(req, body, "tty", &tty))
		goto out;
	struct pend *p = pend_new(req, b, P_EXEC);
	if (!p) {
		http_error(req, 500, "internal", "out of memory");
		goto out;
	}
	const char *accept = evhttp_find_header(evhttp_request_get_input_headers(req), "Accept");
	p->sse = accept && strstr(accept, "text/event-stream");
	p->yield = yield >= 0 && !p->sse;
	p->yield_ms = yield;
	env = box_env(b, json_object_get(body, "env"));
	json_t *op = json_pack("{s:s,s:O,s:O,s:s,s:b,s:b,s:I,s:I,s:I,s:I}", "op", "exec", "argv",
			       argv, "env", env, "cwd", cwd, "tty", tty, "close_stdin", !p->yield,
			       "timeout_ms", (json_int_t)timeout, "max_output_bytes",
			       (json_int_t)maxout, "cols", (json_int_t)cols, "rows", (json_int_t)rows);
	json_object_set_new(op, "cap_total", json_boolean(!p->yield));
	json_object_set_new(op, "wait",
			    p->sse ? json_pack("{s:I,s:s}", "timeout_ms", (json_int_t)0, "until",
					       "output")
				   : json_pack("{s:I,s:s}", "timeout_ms",
					       (json_int_t)(p->yield ? (yield ? yield : 1) : 0),
					       "until", "exit"));
	const char *in = st && json_is_string(st) ? json_string_value(st) : "";
	size_t inlen = st && json_is_string(st) ? json_string_length(st) : 0;
	metrics_bytes(0, inlen);
	call(p, op, in, inlen);
out:
	json_decref(argv);
	json_decref(env);
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
	if (!only_keys(req, body, "body", keys) ||
	    !get_int(req, body, "yield_ms", 3600000, &yield) || !get_bool(req, body, "close", &close))
		goto out;
	if (d && !json_is_null(d) && !json_is_string(d)) {
		http_error(req, 400, "invalid_request", "data must be a string");
		goto out;
	}
	struct pend *p = pend_new(req, b, P_STDIN);
	if (!p) {
		http_error(req, 500, "internal", "out of memory");
		goto out;
	}
	p->pid = pid;
	p->yield_ms = yield;
	/* write, then collect what it printed for yield_ms (both in order on
	 * one connection: the agent answers the write first) */
	json_t *op = json_pack("{s:s,s:I,s:b}", "op", "stdin", "process_id", (json_int_t)pid,
			       "close", close);
	const char *data = d && json_is_string(d) ? json_string_value(d) : "";
	size_t len = d && json_is_string(d) ? json_string_length(d) : 0;
	/* the write's own ack is not waited for: a failure (the process
	 * ended) shows in the wait's answer */
	if (box_call(b, op, data, len, NULL, NULL) < 0) {
		json_decref(op);
		pend_done(p);
		http_error(req, 409, "conflict", "sandbox %s is not running", box_id(b));
		pend_free(p);
		goto out;
	}
	json_decref(op);
	wait_for(p, yield ? yield : 1, "exit");
out:
	json_decref(body);
}

static void h_signal(struct evhttp_request *req, struct box *b, const char *pids)
{
	int64_t pid;
	if (!parse_pid(req, pids, &pid))
		return;
	char *sig = http_query(req, "signal");
	simple(req, b, P_NOCONTENT,
	       json_pack("{s:s,s:I,s:s}", "op", "signal", "process_id", (json_int_t)pid, "signal",
			 sig ? sig : "KILL"),
	       NULL, 0);
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
	char *path = need_path(req);
	if (!path)
		return;
	if (!sub && m == EVHTTP_REQ_GET) {
		simple(req, b, P_READ,
		       json_pack("{s:s,s:s,s:I}", "op", "read", "path", path, "max",
				 (json_int_t)conf->max_file),
		       NULL, 0);
	} else if (!sub && m == EVHTTP_REQ_PUT) {
		size_t len;
		const char *data = http_body(req, &len);
		if (len > conf->max_file) {
			http_error(req, 413, "too_large", "file over %llu bytes",
				   (unsigned long long)conf->max_file);
		} else {
			metrics_bytes(0, len);
			simple(req, b, P_NOCONTENT,
			       json_pack("{s:s,s:s}", "op", "write", "path", path), data, len);
		}
	} else if (!sub && m == EVHTTP_REQ_DELETE) {
		char *rec = http_query(req, "recursive");
		bool r = rec && (!strcmp(rec, "true") || !strcmp(rec, "1"));
		free(rec);
		simple(req, b, P_NOCONTENT,
		       json_pack("{s:s,s:s,s:b}", "op", "delete", "path", path, "recursive", r), NULL,
		       0);
	} else if (sub && !strcmp(sub, "mkdir") && m == EVHTTP_REQ_POST) {
		simple(req, b, P_NOCONTENT, json_pack("{s:s,s:s}", "op", "mkdir", "path", path),
		       NULL, 0);
	} else if (sub && !strcmp(sub, "list") && m == EVHTTP_REQ_GET) {
		char *d = http_query(req, "depth");
		char *end = NULL;
		long depth = d ? strtol(d, &end, 10) : 1;
		if (d && (*end || depth < 1 || depth > 64)) {
			http_error(req, 400, "invalid_request", "depth must be 1 to 64");
		} else {
			simple(req, b, P_LIST,
			       json_pack("{s:s,s:s,s:i}", "op", "list", "path", path, "depth",
					 (int)depth),
			       NULL, 0);
		}
		free(d);
	} else if (sub && !strcmp(sub, "stat") && m == EVHTTP_REQ_GET) {
		simple(req, b, P_STAT, json_pack("{s:s,s:s}", "op", "stat", "path", path), NULL, 0);
	} else {
		http_error(req, sub && strcmp(sub, "mkdir") && strcmp(sub, "list") &&
					strcmp(sub, "stat")
				    ? 404
				    : 405,
			   sub && strcmp(sub, "mkdir") && strcmp(sub, "list") && strcmp(sub, "stat")
				   ? "not_found"
				   : "method_not_allowed",
			   "no such route");
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
	if (only_keys(req, body, "body", keys)) {
		if (!json_is_string(pt) || !json_string_length(pt))
			http_error(req, 400, "invalid_request", "patch must be a non-empty string");
		else
			simple(req, b, P_PLAIN, json_pack("{s:s}", "op", "patch"),
			       json_string_value(pt), json_string_length(pt));
	}
	json_decref(body);
}

static void h_image(struct evhttp_request *req, struct box *b)
{
	char *path = need_path(req);
	if (!path)
		return;
	simple(req, b, P_IMAGE,
	       json_pack("{s:s,s:s,s:I}", "op", "read", "path", path, "max", (json_int_t)IMAGE_MAX),
	       NULL, 0);
	free(path);
}

static void h_archive(struct evhttp_request *req, struct box *b)
{
	if (evhttp_request_get_command(req) == EVHTTP_REQ_GET) {
		simple(req, b, P_PACK, json_pack("{s:s,s:s}", "op", "pack", "path", WORKSPACE), NULL,
		       0);
		return;
	}
	size_t len;
	const char *tar = http_body(req, &len);
	struct moat_archive_limits lim = {.max_total = conf->max_archive, .max_entries = 100000};
	struct moat_buf entries = {0};
	struct moat_err e = {0};
	if (moat_archive_to_entries(tar, len, &lim, &entries, &e) < 0) {
		bool big = e.errnum == EFBIG;
		http_error(req, big ? 413 : 400, big ? "too_large" : "invalid_request", "archive: %s",
			   e.msg);
		moat_buf_free(&entries);
		return;
	}
	metrics_bytes(0, len);
	simple(req, b, P_NOCONTENT,
	       json_pack("{s:s,s:s,s:b}", "op", "unpack", "path", WORKSPACE, "replace", 1),
	       entries.p, entries.len);
	moat_buf_free(&entries);
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

/* ---- routing ------------------------------------------------------------------- */

static void not_allowed(struct evhttp_request *req)
{
	http_error(req, 405, "method_not_allowed", "method not allowed on %s",
		   evhttp_uri_get_path(evhttp_request_get_evhttp_uri(req)));
}

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
		not_allowed(req);
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
	if (n < 2 || strcmp(seg[0], "v1") || strcmp(seg[1], "sandboxes")) {
		http_error(req, 404, "not_found", "no such route: %.200s", path);
		return;
	}
	if (n == 2) {
		if (m == EVHTTP_REQ_POST)
			h_create(req);
		else if (m == EVHTTP_REQ_GET)
			h_list(req);
		else
			not_allowed(req);
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
			box_delete(b);
			metrics_deleted();
			http_no_content(req);
		} else {
			not_allowed(req);
		}
		return;
	}
	const char *what = seg[3];
	if (!strcmp(what, "exec") && n == 4)
		m == EVHTTP_REQ_POST ? h_exec(req, b) : not_allowed(req);
	else if (!strcmp(what, "processes") && n == 4)
		m == EVHTTP_REQ_GET ? simple(req, b, P_PS, json_pack("{s:s}", "op", "ps"), NULL, 0)
				    : not_allowed(req);
	else if (!strcmp(what, "processes") && n == 6 && !strcmp(seg[5], "stdin"))
		m == EVHTTP_REQ_POST ? h_stdin(req, b, seg[4]) : not_allowed(req);
	else if (!strcmp(what, "processes") && n == 5)
		m == EVHTTP_REQ_DELETE ? h_signal(req, b, seg[4]) : not_allowed(req);
	else if (!strcmp(what, "files") && (n == 4 || n == 5))
		h_files(req, b, n == 5 ? seg[4] : NULL);
	else if (!strcmp(what, "patch") && n == 4)
		m == EVHTTP_REQ_POST ? h_patch(req, b) : not_allowed(req);
	else if (!strcmp(what, "image") && n == 4)
		m == EVHTTP_REQ_GET ? h_image(req, b) : not_allowed(req);
	else if (!strcmp(what, "netlog") && n == 4)
		m == EVHTTP_REQ_GET ? h_netlog(req, b) : not_allowed(req);
	else if (!strcmp(what, "archive") && n == 4)
		(m == EVHTTP_REQ_GET || m == EVHTTP_REQ_PUT) ? h_archive(req, b) : not_allowed(req);
	else
		http_error(req, 404, "not_found", "no such route: %.200s", path);
}
