/* Unit tests for src/serve/multipart.c: multipart/form-data as undici's
 * FormData (the JS SDK) and httpx (the Python SDK) write it. Bodies are
 * exact heap copies, so a read past the end trips ASan. */
#include <criterion/criterion.h>

#include "serve/multipart.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define mp_assert_has(hay, needle) \
	cr_assert(strstr((hay), (needle)) != NULL, "expected \"%s\" in \"%s\"", (needle), (hay))

#define UNDICI "----formdata-undici-0123456789"

/* Parse an exact heap copy of body[0..len). The copy is kept in *copy so
 * the parts' data stay valid; free it after mp_free. */
static int mp_run(const char *body, size_t len, const char *boundary, size_t max,
		  struct mp_parts *ps, char **copy, struct moat_err *e)
{
	*copy = malloc(len ? len : 1);
	cr_assert_not_null(*copy);
	memcpy(*copy, body, len);
	memset(e, 0, sizeof *e);
	return mp_parse(*copy, len, boundary, max, ps, e);
}

/* A body that must be refused, with a message naming `what`. */
static void mp_refused(const char *body, size_t len, const char *boundary, const char *what)
{
	struct mp_parts ps;
	struct moat_err e;
	char *c;
	cr_assert_eq(mp_run(body, len, boundary, 16, &ps, &c, &e), -1, "accepted: %s", what);
	mp_assert_has(e.msg, what);
	cr_assert_eq(ps.n, 0);
	cr_assert_null(ps.v);
	free(c);
}

static void mp_part_is(const struct mp_part *p, const char *name, const char *filename,
		       const char *ctype, const char *data, size_t len)
{
	if (name)
		cr_assert_str_eq(p->name, name);
	else
		cr_assert_null(p->name);
	if (filename)
		cr_assert_str_eq(p->filename, filename);
	else
		cr_assert_null(p->filename);
	if (ctype)
		cr_assert_str_eq(p->ctype, ctype);
	else
		cr_assert_null(p->ctype);
	cr_assert_eq(p->len, len, "data of %zu bytes, %zu expected", p->len, len);
	cr_assert_eq(memcmp(p->data, data, len), 0);
}

/* ---- the boundary --------------------------------------------------------- */

Test(multipart, boundary_forms)
{
	char b[71];
	struct moat_err e;
	cr_assert_eq(mp_boundary("multipart/form-data; boundary=" UNDICI, b, sizeof b, &e), 0);
	cr_assert_str_eq(b, UNDICI);
	cr_assert_eq(mp_boundary("Multipart/Form-Data;BOUNDARY=\"a b'()+_,-./:=?\"", b, sizeof b, &e),
		     0);
	cr_assert_str_eq(b, "a b'()+_,-./:=?");
	cr_assert_eq(mp_boundary("multipart/form-data; charset=utf-8; boundary=xyz; x=\"q\\\"\"", b,
				 sizeof b, &e),
		     0);
	cr_assert_str_eq(b, "xyz");
	cr_assert_eq(mp_boundary("multipart/form-data; boundary=\"x\\yz\"", b, sizeof b, &e), 0);
	cr_assert_str_eq(b, "xyz");
	char b70[71];
	memset(b70, 'b', 70);
	b70[70] = '\0';
	char ct[128];
	snprintf(ct, sizeof ct, "multipart/form-data; boundary=%s", b70);
	cr_assert_eq(mp_boundary(ct, b, sizeof b, &e), 0);
	cr_assert_str_eq(b, b70);
	cr_assert_eq(mp_boundary(ct, b, 70, &e), -1); /* no room for the NUL */

	const char *bad[] = {
		NULL,
		"",
		"multipart/form-data",
		"multipart/form-data; boundary=",
		"multipart/form-data; boundary=\"\"",
		"multipart/form-data; boundary=\"ab",
		"multipart/form-data; boundary=\"ab \"", /* space last */
		"multipart/form-data; boundary=a;boundary=b",
		"multipart/form-data; boundary=a@b",
		"multipart/mixed; boundary=abc",
		"application/json",
		"multipart/form-datax; boundary=abc",
		"multipart/form-data boundary=abc",
		"multipart/form-data; =abc",
		"multipart/form-data; boundary",
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		cr_assert_eq(mp_boundary(bad[i], b, sizeof b, &e), -1, "accepted: %s",
			     bad[i] ? bad[i] : "NULL");
	snprintf(ct, sizeof ct, "multipart/form-data; boundary=%sb", b70);
	cr_assert_eq(mp_boundary(ct, b, sizeof b, &e), -1);
}

/* ---- bodies --------------------------------------------------------------- */

Test(multipart, undici_body)
{
	/* as undici's extractBody writes FormData with two Blobs and a string */
	static const char body[] =
		"--" UNDICI "\r\n"
		"Content-Disposition: form-data; name=\"file\"; filename=\"/home/user/a.txt\"\r\n"
		"Content-Type: application/octet-stream\r\n"
		"\r\n"
		"hello\r\n"
		"--" UNDICI "\r\n"
		"Content-Disposition: form-data; name=\"file\"; filename=\"rel/dir/b.bin\"\r\n"
		"Content-Type: application/octet-stream\r\n"
		"\r\n"
		"\x00\x01\r\n--" UNDICI "x\r\n\n\r\r\n-" UNDICI "\r\n"
		"--" UNDICI "\r\n"
		"Content-Disposition: form-data; name=\"note\"\r\n"
		"\r\n"
		"text --" UNDICI "-- value\r\n" /* not at a line start: data */
		"--" UNDICI "--\r\n";
	static const char bin[] = "\x00\x01\r\n--" UNDICI "x\r\n\n\r\r\n-" UNDICI;
	struct mp_parts ps;
	struct moat_err e;
	char *c;
	cr_assert_eq(mp_run(body, sizeof body - 1, UNDICI, 16, &ps, &c, &e), 0, "%s", e.msg);
	cr_assert_eq(ps.n, 3);
	mp_part_is(&ps.v[0], "file", "/home/user/a.txt", "application/octet-stream", "hello", 5);
	mp_part_is(&ps.v[1], "file", "rel/dir/b.bin", "application/octet-stream", bin,
		   sizeof bin - 1);
	static const char note[] = "text --" UNDICI "-- value";
	mp_part_is(&ps.v[2], "note", NULL, NULL, note, sizeof note - 1);
	/* zero-copy: the data point into the body */
	cr_assert(ps.v[0].data > c && ps.v[0].data < c + sizeof body);
	mp_free(&ps);
	cr_assert_eq(ps.n, 0);
	free(c);
}

Test(multipart, httpx_body)
{
	/* httpx: a hex boundary, a preamble-free body, text/plain guessed */
	static const char body[] =
		"--d3b7a4c1e0f24b5c9a8e7d6c5b4a3f21\r\n"
		"Content-Disposition: form-data; name=\"file\"; filename=\"C:\\\\dir\\\\x.txt\"\r\n"
		"Content-Type: text/plain\r\n"
		"\r\n"
		"line1\nline2\r\n"
		"--d3b7a4c1e0f24b5c9a8e7d6c5b4a3f21--\r\n";
	struct mp_parts ps;
	struct moat_err e;
	char *c;
	cr_assert_eq(mp_run(body, sizeof body - 1, "d3b7a4c1e0f24b5c9a8e7d6c5b4a3f21", 16, &ps, &c, &e),
		     0, "%s", e.msg);
	cr_assert_eq(ps.n, 1);
	mp_part_is(&ps.v[0], "file", "C:\\dir\\x.txt", "text/plain", "line1\nline2", 11);
	mp_free(&ps);
	free(c);
}

Test(multipart, escapes_in_names)
{
	static const char body[] =
		"--X\r\n"
		"content-disposition: FORM-DATA; NAME=\"a\\\"b\"; FileName=\"/tmp/q%22uote%0D%0Anl%41.txt\"\r\n"
		"\r\n"
		"1\r\n"
		"--X\r\n"
		"Content-Disposition: form-data; name=file; filename=\"plain\"; "
		"filename*=UTF-8''%E2%82%AC%20rates.txt\r\n"
		"\r\n"
		"2\r\n"
		"--X\r\n"
		"Content-Disposition: form-data; name=\"\"; filename=\"\"\r\n"
		"\r\n"
		"\r\n"
		"--X--";
	struct mp_parts ps;
	struct moat_err e;
	char *c;
	cr_assert_eq(mp_run(body, sizeof body - 1, "X", 16, &ps, &c, &e), 0, "%s", e.msg);
	cr_assert_eq(ps.n, 3);
	mp_part_is(&ps.v[0], "a\"b", "/tmp/q\"uote\r\nnl%41.txt", NULL, "1", 1);
	mp_part_is(&ps.v[1], "file", "\xe2\x82\xac rates.txt", NULL, "2", 1);
	mp_part_is(&ps.v[2], "", "", NULL, "", 0);
	mp_free(&ps);
	free(c);
}

Test(multipart, empty_parts_and_framing)
{
	/* a preamble, empty data, a part without headers, transport padding,
	 * an epilogue */
	static const char body[] =
		"preamble --X\r\n ignored\r\n"
		"--X \t\r\n"
		"Content-Disposition: form-data; name=\"empty\"\r\n"
		"\r\n"
		"\r\n"
		"--X\r\n"
		"\r\n"
		"no headers\r\n"
		"--X--\r\n"
		"epilogue\r\n--X\r\n\r\nnot a part\r\n";
	struct mp_parts ps;
	struct moat_err e;
	char *c;
	cr_assert_eq(mp_run(body, sizeof body - 1, "X", 16, &ps, &c, &e), 0, "%s", e.msg);
	cr_assert_eq(ps.n, 2);
	mp_part_is(&ps.v[0], "empty", NULL, NULL, "", 0);
	mp_part_is(&ps.v[1], NULL, NULL, NULL, "no headers", 10);
	mp_free(&ps);
	free(c);

	/* a part of nothing (no headers, no blank line) between two delimiters */
	cr_assert_eq(mp_run("--X\r\n\r\n--X\r\n\r\nb\r\n--X--", 22, "X", 16, &ps, &c, &e), 0, "%s",
		     e.msg);
	cr_assert_eq(ps.n, 2);
	mp_part_is(&ps.v[0], NULL, NULL, NULL, "", 0);
	mp_part_is(&ps.v[1], NULL, NULL, NULL, "b", 1);
	mp_free(&ps);
	free(c);

	/* only the close delimiter: no parts */
	cr_assert_eq(mp_run("--X--\r\n", 7, "X", 16, &ps, &c, &e), 0);
	cr_assert_eq(ps.n, 0);
	mp_free(&ps);
	free(c);
}

Test(multipart, max_parts)
{
	static const char body[] = "--X\r\n\r\na\r\n--X\r\n\r\nb\r\n--X\r\n\r\nc\r\n--X--\r\n";
	struct mp_parts ps;
	struct moat_err e;
	char *c;
	cr_assert_eq(mp_run(body, sizeof body - 1, "X", 3, &ps, &c, &e), 0);
	cr_assert_eq(ps.n, 3);
	mp_free(&ps);
	free(c);
	cr_assert_eq(mp_run(body, sizeof body - 1, "X", 2, &ps, &c, &e), -1);
	mp_assert_has(e.msg, "part 3");
	mp_assert_has(e.msg, "too many parts");
	free(c);
}

Test(multipart, refusals)
{
#define R(body, what) mp_refused(body, sizeof body - 1, "X", what)
	R("", "no multipart boundary");
	R("--Y\r\n\r\na\r\n--Y--\r\n", "no multipart boundary");
	R("--XY\r\n\r\na\r\n--Xz", "no multipart boundary");
	R("--X\r\n\r\nabc", "part 1: no closing boundary");
	R("--X\r\n\r\nabc\r\n--X", "part 1: no closing boundary");
	R("--X\r\n\r\nabc\r\n--X-", "part 1: no closing boundary");
	R("--X\r\n\r\nabc\n--X--\r\n", "part 1: no closing boundary"); /* bare LF is data */
	R("--X\r\n\r\na\r\n--X\r\n\r\nb\r\n--Xy--", "part 2: no closing boundary");
	R("--X\r\nContent-Type: a", "part 1: headers without an end");
	R("--X\r\nContent-Type: a\r\n", "part 1: headers without an end");
	R("--X\r\nno colon\r\n\r\nd\r\n--X--", "part 1: malformed header");
	R("--X\r\n: v\r\n\r\nd\r\n--X--", "part 1: malformed header");
	R("--X\r\n folded: v\r\n\r\nd\r\n--X--", "part 1: malformed header");
	R("--X\r\nA: b\rc\r\n\r\nd\r\n--X--", "part 1: malformed header");
	R("--X\r\n\r\nd\r\n--X\r\nContent-Disposition: attachment; name=\"a\"\r\n\r\nd\r\n--X--",
	  "part 2: Content-Disposition is not form-data");
	R("--X\r\nContent-Disposition: form-data; name=\"a\r\n\r\nd\r\n--X--",
	  "part 1: malformed Content-Disposition");
	R("--X\r\nContent-Disposition: form-data; name=\"a\"; name=\"b\"\r\n\r\nd\r\n--X--",
	  "part 1: a Content-Disposition parameter twice");
	R("--X\r\nContent-Disposition: form-data\r\nContent-Disposition: form-data\r\n\r\nd\r\n--X--",
	  "part 1: two Content-Disposition");
	R("--X\r\nContent-Type: a\r\nContent-Type: b\r\n\r\nd\r\n--X--", "part 1: two Content-Type");
	R("--X\r\nContent-Disposition: form-data; filename*=ISO-8859-1''a\r\n\r\nd\r\n--X--",
	  "part 1: filename*");
	R("--X\r\nContent-Disposition: form-data; filename*=UTF-8''a%00b\r\n\r\nd\r\n--X--",
	  "part 1: filename*");
	R("--X\r\nContent-Disposition: form-data; filename*=UTF-8''a%4\r\n\r\nd\r\n--X--",
	  "part 1: filename*");
	R("--X\r\nContent-Disposition: form-data; name\r\n\r\nd\r\n--X--",
	  "part 1: malformed Content-Disposition");
#undef R
	const char nul[] = "--X\r\nContent-Disposition: form-data; name=\"a\0b\"\r\n\r\nd\r\n--X--";
	mp_refused(nul, sizeof nul - 1, "X", "part 1: malformed");

	struct mp_parts ps;
	struct moat_err e;
	cr_assert_eq(mp_parse("--X--", 5, "", 4, &ps, &e), -1);
	char b71[72];
	memset(b71, 'b', 71);
	b71[71] = '\0';
	cr_assert_eq(mp_parse("--X--", 5, b71, 4, &ps, &e), -1);
}

Test(multipart, header_block_limit)
{
	/* a header block of 16 KiB passes; one byte more is refused */
	size_t big = 16u << 10;
	char *body = malloc(big + 64);
	cr_assert_not_null(body);
	size_t n = 0;
	memcpy(body, "--X\r\n", 5);
	n = 5;
	const char *h = "X-Pad: ";
	memcpy(body + n, h, strlen(h));
	n += strlen(h);
	size_t pad = big - strlen(h) - 4; /* the block ends in CRLF CRLF */
	memset(body + n, 'p', pad);
	n += pad;
	memcpy(body + n, "\r\n\r\nd\r\n--X--", 12);
	n += 12;
	struct mp_parts ps;
	struct moat_err e;
	char *c;
	cr_assert_eq(mp_run(body, n, "X", 4, &ps, &c, &e), 0, "%s", e.msg);
	cr_assert_eq(ps.n, 1);
	mp_part_is(&ps.v[0], NULL, NULL, NULL, "d", 1);
	mp_free(&ps);
	free(c);

	memmove(body + 5 + strlen(h) + 1, body + 5 + strlen(h), n - 5 - strlen(h));
	n++;
	cr_assert_eq(mp_run(body, n, "X", 4, &ps, &c, &e), -1);
	mp_assert_has(e.msg, "part 1: header block over 16 KiB");
	free(c);
	free(body);
}

/* Every prefix of a valid body is refused cleanly (no read past len). */
Test(multipart, truncations)
{
	static const char body[] = "--" UNDICI "\r\n"
				   "Content-Disposition: form-data; name=\"file\"; filename=\"/a\"\r\n"
				   "Content-Type: application/octet-stream\r\n"
				   "\r\n"
				   "abc\r\n"
				   "--" UNDICI "--\r\n";
	size_t full = sizeof body - 1;
	for (size_t cut = 0; cut < full; cut++) {
		struct mp_parts ps;
		struct moat_err e;
		char *c;
		int r = mp_run(body, cut, UNDICI, 4, &ps, &c, &e);
		/* complete once "--boundary--" is whole (the last CRLF is epilogue) */
		cr_assert_eq(r, cut >= full - 2 ? 0 : -1, "cut %zu", cut);
		mp_free(&ps);
		free(c);
	}
}
