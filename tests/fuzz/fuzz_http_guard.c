/* libFuzzer target: the request framer in front of evhttp
 * (src/serve/http_guard.c). The framer's own code is included, unchanged,
 * so that the harness can reach its per-connection state (to check what it
 * holds back, and to free it: evhttp calls the close callback only for a
 * connected socket). The connection is real: the framer's bufferevent from
 * guard_bevcb() (no socket), wrapped in a real evhttp_connection, and the
 * bytes arrive in its input evbuffer as TCP would deliver them.
 *
 * Input: byte 0 = the route limits (bits 0-2 a base limit, bit 3 GET has
 * none, bit 4 the limit shrinks with the path's length); byte 1 = how many
 * split points (bits 0-4); byte 2 = after which pieces "evhttp" reads its
 * input (bit i for piece i, else the bytes stay there); then one byte per
 * split point, the piece's length - 1; the rest is the client's bytes.
 *
 * Checks, on everything the framer passes on, parsed the way evhttp 2.1
 * does: it is a sequence of complete requests (a head is never passed in
 * part; only the last request's body may still be under way), each head
 * within GUARD_MAX_HEAD with a request line, fields and framing evhttp
 * reads the same way (no obs-fold, one Content-Length, only chunked, not
 * both, no body on HEAD/TRACE, chunk sizes in plain hex, CRLF after each
 * chunk, no trailer fields), each body within its route's limit; nothing
 * follows a refusal that closes the connection; what the framer holds
 * back never exceeds GUARD_MAX_HEAD. */
#include "../../src/serve/http_guard.c"

#include <event2/http_struct.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

static struct event_base *base;
static uint8_t limit_mode;

static uint64_t fuzz_limit(enum evhttp_cmd_type m, const char *path)
{
	static const uint64_t lim[] = {0, 1, 5, 16, 100, 4096, 1u << 20, 64u << 20};
	uint64_t l = lim[limit_mode & 7];
	if ((limit_mode & 8) && m == EVHTTP_REQ_GET)
		l = 0;
	if (limit_mode & 16)
		l >>= strlen(path) & 3;
	return l;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	base = event_base_new();
	if (!base)
		abort();
	guard_set_limit(fuzz_limit);
	return 0;
}

/* ---- what evhttp sees ---------------------------------------------------- */

struct seen {
	char *buf;
	size_t len, cap;
	size_t pos;  /* where the next request starts */
	bool closed; /* a refusal ended the connection */
	bool forged; /* the client itself sent the stand-in's target */
	struct evhttp_connection *evcon;
};

static void take(struct seen *s, struct evbuffer *in)
{
	size_t n = evbuffer_get_length(in);
	if (!n)
		return;
	if (s->len + n > s->cap) {
		size_t cap = (s->len + n) * 2;
		char *b = realloc(s->buf, cap);
		if (!b)
			abort();
		s->buf = b;
		s->cap = cap;
	}
	if (evbuffer_remove(in, s->buf + s->len, n) != (int)n)
		abort();
	s->len += n;
}

/* the next line of [*p, end) as evbuffer_readln(EVBUFFER_EOL_CRLF) reads
 * it; false when there is no LF yet */
static bool line(const char **p, const char *end, const char **l, size_t *n)
{
	const char *nl = memchr(*p, '\n', (size_t)(end - *p));
	if (!nl)
		return false;
	*l = *p;
	*n = (size_t)(nl - *p) - (nl > *p && nl[-1] == '\r');
	*p = nl + 1;
	return true;
}

static bool hex_line(const char *l, size_t n, uint64_t *v)
{
	if (!n || n > 15)
		return false;
	*v = 0;
	for (size_t i = 0; i < n; i++) {
		char c = l[i];
		int d = c >= '0' && c <= '9' ? c - '0'
			: c >= 'a' && c <= 'f' ? c - 'a' + 10
			: c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
		if (d < 0)
			return false;
		*v = *v * 16 + (uint64_t)d;
	}
	return true;
}

/* One request at s->pos: its length when complete, 0 when its body is
 * still under way; aborts on anything evhttp would read differently. */
static size_t one_request(struct seen *s, enum evhttp_cmd_type *type, char *path, size_t pathcap)
{
	const char *start = s->buf + s->pos, *end = s->buf + s->len, *p = start, *l;
	size_t n;
	if (!line(&p, end, &l, &n) || !n)
		abort(); /* a partial head, or a blank line evhttp would refuse */
	/* request line: METHOD SP TARGET SP HTTP/1.x */
	const char *sp1 = memchr(l, ' ', n);
	const char *sp2 = sp1 ? memchr(sp1 + 1, ' ', (size_t)(l + n - sp1 - 1)) : NULL;
	if (!sp1 || !sp2 || memchr(sp2 + 1, ' ', (size_t)(l + n - sp2 - 1)))
		abort();
	size_t ml = (size_t)(sp1 - l), tl = (size_t)(sp2 - sp1 - 1);
	if ((size_t)(l + n - sp2 - 1) != 8 ||
	    (memcmp(sp2 + 1, "HTTP/1.1", 8) && memcmp(sp2 + 1, "HTTP/1.0", 8)))
		abort();
	size_t mi = 0;
	while (mi < sizeof methods / sizeof methods[0] &&
	       (strlen(methods[mi].name) != ml || memcmp(methods[mi].name, l, ml)))
		mi++;
	if (mi == sizeof methods / sizeof methods[0])
		abort();
	*type = methods[mi].type;
	char target[8192];
	if (!tl || tl >= sizeof target || memchr(sp1 + 1, '\0', tl))
		abort();
	memcpy(target, sp1 + 1, tl);
	target[tl] = '\0';
	struct evhttp_uri *u = evhttp_uri_parse_with_flags(target, EVHTTP_URI_NONCONFORMANT);
	if (!u)
		abort();
	const char *up = evhttp_uri_get_path(u);
	snprintf(path, pathcap, "%s", up ? up : "");
	evhttp_uri_free(u);
	/* fields, up to the blank line */
	bool has_cl = false, chunked = false;
	uint64_t cl = 0;
	for (;;) {
		if (!line(&p, end, &l, &n))
			abort(); /* a partial head */
		if (!n)
			break;
		if (l[0] == ' ' || l[0] == '\t')
			abort(); /* obs-fold: evhttp would join it to the field before */
		const char *colon = memchr(l, ':', n);
		if (!colon || colon == l || memchr(l, '\0', n))
			abort();
		for (const char *c = l; c < colon; c++)
			if (!tchar((unsigned char)*c))
				abort();
		const char *v = colon + 1, *ve = l + n;
		while (v < ve && *v == ' ')
			v++;
		while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
			ve--;
		size_t nl = (size_t)(colon - l), vl = (size_t)(ve - v);
		if (nl == 14 && !strncasecmp(l, "Content-Length", 14)) {
			if (has_cl || !vl || vl > 18)
				abort();
			for (size_t i = 0; i < vl; i++) {
				if (v[i] < '0' || v[i] > '9')
					abort();
				cl = cl * 10 + (uint64_t)(v[i] - '0');
			}
			has_cl = true;
		} else if (nl == 17 && !strncasecmp(l, "Transfer-Encoding", 17)) {
			if (chunked || vl != 7 || strncasecmp(v, "chunked", 7))
				abort();
			chunked = true;
		}
	}
	if ((size_t)(p - start) > GUARD_MAX_HEAD)
		abort();
	if (has_cl && chunked)
		abort();
	if ((*type == EVHTTP_REQ_HEAD || *type == EVHTTP_REQ_TRACE) && (chunked || cl))
		abort();
	uint64_t limit = fuzz_limit(*type, path), body = 0;
	if (!chunked) {
		if (cl > limit)
			abort();
		if ((uint64_t)(end - p) < cl)
			return 0;
		return (size_t)(p - start) + (size_t)cl;
	}
	for (;;) {
		uint64_t v;
		if (!line(&p, end, &l, &n)) {
			if (end - p > MAX_CHUNK_LINE)
				abort();
			return 0;
		}
		if (!hex_line(l, n, &v))
			abort();
		body += v;
		if (body > limit)
			abort();
		if (!v)
			break;
		if ((uint64_t)(end - p) < v)
			return 0;
		p += v;
		/* exactly an EOL after the data */
		if (p == end || (p + 1 == end && *p == '\r'))
			return 0;
		if (*p == '\n')
			p++;
		else if (p[0] == '\r' && p[1] == '\n')
			p += 2;
		else
			abort();
	}
	/* the trailer: only its end is passed on */
	if (p == end || (p + 1 == end && *p == '\r'))
		return 0;
	if (*p == '\n')
		p++;
	else if (p[0] == '\r' && p[1] == '\n')
		p += 2;
	else
		abort();
	return (size_t)(p - start);
}

/* evhttp reads what is in its input: every complete request goes to the
 * router, in order, which asks the framer whether it was refused. */
static void evhttp_reads(struct seen *s, struct evbuffer *in)
{
	take(s, in);
	while (s->pos < s->len) {
		if (s->closed)
			abort(); /* bytes after a refusal that closed the connection */
		enum evhttp_cmd_type type;
		char path[512];
		size_t n = one_request(s, &type, path, sizeof path);
		if (!n)
			return;
		static const char standin[] = "GET /.moat-refused HTTP/1.1\r\nHost: moat\r\n";
		bool is_standin = n >= sizeof standin - 1 &&
				  !memcmp(s->buf + s->pos, standin, sizeof standin - 1);
		s->pos += n;
		struct evhttp_request req = {.evcon = s->evcon};
		struct guard_refusal r;
		if (guard_refused(&req, &r)) {
			if (!r.status || !r.code || !r.msg)
				abort();
			s->closed = r.close;
		} else if (is_standin && !s->forged) {
			abort(); /* a stand-in the router would serve as a request */
		}
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 3)
		return 0;
	limit_mode = data[0];
	size_t splits = data[1] & 31;
	uint8_t reads = data[2];
	data += 3;
	size -= 3;
	if (splits > size)
		splits = size;
	const uint8_t *lens = data;
	data += splits;
	size -= splits;

	struct bufferevent *bev = guard_bevcb(base, NULL);
	if (!bev)
		abort();
	struct evhttp_connection *evcon =
		evhttp_connection_base_bufferevent_new(base, NULL, bev, "127.0.0.1", 80);
	if (!evcon)
		abort();
	struct seen s = {.evcon = evcon,
			 .forged = memmem(data, size, ".moat-refused", 13) != NULL};
	struct evbuffer *in = bufferevent_get_input(bev);
	size_t off = 0;
	for (size_t i = 0; i <= splits && off < size; i++) {
		size_t n = i < splits ? (size_t)lens[i] + 1 : size - off;
		if (n > size - off)
			n = size - off;
		/* as the socket bufferevent's read does: its input is frozen
		 * at the end except while it reads */
		if (evbuffer_unfreeze(in, 0) || evbuffer_add(in, data + off, n) ||
		    evbuffer_freeze(in, 0))
			abort();
		off += n;
		struct guard *g = find_bev(bev);
		if (g && evbuffer_get_length(g->raw) > GUARD_MAX_HEAD)
			abort(); /* held back more than one head */
		if (i == splits || (reads >> (i & 7)) & 1)
			evhttp_reads(&s, in);
	}
	evhttp_reads(&s, in);

	struct guard *g = find_bev(bev);
	if (g)
		on_close(evcon, g);
	if (find_bev(bev))
		abort();
	evhttp_connection_set_closecb(evcon, NULL, NULL);
	evhttp_connection_free(evcon); /* and the bufferevent */
	/* a bufferevent is finalized from the event loop */
	if (event_base_loop(base, EVLOOP_NONBLOCK) < 0)
		abort();
	free(s.buf);
	return 0;
}
