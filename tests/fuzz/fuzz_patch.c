/* libFuzzer target: apply_patch (src/patch/patch.c), which the agent runs
 * on a POST .../patch body against files the sandbox wrote: parse, then
 * apply each Update section to in-memory content (the file's "old" text,
 * also from the input). Layout: old content, a NUL, the patch text; when
 * the first byte is odd the patch text gets a "*** Begin Patch / *** Update
 * File: f" head and "*** End Patch" tail (so that the fuzzer spends its
 * time on hunks). Checks the parse's shape, that an error says why, and
 * that an applied result is NUL-terminated at its length, ends with a
 * newline unless empty (a pure Move to: is the old bytes exactly), and that
 * parsing is deterministic. Text that does not start "*** Begin Patch" is
 * parsed as a unified diff (src/patch/udiff.c).
 *
 * When the first byte has bit 1 set, the rest is "old NUL new" instead: the
 * target writes the unified diff of old to new (one hunk between their
 * common head and tail, a few lines of context, "\ No newline" where a side
 * lacks one, as diff -u does) and checks that it parses and that applying
 * it to old gives new exactly, CRs and missing final newline included. */
#include "patch/patch.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void apply_all(const struct moat_patch *p, const char *old, size_t old_len)
{
	for (size_t i = 0; i < p->n; i++) {
		const struct moat_patch_file *f = &p->files[i];
		if (!f->path || !f->path[0])
			abort();
		if (f->kind == MOAT_PATCH_ADD &&
		    (!f->content || strlen(f->content) > f->content_len))
			abort();
		if (f->kind != MOAT_PATCH_UPDATE && !(f->exact && f->kind == MOAT_PATCH_DELETE))
			continue;
		char *out = NULL;
		size_t out_len = 0;
		struct moat_err e = {0};
		if (moat_patch_apply(f, old, old_len, &out, &out_len, &e) == 0) {
			if (!out || out[out_len] != '\0')
				abort();
			if (f->nhunks == 0) { /* a pure Move to or mode: the bytes as they were */
				if ((f->kind == MOAT_PATCH_UPDATE && !f->move_to && !f->mode) ||
				    out_len != old_len || memcmp(out, old, old_len))
					abort();
			} else if (out_len && out[out_len - 1] != '\n' && !f->exact) {
				abort();
			}
			free(out);
		} else if (!e.msg[0] || out) {
			abort();
		}
	}
}

/* ---- the diff -u round trip ---------------------------------------------- */

struct lines {
	const char *s[4096];
	size_t len[4096]; /* with its "\n", if it has one */
	size_t n;
};

static bool split(const char *t, size_t len, struct lines *l)
{
	l->n = 0;
	for (size_t i = 0; i < len;) {
		if (l->n == 4096)
			return false;
		const char *nl = memchr(t + i, '\n', len - i);
		size_t k = nl ? (size_t)(nl - (t + i)) + 1 : len - i;
		l->s[l->n] = t + i;
		l->len[l->n++] = k;
		i += k;
	}
	return true;
}

static bool same(const struct lines *a, size_t i, const struct lines *b, size_t j)
{
	return a->len[i] == b->len[j] && !memcmp(a->s[i], b->s[j], a->len[i]);
}

static void line_out(char **o, char op, const char *s, size_t len)
{
	*(*o)++ = op;
	memcpy(*o, s, len);
	*o += len;
	if (!len || s[len - 1] != '\n') {
		static const char m[] = "\n\\ No newline at end of file\n";
		memcpy(*o, m, sizeof m - 1);
		*o += sizeof m - 1;
	}
}

static void round_trip(const char *old, size_t ol, const char *neu, size_t nl, int ctx)
{
	static struct lines a, b;
	if (!split(old, ol, &a) || !split(neu, nl, &b) || (ol == nl && !memcmp(old, neu, ol)))
		return;
	for (size_t i = 0; i < a.n; i++) /* a NUL would end the text in a real diff too */
		if (memchr(a.s[i], '\0', a.len[i]))
			return;
	for (size_t i = 0; i < b.n; i++)
		if (memchr(b.s[i], '\0', b.len[i]))
			return;
	size_t head = 0, tail = 0;
	while (head < a.n && head < b.n && same(&a, head, &b, head))
		head++;
	while (tail < a.n - head && tail < b.n - head &&
	       same(&a, a.n - 1 - tail, &b, b.n - 1 - tail))
		tail++;
	size_t c0 = head < (size_t)ctx ? head : (size_t)ctx;
	size_t c1 = tail < (size_t)ctx ? tail : (size_t)ctx;
	size_t from = head - c0, oc = a.n - head - tail + c0 + c1, nc = b.n - head - tail + c0 + c1;
	char *d = malloc(64 + 3 * (ol + nl) + 40 * (a.n + b.n + 2)), *o = d;
	o += sprintf(o, "--- a/f\n+++ b/f\n@@ -%zu,%zu +%zu,%zu @@\n", oc ? from + 1 : from, oc,
		     nc ? from + 1 : from, nc);
	for (size_t i = from; i < head; i++)
		line_out(&o, ' ', a.s[i], a.len[i]);
	for (size_t i = head; i < a.n - tail; i++)
		line_out(&o, '-', a.s[i], a.len[i]);
	for (size_t i = head; i < b.n - tail; i++)
		line_out(&o, '+', b.s[i], b.len[i]);
	for (size_t i = a.n - tail; i < a.n - tail + c1; i++)
		line_out(&o, ' ', a.s[i], a.len[i]);
	struct moat_patch p = {0};
	struct moat_err e = {0};
	if (moat_patch_parse(d, (size_t)(o - d), &p, &e) < 0 || p.n != 1 || !p.files[0].exact)
		abort();
	char *out = NULL;
	size_t out_len = 0;
	if (moat_patch_apply(&p.files[0], old, ol, &out, &out_len, &e) < 0 || out_len != nl ||
	    memcmp(out, neu, nl))
		abort();
	free(out);
	moat_patch_free(&p);
	free(d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	if (data[0] & 2) {
		const uint8_t *nul = memchr(data + 1, 0, size - 1);
		if (!nul)
			return 0;
		size_t ol = (size_t)(nul - (data + 1)), nl = size - ol - 2;
		char *o = malloc(ol + 1), *n = malloc(nl + 1);
		memcpy(o, data + 1, ol);
		memcpy(n, nul + 1, nl);
		round_trip(o, ol, n, nl, (data[0] >> 2) & 3);
		free(o);
		free(n);
		return 0;
	}
	const uint8_t *nul = memchr(data + 1, 0, size - 1);
	size_t old_len = nul ? (size_t)(nul - (data + 1)) : 0;
	const uint8_t *pt = nul ? nul + 1 : data + 1;
	size_t pl = size - (size_t)(pt - data);
	/* exact heap copies for ASan */
	char *old = malloc(old_len + 1);
	memcpy(old, data + 1, old_len);
	old[old_len] = '\0';
	static const char head[] = "*** Begin Patch\n*** Update File: f\n";
	static const char tail[] = "\n*** End Patch\n";
	bool wrap = data[0] & 1;
	size_t tl = pl + (wrap ? sizeof head - 1 + sizeof tail - 1 : 0);
	char *text = malloc(tl ? tl : 1);
	size_t o = 0;
	if (wrap) {
		memcpy(text, head, sizeof head - 1);
		o = sizeof head - 1;
	}
	memcpy(text + o, pt, pl);
	o += pl;
	if (wrap)
		memcpy(text + o, tail, sizeof tail - 1);

	struct moat_patch p = {0}, q = {0};
	struct moat_err e = {0}, e2 = {0};
	int rc = moat_patch_parse(text, tl, &p, &e);
	int rc2 = moat_patch_parse(text, tl, &q, &e2);
	if (rc != rc2 || p.n != q.n || (rc < 0 && (strcmp(e.msg, e2.msg) || !e.msg[0])))
		abort();
	if (rc < 0 && (p.n || p.files))
		abort(); /* left empty on failure */
	if (rc == 0)
		apply_all(&p, old, old_len);
	moat_patch_free(&p);
	moat_patch_free(&q);
	free(text);
	free(old);
	return 0;
}
