/* apply_patch: see patch.h. The grammar and the matching rules follow Codex's
 * apply-patch (lenient marker trimming, seek with progressively looser line
 * comparison); deliberate differences are noted where they are made. */
#include "patch/patch.h"
#include "patch/patch_int.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BEGIN_PATCH "*** Begin Patch"
#define END_PATCH "*** End Patch"
#define ADD_FILE "*** Add File:"
#define DELETE_FILE "*** Delete File:"
#define UPDATE_FILE "*** Update File:"
#define MOVE_TO "*** Move to:"
#define END_OF_FILE "*** End of File"

/* ---- strings and messages ------------------------------------------------ */

/* Length of the well-formed UTF-8 character at u (1..4), 0 if there is none
 * (messages end up in JSON, which refuses invalid UTF-8). */
static size_t utf8_len(const unsigned char *u, size_t n)
{
	if (n == 0)
		return 0;
	if (u[0] < 0x80)
		return 1;
	unsigned char lo = 0x80, hi = 0xbf;
	size_t w;
	if (u[0] >= 0xc2 && u[0] <= 0xdf) {
		w = 2;
	} else if (u[0] >= 0xe0 && u[0] <= 0xef) {
		w = 3;
		if (u[0] == 0xe0)
			lo = 0xa0; /* overlong */
		else if (u[0] == 0xed)
			hi = 0x9f; /* surrogates */
	} else if (u[0] >= 0xf0 && u[0] <= 0xf4) {
		w = 4;
		if (u[0] == 0xf0)
			lo = 0x90;
		else if (u[0] == 0xf4)
			hi = 0x8f; /* above U+10FFFF */
	} else {
		return 0;
	}
	if (n < w || u[1] < lo || u[1] > hi)
		return 0;
	for (size_t i = 2; i < w; i++)
		if ((u[i] & 0xc0) != 0x80)
			return 0;
	return w;
}

/* Render s for a message into q: control bytes and invalid UTF-8 escaped,
 * cut after QUOTE_MAX input bytes at a character boundary ("..." marks it). */
const char *moat_patch_quote(char *q, size_t cap, const char *s, size_t len)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t o = 0, i = 0;
	while (i < len && i < QUOTE_MAX) {
		char tmp[8];
		size_t tn, w = utf8_len(u + i, len - i);
		if (w > 1) {
			memcpy(tmp, u + i, w);
			tn = w;
		} else if (w == 1 && u[i] >= 0x20 && u[i] != 0x7f) {
			tmp[0] = (char)u[i];
			tn = 1;
		} else if (u[i] == '\t' || u[i] == '\n' || u[i] == '\r') {
			tmp[0] = '\\';
			tmp[1] = u[i] == '\t' ? 't' : u[i] == '\n' ? 'n' : 'r';
			tn = 2;
			w = 1;
		} else {
			tn = (size_t)snprintf(tmp, sizeof tmp, "\\x%02x", u[i]);
			w = 1;
		}
		if (o + tn + 4 > cap) /* keep room for "..." and the NUL */
			break;
		memcpy(q + o, tmp, tn);
		o += tn;
		i += w;
	}
	if (i < len) {
		memcpy(q + o, "...", 3);
		o += 3;
	}
	q[o] = '\0';
	return q;
}

/* Set a MOAT_E_USAGE error. Quoted parts are valid UTF-8, but vsnprintf may
 * cut the message inside a character: drop such a tail. */
int moat_patch_fail(struct moat_err *e, const char *fmt, ...)
{
	char buf[MOAT_ERR_MSG];
	va_list ap;
	va_start(ap, fmt);
	int r = vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	if (r < 0)
		buf[0] = '\0';
	size_t n = strlen(buf);
	for (size_t i = 0; i < n;) {
		size_t w = utf8_len((const unsigned char *)buf + i, n - i);
		if (w == 0) {
			buf[i] = '\0';
			break;
		}
		i += w;
	}
	return moat_err_set(e, MOAT_E_USAGE, 0, "%s", buf);
}

int moat_patch_oom(struct moat_err *e)
{
	return moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "apply_patch");
}

/* ---- reading the patch line by line -------------------------------------- */


/* The line at c without its "\n" and a trailing "\r" (models and Windows
 * editors emit CRLF patches); false at the end of the text. */
bool moat_patch_peek(const struct cur *c, struct span *l)
{
	if (c->p >= c->end)
		return false;
	const char *nl = memchr(c->p, '\n', (size_t)(c->end - c->p));
	l->s = c->p;
	l->len = (size_t)((nl ? nl : c->end) - c->p);
	if (l->len && l->s[l->len - 1] == '\r')
		l->len--;
	return true;
}

void moat_patch_advance(struct cur *c)
{
	const char *nl = memchr(c->p, '\n', (size_t)(c->end - c->p));
	c->p = nl ? nl + 1 : c->end;
	c->no++;
}

/* Inside an Update section a line is a directive when it starts with "***"
 * (context lines start with ' '); an indented "*** End Patch" or section
 * header is accepted too since Codex trims marker lines. */
static bool update_directive(struct span l)
{
	struct span t = trim(l);
	return span_prefix(l, "***") || span_eq(t, END_PATCH) ||
	       span_prefix(t, ADD_FILE) || span_prefix(t, DELETE_FILE) ||
	       span_prefix(t, UPDATE_FILE);
}

/* The path after a "*** ... File:" / "*** Move to:" marker (already known to
 * be a prefix of the trimmed line t), trimmed and copied. */
static int take_path(struct span t, const char *marker, size_t no, char **out,
		     struct moat_err *e)
{
	char q[QBUF];
	struct span rest = {t.s + strlen(marker), t.len - strlen(marker)};
	rest = trim(rest);
	if (rest.len == 0)
		return moat_patch_fail(e, "line %zu: missing path after '%s'", no, marker);
	if (memchr(rest.s, '\0', rest.len))
		return moat_patch_fail(e, "line %zu: path contains a NUL byte: '%s'", no,
			    moat_patch_quote(q, sizeof q, t.s, t.len));
	*out = strndup(rest.s, rest.len);
	return *out ? 0 : moat_patch_oom(e);
}

/* ---- Add File ------------------------------------------------------------- */

/* Content is the '+' lines, each with "\n". Unlike Codex, a blank line
 * between '+' lines is taken as an empty line (a model dropping the '+')
 * rather than an error; blank lines after the last '+' line separate
 * sections. */
static int parse_add(struct cur *c, struct moat_patch_file *f,
		     struct moat_err *e)
{
	char q[QBUF], qp[QBUF];
	struct cur scan = *c, last = *c;
	size_t size = 0, pending = 0;
	struct span l;
	while (moat_patch_peek(&scan, &l)) {
		struct span t = trim(l);
		if (l.len && l.s[0] == '+') {
			size += pending + l.len; /* '+' dropped, "\n" added */
			pending = 0;
			moat_patch_advance(&scan);
			last = scan;
		} else if (t.len == 0) {
			pending++;
			moat_patch_advance(&scan);
		} else if (span_prefix(t, "***")) {
			break;
		} else {
			return moat_patch_fail(e,
				    "line %zu: Add File '%s': every line must "
				    "start with '+', got '%s'",
				    scan.no,
				    moat_patch_quote(qp, sizeof qp, f->path,
					  strlen(f->path)),
				    moat_patch_quote(q, sizeof q, l.s, l.len));
		}
	}
	f->content = malloc(size + 1);
	if (!f->content)
		return moat_patch_oom(e);
	size_t o = 0;
	while (c->p < last.p) {
		moat_patch_peek(c, &l);
		if (l.len && l.s[0] == '+') {
			memcpy(f->content + o, l.s + 1, l.len - 1);
			o += l.len - 1;
		}
		f->content[o++] = '\n';
		moat_patch_advance(c);
	}
	f->content[o] = '\0';
	f->content_len = o;
	return 0;
}

/* ---- Update File ---------------------------------------------------------- */

enum lkind { L_HDR, L_EOF, L_DIR, L_LINE, L_BAD };

/* Classify a line inside an Update section; for L_LINE set op and text. */
static enum lkind classify(struct span l, char *op, struct span *text)
{
	if (span_prefix(l, "@@"))
		return L_HDR;
	if (update_directive(l))
		return span_eq(trim(l), END_OF_FILE) ? L_EOF : L_DIR;
	if (l.len && (l.s[0] == ' ' || l.s[0] == '-' || l.s[0] == '+')) {
		*op = l.s[0];
		*text = (struct span){l.s + 1, l.len - 1};
		return L_LINE;
	}
	if (trim(l).len == 0) {
		/* An empty line is an empty context line (Codex); a stray
		 * tab-only line is kept whole, whitespace fuzz matches it. */
		*op = ' ';
		*text = l;
		return L_LINE;
	}
	return L_BAD;
}

/* Skip "-N[,N] +N[,N] @@" (a unified-diff range header, which models write
 * out of habit); return the text after it, or s unchanged. */
static struct span skip_range(struct span s)
{
	const char *p = s.s, *end = s.s + s.len;
	for (int k = 0; k < 2; k++) {
		if (p >= end || *p != (k ? '+' : '-'))
			return s;
		p++;
		const char *d = p;
		while (p < end && *p >= '0' && *p <= '9')
			p++;
		if (p == d)
			return s;
		if (p < end && *p == ',') {
			d = ++p;
			while (p < end && *p >= '0' && *p <= '9')
				p++;
			if (p == d)
				return s;
		}
		while (p < end && *p == ' ')
			p++;
	}
	if (end - p < 2 || p[0] != '@' || p[1] != '@')
		return s;
	p += 2;
	return (struct span){p, (size_t)(end - p)};
}

/* The context text of a "@@" header line; false when it has none. Like
 * Codex only the separator space is dropped, so an indented header still
 * prefers a line with the same indentation. */
static bool header_context(struct span l, struct span *ctx)
{
	struct span r = {l.s + 2, l.len - 2};
	if (r.len && r.s[0] == ' ') {
		r.s++;
		r.len--;
	}
	struct span after = skip_range(r);
	if (after.s != r.s) /* git puts one space before the function context */
		r = trim(after);
	r = rtrim(r);
	if (r.len == 0)
		return false;
	*ctx = r;
	return true;
}

/* One hunk: "@@" header lines (none allowed for a file's first hunk), then
 * ' ', '-', '+' lines, then optionally "*** End of File". Two passes over
 * the lines: measure, then copy into one text block. */
static int parse_hunk(struct cur *c, const struct moat_patch_file *f,
		      bool first, struct moat_patch_hunk *h, struct moat_err *e)
{
	char q[QBUF], qp[QBUF];
	const struct cur start = *c;
	size_t nctx = 0, nlines = 0, nold = 0, bytes = 0;
	struct span l, t;
	char op;
	moat_patch_quote(qp, sizeof qp, f->path, strlen(f->path));

	h->line = c->no;
	while (moat_patch_peek(c, &l) && span_prefix(l, "@@")) {
		if (header_context(l, &t)) {
			nctx++;
			bytes += t.len;
		}
		moat_patch_advance(c);
	}
	if (c->no == start.no && !first) {
		moat_patch_peek(c, &l);
		return moat_patch_fail(e,
			    "line %zu: Update File '%s': expected '@@' to start "
			    "the next hunk, got '%s'",
			    c->no, qp, moat_patch_quote(q, sizeof q, l.s, l.len));
	}
	while (moat_patch_peek(c, &l)) {
		enum lkind k = classify(l, &op, &t);
		if (k == L_HDR || k == L_DIR)
			break;
		if (k == L_EOF) {
			if (nlines == 0)
				break; /* reported below as an empty hunk */
			h->eof = true;
			moat_patch_advance(c);
			break;
		}
		if (k == L_BAD)
			return moat_patch_fail(e,
				    "line %zu: Update File '%s': hunk lines must "
				    "start with ' ', '-', '+' or '@@', got '%s'",
				    c->no, qp, moat_patch_quote(q, sizeof q, l.s, l.len));
		nlines++;
		nold += op != '+';
		bytes += t.len;
		moat_patch_advance(c);
	}
	if (nlines == 0)
		return moat_patch_fail(e, "line %zu: Update File '%s': hunk has no lines",
			    h->line, qp);

	h->items = calloc(nctx + nlines, sizeof *h->items);
	h->text = malloc(bytes + 1);
	if (!h->items || !h->text)
		return moat_patch_oom(e);
	h->ctx = h->items;
	h->lines = h->items + nctx;
	h->nold = nold;

	/* Second pass over the same lines; the first one validated them. */
	struct cur r = start;
	size_t o = 0;
	struct hline *hl;
	while (moat_patch_peek(&r, &l) && span_prefix(l, "@@")) {
		if (header_context(l, &t)) {
			hl = &h->ctx[h->nctx++];
			*hl = (struct hline){(uint32_t)o, (uint32_t)t.len, '@', false, false};
			memcpy(h->text + o, t.s, t.len);
			o += t.len;
		}
		moat_patch_advance(&r);
	}
	while (h->nlines < nlines && moat_patch_peek(&r, &l)) {
		classify(l, &op, &t);
		hl = &h->lines[h->nlines++];
		*hl = (struct hline){(uint32_t)o, (uint32_t)t.len, op, false, false};
		memcpy(h->text + o, t.s, t.len);
		o += t.len;
		moat_patch_advance(&r);
	}
	h->text[o] = '\0';
	return 0;
}

static int parse_update(struct cur *c, struct moat_patch_file *f,
			struct moat_err *e)
{
	char qp[QBUF];
	struct span l;
	size_t cap = 0;
	if (moat_patch_peek(c, &l) && span_prefix(trim(l), MOVE_TO)) {
		if (take_path(trim(l), MOVE_TO, c->no, &f->move_to, e) < 0)
			return -1;
		moat_patch_advance(c);
	}
	while (moat_patch_peek(c, &l)) {
		if (trim(l).len == 0) { /* blank lines between hunks */
			moat_patch_advance(c);
			continue;
		}
		char op;
		struct span t;
		enum lkind k = classify(l, &op, &t);
		if (k == L_EOF)
			return moat_patch_fail(e,
				    "line %zu: '" END_OF_FILE
				    "' must follow a hunk's lines",
				    c->no);
		if (k == L_DIR)
			break;
		if (f->nhunks == cap) {
			size_t ncap = cap ? 2 * cap : 4;
			struct moat_patch_hunk *nh =
				realloc(f->hunks, ncap * sizeof *nh);
			if (!nh)
				return moat_patch_oom(e);
			f->hunks = nh;
			cap = ncap;
		}
		/* Counted before parsing so that free() sees a partial one. */
		struct moat_patch_hunk *h = &f->hunks[f->nhunks++];
		memset(h, 0, sizeof *h);
		if (parse_hunk(c, f, f->nhunks == 1, h, e) < 0)
			return -1;
	}
	/* A Move to alone is a rename (the Agents SDK sends one as an
	 * update_file with an empty diff); without it there is nothing to do. */
	if (f->nhunks == 0 && !f->move_to)
		return moat_patch_fail(e, "line %zu: Update File '%s' has no hunks",
			    f->line, moat_patch_quote(qp, sizeof qp, f->path,
					   strlen(f->path)));
	return 0;
}

/* ---- the whole patch ------------------------------------------------------ */

struct name {
	const char *s;
	size_t line;
};

static int name_cmp(const void *a, const void *b)
{
	const struct name *x = a, *y = b;
	int r = strcmp(x->s, y->s);
	if (r)
		return r;
	return x->line < y->line ? -1 : x->line > y->line;
}

/* Each path, source or Move to destination, may appear once: the caller
 * checks every section before changing anything, which only works when no
 * section depends on another. Sorted, so that many sections stay cheap. */
static int check_duplicates(const struct moat_patch *p, struct moat_err *e)
{
	char qp[QBUF];
	size_t n = 0;
	for (size_t i = 0; i < p->n; i++) {
		const struct moat_patch_file *f = &p->files[i];
		if (f->move_to && strcmp(f->move_to, f->path) == 0)
			return moat_patch_fail(e,
				    "line %zu: '*** Move to:' names the file "
				    "being updated: '%s'",
				    f->line + 1,
				    moat_patch_quote(qp, sizeof qp, f->path,
					  strlen(f->path)));
		n += f->move_to ? 2 : 1;
	}
	struct name *v = calloc(n, sizeof *v);
	if (!v)
		return moat_patch_oom(e);
	size_t k = 0;
	for (size_t i = 0; i < p->n; i++) {
		v[k++] = (struct name){p->files[i].path, p->files[i].line};
		if (p->files[i].move_to)
			v[k++] = (struct name){p->files[i].move_to,
					       p->files[i].line + 1};
	}
	qsort(v, n, sizeof *v, name_cmp);
	for (size_t i = 1; i < n; i++) {
		if (strcmp(v[i - 1].s, v[i].s) == 0) {
			int r = moat_patch_fail(e,
				     "line %zu: '%s' appears twice in the patch "
				     "(first at line %zu)",
				     v[i].line,
				     moat_patch_quote(qp, sizeof qp, v[i].s,
					   strlen(v[i].s)),
				     v[i - 1].line);
			free(v);
			return r;
		}
	}
	free(v);
	return 0;
}

static int parse_sections(struct cur *c, struct moat_patch *p,
			  struct moat_err *e)
{
	char q[QBUF];
	struct span l;
	size_t cap = 0;
	for (;;) {
		if (!moat_patch_peek(c, &l))
			return moat_patch_fail(e,
				    "line %zu: missing '" END_PATCH
				    "' at the end of the patch",
				    c->no - 1);
		struct span t = trim(l);
		if (t.len == 0) {
			moat_patch_advance(c);
			continue;
		}
		if (span_eq(t, END_PATCH))
			break;

		enum moat_patch_kind kind;
		const char *marker;
		if (span_prefix(t, ADD_FILE)) {
			kind = MOAT_PATCH_ADD;
			marker = ADD_FILE;
		} else if (span_prefix(t, DELETE_FILE)) {
			kind = MOAT_PATCH_DELETE;
			marker = DELETE_FILE;
		} else if (span_prefix(t, UPDATE_FILE)) {
			kind = MOAT_PATCH_UPDATE;
			marker = UPDATE_FILE;
		} else if (span_prefix(t, MOVE_TO)) {
			return moat_patch_fail(e,
				    "line %zu: '" MOVE_TO
				    "' must directly follow '" UPDATE_FILE
				    " PATH': '%s'",
				    c->no, moat_patch_quote(q, sizeof q, l.s, l.len));
		} else if (span_eq(t, END_OF_FILE)) {
			return moat_patch_fail(e,
				    "line %zu: '" END_OF_FILE
				    "' must follow a hunk's lines",
				    c->no);
		} else if (span_prefix(t, "***")) {
			return moat_patch_fail(e, "line %zu: unknown directive '%s'", c->no,
				    moat_patch_quote(q, sizeof q, l.s, l.len));
		} else {
			return moat_patch_fail(e,
				    "line %zu: expected '" ADD_FILE "', '" DELETE_FILE
				    "', '" UPDATE_FILE "' or '" END_PATCH
				    "', got '%s'",
				    c->no, moat_patch_quote(q, sizeof q, l.s, l.len));
		}

		if (p->n == cap) {
			size_t ncap = cap ? 2 * cap : 8;
			struct moat_patch_file *nf =
				realloc(p->files, ncap * sizeof *nf);
			if (!nf)
				return moat_patch_oom(e);
			p->files = nf;
			cap = ncap;
		}
		/* Counted before filling so that free() sees a partial one. */
		struct moat_patch_file *f = &p->files[p->n++];
		memset(f, 0, sizeof *f);
		f->kind = kind;
		f->line = c->no;
		if (take_path(t, marker, c->no, &f->path, e) < 0)
			return -1;
		moat_patch_advance(c);
		int r = 0;
		if (kind == MOAT_PATCH_ADD)
			r = parse_add(c, f, e);
		else if (kind == MOAT_PATCH_UPDATE)
			r = parse_update(c, f, e);
		if (r < 0)
			return -1;
	}
	return 0;
}

int moat_patch_parse(const char *text, size_t len, struct moat_patch *out,
		     struct moat_err *e)
{
	char q[QBUF];
	struct moat_patch p = {NULL, 0};
	struct span l;
	out->files = NULL;
	out->n = 0;
	if (!text) { /* no arithmetic on a null pointer */
		text = "";
		len = 0;
	}
	if (len > MOAT_PATCH_MAX_LEN)
		return moat_patch_fail(e, "patch is %zu bytes, over the 16 MiB limit",
			    len);
	/* Bound every line up front so no later step meets a huge one. */
	struct cur c = {text, text + len, 1};
	for (; c.p < c.end; moat_patch_advance(&c)) {
		const char *nl = memchr(c.p, '\n', (size_t)(c.end - c.p));
		size_t n = (size_t)((nl ? nl : c.end) - c.p);
		if (n > MOAT_PATCH_MAX_LINE)
			return moat_patch_fail(e,
				    "line %zu: %zu bytes long, over the 1 MiB "
				    "line limit",
				    c.no, n);
	}

	c = (struct cur){text, text + len, 1};
	while (moat_patch_peek(&c, &l) && trim(l).len == 0)
		moat_patch_advance(&c);
	if (!moat_patch_peek(&c, &l))
		return moat_patch_fail(e, "line 1: empty patch: expected '" BEGIN_PATCH
			       "' or a unified diff");
	if (!span_eq(trim(l), BEGIN_PATCH) && span_prefix(trim(l), "***"))
		return moat_patch_fail(e, "line %zu: expected '" BEGIN_PATCH "', got '%s'",
				       c.no, moat_patch_quote(q, sizeof q, l.s, l.len));
	if (!span_eq(trim(l), BEGIN_PATCH)) {
		/* not apply_patch: a unified diff, or neither (it says so) */
		if (moat_udiff_parse(&c, &p, e) < 0 || check_duplicates(&p, e) < 0)
			goto fail;
		*out = p;
		return 0;
	}
	moat_patch_advance(&c);

	if (parse_sections(&c, &p, e) < 0)
		goto fail;
	size_t end_line = c.no;
	moat_patch_advance(&c);
	while (moat_patch_peek(&c, &l)) {
		if (trim(l).len) {
			moat_patch_fail(e,
			     "line %zu: unexpected text after '" END_PATCH
			     "': '%s'",
			     c.no, moat_patch_quote(q, sizeof q, l.s, l.len));
			goto fail;
		}
		moat_patch_advance(&c);
	}
	if (p.n == 0) {
		moat_patch_fail(e,
		     "line %zu: the patch has no '*** Add File:', "
		     "'*** Delete File:' or '*** Update File:' section",
		     end_line);
		goto fail;
	}
	if (check_duplicates(&p, e) < 0)
		goto fail;
	*out = p;
	return 0;
fail:
	moat_patch_free(&p);
	return -1;
}

void moat_patch_free(struct moat_patch *p)
{
	if (!p)
		return;
	for (size_t i = 0; i < p->n; i++) {
		struct moat_patch_file *f = &p->files[i];
		free(f->path);
		free(f->move_to);
		free(f->content);
		for (size_t j = 0; j < f->nhunks; j++) {
			free(f->hunks[j].items);
			free(f->hunks[j].text);
		}
		free(f->hunks);
	}
	free(p->files);
	p->files = NULL;
	p->n = 0;
}

/* ---- matching ------------------------------------------------------------- */

/* A line of the old file: text without "\n" and a "\r" before it, so that
 * CRLF files match LF patches. */
struct fline {
	const char *s;
	size_t len;
	bool cr; /* ended in "\r\n" */
	bool nl; /* ended in a newline at all (only the last line may not) */
	bool rawcr; /* ended in "\r", before "\n" or not (exact sections) */
};

/* Fold the character at s[*i] like Codex's last matching pass: Unicode
 * dashes, quotes and spaces become their ASCII look-alikes, since models
 * often write the ASCII form of what is in the file (or the reverse). */
static unsigned char fold_at(const char *s, size_t n, size_t *i)
{
	const unsigned char *u = (const unsigned char *)s + *i;
	size_t left = n - *i;
	unsigned char r = 0;
	size_t w = 0;
	if (left >= 2 && u[0] == 0xc2 && u[1] == 0xa0) {
		r = ' '; /* U+00A0 no-break space */
		w = 2;
	} else if (left >= 3 && u[0] == 0xe2 && u[1] == 0x80) {
		w = 3;
		if (u[2] >= 0x90 && u[2] <= 0x95) /* U+2010..2015 dashes */
			r = '-';
		else if (u[2] >= 0x98 && u[2] <= 0x9b) /* U+2018..201B */
			r = '\'';
		else if (u[2] >= 0x9c && u[2] <= 0x9f) /* U+201C..201F */
			r = '"';
		else if ((u[2] >= 0x82 && u[2] <= 0x8a) || u[2] == 0xaf)
			r = ' '; /* U+2002..200A, U+202F spaces */
	} else if (left >= 3 && u[0] == 0xe2 && u[1] == 0x88 && u[2] == 0x92) {
		r = '-'; /* U+2212 minus */
		w = 3;
	} else if (left >= 3 && u[0] == 0xe2 && u[1] == 0x81 && u[2] == 0x9f) {
		r = ' '; /* U+205F medium mathematical space */
		w = 3;
	} else if (left >= 3 && u[0] == 0xe3 && u[1] == 0x80 && u[2] == 0x80) {
		r = ' '; /* U+3000 ideographic space */
		w = 3;
	}
	if (!r) {
		r = u[0];
		w = 1;
	}
	*i += w;
	return r;
}

/* Byte range of s without leading/trailing (folded) whitespace. */
static void fold_bounds(const char *s, size_t n, size_t *b, size_t *e)
{
	*b = *e = 0;
	bool seen = false;
	for (size_t i = 0; i < n;) {
		size_t at = i;
		unsigned char ch = fold_at(s, n, &i);
		if (is_ws(ch))
			continue;
		if (!seen)
			*b = at;
		seen = true;
		*e = i;
	}
}

static bool fold_eq(struct span x, struct span y)
{
	size_t xb, xe, yb, ye;
	fold_bounds(x.s, x.len, &xb, &xe);
	fold_bounds(y.s, y.len, &yb, &ye);
	while (xb < xe && yb < ye)
		if (fold_at(x.s, xe, &xb) != fold_at(y.s, ye, &yb))
			return false;
	return xb >= xe && yb >= ye;
}

/* Levels, loosest last: 0 exact, 1 trailing whitespace ignored, 2 leading
 * and trailing whitespace ignored, 3 also Unicode punctuation folded. */
#define LEVELS 4

static bool line_eq(const struct fline *fl, struct span pat, int level)
{
	struct span a = {fl->s, fl->len}, b = pat;
	if (level == 3)
		return fold_eq(a, b);
	if (level == 1) {
		a = rtrim(a);
		b = rtrim(b);
	} else if (level == 2) {
		a = trim(a);
		b = trim(b);
	}
	return a.len == b.len && memcmp(a.s, b.s, a.len) == 0;
}

static bool match_at(const struct fline *fl, const struct span *pat, size_t m,
		     size_t at, int level)
{
	for (size_t k = 0; k < m; k++)
		if (!line_eq(&fl[at + k], pat[k], level))
			return false;
	return true;
}

/* Find pat (m lines) in fl (n lines) at or after start, trying each level
 * over the whole range before loosening (Codex's seek_sequence). An
 * end-of-file hunk tries the last position first, then anywhere after
 * start, so that a wrong anchor is tolerated rather than fatal. */
static bool seek(const struct fline *fl, size_t n, const struct span *pat,
		 size_t m, size_t start, bool eof, size_t *at)
{
	if (m == 0) {
		*at = eof ? n : start;
		return true;
	}
	if (m > n || start > n - m)
		return false;
	if (eof)
		for (int lv = 0; lv < LEVELS; lv++)
			if (match_at(fl, pat, m, n - m, lv)) {
				*at = n - m;
				return true;
			}
	for (int lv = 0; lv < LEVELS; lv++)
		for (size_t i = start; i <= n - m; i++)
			if (match_at(fl, pat, m, i, lv)) {
				*at = i;
				return true;
			}
	return false;
}

/* ---- applying ------------------------------------------------------------- */

/* Hunk h replaces del file lines at at with its first nops body lines. */
struct rep {
	size_t at, del, nops;
	const struct moat_patch_hunk *h;
	bool tail; /* pure insertion appended at the end of the file */
};

struct outb {
	char *b; /* NULL: only count */
	size_t len;
};

static void put(struct outb *o, const char *s, size_t n)
{
	if (o->b)
		memcpy(o->b + o->len, s, n);
	o->len += n;
}

/* A kept file line keeps its own line ending; a last line that had none
 * gets one (the result ends with a newline, as in Codex). */
static void put_fline(struct outb *o, const struct fline *fl, const char *eol)
{
	put(o, fl->s, fl->len);
	if (fl->cr)
		put(o, "\r\n", 2);
	else if (fl->nl)
		put(o, "\n", 1);
	else
		put(o, eol, strlen(eol));
}

/* An exact section's kept line: its bytes as they were. */
static void put_exact(struct outb *o, const struct fline *fl)
{
	put(o, fl->s, fl->len);
	if (fl->rawcr)
		put(o, "\r", 1);
	if (fl->nl)
		put(o, "\n", 1);
}

static void put_kept(struct outb *o, const struct fline *fl, const char *eol)
{
	if (eol)
		put_fline(o, fl, eol);
	else
		put_exact(o, fl);
}

/* Run once to count and once to write. Context lines copy the file's line,
 * not the patch's: they matched perhaps only up to whitespace, and a context
 * line is not meant to change (Codex writes the patch's version). eol NULL:
 * an exact section, whose added lines end as the diff wrote them. */
static void emit(struct outb *o, const struct fline *fl, size_t n,
		 const struct rep *reps, size_t nrep, const char *eol)
{
	size_t cur = 0;
	for (int tail = 0; tail < 2; tail++) {
		for (size_t i = 0; i < nrep; i++) {
			const struct rep *r = &reps[i];
			if (r->tail != (bool)tail)
				continue;
			while (cur < r->at)
				put_kept(o, &fl[cur++], eol);
			size_t k = r->at;
			for (size_t j = 0; j < r->nops; j++) {
				const struct hline *hl = &r->h->lines[j];
				if (hl->op == ' ') {
					put_kept(o, &fl[k++], eol);
				} else if (hl->op == '-') {
					k++;
				} else {
					put(o, r->h->text + hl->off, hl->len);
					if (eol)
						put(o, eol, strlen(eol));
					else if (hl->cr)
						put(o, hl->nonl ? "\r" : "\r\n", hl->nonl ? 1 : 2);
					else if (!hl->nonl)
						put(o, "\n", 1);
				}
			}
			cur = k;
		}
	}
	while (cur < n)
		put_kept(o, &fl[cur++], eol);
}

static int not_found(const struct moat_patch_file *f, size_t hunk_no,
		     const struct moat_patch_hunk *h, struct moat_err *e)
{
	char qp[QBUF], q[QBUF];
	char lines[640]; /* the path and the rest of the message need room */
	size_t o = 0;
	lines[0] = '\0';
	for (size_t j = 0; j < h->nlines; j++) {
		const struct hline *hl = &h->lines[j];
		if (hl->op == '+')
			continue;
		moat_patch_quote(q, sizeof q, h->text + hl->off, hl->len);
		size_t need = strlen(q) + 4;
		if (o + need + 5 > sizeof lines) {
			memcpy(lines + o, " ...", 5);
			break;
		}
		o += (size_t)snprintf(lines + o, sizeof lines - o, "%s'%s'",
				      o ? ", " : "", q);
	}
	return moat_patch_fail(e,
		    "%s: could not find context %s(hunk %zu at patch line "
		    "%zu): %s",
		    moat_patch_quote(qp, sizeof qp, f->path, strlen(f->path)),
		    h->eof ? "at the end of the file " : "", hunk_no, h->line,
		    lines);
}

/* Split old into lines; *n is 0 for an empty file. */
static int split_lines(const char *old, size_t old_len, struct fline **out,
		       size_t *n, struct moat_err *e)
{
	size_t count = 0;
	for (const char *p = old, *end = old + old_len; p < end; count++) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		p = nl ? nl + 1 : end;
	}
	*out = NULL;
	*n = count;
	if (count == 0)
		return 0;
	struct fline *fl = calloc(count, sizeof *fl);
	if (!fl)
		return moat_patch_oom(e);
	const char *p = old, *end = old + old_len;
	for (size_t i = 0; i < count; i++) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		fl[i].s = p;
		fl[i].len = (size_t)((nl ? nl : end) - p);
		fl[i].nl = nl != NULL;
		if (fl[i].len && p[fl[i].len - 1] == '\r') {
			fl[i].len--;
			fl[i].cr = fl[i].nl;
			fl[i].rawcr = true;
		}
		p = nl ? nl + 1 : end;
	}
	*out = fl;
	return 0;
}

static int locate(const struct moat_patch_file *f, const struct fline *fl,
		  size_t n, struct span *pat, struct rep *reps,
		  struct moat_err *e)
{
	char qp[QBUF], q[QBUF];
	size_t from = 0; /* hunks apply in order, each after the previous */
	for (size_t i = 0; i < f->nhunks; i++) {
		const struct moat_patch_hunk *h = &f->hunks[i];
		struct rep *r = &reps[i];
		size_t at;
		for (size_t j = 0; j < h->nctx; j++) {
			const struct hline *c = &h->ctx[j];
			struct span s = {h->text + c->off, c->len};
			if (!seek(fl, n, &s, 1, from, false, &at))
				return moat_patch_fail(e,
					    "%s: could not find context '@@ %s' "
					    "(hunk %zu at patch line %zu)",
					    moat_patch_quote(qp, sizeof qp, f->path,
						  strlen(f->path)),
					    moat_patch_quote(q, sizeof q, s.s, s.len),
					    i + 1, h->line);
			from = at + 1;
		}
		size_t nops = h->nlines, m = 0;
		for (size_t j = 0; j < nops; j++)
			if (h->lines[j].op != '+')
				pat[m++] = (struct span){
					h->text + h->lines[j].off,
					h->lines[j].len};
		bool found = m > 0 && seek(fl, n, pat, m, from, h->eof, &at);
		/* Trailing empty context lines are often just the blank line
		 * that separates hunks or the file's final newline: retry
		 * without them (Codex drops one). */
		while (!found && m > 0 && h->lines[nops - 1].op == ' ' &&
		       h->lines[nops - 1].len == 0) {
			nops--;
			m--;
			found = m > 0 &&
				seek(fl, n, pat, m, from, h->eof, &at);
		}
		if (m == 0) {
			/* Pure insertion: appended at the end (Codex), except
			 * after a "@@" context, where it goes right after that
			 * line, which is what the header asked for. */
			*r = (struct rep){from, 0, nops, h, true};
			if (h->nctx && !h->eof)
				r->tail = false;
			else
				r->at = n;
			continue;
		}
		if (!found)
			return not_found(f, i + 1, h, e);
		*r = (struct rep){at, m, nops, h, false};
		from = at + m;
	}
	return 0;
}

/* ---- exact sections (unified diffs) -------------------------------------- */

/* A diff's ' ' or '-' line against a file line: the same bytes, the same
 * "\r", and a newline unless the diff says there is none. */
static bool exact_eq(const struct fline *fl, const struct moat_patch_hunk *h,
		     const struct hline *hl)
{
	return fl->len == hl->len && !memcmp(fl->s, h->text + hl->off, hl->len) &&
	       fl->rawcr == hl->cr && fl->nl == !hl->nonl;
}

static bool exact_at(const struct fline *fl, const struct moat_patch_hunk *h, size_t at)
{
	size_t k = at;
	for (size_t j = 0; j < h->nlines; j++)
		if (h->lines[j].op != '+' && !exact_eq(&fl[k++], h, &h->lines[j]))
			return false;
	return true;
}

static int exact_fail(const struct moat_patch_file *f, size_t i,
		      const struct moat_patch_hunk *h, size_t want, const char *why,
		      struct moat_err *e)
{
	char qp[QBUF], q[QBUF] = "";
	for (size_t j = 0; j < h->nlines; j++)
		if (h->lines[j].op != '+') {
			moat_patch_quote(q, sizeof q, h->text + h->lines[j].off,
					 h->lines[j].len);
			break;
		}
	return moat_patch_fail(
		e,
		"%s: hunk %zu (@@ -%zu,%zu +%zu,%zu @@ at patch line %zu) %s "
		"(sought from line %zu, exactly, no fuzz); its first old line: '%s'",
		moat_patch_quote(qp, sizeof qp, f->path, strlen(f->path)), i + 1,
		h->old_start, h->old_count, h->new_start, h->new_count, h->line, why,
		want + 1, q);
}

/* Each hunk where its line numbers say (shifted by the offset the hunk
 * before it was found at), else the nearest exact match after the hunk
 * before; like git apply, no line is matched loosely. */
static int locate_exact(const struct moat_patch_file *f, const struct fline *fl,
			size_t n, struct rep *reps, struct moat_err *e)
{
	size_t from = 0;
	long long shift = 0;
	for (size_t i = 0; i < f->nhunks; i++) {
		const struct moat_patch_hunk *h = &f->hunks[i];
		size_t m = h->nold;
		long long w = (long long)(m ? h->old_start - 1 : h->old_start) + shift;
		size_t want = w < (long long)from ? from : (size_t)w;
		bool found = false;
		size_t at = 0;
		if (m == 0) { /* no context to check: where it says */
			found = want <= n;
			at = want;
		} else if (m <= n && from <= n - m) {
			size_t last = n - m;
			if (want > last)
				want = last;
			for (size_t d = 0; !found && (want >= from + d || want + d <= last); d++) {
				if (want + d <= last && exact_at(fl, h, want + d)) {
					at = want + d;
					found = true;
				} else if (d && want >= from + d && exact_at(fl, h, want - d)) {
					at = want - d;
					found = true;
				}
			}
		}
		if (!found)
			return exact_fail(f, i, h, want, "does not match the file", e);
		/* a last line without a newline ends the new file */
		bool nonl = h->nlines && h->lines[h->nlines - 1].op != '-' &&
			    h->lines[h->nlines - 1].nonl;
		for (size_t j = 0; j < h->nlines && !nonl; j++)
			nonl = h->lines[j].op == '+' && h->lines[j].nonl;
		if (nonl && (at + m != n || i + 1 != f->nhunks))
			return exact_fail(f, i, h, want,
					  "ends the file without a newline but is not at its end", e);
		reps[i] = (struct rep){at, m, h->nlines, h, false};
		shift = (long long)at - (long long)(m ? h->old_start - 1 : h->old_start);
		from = at + m;
	}
	return 0;
}

int moat_patch_apply(const struct moat_patch_file *f, const char *old,
		     size_t old_len, char **out, size_t *out_len,
		     struct moat_err *e)
{
	char qp[QBUF];
	if (f->kind != MOAT_PATCH_UPDATE && !(f->exact && f->kind == MOAT_PATCH_DELETE))
		return moat_patch_fail(e, "%s: not an '*** Update File:' section",
			    moat_patch_quote(qp, sizeof qp, f->path, strlen(f->path)));
	if (!old) {
		old = "";
		old_len = 0;
	}
	if (old_len > SIZE_MAX / 4) /* keeps the output size from wrapping */
		return moat_patch_fail(e, "%s: file too large",
			    moat_patch_quote(qp, sizeof qp, f->path, strlen(f->path)));

	if (f->nhunks == 0) { /* a pure move: the bytes as they are */
		char *b = malloc(old_len + 1);
		if (!b)
			return moat_patch_oom(e);
		memcpy(b, old, old_len);
		b[old_len] = '\0';
		*out = b;
		*out_len = old_len;
		return 0;
	}
	struct fline *fl = NULL;
	size_t n, maxold = 1;
	if (split_lines(old, old_len, &fl, &n, e) < 0)
		return -1;
	/* New lines take the file's style, judged by its first line (an exact
	 * section's, the diff's). */
	const char *eol = f->exact ? NULL : n && fl[0].cr ? "\r\n" : "\n";
	for (size_t i = 0; i < f->nhunks; i++)
		if (f->hunks[i].nold > maxold)
			maxold = f->hunks[i].nold;
	struct span *pat = calloc(maxold, sizeof *pat);
	struct rep *reps = calloc(f->nhunks ? f->nhunks : 1, sizeof *reps);
	int r = -1;
	if (!pat || !reps) {
		moat_patch_oom(e);
		goto done;
	}
	if ((f->exact ? locate_exact(f, fl, n, reps, e) : locate(f, fl, n, pat, reps, e)) < 0)
		goto done;

	struct outb o = {NULL, 0};
	emit(&o, fl, n, reps, f->nhunks, eol);
	o.b = malloc(o.len + 1);
	if (!o.b) {
		moat_patch_oom(e);
		goto done;
	}
	o.len = 0;
	emit(&o, fl, n, reps, f->nhunks, eol);
	o.b[o.len] = '\0';
	*out = o.b;
	*out_len = o.len;
	r = 0;
done:
	free(reps);
	free(pat);
	free(fl);
	return r;
}
