/* multipart/form-data: see multipart.h. RFC 2046 section 5.1.1 framing, as
 * undici's FormData and Python's httpx write it: CRLF line ends only (a
 * bare LF is data), the first delimiter at the start of the body or after
 * a preamble's CRLF, each later one "CRLF--boundary", then optional
 * spaces/tabs and CRLF, or "--" for the last (the epilogue is ignored).
 * "--boundary" followed by anything else is data. Nothing is read past the
 * body's length: every search is a memmem/memchr bounded by it. */
#define _GNU_SOURCE
#include "serve/multipart.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define MP_HEADERS_MAX (16u << 10) /* one part's header block */
#define MP_BOUNDARY_MAX 70

static int bad(struct moat_err *e, size_t part, const char *what)
{
	return moat_err_set(e, MOAT_E_USAGE, 0, "multipart part %zu: %s", part, what);
}

static int oom(struct moat_err *e)
{
	return moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "multipart");
}

/* RFC 2046 bchars: what a boundary may hold (a space, but not last) */
static bool bchar(unsigned char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	       (c && strchr("'()+_,-./:=? ", c));
}

static bool tchar(unsigned char c)
{
	return c > 0x20 && c < 0x7f && !strchr("()<>@,;:\\\"/[]?={}", c);
}

/* ---- header parameters ---------------------------------------------------- */

/* A cursor over one header value. */
struct cur {
	const char *p, *end;
};

static void ows(struct cur *c)
{
	while (c->p < c->end && (*c->p == ' ' || *c->p == '\t'))
		c->p++;
}

/* A token: [p, *n) */
static const char *token(struct cur *c, size_t *n)
{
	const char *s = c->p;
	while (c->p < c->end && tchar((unsigned char)*c->p))
		c->p++;
	*n = (size_t)(c->p - s);
	return *n ? s : NULL;
}

/* A parameter value: a quoted-string (backslash escapes undone, as httpx
 * writes a '\\'; undici leaves a '\\' bare, which only a path from Windows
 * would hold) or a bare run up to ';' or white space (lenient: boundaries
 * hold '/', ':', '=' ...).
 * malloc'd; NULL with *err = true when malformed. */
static char *pvalue(struct cur *c, bool *err)
{
	*err = false;
	size_t cap = (size_t)(c->end - c->p) + 1, o = 0;
	char *out = malloc(cap);
	if (!out)
		return NULL;
	if (c->p < c->end && *c->p == '"') {
		c->p++;
		for (;;) {
			if (c->p == c->end)
				goto malformed; /* unterminated */
			char ch = *c->p++;
			if (ch == '"')
				break;
			if (ch == '\\') {
				if (c->p == c->end)
					goto malformed;
				ch = *c->p++;
			}
			if (ch == '\0')
				goto malformed;
			out[o++] = ch;
		}
	} else {
		while (c->p < c->end && *c->p != ';' && *c->p != ' ' && *c->p != '\t') {
			if (*c->p == '\0' || *c->p == '"')
				goto malformed;
			out[o++] = *c->p++;
		}
		if (o == 0)
			goto malformed;
	}
	out[o] = '\0';
	return out;
malformed:
	free(out);
	*err = true;
	return NULL;
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* In place: the percent-escapes undici's FormData writes for '"', CR and
 * LF in names (the HTML standard's form encoding); other '%' stay. */
static void undici_unescape(char *s)
{
	char *o = s;
	for (const char *p = s; *p;) {
		if (p[0] == '%' && p[1] == '2' && p[2] == '2') {
			*o++ = '"';
			p += 3;
		} else if (p[0] == '%' && p[1] == '0' && (p[2] == 'D' || p[2] == 'd')) {
			*o++ = '\r';
			p += 3;
		} else if (p[0] == '%' && p[1] == '0' && (p[2] == 'A' || p[2] == 'a')) {
			*o++ = '\n';
			p += 3;
		} else {
			*o++ = *p++;
		}
	}
	*o = '\0';
}

/* In place: RFC 8187 ext-value "UTF-8'lang'pct-encoded"; -1 when it is not
 * one (another charset, a bad or a NUL escape). */
static int ext_value(char *s)
{
	if (strncasecmp(s, "UTF-8'", 6))
		return -1;
	char *q = strchr(s + 6, '\'');
	if (!q)
		return -1;
	char *o = s;
	for (const char *p = q + 1; *p;) {
		if (*p == '%') {
			int h = hexval(p[1]), l = h < 0 ? -1 : hexval(p[2]);
			if (l < 0 || (h | l) == 0)
				return -1;
			*o++ = (char)(h << 4 | l);
			p += 3;
		} else {
			*o++ = *p++;
		}
	}
	*o = '\0';
	return 0;
}

/* ---- the boundary --------------------------------------------------------- */

int mp_boundary(const char *ctype, char *out, size_t cap, struct moat_err *e)
{
	static const char want[] = "multipart/form-data";
	if (!ctype)
		return moat_err_set(e, MOAT_E_USAGE, 0, "no Content-Type (multipart/form-data expected)");
	struct cur c = {ctype, ctype + strlen(ctype)};
	ows(&c);
	if ((size_t)(c.end - c.p) < sizeof want - 1 || strncasecmp(c.p, want, sizeof want - 1))
		return moat_err_set(e, MOAT_E_USAGE, 0, "Content-Type is not multipart/form-data");
	c.p += sizeof want - 1;
	bool found = false;
	for (;;) {
		ows(&c);
		if (c.p == c.end)
			break;
		if (*c.p != ';')
			return moat_err_set(e, MOAT_E_USAGE, 0, "malformed Content-Type parameters");
		c.p++;
		ows(&c);
		if (c.p == c.end)
			break; /* a trailing ';' */
		size_t n;
		const char *name = token(&c, &n);
		if (!name || c.p == c.end || *c.p != '=')
			return moat_err_set(e, MOAT_E_USAGE, 0, "malformed Content-Type parameters");
		c.p++;
		bool err;
		char *v = pvalue(&c, &err);
		if (!v)
			return err ? moat_err_set(e, MOAT_E_USAGE, 0, "malformed Content-Type parameters")
				   : oom(e);
		if (n == 8 && !strncasecmp(name, "boundary", 8)) {
			size_t bl = strlen(v);
			bool ok = bl >= 1 && bl <= MP_BOUNDARY_MAX && v[bl - 1] != ' ';
			for (size_t i = 0; ok && i < bl; i++)
				ok = bchar((unsigned char)v[i]);
			if (!ok || found || bl + 1 > cap) {
				free(v);
				return moat_err_set(e, MOAT_E_USAGE, 0,
						    found ? "two boundary parameters"
						    : ok  ? "boundary too long"
							  : "invalid multipart boundary (1..70 of RFC 2046's characters)");
			}
			memcpy(out, v, bl + 1);
			found = true;
		}
		free(v);
	}
	if (!found)
		return moat_err_set(e, MOAT_E_USAGE, 0, "multipart/form-data without a boundary");
	return 0;
}

/* ---- parts ---------------------------------------------------------------- */

void mp_free(struct mp_parts *p)
{
	for (size_t i = 0; i < p->n; i++) {
		free(p->v[i].name);
		free(p->v[i].filename);
		free(p->v[i].ctype);
	}
	free(p->v);
	p->v = NULL;
	p->n = 0;
}

/* What follows a delimiter at d (the "--boundary" matched, dl bytes): 1 for
 * the next part (after LWSP CRLF, *next set past it), 2 for the close
 * delimiter, 0 when this is no delimiter (it is data). */
static int after_delim(const char *body, size_t len, size_t d, size_t dl, size_t *next)
{
	size_t i = d + dl;
	if (len - i >= 2 && body[i] == '-' && body[i + 1] == '-')
		return 2;
	while (i < len && (body[i] == ' ' || body[i] == '\t'))
		i++;
	if (len - i >= 2 && body[i] == '\r' && body[i + 1] == '\n') {
		*next = i + 2;
		return 1;
	}
	return 0;
}

/* The next delimiter "CRLF--boundary" at or after `from`: *at = where the
 * CRLF is; returns after_delim's answer, -1 when there is none. */
static int find_delim(const char *body, size_t len, size_t from, const char *delim, size_t dl,
		      size_t *at, size_t *next)
{
	while (from < len) {
		const char *m = memmem(body + from, len - from, delim, dl);
		if (!m)
			return -1;
		size_t d = (size_t)(m - body);
		int k = after_delim(body, len, d + 2, dl - 2, next);
		if (k) {
			*at = d;
			return k;
		}
		from = d + 1;
	}
	return -1;
}

/* Content-Disposition: form-data; name=...; filename=...; filename*=... */
static int disposition(struct mp_part *pt, const char *v, size_t vl, size_t part,
		       struct moat_err *e)
{
	struct cur c = {v, v + vl};
	size_t n;
	const char *type = token(&c, &n);
	if (!type || n != 9 || strncasecmp(type, "form-data", 9))
		return bad(e, part, "Content-Disposition is not form-data");
	char *ext = NULL;
	int rc = 0;
	for (;;) {
		ows(&c);
		if (c.p == c.end)
			break;
		if (*c.p != ';') {
			rc = bad(e, part, "malformed Content-Disposition");
			break;
		}
		c.p++;
		ows(&c);
		if (c.p == c.end)
			break;
		const char *name = token(&c, &n);
		if (!name || c.p == c.end || *c.p != '=') {
			rc = bad(e, part, "malformed Content-Disposition");
			break;
		}
		c.p++;
		bool err;
		char *val = pvalue(&c, &err);
		if (!val) {
			rc = err ? bad(e, part, "malformed Content-Disposition") : oom(e);
			break;
		}
		char **slot = n == 4 && !strncasecmp(name, "name", 4)	      ? &pt->name
			      : n == 8 && !strncasecmp(name, "filename", 8)  ? &pt->filename
			      : n == 9 && !strncasecmp(name, "filename*", 9) ? &ext
									     : NULL;
		if (!slot) {
			free(val); /* another parameter: not ours */
			continue;
		}
		if (*slot) {
			free(val);
			rc = bad(e, part, "a Content-Disposition parameter twice");
			break;
		}
		if (slot == &ext) {
			if (ext_value(val) < 0) {
				free(val);
				rc = bad(e, part, "filename* is not UTF-8''percent-encoded");
				break;
			}
		} else {
			undici_unescape(val);
		}
		*slot = val;
	}
	if (rc == 0 && ext) { /* RFC 6266: filename* wins */
		free(pt->filename);
		pt->filename = ext;
		ext = NULL;
	}
	free(ext);
	return rc;
}

/* The header block [h, h + hl) of one part, CRLF-ended lines. */
static int headers(struct mp_part *pt, const char *h, size_t hl, size_t part, struct moat_err *e)
{
	bool cd = false;
	while (hl) {
		const char *eol = memmem(h, hl, "\r\n", 2); /* the block ends in CRLF */
		size_t ll = (size_t)(eol - h);
		const char *colon = memchr(h, ':', ll);
		if (!colon || colon == h || memchr(h, '\0', ll) || memchr(h, '\r', ll) ||
		    memchr(h, '\n', ll))
			return bad(e, part, "malformed header line");
		size_t nl = (size_t)(colon - h);
		for (size_t i = 0; i < nl; i++)
			if (!tchar((unsigned char)h[i]))
				return bad(e, part, "malformed header name");
		const char *v = colon + 1, *ve = eol;
		while (v < ve && (*v == ' ' || *v == '\t'))
			v++;
		while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
			ve--;
		if (nl == 19 && !strncasecmp(h, "Content-Disposition", 19)) {
			if (cd)
				return bad(e, part, "two Content-Disposition headers");
			cd = true;
			if (disposition(pt, v, (size_t)(ve - v), part, e) < 0)
				return -1;
		} else if (nl == 12 && !strncasecmp(h, "Content-Type", 12)) {
			if (pt->ctype)
				return bad(e, part, "two Content-Type headers");
			pt->ctype = strndup(v, (size_t)(ve - v));
			if (!pt->ctype)
				return oom(e);
		}
		hl -= ll + 2;
		h = eol + 2;
	}
	return 0;
}

int mp_parse(const char *body, size_t len, const char *boundary, size_t max_parts,
	     struct mp_parts *out, struct moat_err *e)
{
	*out = (struct mp_parts){0};
	size_t bl = boundary ? strlen(boundary) : 0;
	if (bl < 1 || bl > MP_BOUNDARY_MAX)
		return moat_err_set(e, MOAT_E_USAGE, 0, "invalid multipart boundary");
	char delim[2 + 2 + MP_BOUNDARY_MAX + 1];
	memcpy(delim, "\r\n--", 4);
	memcpy(delim + 4, boundary, bl + 1);
	size_t dl = bl + 4;

	/* the first delimiter: at the start, or after a preamble's CRLF */
	size_t at, next = 0;
	int k = 0;
	if (len >= dl - 2 && !memcmp(body, delim + 2, dl - 2))
		k = after_delim(body, len, 0, dl - 2, &next);
	if (!k)
		k = find_delim(body, len, 0, delim, dl, &at, &next);
	if (k < 0)
		return bad(e, 1, "no multipart boundary in the body");

	struct mp_parts ps = {0};
	size_t cap = 0;
	while (k == 1) {
		size_t part = ps.n + 1;
		if (ps.n == max_parts) {
			mp_free(&ps);
			return bad(e, part, "too many parts");
		}
		if (ps.n == cap) {
			size_t nc = cap ? cap * 2 : 4;
			struct mp_part *v = realloc(ps.v, nc * sizeof *v);
			if (!v) {
				mp_free(&ps);
				return oom(e);
			}
			ps.v = v;
			cap = nc;
		}
		struct mp_part *pt = &ps.v[ps.n++];
		*pt = (struct mp_part){0};
		/* headers: up to an empty line, within MP_HEADERS_MAX */
		size_t h = next, lim = len - h < MP_HEADERS_MAX ? len - h : MP_HEADERS_MAX, hl;
		/* RFC 2046 lets a part be nothing at all: the next delimiter's CRLF
		 * right after this one's */
		if (len - h >= dl && !memcmp(body + h, delim, dl)) {
			size_t nx;
			int k2 = after_delim(body, len, h + 2, dl - 2, &nx);
			if (k2) {
				pt->data = body + h;
				pt->len = 0;
				k = k2;
				next = nx;
				continue;
			}
		}
		if (lim >= 2 && body[h] == '\r' && body[h + 1] == '\n') {
			hl = 0; /* no headers */
		} else {
			const char *m = memmem(body + h, lim, "\r\n\r\n", 4);
			if (!m) {
				mp_free(&ps);
				return bad(e, part,
					   lim == MP_HEADERS_MAX ? "header block over 16 KiB"
								 : "headers without an end");
			}
			hl = (size_t)(m - (body + h)) + 2;
		}
		if (headers(pt, body + h, hl, part, e) < 0) {
			mp_free(&ps);
			return -1;
		}
		size_t data = h + hl + 2;
		/* (empty data: the delimiter's CRLF right after the blank line) */
		k = find_delim(body, len, data, delim, dl, &at, &next);
		if (k < 0) {
			mp_free(&ps);
			return bad(e, part, "no closing boundary after its data");
		}
		pt->data = body + data;
		pt->len = at - data;
	}
	*out = ps;
	return 0;
}
