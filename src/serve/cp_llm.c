/* The LLM proxy's pass-through door (cp.h): an agent's SDK call to
 * /llm/<route>/v1/<dialect path> goes to the route's upstream with the
 * route's key instead of the session token, and the upstream's answer
 * comes back as it was sent: its status and Content-Type, a JSON body
 * whole, an SSE stream event by event as it arrives (back-pressured by the
 * agent's reading). Every call is recorded (conv_record) and accounted
 * (session_account) once it is over, complete or not.
 *
 * Errors before the upstream answered are the /v1 shape (502
 * upstream_error, 504 timeout, 4xx naming the culprit); the upstream's own
 * errors are relayed as it sent them. A stream the upstream cuts (or that
 * times out) after it started ends with an error event in the dialect's
 * shape, so that the SDK raises instead of taking half an answer. */
#define _GNU_SOURCE
#include "conv.h"
#include "core.h"
#include "cp.h"
#include "http.h"
#include "llm.h"
#include "llm_dialect.h"
#include "session.h"

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* What of an answer the record keeps (and of a request): enough for audit;
 * the rest is counted, not stored. */
#define KEEP_MAX ((size_t)4 << 20)
/* A JSON (not streamed) answer is relayed whole, so held whole: at most. */
#define JSON_ANSWER_MAX ((size_t)32 << 20)
/* How often a paused stream looks at its client's backlog. */
#define DRAIN_POLL_MS 5

struct px {
	struct evhttp_request *req;
	char sid[64];
	char route[33];
	enum llm_dialect d;
	struct llm_call *call;
	struct http_wait wait;
	struct event *drain; /* a paused upstream: polls the client's backlog */
	char *reqbody;       /* as sent upstream */
	size_t reqlen;
	uint64_t bytes_in;  /* from the agent */
	uint64_t bytes_out; /* to the agent */
	int status;         /* the upstream's, 0 before head */
	char ctype[128];
	bool sse;           /* relayed as a chunked stream */
	bool ended_nl;      /* the stream's last bytes end an event */
	struct llm_stream *st;
	/* the answer: whole for JSON (relayed at the end), the first KEEP_MAX
	 * bytes of a stream (for the record) */
	char *ans;
	size_t alen, acap;
	uint64_t atotal;
	bool too_big;
};

static void px_free(struct px *p)
{
	http_wait_stop(&p->wait);
	if (p->call)
		llm_call_cancel(p->call);
	if (p->drain)
		event_free(p->drain);
	llm_stream_free(p->st);
	free(p->reqbody);
	free(p->ans);
	free(p);
}

static void ans_keep(struct px *p, const char *d, size_t n, size_t max)
{
	if (p->alen >= max)
		return;
	if (n > max - p->alen)
		n = max - p->alen;
	if (p->alen + n > p->acap) {
		size_t cap = p->acap ? p->acap : 8192;
		while (cap < p->alen + n)
			cap *= 2;
		if (cap > max)
			cap = max;
		char *a = realloc(p->ans, cap);
		if (!a)
			return; /* the record is shorter; the relay goes on */
		p->ans = a;
		p->acap = cap;
	}
	memcpy(p->ans + p->alen, d, n);
	p->alen += n;
}

/* Once it is over (answered, failed or abandoned): the record and the
 * session's meter. The session is looked up again: it may have ended
 * while the call ran. */
static void px_account(struct px *p, bool complete)
{
	struct llm_usage u = {-1, -1};
	if (p->st) {
		llm_stream_usage(p->st, &u);
		if (complete && !llm_stream_complete(p->st))
			complete = false;
	} else if (p->status >= 200 && p->status < 300 && !p->sse && p->alen &&
		   p->alen == p->atotal) {
		json_t *msgs = NULL;
		if (llm_answer_parse(p->d, p->ans, p->alen, &u, &msgs) < 0)
			u = (struct llm_usage){-1, -1};
		json_decref(msgs);
	}
	struct moat_err me = {0};
	if (conv_record(p->sid, p->route, p->d, p->reqbody,
			p->reqlen < KEEP_MAX ? p->reqlen : KEEP_MAX, p->status, p->ans,
			p->alen < KEEP_MAX ? p->alen : KEEP_MAX, complete, &u, &me) < 0)
		fprintf(stderr, "moat serve: session %s: recording a model call: %s\n", p->sid,
			me.msg);
	struct session *s = session_find(p->sid);
	if (s)
		session_account(s, &u, p->bytes_in, p->bytes_out);
}

/* The agent hung up: the upstream call is dropped, what was seen counted. */
static void on_gone(void *arg)
{
	struct px *p = arg;
	if (p->call) {
		llm_call_cancel(p->call);
		p->call = NULL;
	}
	px_account(p, false);
	px_free(p); /* http_wait ends the request itself */
}

static void send_chunk(struct px *p, const char *d, size_t n)
{
	struct evbuffer *b = evbuffer_new();
	if (!b || evbuffer_add(b, d, n) < 0) {
		if (b)
			evbuffer_free(b);
		return;
	}
	evhttp_send_reply_chunk(p->req, b);
	evbuffer_free(b);
	p->bytes_out += n;
	if (n >= 2)
		p->ended_nl = d[n - 1] == '\n' && d[n - 2] == '\n';
	else if (n == 1)
		p->ended_nl = p->ended_nl && d[0] == '\n';
}

static const char *status_reason(int s)
{
	switch (s) {
	case 200: return "OK";
	case 201: return "Created";
	case 400: return "Bad Request";
	case 401: return "Unauthorized";
	case 403: return "Forbidden";
	case 404: return "Not Found";
	case 429: return "Too Many Requests";
	case 500: return "Internal Server Error";
	case 502: return "Bad Gateway";
	case 503: return "Service Unavailable";
	case 504: return "Gateway Timeout";
	case 529: return "Overloaded";
	default: return s < 400 ? "OK" : "Error";
	}
}

static void on_head(void *arg, int status, const char *ctype)
{
	struct px *p = arg;
	p->status = status;
	snprintf(p->ctype, sizeof p->ctype, "%s", ctype);
	if (strncasecmp(ctype, "text/event-stream", 17))
		return; /* a JSON answer: relayed whole at the end */
	p->sse = true;
	p->ended_nl = true;
	p->st = llm_stream_new(p->d);
	struct evkeyvalq *h = evhttp_request_get_output_headers(p->req);
	evhttp_add_header(h, "Content-Type", p->ctype);
	evhttp_add_header(h, "Cache-Control", "no-store");
	evhttp_add_header(h, "X-Content-Type-Options", "nosniff");
	evhttp_send_reply_start(p->req, status, status_reason(status));
	/* http_wait ends a started stream itself when the agent goes */
	p->wait.streaming = true;
}

static void on_drain(evutil_socket_t fd, short what, void *arg)
{
	(void)fd, (void)what;
	struct px *p = arg;
	if (!p->call)
		return;
	if (http_wait_backlog(&p->wait) > CORE_BACKLOG_LOW) {
		struct timeval tv = {0, DRAIN_POLL_MS * 1000};
		evtimer_add(p->drain, &tv);
		return;
	}
	llm_call_resume(p->call);
}

static void on_data(void *arg, const char *d, size_t n)
{
	struct px *p = arg;
	p->atotal += n;
	if (!p->sse) {
		if (p->atotal > JSON_ANSWER_MAX) {
			/* an answer too big to hold: dropped, said at done */
			p->too_big = true;
			llm_call_cancel(p->call);
			p->call = NULL;
			struct core_err e = {.status = 502};
			snprintf(e.code, sizeof e.code, "upstream_error");
			snprintf(e.msg, sizeof e.msg,
				 "the upstream of LLM route %s sent an answer over %zu MiB", p->route,
				 JSON_ANSWER_MAX >> 20);
			http_wait_stop(&p->wait);
			http_error(p->req, e.status, e.code, "%s", e.msg);
			px_account(p, false);
			px_free(p);
			return;
		}
		ans_keep(p, d, n, JSON_ANSWER_MAX);
		return;
	}
	ans_keep(p, d, n, KEEP_MAX);
	if (p->st && llm_stream_feed(p->st, d, n) < 0) {
		/* not SSE the dialect understands: relayed all the same, but no
		 * usage or completeness can be read from it */
		llm_stream_free(p->st);
		p->st = NULL;
	}
	send_chunk(p, d, n);
	/* the agent reads slower than the upstream sends: llm.c pauses the
	 * upstream (our backlog callback); this resumes it once drained */
	if (http_wait_backlog(&p->wait) > CORE_BACKLOG_HIGH && p->drain &&
	    !evtimer_pending(p->drain, NULL)) {
		struct timeval tv = {0, DRAIN_POLL_MS * 1000};
		evtimer_add(p->drain, &tv);
	}
}

static size_t on_backlog(void *arg)
{
	struct px *p = arg;
	return p->sse ? http_wait_backlog(&p->wait) : 0;
}

/* The end of a relayed stream that broke: an error event the dialect's SDKs
 * raise on. */
static void stream_error(struct px *p, const struct core_err *e)
{
	json_t *ev;
	const char *event = NULL;
	switch (p->d) {
	case LLM_MESSAGES:
		event = "error";
		ev = json_pack("{s:s,s:{s:s,s:s}}", "type", "error", "error", "type",
			       e->status == 504 ? "timeout_error" : "api_error", "message", e->msg);
		break;
	case LLM_RESPONSES:
		event = "error";
		ev = json_pack("{s:s,s:s,s:s,s:n,s:{s:s,s:s,s:s}}", "type", "error", "code", e->code,
			       "message", e->msg, "param", "error", "type", e->code, "code", e->code,
			       "message", e->msg);
		break;
	default:
		ev = json_pack("{s:{s:s,s:s,s:s,s:n}}", "error", "message", e->msg, "type", e->code,
			       "code", e->code, "param");
		break;
	}
	char *s = ev ? json_dumps(ev, JSON_COMPACT) : NULL;
	json_decref(ev);
	if (!s)
		return;
	char *out = NULL;
	int n = asprintf(&out, "%s%s%s%sdata: %s\n\n", p->ended_nl ? "" : "\n\n",
			 event ? "event: " : "", event ? event : "", event ? "\n" : "", s);
	free(s);
	if (n > 0) {
		size_t before = p->bytes_out;
		send_chunk(p, out, (size_t)n);
		p->bytes_out = before + (uint64_t)n;
	}
	free(out);
}

static void on_done(void *arg, const struct core_err *err)
{
	struct px *p = arg;
	p->call = NULL;
	http_wait_stop(&p->wait);
	bool complete = err == NULL;
	if (p->sse) {
		if (err)
			stream_error(p, err);
		evhttp_send_reply_end(p->req);
	} else if (err) {
		/* not a byte relayed yet: the /v1 shape */
		http_error(p->req, err->status, err->code, "%s", err->msg);
	} else {
		p->bytes_out += p->alen;
		http_raw(p->req, p->status, p->ctype, p->ans, p->alen);
	}
	px_account(p, complete);
	px_free(p);
}

static const struct llm_cbs cbs = {
	.head = on_head, .data = on_data, .done = on_done, .backlog = on_backlog};

static void cerr_reply(struct evhttp_request *req, const struct core_err *e)
{
	http_error(req, e->status ? e->status : 500, e->code[0] ? e->code : "internal", "%s",
		   e->msg);
}

/* The client headers worth passing on (llm.h): the APIs' version and beta
 * switches; never its credentials. */
static const char *const pass_headers[] = {"anthropic-version", "anthropic-beta",
					  "openai-beta"};

void cp_llm_route(struct evhttp_request *req, struct session *s, const char *path)
{
	/* /llm/<route>/v1/... */
	const char *name = path + strlen("/llm/");
	if (strncmp(path, "/llm/", 5)) {
		http_error(req, 404, "not_found", "no such path: %.200s", path);
		return;
	}
	size_t nlen = strcspn(name, "/");
	const char *rest = name + nlen;
	if (!nlen || nlen > 32) {
		http_error(req, 404, "not_found",
			   "no LLM route in %.200s (expected /llm/<route>/v1/...)", path);
		return;
	}
	char route[33];
	snprintf(route, sizeof route, "%.*s", (int)nlen, name);
	int d = llm_dialect_of_path(rest);
	if (d < 0) {
		http_error(req, 404, "not_found",
			   "no such LLM API path: %.200s (the proxy speaks /v1/chat/completions, "
			   "/v1/responses and /v1/messages)", rest);
		return;
	}
	if (evhttp_request_get_command(req) != EVHTTP_REQ_POST) {
		evhttp_add_header(evhttp_request_get_output_headers(req), "Allow", "POST");
		http_error(req, 405, "method_not_allowed", "%.200s takes POST only", rest);
		return;
	}
	const struct llm_route *r = llm_route_find(route);
	if (!r) {
		http_error(req, 404, "not_found", "no LLM route %s (the daemon's --llm-route)", route);
		return;
	}
	bool anthropic = d == LLM_MESSAGES;
	if (anthropic != (r->family == LLM_FAMILY_ANTHROPIC)) {
		http_error(req, 404, "not_found",
			   "LLM route %s speaks %s, not %s", route,
			   r->family == LLM_FAMILY_ANTHROPIC ? "Anthropic's /v1/messages"
							     : "OpenAI's /v1/chat/completions and "
							       "/v1/responses",
			   rest);
		return;
	}
	json_t *body = http_body_json(req, false);
	if (!body)
		return;
	struct core_err ce = {0};
	struct llm_req_info info = {0};
	if (llm_req_inspect((enum llm_dialect)d, body, &info, &ce) < 0 ||
	    session_llm_check(s, route, info.model, &ce) < 0) {
		json_decref(body);
		cerr_reply(req, &ce);
		return;
	}
	size_t inlen = 0;
	const char *in = http_body(req, &inlen);
	/* the body goes up as the agent sent it unless llm_req_prepare had
	 * something to add (a JSON round trip reformats numbers and spaces) */
	json_t *orig = json_deep_copy(body);
	llm_req_prepare((enum llm_dialect)d, body);
	char *up = NULL;
	size_t uplen = 0;
	if (orig && json_equal(orig, body)) {
		up = malloc(inlen + 1);
		if (up) {
			memcpy(up, in, inlen);
			up[inlen] = '\0';
			uplen = inlen;
		}
	} else {
		up = json_dumps(body, JSON_COMPACT);
		uplen = up ? strlen(up) : 0;
	}
	json_decref(orig);
	json_decref(body);
	struct px *p = calloc(1, sizeof *p);
	if (!up || !p) {
		free(up);
		free(p);
		http_error(req, 500, "internal", "out of memory");
		return;
	}
	p->req = req;
	p->d = (enum llm_dialect)d;
	p->reqbody = up;
	p->reqlen = uplen;
	p->bytes_in = inlen;
	snprintf(p->sid, sizeof p->sid, "%s", session_id(s));
	snprintf(p->route, sizeof p->route, "%s", route);
	struct event_base *base = core_config() ? core_config()->base : NULL;
	p->drain = base ? evtimer_new(base, on_drain, p) : NULL;
	/* the client's headers worth passing on, as "Name: value" */
	char *hv[sizeof pass_headers / sizeof *pass_headers + 1] = {0};
	size_t nh = 0;
	struct evkeyvalq *hin = evhttp_request_get_input_headers(req);
	for (size_t i = 0; i < sizeof pass_headers / sizeof *pass_headers; i++) {
		const char *v = evhttp_find_header(hin, pass_headers[i]);
		if (v && strlen(v) < 1024 && !strpbrk(v, "\r\n") &&
		    asprintf(&hv[nh], "%s: %s", pass_headers[i], v) > 0)
			nh++;
	}
	p->call = llm_call_start(r, rest, up, uplen, (const char *const *)hv, &cbs, p, &ce);
	for (size_t i = 0; i < nh; i++)
		free(hv[i]);
	if (!p->call) {
		cerr_reply(req, &ce);
		px_account(p, false);
		px_free(p);
		return;
	}
	http_wait_start(&p->wait, base, req, on_gone, p);
}
