/* Unified diffs (git diff, diff -u) parsed into apply_patch's sections, so
 * that one application path (the agent's) serves both formats: see
 * patch_int.h. Facts from git's diff format documentation: "diff --git"
 * and its extended header lines, "a/" and "b/" prefixes, /dev/null for a
 * side that does not exist, C-style quoted names, "\ No newline at end of
 * file". Hunk bodies are delimited by their header's counts. */
#include "patch/patch_int.h"

#include <stdio.h>
#include <stdlib.h>

#define NO_NEWLINE "\\ No newline at end of file"

/* One file's headers while they are read. */
struct fhead {
	char *old, *new;       /* from ---/+++ (prefix stripped), NULL: /dev/null */
	char *gold, *gnew;     /* from the "diff --git" line */
	char *rfrom, *rto;     /* rename from / to */
	bool git, is_new, is_del, has_names;
	unsigned mode;         /* new file mode or new mode: 0644 / 0755 */
	size_t line;           /* where the file's header starts */
};

static void fhead_free(struct fhead *h)
{
	free(h->old);
	free(h->new);
	free(h->gold);
	free(h->gnew);
	free(h->rfrom);
	free(h->rto);
	memset(h, 0, sizeof *h);
}

static bool prefix(struct span l, const char *lit)
{
	return span_prefix(l, lit);
}

static struct span after(struct span l, const char *lit)
{
	size_t n = strlen(lit);
	return (struct span){l.s + n, l.len - n};
}

/* A C-style quoted name (git quotes names with unusual bytes): "..." with
 * \\, \", \a \b \t \n \v \f \r and \ooo. *len gets what was used. */
static char *unquote(struct span s, size_t *used)
{
	char *o = malloc(s.len + 1);
	size_t k = 0, i = 1;
	if (!o)
		return NULL;
	while (i < s.len && s.s[i] != '"') {
		char c = s.s[i++];
		if (c != '\\') {
			o[k++] = c;
			continue;
		}
		if (i >= s.len)
			break;
		c = s.s[i++];
		static const char from[] = "abtnvfr\\\"", to[] = "\a\b\t\n\v\f\r\\\"";
		const char *f = strchr(from, c);
		if (c && f) {
			o[k++] = to[f - from];
		} else if (c >= '0' && c <= '3' && i + 1 < s.len && s.s[i] >= '0' &&
			   s.s[i] <= '7' && s.s[i + 1] >= '0' && s.s[i + 1] <= '7') {
			o[k++] = (char)((c - '0') << 6 | (s.s[i] - '0') << 3 | (s.s[i + 1] - '0'));
			i += 2;
		} else {
			free(o);
			return NULL;
		}
	}
	if (i >= s.len) { /* no closing quote */
		free(o);
		return NULL;
	}
	o[k] = '\0';
	*used = i + 1;
	return o;
}

/* The name of a "---"/"+++" line (after the marker): quoted, or up to a
 * tab (diff -u puts the date there). pfx ("a/", "b/") is dropped when
 * present, as git apply's default -p1 does. *out NULL for /dev/null. */
static int take_name(struct span s, const char *pfx, size_t no, char **out, bool *null,
		     struct moat_err *e)
{
	char q[QBUF];
	char *n;
	*out = NULL;
	*null = false;
	if (s.len && s.s[0] == '"') {
		size_t used;
		n = unquote(s, &used);
		if (!n)
			return moat_patch_fail(e, "line %zu: a badly quoted file name: '%s'", no,
					       moat_patch_quote(q, sizeof q, s.s, s.len));
	} else {
		const char *tab = memchr(s.s, '\t', s.len);
		size_t l = tab ? (size_t)(tab - s.s) : s.len;
		if (!tab) /* git adds no date; trailing blanks are not the name's */
			while (l && s.s[l - 1] == ' ')
				l--;
		if (memchr(s.s, '\0', l))
			return moat_patch_fail(e, "line %zu: a file name with a NUL byte", no);
		n = strndup(s.s, l);
		if (!n)
			return moat_patch_oom(e);
	}
	if (!strcmp(n, "/dev/null")) {
		free(n);
		*null = true;
		return 0;
	}
	size_t pl = strlen(pfx);
	if (pfx[0] && !strncmp(n, pfx, pl) && n[pl])
		memmove(n, n + pl, strlen(n + pl) + 1);
	*out = n;
	return 0;
}

/* "diff --git a/P b/P": the names when both are the same (the only case
 * git leaves without other headers naming them: modes, empty files). */
static int git_names(struct span s, struct fhead *h, size_t no, struct moat_err *e)
{
	if (s.len && s.s[0] == '"') {
		size_t used;
		char *a = unquote(s, &used);
		if (!a)
			return 0; /* the other headers may name it */
		struct span r = {s.s + used, s.len - used};
		while (r.len && r.s[0] == ' ') {
			r.s++;
			r.len--;
		}
		bool null;
		char *b = NULL;
		if (take_name(r, "b/", no, &b, &null, e) < 0) {
			free(a);
			return -1;
		}
		if (!strncmp(a, "a/", 2))
			memmove(a, a + 2, strlen(a + 2) + 1);
		h->gold = a;
		h->gnew = b;
		return 0;
	}
	/* "a/X b/X" or, without prefixes, "X X" */
	for (int pf = 0; pf < 2; pf++) {
		size_t extra = pf == 0 ? 5 : 1; /* "a/" " b/" or " " */
		if (s.len < extra + 2 || (s.len - extra) % 2)
			continue;
		size_t k = (s.len - extra) / 2;
		const char *x = s.s + (pf == 0 ? 2 : 0);
		const char *y = s.s + (pf == 0 ? 2 + k + 3 : k + 1);
		if (pf == 0 && (memcmp(s.s, "a/", 2) || memcmp(s.s + 2 + k, " b/", 3)))
			continue;
		if (pf == 1 && s.s[k] != ' ')
			continue;
		if (memcmp(x, y, k) || memchr(x, '\0', k))
			continue;
		h->gold = strndup(x, k);
		h->gnew = strndup(x, k);
		return h->gold && h->gnew ? 0 : moat_patch_oom(e);
	}
	return 0;
}

static int mode_of(struct span s, const char *name, size_t no, unsigned *mode,
		   struct moat_err *e)
{
	char q[QBUF], qn[QBUF];
	struct span t = trim(s);
	if (span_eq(t, "100644") || span_eq(t, "100664")) {
		*mode = 0644;
		return 0;
	}
	if (span_eq(t, "100755")) {
		*mode = 0755;
		return 0;
	}
	return moat_patch_fail(e,
			       "line %zu: '%s': mode %s is not supported (only regular files, "
			       "100644 and 100755: no symbolic links or submodules)",
			       no, moat_patch_quote(qn, sizeof qn, name ? name : "?",
						    name ? strlen(name) : 1),
			       moat_patch_quote(q, sizeof q, t.s, t.len));
}

/* A path from a diff names a file in the workspace, as git apply wants. */
static int check_path(const char *p, size_t no, struct moat_err *e)
{
	char q[QBUF];
	bool dots = false;
	for (const char *c = p; *c;) {
		size_t l = strcspn(c, "/");
		dots |= l == 2 && c[0] == '.' && c[1] == '.';
		c += l;
		c += *c == '/';
	}
	if (!p[0] || p[0] == '/' || dots)
		return moat_patch_fail(e,
				       "line %zu: '%s': a unified diff's paths are relative to "
				       "the workspace, without '..'",
				       no, moat_patch_quote(q, sizeof q, p, strlen(p)));
	return 0;
}

/* "@@ -a[,b] +c[,d] @@": the four numbers. */
static bool range(struct span l, size_t v[4])
{
	const char *p = l.s + 2, *end = l.s + l.len;
	for (int k = 0; k < 2; k++) {
		while (p < end && *p == ' ')
			p++;
		if (p >= end || *p != (k ? '+' : '-'))
			return false;
		p++;
		for (int j = 0; j < 2; j++) {
			if (p >= end || *p < '0' || *p > '9')
				return false;
			size_t n = 0;
			while (p < end && *p >= '0' && *p <= '9') {
				if (n > 100000000)
					return false;
				n = n * 10 + (size_t)(*p++ - '0');
			}
			v[2 * k + j] = n;
			if (j == 0 && (p >= end || *p != ',')) {
				v[2 * k + 1] = 1;
				break;
			}
			if (j == 0)
				p++;
		}
	}
	while (p < end && *p == ' ')
		p++;
	return end - p >= 2 && p[0] == '@' && p[1] == '@';
}

/* One hunk, its body read by the header's counts. */
static int parse_hunk(struct cur *c, const char *path, size_t idx, struct moat_patch_hunk *h,
		      struct moat_err *e)
{
	char q[QBUF], qp[QBUF];
	struct span l;
	size_t v[4];
	moat_patch_peek(c, &l);
	moat_patch_quote(qp, sizeof qp, path, strlen(path));
	h->line = c->no;
	if (!range(l, v) || (v[1] && !v[0]) || (v[3] && !v[2]))
		return moat_patch_fail(e, "line %zu: '%s': a bad hunk header: '%s'", c->no, qp,
				       moat_patch_quote(q, sizeof q, l.s, l.len));
	h->old_start = v[0];
	h->old_count = v[1];
	h->new_start = v[2];
	h->new_count = v[3];
	moat_patch_advance(c);
	/* measure, then copy (the text block holds every line's text) */
	const struct cur start = *c;
	size_t nold = 0, nnew = 0, nlines = 0, bytes = 0;
	while (nold < v[1] || nnew < v[3]) {
		bool more = moat_patch_peek(c, &l);
		char op = more && l.len ? l.s[0] : ' ';
		if (!more || (op != ' ' && op != '-' && op != '+' && op != '\\')) {
			return moat_patch_fail(
				e,
				"line %zu: '%s': hunk %zu (@@ -%zu,%zu +%zu,%zu @@ at line %zu) ends "
				"early: %zu old and %zu new lines of its counts are missing%s%s%s",
				c->no, qp, idx, v[0], v[1], v[2], v[3], h->line, v[1] - nold,
				v[3] - nnew, more ? ", got '" : "",
				more ? moat_patch_quote(q, sizeof q, l.s, l.len) : "", more ? "'" : "");
		}
		if (op == '\\') {
			moat_patch_advance(c); /* checked in the second pass */
			continue;
		}
		if ((op != '+' && nold == v[1]) || (op != '-' && nnew == v[3]))
			return moat_patch_fail(e,
					       "line %zu: '%s': hunk %zu (at line %zu) has more %s "
					       "lines than its header counts",
					       c->no, qp, idx, h->line,
					       op != '-' && nnew == v[3] ? "new" : "old");
		nold += op != '+';
		nnew += op != '-';
		nlines++;
		bytes += l.len ? l.len - 1 : 0;
		moat_patch_advance(c);
	}
	if (moat_patch_peek(c, &l) && l.len && l.s[0] == '\\')
		moat_patch_advance(c); /* the last line's marker */
	const struct cur end = *c;

	h->items = calloc(nlines ? nlines : 1, sizeof *h->items);
	h->text = malloc(bytes + 1);
	if (!h->items || !h->text)
		return moat_patch_oom(e);
	h->ctx = h->lines = h->items;
	h->nold = nold;
	size_t o = 0;
	bool old_done = false, new_done = false; /* a side's last line had no newline */
	struct cur r = start;
	while (r.p < end.p) {
		moat_patch_peek(&r, &l);
		/* the line's own "\r": peek dropped it, the bytes keep it */
		const char *nl = memchr(l.s, '\n', (size_t)(r.end - l.s));
		bool cr = (nl ? (size_t)(nl - l.s) : (size_t)(r.end - l.s)) > l.len;
		char op = l.len ? l.s[0] : ' ';
		if (op == '\\') {
			struct hline *last = h->nlines ? &h->lines[h->nlines - 1] : NULL;
			if (!last || last->nonl || !prefix(l, "\\ "))
				return moat_patch_fail(e, "line %zu: '%s': a stray '%s'", r.no, qp,
						       moat_patch_quote(q, sizeof q, l.s, l.len));
			last->nonl = true;
			old_done |= last->op != '+';
			new_done |= last->op != '-';
			moat_patch_advance(&r);
			continue;
		}
		if ((op != '+' && old_done) || (op != '-' && new_done))
			return moat_patch_fail(e,
					       "line %zu: '%s': a line after '" NO_NEWLINE "'",
					       r.no, qp);
		struct hline *hl = &h->lines[h->nlines++];
		size_t tl = l.len ? l.len - 1 : 0;
		*hl = (struct hline){(uint32_t)o, (uint32_t)tl, op, cr, false};
		memcpy(h->text + o, l.s + (l.len ? 1 : 0), tl);
		o += tl;
		moat_patch_advance(&r);
	}
	h->text[o] = '\0';
	return 0;
}

/* The section for one file, from its headers and hunks. */
static int finish(struct fhead *fh, struct moat_patch_file *f, struct moat_err *e)
{
	char qp[QBUF];
	const char *old = fh->rfrom ? fh->rfrom : fh->has_names ? fh->old : fh->gold;
	const char *new = fh->rto ? fh->rto : fh->has_names ? fh->new : fh->gnew;
	if (fh->is_new)
		old = NULL;
	if (fh->is_del)
		new = NULL;
	if (!fh->git && old && new && strcmp(old, new))
		old = new; /* diff -u x.orig x: the file patched is the new name */
	const char *path = old ? old : new;
	if (!path)
		return moat_patch_fail(e, "line %zu: a file header that names no file",
				       fh->line);
	f->exact = true;
	f->line = fh->line;
	f->mode = fh->mode;
	f->kind = !old ? MOAT_PATCH_ADD : !new ? MOAT_PATCH_DELETE : MOAT_PATCH_UPDATE;
	f->path = strdup(path);
	if (!f->path)
		return moat_patch_oom(e);
	if (check_path(f->path, fh->line, e) < 0)
		return -1;
	moat_patch_quote(qp, sizeof qp, f->path, strlen(f->path));
	if (f->kind == MOAT_PATCH_UPDATE && strcmp(old, new)) {
		f->move_to = strdup(new);
		if (!f->move_to)
			return moat_patch_oom(e);
		if (check_path(f->move_to, fh->line, e) < 0)
			return -1;
	}
	if (f->kind == MOAT_PATCH_UPDATE && !f->nhunks && !f->move_to && !f->mode)
		return moat_patch_fail(e, "line %zu: '%s': the diff changes nothing in it",
				       fh->line, qp);
	if (f->kind == MOAT_PATCH_DELETE)
		f->mode = 0;
	for (size_t i = 0; i < f->nhunks; i++) {
		const struct moat_patch_hunk *h = &f->hunks[i];
		for (size_t j = 0; j < h->nlines; j++) {
			char op = h->lines[j].op;
			if ((f->kind == MOAT_PATCH_ADD && op != '+') ||
			    (f->kind == MOAT_PATCH_DELETE && op != '-'))
				return moat_patch_fail(
					e, "line %zu: '%s': a %s file's hunk may only %s lines", h->line,
					qp, f->kind == MOAT_PATCH_ADD ? "new" : "deleted",
					f->kind == MOAT_PATCH_ADD ? "add" : "remove");
		}
	}
	if (f->kind != MOAT_PATCH_ADD)
		return 0;
	/* a new file is its '+' lines, ends as written */
	size_t size = 0;
	for (size_t i = 0; i < f->nhunks; i++)
		for (size_t j = 0; j < f->hunks[i].nlines; j++)
			size += f->hunks[i].lines[j].len + 2;
	f->content = malloc(size + 1);
	if (!f->content)
		return moat_patch_oom(e);
	size_t o = 0;
	for (size_t i = 0; i < f->nhunks; i++) {
		const struct moat_patch_hunk *h = &f->hunks[i];
		for (size_t j = 0; j < h->nlines; j++) {
			const struct hline *hl = &h->lines[j];
			memcpy(f->content + o, h->text + hl->off, hl->len);
			o += hl->len;
			if (hl->cr)
				f->content[o++] = '\r';
			if (!hl->nonl)
				f->content[o++] = '\n';
		}
		free(h->items);
		free(h->text);
	}
	f->content[o] = '\0';
	f->content_len = o;
	free(f->hunks);
	f->hunks = NULL;
	f->nhunks = 0;
	return 0;
}

/* Extended header lines of "diff --git"; 1 when l was one, 0 if not. */
static int git_header(struct span l, size_t no, struct fhead *h, struct moat_err *e)
{
	char q[QBUF], qn[QBUF];
	const char *name = h->gnew ? h->gnew : h->gold;
	const char *nm = moat_patch_quote(qn, sizeof qn, name ? name : "?",
					  name ? strlen(name) : 1);
	unsigned m;
	if (prefix(l, "new file mode ")) {
		h->is_new = true;
		if (mode_of(after(l, "new file mode "), name, no, &m, e) < 0)
			return -1;
		h->mode = m;
	} else if (prefix(l, "deleted file mode ")) {
		h->is_del = true;
		if (mode_of(after(l, "deleted file mode "), name, no, &m, e) < 0)
			return -1;
	} else if (prefix(l, "old mode ")) {
		if (mode_of(after(l, "old mode "), name, no, &m, e) < 0)
			return -1;
	} else if (prefix(l, "new mode ")) {
		if (mode_of(after(l, "new mode "), name, no, &m, e) < 0)
			return -1;
		h->mode = m;
	} else if (prefix(l, "rename from ") || prefix(l, "rename to ")) {
		bool from = prefix(l, "rename from "), null;
		char **dst = from ? &h->rfrom : &h->rto;
		free(*dst);
		if (take_name(after(l, from ? "rename from " : "rename to "), "", no, dst, &null,
			      e) < 0)
			return -1;
		if (null || !*dst)
			return moat_patch_fail(e, "line %zu: a rename names no file", no);
	} else if (prefix(l, "copy from ") || prefix(l, "copy to ")) {
		return moat_patch_fail(e,
				       "line %zu: '%s': copies are not supported ('%s'): send the "
				       "copy as a new file",
				       no, nm, moat_patch_quote(q, sizeof q, l.s, l.len));
	} else if (prefix(l, "GIT binary patch") || prefix(l, "Binary files ")) {
		return moat_patch_fail(e, "line %zu: '%s': binary patches are not supported", no,
				       nm);
	} else if (!prefix(l, "similarity index ") && !prefix(l, "dissimilarity index ") &&
		   !prefix(l, "index ")) {
		return 0;
	}
	return 1;
}

static int add_file(struct moat_patch *p, size_t *cap, struct moat_patch_file **f,
		    struct moat_err *e)
{
	if (p->n == *cap) {
		size_t ncap = *cap ? 2 * *cap : 8;
		struct moat_patch_file *nf = realloc(p->files, ncap * sizeof *nf);
		if (!nf)
			return moat_patch_oom(e);
		p->files = nf;
		*cap = ncap;
	}
	*f = &p->files[p->n++]; /* counted now, so that free() sees a partial one */
	memset(*f, 0, sizeof **f);
	return 0;
}

static bool is_old_header(const struct cur *c, struct span l)
{
	struct span nx;
	struct cur n = *c;
	if (!prefix(l, "--- "))
		return false;
	moat_patch_advance(&n);
	return moat_patch_peek(&n, &nx) && prefix(nx, "+++ ");
}

/* One file: "diff --git" and its headers, or "---"/"+++" alone; then its
 * hunks. */
static int parse_file(struct cur *c, struct moat_patch *p, size_t *cap, struct moat_err *e)
{
	struct fhead fh = {.line = c->no};
	struct moat_patch_file *f = NULL;
	struct span l;
	moat_patch_peek(c, &l);
	int rc = -1;
	if (prefix(l, "diff --git ")) {
		fh.git = true;
		if (git_names(after(l, "diff --git "), &fh, c->no, e) < 0)
			goto out;
		moat_patch_advance(c);
		while (moat_patch_peek(c, &l)) {
			int r = git_header(l, c->no, &fh, e);
			if (r < 0)
				goto out;
			if (r == 0)
				break;
			moat_patch_advance(c);
		}
	}
	if (moat_patch_peek(c, &l) && is_old_header(c, l)) {
		bool null_old, null_new;
		if (take_name(after(l, "--- "), "a/", c->no, &fh.old, &null_old, e) < 0)
			goto out;
		moat_patch_advance(c);
		moat_patch_peek(c, &l);
		if (take_name(after(l, "+++ "), "b/", c->no, &fh.new, &null_new, e) < 0)
			goto out;
		moat_patch_advance(c);
		if (null_old && null_new) {
			moat_patch_fail(e, "line %zu: both sides are /dev/null", c->no - 1);
			goto out;
		}
		fh.is_new |= null_old;
		fh.is_del |= null_new;
		fh.has_names = true;
	} else if (!fh.git) {
		moat_patch_fail(e, "line %zu: expected '--- ' then '+++ '", c->no);
		goto out;
	}
	if (add_file(p, cap, &f, e) < 0)
		goto out;
	const char *shown = fh.new ? fh.new : fh.old ? fh.old : fh.gnew ? fh.gnew : "?";
	size_t hcap = 0;
	while (moat_patch_peek(c, &l) && prefix(l, "@@")) {
		if (f->nhunks == hcap) {
			size_t ncap = hcap ? 2 * hcap : 4;
			struct moat_patch_hunk *nh = realloc(f->hunks, ncap * sizeof *nh);
			if (!nh) {
				moat_patch_oom(e);
				goto out;
			}
			f->hunks = nh;
			hcap = ncap;
		}
		struct moat_patch_hunk *h = &f->hunks[f->nhunks++];
		memset(h, 0, sizeof *h);
		if (parse_hunk(c, shown, f->nhunks, h, e) < 0)
			goto out;
	}
	if (fh.has_names && !f->nhunks && !fh.git) {
		moat_patch_fail(e, "line %zu: '%s' has no hunks ('@@ -l,n +l,n @@')", fh.line,
				shown);
		goto out;
	}
	rc = finish(&fh, f, e);
out:
	fhead_free(&fh);
	return rc;
}

int moat_udiff_parse(struct cur *c, struct moat_patch *p, struct moat_err *e)
{
	char q[QBUF];
	struct span l;
	size_t cap = 0;
	struct cur first = *c;
	struct span fl;
	moat_patch_peek(&first, &fl);
	bool hunk_end = false; /* just after a file's last hunk */
	while (moat_patch_peek(c, &l)) {
		if (prefix(l, "diff --git ") || is_old_header(c, l)) {
			if (parse_file(c, p, &cap, e) < 0)
				return -1;
			hunk_end = true;
			continue;
		}
		if (span_eq(l, "-- ")) /* git format-patch's signature: the end */
			break;
		/* text around the files (a commit message, "diff -ru" or "Only
		 * in" lines) is skipped, but not hunk lines past a hunk's counts */
		if (hunk_end && l.len && strchr(" +-@\\", l.s[0]))
			return moat_patch_fail(e,
					       "line %zu: '%s' follows a hunk but is not counted by "
					       "its header (@@ -l,n +l,n @@: the counts are wrong?)",
					       c->no, moat_patch_quote(q, sizeof q, l.s, l.len));
		hunk_end = false;
		moat_patch_advance(c);
	}
	if (p->n == 0)
		return moat_patch_fail(e,
				       "line %zu: neither apply_patch ('*** Begin Patch') nor a "
				       "unified diff ('diff --git' or '--- '/'+++ ' then '@@' "
				       "hunks), got '%s'",
				       first.no, moat_patch_quote(q, sizeof q, fl.s, fl.len));
	return 0;
}
