/* The request framer in front of evhttp: see http_guard.h.
 *
 * Its view of the framing must be evhttp's own, or a body could smuggle a
 * request past it: so anything evhttp 2.1 would read differently, or
 * refuse itself, is refused here first (obs-fold, chunk extensions, "0x"
 * sizes, Transfer-Encoding other than chunked, both framings at once, a
 * body on HEAD/TRACE, which evhttp does not read, unknown methods, an
 * Expect other than 100-continue, a target its URI parser rejects). */
#define _GNU_SOURCE
#include "http_guard.h"

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <stdio.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <string.h>
#include <strings.h>

#define MAX_FIELDS 100
#define MAX_CHUNK_LINE 64
/* refusals handed on, not yet seen by the router: a refusal that keeps the
 * connection waits for the router's answer before another may keep it, and
 * one that ends it is the last, so there are at most two */
#define MAX_PENDING 2

enum gstate { G_HEAD, G_BODY, G_CHUNK_SIZE, G_CHUNK_DATA, G_CHUNK_EOL, G_TRAILER, G_DISCARD };

struct guard {
	struct guard *next;
	struct bufferevent *bev;
	struct evhttp_connection *evcon;
	struct evbuffer *raw; /* received, not checked yet */
	guard_limit_fn limit_fn;
	enum gstate st;
	size_t scan;        /* G_HEAD: where the next unread line starts */
	uint64_t left;      /* G_BODY / G_CHUNK_DATA: bytes still to pass */
	uint64_t total;     /* chunked: body bytes announced so far */
	uint64_t limit;     /* this request's body limit */
	size_t trailer;     /* trailer bytes so far */
	bool skip;          /* a refused body: framed as usual, then dropped */
	unsigned long heads;      /* requests handed to evhttp */
	unsigned long seen;       /* requests the router saw */
	struct pending {
		unsigned long at; /* 1-based index of the refused request */
		struct guard_refusal why;
		char msg[192];
	} pending[MAX_PENDING]; /* slots with at <= seen are free */
	bool busy;
	bool released;      /* the connection left HTTP (guard_release) */
	void (*user_cb)(struct evhttp_connection *, void *);
	void *user_arg;
};

static struct guard *guards;
static guard_limit_fn limit_of;

static struct guard *find_bev(const struct bufferevent *bev)
{
	for (struct guard *g = guards; g; g = g->next)
		if (g->bev == bev)
			return g;
	return NULL;
}

static struct guard *find_conn(struct evhttp_connection *c)
{
	return c ? find_bev(evhttp_connection_get_bufferevent(c)) : NULL;
}

static void on_close(struct evhttp_connection *c, void *arg)
{
	struct guard *g = arg;
	if (g->user_cb) {
		void (*cb)(struct evhttp_connection *, void *) = g->user_cb;
		g->user_cb = NULL;
		cb(c, g->user_arg);
	}
	for (struct guard **pp = &guards; *pp; pp = &(*pp)->next)
		if (*pp == g) {
			*pp = g->next;
			break;
		}
	evbuffer_free(g->raw);
	free(g);
}

void guard_set_closecb(struct evhttp_connection *c,
		       void (*cb)(struct evhttp_connection *, void *), void *arg)
{
	struct guard *g = find_conn(c);
	if (!g) {
		evhttp_connection_set_closecb(c, cb, arg);
		return;
	}
	g->user_cb = cb;
	g->user_arg = arg;
}

bool guard_refused(struct evhttp_request *req, struct guard_refusal *r)
{
	struct guard *g = find_conn(evhttp_request_get_connection(req));
	if (!g)
		return false;
	g->seen++;
	for (size_t i = 0; i < MAX_PENDING; i++)
		if (g->pending[i].at == g->seen) {
			*r = g->pending[i].why;
			r->msg = g->pending[i].msg;
			return true;
		}
	return false;
}

/* ---- refusing ---------------------------------------------------------------- */

/* No refusal waits for the router: a new one may keep the connection. */
static bool none_pending(const struct guard *g)
{
	for (size_t i = 0; i < MAX_PENDING; i++)
		if (g->pending[i].at > g->seen)
			return false;
	return true;
}

/* Records the refusal of request number at; false when there is no room
 * (cannot happen, see MAX_PENDING: the caller then ends the connection). */
static bool set_why(struct guard *g, unsigned long at, int status, const char *code,
		    bool after_auth, bool close, const char *msg)
{
	size_t i = 0;
	while (i < MAX_PENDING && g->pending[i].at > g->seen)
		i++;
	if (i == MAX_PENDING)
		return false;
	struct pending *p = &g->pending[i];
	p->at = at;
	p->why = (struct guard_refusal){
		.status = status, .code = code, .after_auth = after_auth, .close = close};
	snprintf(p->msg, sizeof p->msg, "%s", msg);
	return true;
}

/* A head refused before evhttp saw any of it: evhttp gets a stand-in
 * request instead (with the caller's credentials, checked as usual). */
static void refuse_head(struct guard *g, struct evbuffer *in, int status, const char *code,
			bool after_auth, const char *msg, const char *auth, size_t authlen,
			uint64_t body)
{
	/* while no other refusal waits for the router, a body of known length
	 * is dropped as it comes and the connection lives on (a client that
	 * sends all of it before reading still gets the answer); anything
	 * else ends the connection (each refusal keeps its own record: two
	 * can arrive in one read, before the router saw the first) */
	bool keep = body != UINT64_MAX && none_pending(g);
	if (!set_why(g, g->heads + 1, status, code, after_auth, !keep, msg)) {
		g->st = G_DISCARD;
		return;
	}
	g->heads++;
	g->scan = 0;
	evbuffer_add_printf(in, "GET /.moat-refused HTTP/1.1\r\nHost: moat\r\n%s",
			    keep ? "" : "Connection: close\r\n");
	if (auth)
		evbuffer_add_printf(in, "Authorization: %.*s\r\n", (int)authlen, auth);
	evbuffer_add(in, "\r\n", 2);
	if (keep && body) {
		g->st = G_BODY;
		g->left = body;
		g->skip = true;
	} else {
		g->st = keep ? G_HEAD : G_DISCARD;
	}
}

/* A chunked body already under way: end it where evhttp stands, so the
 * request reaches the router (and is answered as refused). */
static void cut(struct guard *g, struct evbuffer *in, int status, const char *code,
		const char *msg)
{
	static const char *const end[] = {
		[G_CHUNK_SIZE] = "0\r\n\r\n", [G_CHUNK_EOL] = "\r\n0\r\n\r\n", [G_TRAILER] = "\r\n"};
	/* over the limit, the framing is still known: the rest is dropped as
	 * it comes and the connection lives on; malformed, it ends */
	bool keep = status == 413 && g->st == G_CHUNK_SIZE && none_pending(g);
	if (!set_why(g, g->heads, status, code, status == 413, !keep, msg)) {
		/* fail closed: the body is not ended, evhttp never passes it on */
		g->st = G_DISCARD;
		return;
	}
	evbuffer_add(in, end[g->st], strlen(end[g->st]));
	if (keep)
		g->skip = true; /* the same size line again, now to skip */
	else
		g->st = G_DISCARD;
}

/* ---- the head ---------------------------------------------------------------- */

static const struct {
	const char *name;
	enum evhttp_cmd_type type;
} methods[] = {{"GET", EVHTTP_REQ_GET},       {"POST", EVHTTP_REQ_POST},
	       {"HEAD", EVHTTP_REQ_HEAD},     {"PUT", EVHTTP_REQ_PUT},
	       {"DELETE", EVHTTP_REQ_DELETE}, {"OPTIONS", EVHTTP_REQ_OPTIONS},
	       {"TRACE", EVHTTP_REQ_TRACE},   {"CONNECT", EVHTTP_REQ_CONNECT},
	       {"PATCH", EVHTTP_REQ_PATCH}};

static bool tchar(unsigned char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	       (c && strchr("!#$%&'*+-.^_`|~", c));
}

static bool field_value_ok(const char *v, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)v[i];
		if ((c < 0x20 && c != '\t') || c == 0x7f)
			return false;
	}
	return true;
}

static bool strcasestr_n(const char *v, size_t n, const char *w)
{
	size_t wl = strlen(w);
	for (size_t i = 0; i + wl <= n; i++)
		if (!strncasecmp(v + i, w, wl))
			return true;
	return false;
}

/* next line of [*p, end): its length without the EOL; *p moves past it */
static size_t take_line(const char **p, const char *end, const char **line)
{
	const char *s = *p, *nl = memchr(s, '\n', (size_t)(end - s));
	const char *e = nl ? nl : end;
	*p = nl ? nl + 1 : end;
	*line = s;
	return (size_t)(e - s) - (e > s && e[-1] == '\r');
}

struct head {
	enum evhttp_cmd_type type;
	char target[8192];
	char path[512]; /* for the route's limit (longer paths match no route) */
	bool has_cl, chunked, http10, conn_close;
	uint64_t cl;
	const char *auth;
	size_t authlen;
};

/* NULL when the head is well-formed, else why not (a 400). */
static const char *parse_head(const char *h, size_t len, struct head *out, int *status)
{
	const char *p = h, *end = h + len, *line;
	size_t n = take_line(&p, end, &line);
	*status = 400;
	const char *sp1 = memchr(line, ' ', n);
	const char *sp2 = sp1 ? memchr(sp1 + 1, ' ', (size_t)(line + n - sp1 - 1)) : NULL;
	if (!sp1 || !sp2 || memchr(sp2 + 1, ' ', (size_t)(line + n - sp2 - 1)))
		return "malformed request line";
	size_t ml = (size_t)(sp1 - line), tl = (size_t)(sp2 - sp1 - 1),
	       vl = (size_t)(line + n - sp2 - 1);
	if (vl != 8 || (memcmp(sp2 + 1, "HTTP/1.1", 8) && memcmp(sp2 + 1, "HTTP/1.0", 8)))
		return "unsupported HTTP version (HTTP/1.0 or HTTP/1.1)";
	out->http10 = !memcmp(sp2 + 1, "HTTP/1.0", 8);
	size_t mi = 0;
	while (mi < sizeof methods / sizeof methods[0] &&
	       (strlen(methods[mi].name) != ml || memcmp(methods[mi].name, line, ml)))
		mi++;
	if (mi == sizeof methods / sizeof methods[0]) {
		*status = 405;
		return "unknown method";
	}
	out->type = methods[mi].type;
	if (!tl || tl >= sizeof out->target || !field_value_ok(sp1 + 1, tl))
		return "malformed request target";
	memcpy(out->target, sp1 + 1, tl);
	out->target[tl] = '\0';
	struct evhttp_uri *u = evhttp_uri_parse_with_flags(out->target, EVHTTP_URI_NONCONFORMANT);
	if (!u)
		return "malformed request target";
	const char *path = evhttp_uri_get_path(u);
	snprintf(out->path, sizeof out->path, "%s", path ? path : "");
	evhttp_uri_free(u);
	bool has_te = false, expect_bad = false;
	unsigned fields = 0;
	while (p < end) {
		n = take_line(&p, end, &line);
		if (!n)
			break; /* the blank line ending the head */
		if (++fields > MAX_FIELDS)
			return "too many header fields";
		const char *colon = memchr(line, ':', n);
		if (!colon || colon == line)
			return "malformed header field";
		for (const char *c = line; c < colon; c++)
			if (!tchar((unsigned char)*c))
				return "malformed header field name";
		const char *v = colon + 1, *ve = line + n;
		while (v < ve && *v == ' ')
			v++;
		/* evhttp skips only spaces there: "Transfer-Encoding:\tchunked"
		 * would not be chunked to it */
		if (v < ve && *v == '\t')
			return "tab before a header field value";
		while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
			ve--;
		if (!field_value_ok(v, (size_t)(ve - v)))
			return "control character in a header field";
		size_t nl = (size_t)(colon - line), vlen = (size_t)(ve - v);
		if (nl == 14 && !strncasecmp(line, "Content-Length", 14)) {
			if (out->has_cl || !vlen || vlen > 19)
				return "malformed or repeated Content-Length";
			uint64_t x = 0;
			for (size_t i = 0; i < vlen; i++) {
				if (v[i] < '0' || v[i] > '9')
					return "malformed Content-Length";
				x = x * 10 + (uint64_t)(v[i] - '0');
			}
			out->has_cl = true;
			out->cl = x;
		} else if (nl == 17 && !strncasecmp(line, "Transfer-Encoding", 17)) {
			if (has_te || vlen != 7 || strncasecmp(v, "chunked", 7))
				return "unsupported Transfer-Encoding (only chunked)";
			has_te = out->chunked = true;
		} else if (nl == 6 && !strncasecmp(line, "Expect", 6)) {
			expect_bad |= vlen != 12 || strncasecmp(v, "100-continue", 12);
		} else if (nl == 10 && !strncasecmp(line, "Connection", 10)) {
			out->conn_close |= vlen >= 5 && strcasestr_n(v, vlen, "close");
		} else if (nl == 13 && !strncasecmp(line, "Authorization", 13)) {
			out->auth = v;
			out->authlen = vlen;
		}
	}
	if (out->has_cl && out->chunked)
		return "both Content-Length and Transfer-Encoding";
	if (expect_bad)
		return "unsupported Expect (only 100-continue)";
	if ((out->type == EVHTTP_REQ_HEAD || out->type == EVHTTP_REQ_TRACE) &&
	    (out->chunked || out->cl))
		return "a HEAD or TRACE request has no body";
	return NULL;
}

/* ---- the framer -------------------------------------------------------------- */

static void head_state(struct guard *g, struct evbuffer *in)
{
	/* blank lines before a request are skipped (RFC 9112 2.2) */
	for (;;) {
		unsigned char c[2];
		ssize_t n = evbuffer_copyout(g->raw, c, 2);
		if (n >= 1 && c[0] == '\n')
			evbuffer_drain(g->raw, 1);
		else if (n == 2 && c[0] == '\r' && c[1] == '\n')
			evbuffer_drain(g->raw, 2);
		else
			break;
		g->scan = 0;
	}
	size_t len = evbuffer_get_length(g->raw), end = 0;
	while (!end) {
		struct evbuffer_ptr ptr;
		if (evbuffer_ptr_set(g->raw, &ptr, g->scan, EVBUFFER_PTR_SET) < 0)
			break;
		size_t eol = 0;
		ptr = evbuffer_search_eol(g->raw, &ptr, &eol, EVBUFFER_EOL_CRLF);
		if (ptr.pos < 0)
			break;
		if ((size_t)ptr.pos == g->scan && g->scan)
			end = (size_t)ptr.pos + eol;
		g->scan = (size_t)ptr.pos + eol;
	}
	if (!end) {
		if (len > GUARD_MAX_HEAD)
			refuse_head(g, in, 400, "invalid_request", false,
				    "request head over 64 KiB", NULL, 0, UINT64_MAX);
		return;
	}
	if (end > GUARD_MAX_HEAD) {
		refuse_head(g, in, 400, "invalid_request", false, "request head over 64 KiB",
			    NULL, 0, UINT64_MAX);
		return;
	}
	struct head h = {0};
	const char *txt = (const char *)evbuffer_pullup(g->raw, (ev_ssize_t)end);
	int status;
	const char *bad = txt ? parse_head(txt, end, &h, &status) : "out of memory";
	if (bad) {
		refuse_head(g, in, status, status == 405 ? "method_not_allowed" : "invalid_request",
			    false, bad, NULL, 0, UINT64_MAX);
		return;
	}
	g->limit = g->limit_fn ? g->limit_fn(h.type, h.path) : UINT64_MAX;
	if (h.has_cl && h.cl > g->limit) {
		char msg[160];
		snprintf(msg, sizeof msg, "request body of %llu bytes is over this route's limit "
			 "of %llu bytes", (unsigned long long)h.cl, (unsigned long long)g->limit);
		char auth[1024];
		size_t al = h.auth && h.authlen < sizeof auth ? h.authlen : 0;
		if (al)
			memcpy(auth, h.auth, al);
		evbuffer_drain(g->raw, end); /* the head; its body follows */
		refuse_head(g, in, 413, "too_large", true, msg, al ? auth : NULL, al,
			    h.http10 || h.conn_close ? UINT64_MAX : h.cl);
		return;
	}
	evbuffer_remove_buffer(g->raw, in, end);
	g->heads++;
	g->scan = 0;
	g->total = 0;
	g->trailer = 0;
	if (h.chunked) {
		g->st = G_CHUNK_SIZE;
	} else if (h.cl) {
		g->st = G_BODY;
		g->left = h.cl;
	}
}

/* Pass at most g->left bytes on; true when all of them went. */
static bool pass(struct guard *g, struct evbuffer *in)
{
	size_t n = evbuffer_get_length(g->raw);
	if (n > g->left)
		n = (size_t)g->left;
	if (g->skip)
		evbuffer_drain(g->raw, n);
	else
		evbuffer_remove_buffer(g->raw, in, n);
	g->left -= n;
	return g->left == 0;
}

/* One line of raw (without its EOL) into buf; 0 if none yet, -1 if longer
 * than cap, else its length + 1, with *eol the EOL's length. */
static int line_of(struct guard *g, char *buf, size_t cap, size_t *eol)
{
	struct evbuffer_ptr ptr = evbuffer_search_eol(g->raw, NULL, eol, EVBUFFER_EOL_CRLF);
	if (ptr.pos < 0)
		return evbuffer_get_length(g->raw) > cap ? -1 : 0;
	if ((size_t)ptr.pos > cap)
		return -1;
	evbuffer_copyout(g->raw, buf, (size_t)ptr.pos);
	return (int)ptr.pos + 1;
}

static void chunk_size(struct guard *g, struct evbuffer *in)
{
	char line[MAX_CHUNK_LINE + 1];
	size_t eol;
	int n = line_of(g, line, MAX_CHUNK_LINE, &eol);
	if (n == 0)
		return;
	size_t len = (size_t)(n - 1);
	uint64_t v = 0;
	bool ok = n > 0 && len > 0 && len <= 15;
	for (size_t i = 0; ok && i < len; i++) {
		char c = line[i];
		int d = c >= '0' && c <= '9' ? c - '0'
			: c >= 'a' && c <= 'f' ? c - 'a' + 10
			: c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
		ok = d >= 0;
		v = v * 16 + (uint64_t)(d < 0 ? 0 : d);
	}
	if (!ok && g->skip) {
		g->st = G_DISCARD;
		return;
	}
	if (!ok) {
		cut(g, in, 400, "invalid_request", "malformed chunk size");
		return;
	}
	if (g->skip) {
		evbuffer_drain(g->raw, len + eol);
		if (v) {
			g->st = G_CHUNK_DATA;
			g->left = v;
		} else {
			g->st = G_TRAILER;
		}
		return;
	}
	if (v > g->limit - g->total) {
		char msg[160];
		snprintf(msg, sizeof msg, "chunked request body over this route's limit of %llu bytes",
			 (unsigned long long)g->limit);
		cut(g, in, 413, "too_large", msg);
		if (g->skip)
			chunk_size(g, in); /* the same line, now skipped */
		return;
	}
	g->total += v;
	evbuffer_remove_buffer(g->raw, in, len + eol);
	if (v) {
		g->st = G_CHUNK_DATA;
		g->left = v;
	} else {
		g->st = G_TRAILER;
	}
}

static void chunk_eol(struct guard *g, struct evbuffer *in)
{
	unsigned char c[2];
	ssize_t n = evbuffer_copyout(g->raw, c, 2);
	size_t k = n >= 1 && c[0] == '\n' ? 1 : n == 2 && c[0] == '\r' && c[1] == '\n' ? 2 : 0;
	if (!k) {
		if (n == 2 || (n == 1 && c[0] != '\r')) {
			if (g->skip)
				g->st = G_DISCARD;
			else
				cut(g, in, 400, "invalid_request", "chunk data longer than its size");
		}
		return;
	}
	if (g->skip)
		evbuffer_drain(g->raw, k);
	else
		evbuffer_remove_buffer(g->raw, in, k);
	g->st = G_CHUNK_SIZE;
}

static void trailer(struct guard *g, struct evbuffer *in)
{
	char line[1024];
	size_t eol;
	int n = line_of(g, line, sizeof line - 1, &eol);
	if (n == 0)
		return;
	if (n < 0) {
		if (g->skip)
			g->st = G_DISCARD;
		else
			cut(g, in, 400, "invalid_request", "malformed chunked trailer");
		return;
	}
	size_t len = (size_t)(n - 1);
	if (!len) {
		if (g->skip)
			evbuffer_drain(g->raw, eol);
		else
			evbuffer_remove_buffer(g->raw, in, eol);
		g->st = G_HEAD;
		g->skip = false;
		return;
	}
	/* trailer fields are not used: checked for form, then dropped */
	const char *colon = memchr(line, ':', len);
	g->trailer += len + eol;
	if (!colon || colon == line || !field_value_ok(line, len) || g->trailer > GUARD_MAX_HEAD) {
		if (g->skip)
			g->st = G_DISCARD;
		else
			cut(g, in, 400, "invalid_request", "malformed chunked trailer");
		return;
	}
	evbuffer_drain(g->raw, len + eol);
}

static void run(struct guard *g, struct evbuffer *in)
{
	for (;;) {
		size_t before = evbuffer_get_length(g->raw);
		enum gstate st = g->st;
		if (!before && st != G_DISCARD)
			return;
		switch (st) {
		case G_HEAD: head_state(g, in); break;
		case G_BODY:
			if (pass(g, in)) {
				g->st = G_HEAD;
				g->skip = false;
			}
			break;
		case G_CHUNK_SIZE: chunk_size(g, in); break;
		case G_CHUNK_DATA:
			if (pass(g, in))
				g->st = G_CHUNK_EOL;
			break;
		case G_CHUNK_EOL: chunk_eol(g, in); break;
		case G_TRAILER: trailer(g, in); break;
		case G_DISCARD:
			/* refused: nothing more is read into memory */
			evbuffer_drain(g->raw, evbuffer_get_length(g->raw));
			return;
		}
		if (g->st == st && evbuffer_get_length(g->raw) == before)
			return; /* waiting for more */
	}
}

/* Data arrived: take it back out of evhttp's input, check it, put back
 * what passes. */
static void on_input(struct evbuffer *in, const struct evbuffer_cb_info *info, void *arg)
{
	struct bufferevent *bev = arg;
	if (!info->n_added)
		return;
	struct guard *g = find_bev(bev);
	if (g && (g->busy || g->released))
		return;
	if (!g) {
		void *cbarg = NULL;
		g = calloc(1, sizeof *g);
		struct evbuffer *raw = g ? evbuffer_new() : NULL;
		bufferevent_getcb(bev, NULL, NULL, NULL, &cbarg);
		if (!raw || !cbarg) {
			/* fail closed: nothing of this connection reaches evhttp */
			free(g);
			if (raw)
				evbuffer_free(raw);
			evbuffer_drain(in, evbuffer_get_length(in));
			bufferevent_disable(bev, EV_READ);
			return;
		}
		g->bev = bev;
		g->raw = raw;
		g->evcon = cbarg; /* evhttp's callbacks get the connection */
		/* a stream's small frames (Connect envelopes, SSE events, the
		 * end-stream frame) must not wait for the peer's delayed ACK
		 * (Nagle: about 40 ms each); a unix socket refuses, harmlessly */
		int one = 1;
		(void)setsockopt(bufferevent_getfd(bev), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
		g->limit_fn = limit_of;
		g->next = guards;
		guards = g;
		evhttp_connection_set_closecb(g->evcon, on_close, g);
	}
	/* the bulk of a body: it stays where it is, only counted */
	if ((g->st == G_BODY || g->st == G_CHUNK_DATA) && !g->skip &&
	    !evbuffer_get_length(g->raw) && info->n_added <= g->left) {
		g->left -= info->n_added;
		if (!g->left)
			g->st = g->st == G_BODY ? G_HEAD : G_CHUNK_EOL;
		return;
	}
	size_t total = evbuffer_get_length(in), keep = total - info->n_added;
	struct evbuffer *old = keep ? evbuffer_new() : NULL;
	if (keep && !old) {
		/* out of memory: fail closed, evhttp gets nothing more */
		g->st = G_DISCARD;
		evbuffer_drain(in, total);
		bufferevent_disable(bev, EV_READ);
		return;
	}
	g->busy = true;
	if (old)
		evbuffer_remove_buffer(in, old, keep);
	evbuffer_add_buffer(g->raw, in);
	if (old) {
		evbuffer_add_buffer(in, old);
		evbuffer_free(old);
	}
	run(g, in);
	g->busy = false;
}

int guard_release(struct bufferevent *bev, struct evbuffer *to)
{
	struct guard *g = find_bev(bev);
	if (!g || g->released)
		return 0;
	g->released = true;
	/* (not back into the input: a bufferevent's input takes bytes only
	 * from its socket) */
	return evbuffer_add_buffer(to, g->raw);
}

void guard_set_limit(guard_limit_fn fn)
{
	limit_of = fn;
}

struct bufferevent *guard_bevcb(struct event_base *base, void *arg)
{
	struct bufferevent *bev = bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE);
	if (bev && !evbuffer_add_cb(bufferevent_get_input(bev), on_input, bev)) {
		bufferevent_free(bev);
		return NULL;
	}
	return bev;
}
