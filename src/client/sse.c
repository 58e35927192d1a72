/* Server-sent events: see sse.h. */
#include "sse.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void sse_init(struct sse *s, size_t max)
{
	memset(s, 0, sizeof *s);
	s->max = max ? max : 1;
}

void sse_free(struct sse *s)
{
	free(s->line);
	free(s->data);
	memset(s, 0, sizeof *s);
}

/* Make room for need bytes plus a NUL in *p. */
static int reserve(char **p, size_t *cap, size_t need, size_t max, struct moat_err *e)
{
	if (need > max)
		return moat_err_set(e, MOAT_E_SYSTEM, 0,
				    "an event from the server is larger than %zu bytes", max);
	if (need + 1 <= *cap)
		return 0;
	size_t nc = *cap ? *cap : 1024;
	while (nc < need + 1)
		nc *= 2;
	char *np = realloc(*p, nc);
	if (!np)
		return moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "event buffer");
	*p = np;
	*cap = nc;
	return 0;
}

static int dispatch(struct sse *s, sse_cb cb, void *arg, struct moat_err *e)
{
	bool had = s->has_data;
	const char *type = s->type[0] ? s->type : "message";
	int r = 0;
	if (had) {
		size_t n = s->dlen;
		if (n > 0 && s->data[n - 1] == '\n') /* the one after the last data line */
			n--;
		s->data[n] = '\0';
		r = cb(arg, type, s->data, n, e);
	}
	s->dlen = 0;
	s->has_data = false;
	s->type[0] = '\0';
	return r;
}

/* One complete line (without its end). */
static int process_line(struct sse *s, sse_cb cb, void *arg, struct moat_err *e)
{
	const char *l = s->line ? s->line : "";
	size_t n = s->llen;
	if (n == 0)
		return dispatch(s, cb, arg, e);
	if (l[0] == ':')
		return 0;
	const char *colon = memchr(l, ':', n);
	size_t flen = colon ? (size_t)(colon - l) : n;
	const char *v = colon ? colon + 1 : l + n;
	size_t vlen = colon ? n - flen - 1 : 0;
	if (vlen > 0 && v[0] == ' ') {
		v++;
		vlen--;
	}
	if (flen == 4 && memcmp(l, "data", 4) == 0) {
		if (reserve(&s->data, &s->dcap, s->dlen + vlen + 1, s->max, e) < 0)
			return -1;
		memcpy(s->data + s->dlen, v, vlen);
		s->dlen += vlen;
		s->data[s->dlen++] = '\n';
		s->data[s->dlen] = '\0';
		s->has_data = true;
	} else if (flen == 5 && memcmp(l, "event", 5) == 0) {
		/* longer types than any MCP uses are cut (they are only compared) */
		size_t k = vlen < sizeof s->type - 1 ? vlen : sizeof s->type - 1;
		memcpy(s->type, v, k);
		s->type[k] = '\0';
	}
	return 0; /* id, retry and unknown fields: ignored */
}

int sse_feed(struct sse *s, const char *p, size_t n, sse_cb cb, void *arg,
	     struct moat_err *e)
{
	for (size_t i = 0; i < n; i++) {
		char c = p[i];
		if (s->after_cr) {
			s->after_cr = false;
			if (c == '\n')
				continue;
		}
		if (c == '\r' || c == '\n') {
			s->after_cr = c == '\r';
			int r = process_line(s, cb, arg, e);
			s->llen = 0;
			if (r < 0)
				return -1;
			continue;
		}
		size_t run = 1;
		while (i + run < n && p[i + run] != '\r' && p[i + run] != '\n')
			run++;
		if (reserve(&s->line, &s->lcap, s->llen + run, s->max, e) < 0)
			return -1;
		memcpy(s->line + s->llen, p + i, run);
		s->llen += run;
		s->line[s->llen] = '\0';
		i += run - 1;
	}
	return 0;
}
