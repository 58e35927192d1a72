/* HTTP side of the daemon: see http.h. */
#define _GNU_SOURCE
#include "http.h"
#include "browser.h"
#include "http_guard.h"
#include "e2b.h"

#include "../base/utf8.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/keyvalq_struct.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_JSON_BODY HTTP_MAX_JSON_BODY
#define MAX_BODY ((ev_uint64_t)HTTP_MAX_BODY)

static struct evhttp *http;
static char *token;
static void (*route)(struct evhttp_request *req);
static char listen_host[256];       /* --listen's host (brackets off) */
static char *const *allow_origins;  /* --allow-origin, NULL-terminated */
static struct http_stats stats;

const struct http_stats *http_stats(void)
{
	return &stats;
}

static void count(int status, size_t out)
{
	int c = status / 100;
	stats.requests[c >= 1 && c <= 5 ? c : 0]++;
	stats.bytes_out += out;
}

static void headers(struct evhttp_request *req, const char *ctype)
{
	struct evkeyvalq *h = evhttp_request_get_output_headers(req);
	evhttp_add_header(h, "Content-Type", ctype);
	evhttp_add_header(h, "Cache-Control", "no-store");
}

static const char *reason(int status)
{
	switch (status) {
	case 200: return "OK";
	case 201: return "Created";
	case 204: return "No Content";
	case 400: return "Bad Request";
	case 401: return "Unauthorized";
	case 403: return "Forbidden";
	case 404: return "Not Found";
	case 405: return "Method Not Allowed";
	case 409: return "Conflict";
	case 413: return "Payload Too Large";
	case 415: return "Unsupported Media Type";
	case 422: return "Unprocessable Entity";
	case 429: return "Too Many Requests";
	case 501: return "Not Implemented";
	case 502: return "Bad Gateway";
	case 503: return "Service Unavailable";
	default: return status >= 500 ? "Internal Server Error" : "Error";
	}
}

void http_raw(struct evhttp_request *req, int status, const char *ctype, const void *data,
	      size_t len)
{
	headers(req, ctype);
	struct evbuffer *b = evbuffer_new();
	if (b && len)
		evbuffer_add(b, data, len);
	evhttp_send_reply(req, status, reason(status), b);
	if (b)
		evbuffer_free(b);
	count(status, len);
}

void http_json(struct evhttp_request *req, int status, json_t *body)
{
	char *s = json_dumps(body, JSON_COMPACT);
	json_decref(body);
	if (!s) {
		static const char oom[] =
			"{\"error\":{\"code\":\"internal\",\"message\":\"out of memory\"}}";
		http_raw(req, 500, "application/json", oom, sizeof oom - 1);
		return;
	}
	size_t n = strlen(s);
	s[n] = '\0';
	http_raw(req, status, "application/json", s, n);
	free(s);
}

void http_no_content(struct evhttp_request *req)
{
	evhttp_send_reply(req, 204, "No Content", NULL);
	count(204, 0);
}

void http_accepted(struct evhttp_request *req)
{
	evhttp_send_reply(req, 202, "Accepted", NULL);
	count(202, 0);
}

void http_not_allowed(struct evhttp_request *req)
{
	http_error(req, 405, "method_not_allowed", "method not allowed on %s",
		   evhttp_uri_get_path(evhttp_request_get_evhttp_uri(req)));
}

void http_collection(struct evhttp_request *req, void (*create)(struct evhttp_request *req),
		     void (*list)(struct evhttp_request *req))
{
	enum evhttp_cmd_type m = evhttp_request_get_command(req);
	if (m == EVHTTP_REQ_POST)
		create(req);
	else if (m == EVHTTP_REQ_GET)
		list(req);
	else
		http_not_allowed(req);
}

static int status_of(const char *code)
{
	static const struct {
		const char *c;
		int s;
	} t[] = {{"invalid_request", 400}, {"invalid_path", 400}, {"is_directory", 400},
		 {"unauthorized", 401},    {"forbidden", 403},    {"not_found", 404},
		 {"method_not_allowed", 405}, {"conflict", 409},  {"too_large", 413},
		 {"unsupported_media_type", 415}, {"patch_failed", 422},
		 {"limit_reached", 429}};
	for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
		if (!strcmp(code, t[i].c))
			return t[i].s;
	return 500;
}

void http_error_code(struct evhttp_request *req, const char *code, const char *msg)
{
	int s = status_of(code);
	http_json(req, s, json_pack("{s:{s:s,s:s}}", "error", "code", s == 500 ? "internal" : code,
				    "message", msg));
}

void http_error(struct evhttp_request *req, int status, const char *code, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	/* a message quotes the client (a path, a key, cut at a byte count):
	 * what is not UTF-8 would fail the JSON string, and the answer would
	 * be a 500 instead of the error meant */
	moat_utf8_clean(msg);
	http_json(req, status, json_pack("{s:{s:s,s:s}}", "error", "code", code, "message", msg));
}

const char *http_body(struct evhttp_request *req, size_t *len)
{
	struct evbuffer *in = evhttp_request_get_input_buffer(req);
	*len = evbuffer_get_length(in);
	stats.bytes_in += *len;
	if (!*len)
		return "";
	return (const char *)evbuffer_pullup(in, -1);
}

json_t *http_body_json(struct evhttp_request *req, bool empty_ok)
{
	return http_body_json_flags(req, empty_ok, 0);
}

json_t *http_body_json_flags(struct evhttp_request *req, bool empty_ok, size_t flags)
{
	size_t len;
	const char *p = http_body(req, &len);
	if (len > MAX_JSON_BODY) {
		http_error(req, 413, "too_large", "JSON body over %u MiB", MAX_JSON_BODY >> 20);
		return NULL;
	}
	if (!len && empty_ok)
		return json_object();
	json_error_t je;
	json_t *j = json_loadb(p, len, JSON_REJECT_DUPLICATES | flags, &je);
	if (!j) {
		http_error(req, 400, "invalid_request", "malformed JSON body: %s (line %d, column %d)",
			   je.text, je.line, je.column);
		return NULL;
	}
	if (!json_is_object(j)) {
		json_decref(j);
		http_error(req, 400, "invalid_request", "the body must be a JSON object");
		return NULL;
	}
	return j;
}

char *http_query(struct evhttp_request *req, const char *key)
{
	const struct evhttp_uri *u = evhttp_request_get_evhttp_uri(req);
	const char *q = u ? evhttp_uri_get_query(u) : NULL;
	if (!q)
		return NULL;
	struct evkeyvalq kv;
	if (evhttp_parse_query_str(q, &kv) < 0)
		return NULL;
	const char *v = evhttp_find_header(&kv, key);
	char *r = v ? strdup(v) : NULL;
	evhttp_clear_headers(&kv);
	return r;
}

json_t *http_query_prefixed(struct evhttp_request *req, const char *prefix)
{
	json_t *o = json_object();
	const struct evhttp_uri *u = evhttp_request_get_evhttp_uri(req);
	const char *q = u ? evhttp_uri_get_query(u) : NULL;
	struct evkeyvalq kv;
	if (!q || evhttp_parse_query_str(q, &kv) < 0)
		return o;
	size_t pl = strlen(prefix);
	for (struct evkeyval *h = kv.tqh_first; h; h = h->next.tqe_next) {
		/* libevent decodes values, not keys */
		char *key = evhttp_uridecode(h->key, 1, NULL);
		json_t *v = json_string(h->value); /* NULL unless UTF-8 */
		if (key && v && !strncmp(key, prefix, pl) && key[pl])
			json_object_set_new(o, key + pl, v);
		else
			json_decref(v);
		free(key);
	}
	evhttp_clear_headers(&kv);
	return o;
}

/* Constant time: the comparison does not tell how much of a guess was right. */
static bool token_ok(const char *got)
{
	if (!token)
		return true;
	size_t a = strlen(token), b = got ? strlen(got) : 0;
	unsigned char d = (unsigned char)(a != b);
	for (size_t i = 0; i < a; i++)
		d |= (unsigned char)(token[i] ^ (i < b ? got[i] : 0));
	return d == 0;
}

bool http_token_equal(const char *got)
{
	return token_ok(got);
}

static uint64_t (*body_limit)(enum evhttp_cmd_type m, const char *path);

static uint64_t route_limit(enum evhttp_cmd_type m, const char *path)
{
	uint64_t l = body_limit ? body_limit(m, path) : MAX_BODY;
	return l < MAX_BODY ? l : MAX_BODY;
}

void http_set_body_limit(uint64_t (*fn)(enum evhttp_cmd_type m, const char *path))
{
	body_limit = fn;
}

void http_set_closecb(struct evhttp_connection *c,
		      void (*cb)(struct evhttp_connection *, void *), void *arg)
{
	if (c)
		guard_set_closecb(c, cb, arg);
}

/* ---- requests answered later (see struct http_wait) ----------------------- */

static void wait_conn_closed(struct evhttp_connection *c, void *arg)
{
	struct http_wait *w = arg;
	/* libevent found the connection broken itself (a write of a streamed
	 * reply failed): it hands the request back to us, detached, to end;
	 * ending a detached request frees it */
	struct evhttp_request *req = w->req;
	bool detached = !evhttp_request_get_connection(req);
	bool streaming = w->streaming;
	w->gone(w->arg); /* frees w */
	if (detached && streaming)
		evhttp_send_reply_end(req);
	else if (detached)
		evhttp_send_reply(req, 500, "Client gone", NULL);
}

static void wait_hangup(evutil_socket_t fd, short what, void *arg)
{
	struct http_wait *w = arg;
	if (w->streaming) {
		/* a started chunked reply: end it (the write fails and evhttp
		 * frees the request and the connection itself) */
		struct evhttp_request *req = w->req;
		http_wait_stop(w);
		w->gone(w->arg);
		evhttp_send_reply_end(req);
		return;
	}
	/* freeing the connection runs wait_conn_closed */
	struct evhttp_connection *c = evhttp_request_get_connection(w->req);
	if (c)
		evhttp_connection_free(c);
}

void http_wait_start(struct http_wait *w, struct event_base *base, struct evhttp_request *req,
		     void (*gone)(void *arg), void *arg)
{
	*w = (struct http_wait){.req = req, .gone = gone, .arg = arg};
	struct evhttp_connection *c = evhttp_request_get_connection(req);
	http_set_closecb(c, wait_conn_closed, w);
	struct bufferevent *bev = c ? evhttp_connection_get_bufferevent(c) : NULL;
	if (bev && base) {
		w->hangup = event_new(base, bufferevent_getfd(bev), EV_CLOSED, wait_hangup, w);
		if (w->hangup && event_add(w->hangup, NULL) < 0) {
			event_free(w->hangup);
			w->hangup = NULL;
		}
	}
}

void http_wait_stop(struct http_wait *w)
{
	struct evhttp_connection *c = w->req ? evhttp_request_get_connection(w->req) : NULL;
	if (c)
		http_set_closecb(c, NULL, NULL);
	if (w->hangup) {
		event_free(w->hangup);
		w->hangup = NULL;
	}
}

void http_wait_stream(struct http_wait *w, const char *ctype)
{
	if (w->streaming)
		return;
	struct evkeyvalq *h = evhttp_request_get_output_headers(w->req);
	evhttp_add_header(h, "Content-Type", ctype);
	evhttp_add_header(h, "Cache-Control", "no-store");
	evhttp_send_reply_start(w->req, 200, "OK");
	w->streaming = true;
}

size_t http_wait_backlog(const struct http_wait *w)
{
	struct evhttp_connection *c = evhttp_request_get_connection(w->req);
	struct bufferevent *bev = c ? evhttp_connection_get_bufferevent(c) : NULL;
	return bev ? evbuffer_get_length(bufferevent_get_output(bev)) : 0;
}

/* A request the head check refused: answered, and the connection closed
 * (what the client still sends is dropped). */
static void refused(struct evhttp_request *req, const struct guard_refusal *r)
{
	if (r->close)
		evhttp_add_header(evhttp_request_get_output_headers(req), "Connection", "close");
	http_error(req, r->status, r->code, "%s", r->msg);
}

static void on_request(struct evhttp_request *req, void *arg)
{
	const char *path = evhttp_request_get_uri(req);
	bool health = path && !strncmp(path, "/healthz", 8) && (!path[8] || path[8] == '?');
	struct guard_refusal r;
	bool is_refused = guard_refused(req, &r);
	if (is_refused && !r.after_auth) {
		refused(req, &r);
		return;
	}
	/* A web page must not drive the daemon, whatever the door (browser.h):
	 * a foreign Origin always; a foreign Host when no token stands in the
	 * way of a DNS-rebound page (E2B's <port>-<id>. hosts have their own
	 * per-sandbox auth). */
	struct evkeyvalq *hin = evhttp_request_get_input_headers(req);
	const char *origin = evhttp_find_header(hin, "Origin");
	bool e2b = e2b_claims(req);
	if (!browser_origin_ok(origin, listen_host, allow_origins)) {
		http_error(req, 403, "forbidden",
			   "Origin %.200s is not allowed: a web page may not drive moat serve "
			   "(loopback origins, the --listen host and --allow-origin only)",
			   origin);
		return;
	}
	const char *hosthdr = evhttp_find_header(hin, "Host");
	if (!token && !e2b && !browser_host_ok(hosthdr, listen_host)) {
		http_error(req, 403, "forbidden",
			   "Host %.200s is not allowed: a daemon without a token answers only "
			   "loopback names and its --listen host",
			   hosthdr);
		return;
	}
	/* the E2B door authenticates its own requests (an API key for its
	 * control plane, per-sandbox access tokens for envd) and answers in
	 * E2B's error shape */
	if (e2b) {
		if (is_refused) {
			if (r.close)
				evhttp_add_header(evhttp_request_get_output_headers(req),
						  "Connection", "close");
			e2b_refuse(req, r.status, r.msg);
			return;
		}
		e2b_route(req);
		return;
	}
	if (token && !health) {
		const char *h = evhttp_find_header(evhttp_request_get_input_headers(req),
						   "Authorization");
		if (!h || strncasecmp(h, "Bearer ", 7) != 0 || !token_ok(h + 7)) {
			evhttp_add_header(evhttp_request_get_output_headers(req),
					  "WWW-Authenticate", "Bearer");
			if (is_refused && r.close)
				evhttp_add_header(evhttp_request_get_output_headers(req),
						  "Connection", "close");
			http_error(req, 401, "unauthorized", "missing or wrong bearer token");
			return;
		}
	}
	if (is_refused) {
		refused(req, &r);
		return;
	}
	route(req);
}

void http_allow_origins(char *const *origins)
{
	allow_origins = origins;
}

int http_start(struct event_base *base, const char *listen, const char *tok,
	       void (*handler)(struct evhttp_request *req), struct moat_err *e)
{
	char host[256];
	const char *colon = strrchr(listen, ':');
	char *end;
	long port = colon ? strtol(colon + 1, &end, 10) : -1;
	if (!colon || colon == listen || (size_t)(colon - listen) >= sizeof host || *end ||
	    port < 0 || port > 65535)
		return moat_err_set(e, MOAT_E_USAGE, 0, "--listen %s: expected HOST:PORT", listen);
	snprintf(host, sizeof host, "%.*s", (int)(colon - listen), listen);
	if (host[0] == '[') { /* [::1]:7070 */
		memmove(host, host + 1, strlen(host));
		host[strcspn(host, "]")] = '\0';
	}
	snprintf(listen_host, sizeof listen_host, "%s", host);
	http = evhttp_new(base);
	if (!http)
		return moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "evhttp");
	/* evhttp's own limit stays as a backstop the head check never lets
	 * it reach (it would answer in HTML) */
	evhttp_set_max_body_size(http, MAX_BODY);
	guard_set_limit(route_limit);
	evhttp_set_bevcb(http, guard_bevcb, NULL);
	evhttp_set_timeout(http, 3600);
	/* every method libevent knows reaches the router, which answers 405
	 * in the API's error shape rather than libevent's HTML 501 */
	evhttp_set_allowed_methods(http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_PUT |
						 EVHTTP_REQ_DELETE | EVHTTP_REQ_HEAD |
						 EVHTTP_REQ_OPTIONS | EVHTTP_REQ_TRACE |
						 EVHTTP_REQ_CONNECT | EVHTTP_REQ_PATCH);
	evhttp_set_gencb(http, on_request, NULL);
	if (!evhttp_bind_socket_with_handle(http, host, (ev_uint16_t)port))
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "--listen %s: cannot listen", listen);
	token = tok ? strdup(tok) : NULL;
	route = handler;
	return 0;
}

void http_stop(void)
{
	if (http)
		evhttp_free(http);
	http = NULL;
	free(token);
	token = NULL;
}
