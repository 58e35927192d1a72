/* libFuzzer target: the framing of `moat mcp` (src/client/linebuf.c, the
 * host's stdin split into bounded lines; src/client/sse.c, the daemon's
 * text/event-stream answers). The first byte picks the chunk size; the
 * rest is fed in chunks of that size. Lines are checked against a plain
 * split of the whole input (an over-long line reported once with its first
 * max bytes); events, against a parse of the whole input in one feed (the
 * chunking must not change what is dispatched), each within the bound and
 * with no CR or LF at its ends. */
#include "client/linebuf.h"
#include "client/sse.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define LINE_MAX_LEN 48
#define SSE_MAX 300
#define MAX_EVENTS 4096

struct lines {
	const char *in;   /* the whole input, for the reference split */
	size_t len, pos;
};

/* The next line of the reference split: [*start, *end) and whether it is
 * the last, unterminated one. */
static int ref_next(struct lines *l, size_t *start, size_t *end)
{
	if (l->pos >= l->len)
		return 0;
	const char *nl = memchr(l->in + l->pos, '\n', l->len - l->pos);
	*start = l->pos;
	*end = nl ? (size_t)(nl - l->in) : l->len;
	l->pos = *end + 1;
	return 1;
}

static int on_line(void *arg, const char *line, size_t len, bool too_long,
		   struct moat_err *e)
{
	struct lines *l = arg;
	size_t s, t;
	if (!ref_next(l, &s, &t))
		abort(); /* a line the input does not have */
	size_t n = t - s;
	if (n > 0 && l->in[t - 1] == '\r')
		n--;
	if (too_long) {
		if (n <= LINE_MAX_LEN || len != LINE_MAX_LEN)
			abort();
	} else if (n != len) {
		abort();
	}
	if (memcmp(line, l->in + s, len) != 0)
		abort();
	if (memchr(line, '\n', len))
		abort();
	return 0;
}

struct events {
	size_t n;
	size_t len[MAX_EVENTS];
	uint32_t hash[MAX_EVENTS];
};

static uint32_t fnv(const char *p, size_t n)
{
	uint32_t h = 2166136261u;
	for (size_t i = 0; i < n; i++)
		h = (h ^ (unsigned char)p[i]) * 16777619u;
	return h;
}

static int on_event(void *arg, const char *type, const char *d, size_t len,
		    struct moat_err *e)
{
	struct events *ev = arg;
	if (len > SSE_MAX || d[len] != '\0' || !type[0])
		abort();
	if (memchr(d, '\r', len))
		abort();
	if (ev->n < MAX_EVENTS) {
		ev->len[ev->n] = len;
		ev->hash[ev->n] = fnv(d, len) ^ fnv(type, strlen(type));
	}
	ev->n++;
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	size_t chunk = (data[0] % 17) + 1;
	const char *in = (const char *)data + 1;
	size_t n = size - 1;
	struct moat_err e;

	struct lines l = {.in = in, .len = n};
	struct linebuf lb;
	linebuf_init(&lb, LINE_MAX_LEN);
	for (size_t off = 0; off < n; off += chunk) {
		size_t k = n - off < chunk ? n - off : chunk;
		if (linebuf_feed(&lb, in + off, k, on_line, &l, &e) < 0)
			abort();
	}
	if (linebuf_finish(&lb, on_line, &l, &e) < 0)
		abort();
	size_t s, t;
	if (ref_next(&l, &s, &t))
		abort(); /* a line never delivered */
	linebuf_free(&lb);

	static struct events whole, parts;
	whole.n = parts.n = 0;
	struct sse a, b;
	sse_init(&a, SSE_MAX);
	sse_init(&b, SSE_MAX);
	int ra = sse_feed(&a, in, n, on_event, &whole, &e);
	int rb = 0;
	for (size_t off = 0; off < n && rb == 0; off += chunk) {
		size_t k = n - off < chunk ? n - off : chunk;
		rb = sse_feed(&b, in + off, k, on_event, &parts, &e);
	}
	/* Over the bound, both stop; before that they agree event by event. */
	if ((ra < 0) != (rb < 0))
		abort();
	if (ra == 0 && whole.n != parts.n)
		abort();
	size_t m = whole.n < parts.n ? whole.n : parts.n;
	for (size_t i = 0; i < m && i < MAX_EVENTS; i++)
		if (whole.len[i] != parts.len[i] || whole.hash[i] != parts.hash[i])
			abort();
	sse_free(&a);
	sse_free(&b);
	return 0;
}
