/* Inside src/patch: what patch.c (apply_patch, the application) and
 * udiff.c (unified diffs, parsed into the same sections) share. */
#ifndef MOAT_PATCH_INT_H
#define MOAT_PATCH_INT_H

#include "patch/patch.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

/* An offending line is quoted up to this many bytes; escapes can make the
 * quote up to 4 times longer. */
#define QUOTE_MAX 160
#define QBUF (4 * QUOTE_MAX + 8)

struct span {
	const char *s;
	size_t len;
};

/* One hunk line (op ' ', '-' or '+'; '@' for a "@@ text" header). The text
 * lives in the hunk's text block; 32-bit offsets suffice because a patch is
 * at most 16 MiB, and keep a hunk of many short lines small. A unified
 * diff's lines keep their exact ends: cr, the line ended in "\r"; nonl,
 * "\\ No newline at end of file" followed it. */
struct hline {
	uint32_t off, len;
	char op;
	bool cr, nonl;
};

struct moat_patch_hunk {
	struct hline *ctx; /* "@@ text" headers, sought one after the other */
	size_t nctx;
	struct hline *lines; /* the body, in order */
	size_t nlines;
	size_t nold; /* body lines that must match the file (' ' and '-') */
	bool eof;    /* "*** End of File": anchored at the end */
	size_t line; /* patch line where the hunk starts, for messages */
	/* a unified diff's "@@ -old_start,old_count +new_start,new_count @@" */
	size_t old_start, old_count, new_start, new_count;
	struct hline *items; /* one allocation holding ctx then lines */
	char *text;
};

/* The patch text, line by line. */
struct cur {
	const char *p, *end;
	size_t no; /* 1-based number of the line at p */
};

/* The line at c without its "\n" and a trailing "\r"; false at the end. */
bool moat_patch_peek(const struct cur *c, struct span *l);
void moat_patch_advance(struct cur *c);

/* s rendered for a message into q (QBUF bytes): control bytes and invalid
 * UTF-8 escaped, cut after QUOTE_MAX bytes ("..." marks it). */
const char *moat_patch_quote(char *q, size_t cap, const char *s, size_t len);
/* A MOAT_E_USAGE error (-1), valid UTF-8 even when cut. */
__attribute__((format(printf, 2, 3))) int moat_patch_fail(struct moat_err *e,
							  const char *fmt, ...);
int moat_patch_oom(struct moat_err *e);

/* udiff.c: parse a unified diff (git diff, diff -u) from c into p, one
 * section per file (exact set). On failure p may hold partial sections,
 * which the caller frees. */
int moat_udiff_parse(struct cur *c, struct moat_patch *p, struct moat_err *e);

static inline bool is_ws(unsigned char c)
{
	return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' ||
	       c == '\f';
}

static inline struct span rtrim(struct span l)
{
	while (l.len && is_ws((unsigned char)l.s[l.len - 1]))
		l.len--;
	return l;
}

static inline struct span trim(struct span l)
{
	l = rtrim(l);
	while (l.len && is_ws((unsigned char)*l.s)) {
		l.s++;
		l.len--;
	}
	return l;
}

static inline bool span_eq(struct span l, const char *lit)
{
	size_t n = strlen(lit);
	return l.len == n && memcmp(l.s, lit, n) == 0;
}

static inline bool span_prefix(struct span l, const char *lit)
{
	size_t n = strlen(lit);
	return l.len >= n && memcmp(l.s, lit, n) == 0;
}

#endif
