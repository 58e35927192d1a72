/* Conversation mode on the control listener (docs/control-plane.md):
 *   POST /v1/conversations/<session>/turns  a turn: the agent's new
 *        messages; the control plane sends the stored history followed by
 *        them upstream, relays the answer as it comes (streamed when the
 *        turn asks stream: true) and, only when the answer came whole,
 *        stores the new messages and the answer's in one transaction;
 *   GET  /v1/conversations/<session>        the history (after a restart).
 * <session> must be the authenticated session. A turn_id names a turn so
 * that an agent that lost the answer (its sandbox was killed, the
 * connection cut) can ask again: a stored turn is answered from the store
 * without a model call. */
#define _GNU_SOURCE
#include "cp.h"

#include "conv.h"
#include "http.h"
#include "jfield.h"
#include "llm.h"
#include "llm_dialect.h"
#include "session.h"

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* An answer is kept (to parse, store and replay to a retry) up to this;
 * a non-streamed one over it is refused, a streamed one relayed but not
 * stored. */
#define ANSWER_KEEP ((size_t)HTTP_MAX_JSON_BODY)
#define TURN_ID_MAX 128
/* How often a stream held for a slow agent looks at its backlog again. */
#define RESUME_POLL_MS 10

struct turn {
	struct http_wait wait;
	struct evhttp_request *req;
	struct event_base *base;
	char sid[128];
	char route[64];
	char *turn_id;
	enum llm_dialect d;
	json_t *new_msgs; /* the agent's new messages (a reference) */
	struct llm_call *call;
	struct llm_stream *st; /* a streamed turn's parser */
	bool relaying;         /* the streamed reply has started */
	bool overflow;         /* the answer outgrew ANSWER_KEEP */
	bool tail_nl;          /* what was relayed ends with a blank line */
	char last;             /* its last byte */
	int status;
	char ctype[128];
	char *body;
	size_t len, cap;
	uint64_t bytes_in, bytes_out;
	struct event *resume;
	char *hdrs[5]; /* "Name: value", NULL-terminated */
};

static void turn_free(struct turn *t)
{
	http_wait_stop(&t->wait);
	if (t->resume)
		event_free(t->resume);
	llm_stream_free(t->st);
	json_decref(t->new_msgs);
	free(t->turn_id);
	free(t->body);
	for (size_t i = 0; i < sizeof t->hdrs / sizeof t->hdrs[0]; i++)
		free(t->hdrs[i]);
	free(t);
}

/* The call is over (complete, failed or the agent left): its usage as
 * far as it was seen goes to the session, whatever else happens. */
static void account(struct turn *t, const struct llm_usage *u)
{
	struct session *s = session_find(t->sid);
	if (s)
		session_account(s, u, t->bytes_in, t->bytes_out);
}

static void keep(struct turn *t, const char *p, size_t n)
{
	if (t->overflow)
		return;
	if (n > ANSWER_KEEP - t->len) {
		t->overflow = true;
		return;
	}
	if (t->len + n > t->cap) {
		size_t c = t->cap ? t->cap : 16384;
		while (c < t->len + n)
			c *= 2;
		char *q = realloc(t->body, c);
		if (!q) {
			t->overflow = true;
			return;
		}
		t->body = q;
		t->cap = c;
	}
	memcpy(t->body + t->len, p, n);
	t->len += n;
}

static void on_head(void *arg, int status, const char *ctype)
{
	struct turn *t = arg;
	t->status = status;
	snprintf(t->ctype, sizeof t->ctype, "%s", ctype && *ctype ? ctype : "application/json");
	/* a stream is relayed event by event; anything else (a JSON answer, an
	 * error) is answered whole once it is in */
	if (t->st && status >= 200 && status < 300 &&
	    !strncasecmp(t->ctype, "text/event-stream", 17)) {
		http_wait_stream(&t->wait, t->ctype);
		t->relaying = true;
	}
}

static void on_resume(evutil_socket_t fd, short what, void *arg)
{
	struct turn *t = arg;
	if (!t->call)
		return;
	if (http_wait_backlog(&t->wait) >= CORE_BACKLOG_LOW) {
		struct timeval tv = {0, RESUME_POLL_MS * 1000};
		if (evtimer_add(t->resume, &tv) == 0)
			return;
	}
	llm_call_resume(t->call);
}

static void on_data(void *arg, const char *p, size_t n)
{
	struct turn *t = arg;
	keep(t, p, n);
	if (!t->relaying)
		return;
	/* a parse failure only means the turn cannot be stored: the agent
	 * still gets what the upstream sent */
	llm_stream_feed(t->st, p, n);
	struct evbuffer *b = evbuffer_new();
	if (b && evbuffer_add(b, p, n) == 0) {
		evhttp_send_reply_chunk(t->req, b);
		t->bytes_out += n;
	}
	if (n >= 2)
		t->tail_nl = p[n - 2] == '\n' && p[n - 1] == '\n';
	else if (n == 1)
		t->tail_nl = t->last == '\n' && p[0] == '\n';
	if (n)
		t->last = p[n - 1];
	if (b)
		evbuffer_free(b);
	/* llm.c stops reading above CORE_BACKLOG_HIGH: look again later */
	if (http_wait_backlog(&t->wait) > CORE_BACKLOG_HIGH && t->base) {
		if (!t->resume)
			t->resume = evtimer_new(t->base, on_resume, t);
		struct timeval tv = {0, RESUME_POLL_MS * 1000};
		if (t->resume && !evtimer_pending(t->resume, NULL))
			evtimer_add(t->resume, &tv);
	}
}

static size_t on_backlog(void *arg)
{
	struct turn *t = arg;
	return t->relaying ? http_wait_backlog(&t->wait) : 0;
}

/* The answer came whole: store the turn, then answer (so that an agent
 * that got the answer finds it in the history). */
static void store(struct turn *t, struct llm_usage *u)
{
	json_t *msgs = NULL;
	if (t->relaying) {
		llm_stream_usage(t->st, u);
		msgs = llm_stream_msgs(t->st);
	} else if (llm_answer_parse(t->d, t->body, t->len, u, &msgs) < 0) {
		msgs = NULL;
	}
	if (t->status < 200 || t->status >= 300 || t->overflow || !msgs) {
		if (t->status >= 200 && t->status < 300)
			fprintf(stderr, "moat serve: session %s: turn not stored: %s\n", t->sid,
				t->overflow ? "the answer is over the size kept"
					    : "the answer is not one of the dialect's");
		json_decref(msgs);
		return;
	}
	struct moat_err me = {0};
	if (conv_turn_add(t->sid, t->turn_id, t->route, t->d, t->new_msgs, msgs, t->body, t->len,
			  u, &me) < 0)
		fprintf(stderr, "moat serve: session %s: turn not stored: %s\n", t->sid, me.msg);
	json_decref(msgs);
}

/* A relayed stream broke (the upstream cut, timed out): its end is an
 * error event in the dialect's shape, which the SDKs raise on, rather
 * than a stream that just stops. */
static void stream_error(struct turn *t, const struct core_err *err)
{
	const char *code = err->code[0] ? err->code : "upstream_error";
	json_t *ev;
	if (t->d == LLM_MESSAGES)
		ev = json_pack("{s:s,s:{s:s,s:s}}", "type", "error", "error", "type",
			       err->status == 504 ? "timeout_error" : "api_error", "message", err->msg);
	else if (t->d == LLM_RESPONSES)
		ev = json_pack("{s:s,s:s,s:s,s:n}", "type", "error", "code", code, "message", err->msg,
			       "param");
	else
		ev = json_pack("{s:{s:s,s:s,s:s,s:n}}", "error", "message", err->msg, "type", code,
			       "code", code, "param");
	char *js = ev ? json_dumps(ev, JSON_COMPACT) : NULL;
	json_decref(ev);
	char *out = NULL;
	/* the event starts on a line of its own whatever the upstream left */
	int n = js ? asprintf(&out, "%s%sdata: %s\n\n", t->tail_nl ? "" : "\n\n",
			      t->d == LLM_CHAT ? "" : "event: error\n", js)
		   : -1;
	free(js);
	if (n > 0) {
		struct evbuffer *b = evbuffer_new();
		if (b && evbuffer_add(b, out, (size_t)n) == 0) {
			evhttp_send_reply_chunk(t->req, b);
			t->bytes_out += (uint64_t)n;
		}
		if (b)
			evbuffer_free(b);
	}
	free(out);
}

static void on_done(void *arg, const struct core_err *err)
{
	struct turn *t = arg;
	t->call = NULL;
	struct llm_usage u = {-1, -1};
	if (err) {
		/* nothing is stored of an answer cut short; its usage counts */
		if (t->relaying) {
			llm_stream_usage(t->st, &u);
			http_wait_stop(&t->wait);
			stream_error(t, err);
			evhttp_send_reply_end(t->req);
		} else {
			json_t *msgs = NULL;
			if (t->len && llm_answer_parse(t->d, t->body, t->len, &u, &msgs) == 0)
				json_decref(msgs);
			http_wait_stop(&t->wait);
			http_error(t->req, err->status ? err->status : 502,
				   err->code[0] ? err->code : "upstream_error", "%s", err->msg);
		}
		account(t, &u);
		turn_free(t);
		return;
	}
	store(t, &u);
	http_wait_stop(&t->wait);
	if (t->relaying) {
		evhttp_send_reply_end(t->req);
	} else if (t->overflow) {
		http_error(t->req, 502, "upstream_error", "the upstream's answer is over %zu bytes",
			   ANSWER_KEEP);
	} else {
		http_raw(t->req, t->status, t->ctype, t->body ? t->body : "", t->len);
		t->bytes_out += t->len;
	}
	account(t, &u);
	turn_free(t);
}

/* The agent hung up: the upstream call goes, nothing is stored. */
static void on_gone(void *arg)
{
	struct turn *t = arg;
	struct llm_usage u = {-1, -1};
	if (t->call) {
		llm_call_cancel(t->call);
		t->call = NULL;
	}
	if (t->st)
		llm_stream_usage(t->st, &u);
	account(t, &u);
	turn_free(t);
}

static const struct llm_cbs turn_cbs = {.head = on_head, .data = on_data, .done = on_done,
					.backlog = on_backlog};

static int dialect_pick(const json_t *body, const struct llm_route *r, enum llm_dialect *d,
			struct core_err *e)
{
	json_t *v = json_object_get(body, "dialect");
	if (!v || json_is_null(v)) {
		*d = r->family == LLM_FAMILY_ANTHROPIC ? LLM_MESSAGES : LLM_CHAT;
		return 0;
	}
	const char *s = json_string_value(v);
	if (s && !strcmp(s, "chat"))
		*d = LLM_CHAT;
	else if (s && !strcmp(s, "responses"))
		*d = LLM_RESPONSES;
	else if (s && !strcmp(s, "messages"))
		*d = LLM_MESSAGES;
	else {
		cerr(e, 400, "invalid_request", "dialect: one of \"chat\", \"responses\", \"messages\"");
		return -1;
	}
	bool anthropic = r->family == LLM_FAMILY_ANTHROPIC;
	if (anthropic != (*d == LLM_MESSAGES)) {
		cerr(e, 400, "invalid_request", "dialect: route \"%s\" is of the %s family, which does "
			 "not speak \"%s\"", r->name, anthropic ? "anthropic" : "openai", s);
		return -1;
	}
	return 0;
}

/* A stored answer for a retried turn_id: as it was sent (JSON, or the
 * stream's events). */
static void replay(struct evhttp_request *req, json_t *found)
{
	json_t *a = json_object_get(found, "answer");
	const char *p = json_string_value(a);
	size_t n = json_string_length(a);
	size_t i = 0;
	while (i < n && strchr(" \t\r\n", p[i]))
		i++;
	const char *ctype = i < n && p[i] == '{' ? "application/json" : "text/event-stream";
	http_raw(req, 200, ctype, p ? p : "", n);
}

static void turn_post(struct evhttp_request *req, struct session *s)
{
	json_t *body = http_body_json(req, false);
	if (!body)
		return;
	struct core_err e = {0};
	struct turn *t = NULL;
	json_t *ub = NULL;
	char *up = NULL;
	const char *route = json_string_value(json_object_get(body, "route"));
	if (!route || !*route) {
		cerr(&e, 400, "invalid_request", "route: a string is required (a route of the "
			 "session's llm.routes)");
		goto fail;
	}
	const struct llm_route *r = llm_route_find(route);
	if (!r) {
		cerr(&e, 404, "not_found", "route: no LLM route \"%.64s\"", route);
		goto fail;
	}
	enum llm_dialect d;
	if (dialect_pick(body, r, &d, &e) < 0)
		goto fail;
	json_t *tid = json_object_get(body, "turn_id");
	if (tid && !json_is_null(tid) &&
	    (!json_is_string(tid) || !json_string_length(tid) ||
	     json_string_length(tid) > TURN_ID_MAX ||
	     strlen(json_string_value(tid)) != json_string_length(tid))) {
		cerr(&e, 400, "invalid_request", "turn_id: a string of 1 to %d bytes", TURN_ID_MAX);
		goto fail;
	}
	const char *turn_id = json_string_value(tid);
	struct llm_req_info info;
	if (llm_req_inspect(d, body, &info, &e) < 0)
		goto fail;
	const char *sid = session_id(s);
	if (turn_id) {
		json_t *found = conv_turn_find(sid, turn_id);
		if (found) {
			replay(req, found);
			json_decref(found);
			json_decref(body);
			return;
		}
	}
	if (session_llm_check(s, route, info.model, &e) < 0)
		goto fail;
	json_t *hist = conv_history(sid);
	ub = llm_conv_body(d, body, hist, &e);
	json_decref(hist);
	if (!ub)
		goto fail;
	llm_req_prepare(d, ub);
	up = json_dumps(ub, JSON_COMPACT);
	t = calloc(1, sizeof *t);
	if (!up || !t) {
		cerr(&e, 500, "internal", "out of memory");
		goto fail;
	}
	t->req = req;
	t->d = d;
	snprintf(t->sid, sizeof t->sid, "%s", sid);
	snprintf(t->route, sizeof t->route, "%s", route);
	t->turn_id = turn_id ? strdup(turn_id) : NULL;
	t->new_msgs = json_incref((json_t *)llm_conv_new(d, body));
	t->st = info.stream ? llm_stream_new(d) : NULL;
	size_t blen = 0;
	http_body(req, &blen);
	t->bytes_in = blen;
	if ((turn_id && !t->turn_id) || !t->new_msgs || (info.stream && !t->st)) {
		cerr(&e, 500, "internal", "out of memory");
		goto fail;
	}
	/* the client's headers an upstream wants (Anthropic's version, betas) */
	struct evkeyvalq *ih = evhttp_request_get_input_headers(req);
	static const char *const pass[] = {"anthropic-version", "anthropic-beta", "openai-beta"};
	size_t nh = 0;
	for (size_t i = 0; i < sizeof pass / sizeof pass[0]; i++) {
		const char *v = evhttp_find_header(ih, pass[i]);
		if (v && !strpbrk(v, "\r\n") && asprintf(&t->hdrs[nh], "%s: %s", pass[i], v) >= 0)
			nh++;
	}
	if (r->family == LLM_FAMILY_ANTHROPIC && !evhttp_find_header(ih, "anthropic-version") &&
	    asprintf(&t->hdrs[nh], "anthropic-version: 2023-06-01") >= 0)
		nh++; /* Anthropic requires one; the agent's SDK may not be there to send it */
	t->hdrs[nh] = NULL;
	struct evhttp_connection *c = evhttp_request_get_connection(req);
	t->base = c ? evhttp_connection_get_base(c) : NULL;
	http_wait_start(&t->wait, t->base, req, on_gone, t);
	t->call = llm_call_start(r, llm_dialect_path(d), up, strlen(up),
				 (const char *const *)t->hdrs, &turn_cbs, t, &e);
	if (!t->call) {
		http_wait_stop(&t->wait);
		goto fail;
	}
	free(up);
	json_decref(ub);
	json_decref(body);
	return;
fail:
	if (t)
		turn_free(t);
	free(up);
	json_decref(ub);
	json_decref(body);
	http_error(req, e.status ? e.status : 500, e.code[0] ? e.code : "internal", "%s", e.msg);
}

void cp_conv_route(struct evhttp_request *req, struct session *s, const char *path)
{
	static const char prefix[] = "/v1/conversations/";
	const char *sid = path + sizeof prefix - 1;
	if (strncmp(path, prefix, sizeof prefix - 1)) {
		http_error(req, 404, "not_found", "no such route: %.200s", path);
		return;
	}
	const char *slash = strchr(sid, '/');
	size_t n = slash ? (size_t)(slash - sid) : strlen(sid);
	const char *rest = sid + n;
	if (!n) {
		http_error(req, 404, "not_found", "/v1/conversations/<session>: the session is missing");
		return;
	}
	const char *mine = session_id(s);
	if (!mine || strlen(mine) != n || strncmp(mine, sid, n)) {
		http_error(req, 403, "forbidden", "conversation %.*s is not this session's (%s)",
			   (int)(n > 64 ? 64 : n), sid, mine ? mine : "?");
		return;
	}
	enum evhttp_cmd_type m = evhttp_request_get_command(req);
	if (!*rest) {
		if (m != EVHTTP_REQ_GET) {
			http_error(req, 405, "method_not_allowed", "/v1/conversations/%s takes GET",
				   mine);
			return;
		}
		json_t *j = conv_json(mine);
		if (!j)
			http_error(req, 500, "internal", "out of memory");
		else
			http_json(req, 200, j);
		return;
	}
	if (!strcmp(rest, "/turns")) {
		if (m != EVHTTP_REQ_POST) {
			http_error(req, 405, "method_not_allowed",
				   "/v1/conversations/%s/turns takes POST", mine);
			return;
		}
		turn_post(req, s);
		return;
	}
	http_error(req, 404, "not_found", "no such route: %.200s (conversations have /turns)",
		   path);
}
