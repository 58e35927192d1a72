/* The entry stream: see entries.h. Both the daemon and the static agent link
 * this file, so it uses libc and moat_err only. Every record is validated in
 * full on the way in (put) and on the way out (next): neither side trusts
 * the other. */
#include "proto/entries.h"

#include "base/util.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


/* type(1) pad(3) mode(4) mtime(8) path_len(4) size(8), as laid out in
 * entries.h (MOAT_ENTRY_HDR). */
#define REC_HDR 28

int moat_buf_add(struct moat_buf *b, const void *data, size_t len)
{
	if (len == 0)
		return 0;
	if (len > SIZE_MAX - b->len) {
		errno = ENOMEM;
		return -1;
	}
	size_t need = b->len + len;
	if (need > b->cap) {
		size_t cap = b->cap ? b->cap : 256;
		while (cap < need)
			cap = cap > SIZE_MAX / 2 ? need : cap * 2;
		char *p = realloc(b->p, cap);
		if (!p) {
			errno = ENOMEM;
			return -1;
		}
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->len, data, len);
	b->len = need;
	return 0;
}

void moat_buf_free(struct moat_buf *b)
{
	free(b->p);
	b->p = NULL;
	b->len = b->cap = 0;
}

/* Malformed data is EINVAL; the message stays free of strerror text. */
__attribute__((format(printf, 2, 3))) static int
fail_inval(struct moat_err *e, const char *fmt, ...)
{
	char msg[MOAT_ERR_MSG];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	if (n < 0)
		msg[0] = '\0';
	moat_err_set(e, MOAT_E_USAGE, 0, "%s", msg);
	if (e)
		e->errnum = EINVAL;
	return -1;
}

__attribute__((format(printf, 4, 5))) static int
bad_entry(struct moat_err *e, const char *path, size_t len, const char *fmt, ...)
{
	char shown[MOAT_SHOWN_CAP], why[256];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(why, sizeof why, fmt, ap);
	va_end(ap);
	if (n < 0)
		why[0] = '\0';
	return fail_inval(e, "entry \"%s\": %s", moat_show(shown, path, len),
			  why);
}

bool moat_entry_path_ok(const char *path, size_t len)
{
	if (!path || len == 0 || len > MOAT_ENTRY_PATH_MAX)
		return false;
	if (memchr(path, '\0', len))
		return false;
	/* Walk components: each must be non-empty and neither "." nor "..",
	 * which also rules out a leading or trailing '/'. */
	size_t start = 0;
	for (size_t i = 0; i <= len; i++) {
		if (i < len && path[i] != '/')
			continue;
		size_t clen = i - start;
		const char *c = path + start;
		if (clen == 0 || (clen == 1 && c[0] == '.') ||
		    (clen == 2 && c[0] == '.' && c[1] == '.'))
			return false;
		start = i + 1;
	}
	return true;
}

static bool type_ok(char t)
{
	return t == 'f' || t == 'd' || t == 'l';
}

/* The rules shared by put and next, once path and data are in hand. */
static int check_entry(const struct moat_entry *en, struct moat_err *e)
{
	if (!type_ok(en->type))
		return bad_entry(e, en->path, en->path_len,
				 "unknown type 0x%02x", (unsigned char)en->type);
	if (en->mode & ~(uint32_t)07777)
		return bad_entry(e, en->path, en->path_len,
				 "mode %#o has bits outside 07777", en->mode);
	if (en->mode & 06000)
		return bad_entry(e, en->path, en->path_len,
				 "mode %#o has set-id bits", en->mode);
	if (en->path_len == 0 || en->path_len > MOAT_ENTRY_PATH_MAX)
		return bad_entry(e, en->path, en->path_len,
				 "path length %zu not in 1..%d", en->path_len,
				 MOAT_ENTRY_PATH_MAX);
	if (!moat_entry_path_ok(en->path, en->path_len))
		return bad_entry(e, en->path, en->path_len, "invalid path");
	if (en->type == 'd' && en->size != 0)
		return bad_entry(e, en->path, en->path_len,
				 "directory with size %llu",
				 (unsigned long long)en->size);
	if (en->type == 'l') {
		if (en->size == 0 || en->size > MOAT_ENTRY_PATH_MAX)
			return bad_entry(e, en->path, en->path_len,
					 "symlink target length %llu not in 1..%d",
					 (unsigned long long)en->size,
					 MOAT_ENTRY_PATH_MAX);
		if (memchr(en->data, '\0', (size_t)en->size))
			return bad_entry(e, en->path, en->path_len,
					 "symlink target contains NUL");
	}
	return 0;
}

static void put_le(unsigned char *p, uint64_t v, int n)
{
	for (int i = 0; i < n; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get_le(const unsigned char *p, int n)
{
	uint64_t v = 0;
	for (int i = 0; i < n; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return v;
}

int moat_entry_put(struct moat_buf *b, const struct moat_entry *en,
		   struct moat_err *e)
{
	if (!en->path)
		return bad_entry(e, "", 0, "no path");
	if (en->size && !en->data)
		return bad_entry(e, en->path, en->path_len, "no data");
	if (check_entry(en, e) < 0)
		return -1;
	/* A stream must fit in memory; reject sizes a size_t cannot carry. */
	if (en->size > SIZE_MAX - REC_HDR - en->path_len)
		return bad_entry(e, en->path, en->path_len, "too large");

	unsigned char h[REC_HDR] = {0};
	h[0] = (unsigned char)en->type;
	put_le(h + 4, en->mode, 4);
	put_le(h + 8, (uint64_t)en->mtime, 8);
	put_le(h + 16, en->path_len, 4);
	put_le(h + 20, en->size, 8);

	/* All or nothing: roll back a partial append. */
	size_t old = b->len;
	if (moat_buf_add(b, h, sizeof h) < 0 ||
	    moat_buf_add(b, en->path, en->path_len) < 0 ||
	    moat_buf_add(b, en->data, (size_t)en->size) < 0) {
		b->len = old;
		char shown[MOAT_SHOWN_CAP];
		return moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "entry \"%s\"",
				    moat_show(shown, en->path, en->path_len));
	}
	return 0;
}

int moat_entry_next(const void *stream, size_t len, size_t *off,
		    struct moat_entry *en, struct moat_err *e)
{
	const unsigned char *s = stream;
	size_t at = *off;
	if (at == len)
		return 0;
	if (at > len)
		return fail_inval(e, "entry stream: offset %zu past end %zu",
				  at, len);
	size_t left = len - at;
	if (left < REC_HDR)
		return fail_inval(e,
				  "entry stream: truncated header at offset %zu",
				  at);
	const unsigned char *h = s + at;
	left -= REC_HDR;
	uint64_t plen = get_le(h + 16, 4);
	/* Name the entry by whatever part of its path is really there. */
	const char *path = (const char *)h + REC_HDR;
	size_t shown = plen < left ? (size_t)plen : left;
	if (h[1] || h[2] || h[3])
		return bad_entry(e, path, shown, "nonzero padding");
	if (plen == 0 || plen > MOAT_ENTRY_PATH_MAX)
		return bad_entry(e, path, shown, "path length %llu not in 1..%d",
				 (unsigned long long)plen, MOAT_ENTRY_PATH_MAX);
	if (plen > left)
		return bad_entry(e, path, shown,
				 "path length %llu runs past the stream",
				 (unsigned long long)plen);
	left -= (size_t)plen;
	uint64_t size = get_le(h + 20, 8);

	struct moat_entry r = {
		.type = (char)h[0],
		.mode = (uint32_t)get_le(h + 4, 4),
		.mtime = (int64_t)get_le(h + 8, 8),
		.path = path,
		.path_len = (size_t)plen,
		.data = path + plen,
		.size = size,
	};
	if (size > left)
		return bad_entry(e, path, r.path_len,
				 "size %llu runs past the stream",
				 (unsigned long long)size);
	if (check_entry(&r, e) < 0)
		return -1;
	*en = r;
	*off = at + REC_HDR + r.path_len + (size_t)size;
	return 1;
}
