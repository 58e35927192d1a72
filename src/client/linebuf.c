/* Bounded line framing: see linebuf.h. */
#include "linebuf.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void linebuf_init(struct linebuf *lb, size_t max)
{
	memset(lb, 0, sizeof *lb);
	lb->max = max ? max : 1;
}

void linebuf_free(struct linebuf *lb)
{
	free(lb->buf);
	lb->buf = NULL;
	lb->len = lb->cap = 0;
}

static int deliver(struct linebuf *lb, linebuf_cb cb, void *arg, struct moat_err *e)
{
	size_t n = lb->len;
	if (n > 0 && lb->buf[n - 1] == '\r')
		n--;
	lb->len = 0;
	const char *line = lb->buf ? lb->buf : ""; /* never NULL for cb */
	if (n > lb->max) /* max + 1 bytes and no "\r" to strip */
		return cb(arg, line, lb->max, true, e);
	return cb(arg, line, n, false, e);
}

/* Append to the pending line; an overflow reports the line once. */
static int append(struct linebuf *lb, const char *p, size_t n, linebuf_cb cb,
		  void *arg, struct moat_err *e)
{
	if (lb->dropping || n == 0)
		return 0;
	/* max + 1: a "\r" may still be stripped before the newline. */
	if (n > lb->max + 1 - lb->len) {
		size_t keep = lb->max - (lb->len < lb->max ? lb->len : lb->max);
		if (keep > n)
			keep = n;
		if (lb->len + keep > lb->cap) {
			char *nb = realloc(lb->buf, lb->len + keep ? lb->len + keep : 1);
			if (!nb)
				return moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "line buffer");
			lb->buf = nb;
			lb->cap = lb->len + keep;
		}
		if (keep)
			memcpy(lb->buf + lb->len, p, keep);
		size_t shown = lb->len + keep < lb->max ? lb->len + keep : lb->max;
		lb->len = 0;
		lb->dropping = true;
		return cb(arg, lb->buf, shown, true, e);
	}
	if (lb->len + n > lb->cap) {
		size_t nc = lb->cap ? lb->cap : 4096;
		while (nc < lb->len + n)
			nc *= 2;
		if (nc > lb->max + 1)
			nc = lb->max + 1;
		char *nb = realloc(lb->buf, nc);
		if (!nb)
			return moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "line buffer");
		lb->buf = nb;
		lb->cap = nc;
	}
	memcpy(lb->buf + lb->len, p, n);
	lb->len += n;
	return 0;
}

int linebuf_feed(struct linebuf *lb, const char *data, size_t n, linebuf_cb cb,
		 void *arg, struct moat_err *e)
{
	while (n > 0) {
		const char *nl = memchr(data, '\n', n);
		size_t chunk = nl ? (size_t)(nl - data) : n;
		if (append(lb, data, chunk, cb, arg, e) < 0)
			return -1;
		if (!nl)
			return 0;
		if (lb->dropping) {
			lb->dropping = false;
			lb->len = 0;
		} else if (deliver(lb, cb, arg, e) < 0) {
			return -1;
		}
		data += chunk + 1;
		n -= chunk + 1;
	}
	return 0;
}

int linebuf_finish(struct linebuf *lb, linebuf_cb cb, void *arg, struct moat_err *e)
{
	if (lb->dropping) {
		lb->dropping = false;
		lb->len = 0;
		return 0;
	}
	if (lb->len == 0)
		return 0;
	return deliver(lb, cb, arg, e);
}
