/* Unit tests for src/gate/http_head: the incremental request-head parser
 * (results, every error, byte-by-byte feeding, limits) and the
 * absolute-URI / CONNECT authority helpers. */
#define _GNU_SOURCE
#include <criterion/criterion.h>

#include "gate/http_head.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define assert_has(hay, needle)                                                \
	cr_assert(strstr((hay), (needle)) != NULL, "expected \"%s\" in \"%s\"", \
		  (needle), (hay))

static bool hh_span_is(const char *buf, struct gate_span s, const char *want)
{
	return s.len == strlen(want) && memcmp(buf + s.off, want, s.len) == 0;
}

#define assert_span(buf, s, want)                                              \
	cr_assert(hh_span_is((buf), (s), (want)), "span \"%.*s\", want \"%s\"", \
		  (int)(s).len, (buf) + (s).off, (want))

/* All at once. */
static enum gate_http_status hh_once(struct gate_http_head *h, const char *buf,
				     size_t len)
{
	gate_http_head_init(h);
	return gate_http_head_parse(h, buf, len);
}

/* One byte at a time, from a fresh heap copy each call (the buffer moves):
 * NEED_MORE until the end, then the same answer as all at once. */
static enum gate_http_status hh_bytewise(struct gate_http_head *h,
					 const char *buf, size_t len)
{
	gate_http_head_init(h);
	enum gate_http_status st = GATE_HTTP_NEED_MORE;
	for (size_t i = 1; i <= len && st == GATE_HTTP_NEED_MORE; i++) {
		char *copy = malloc(i);
		memcpy(copy, buf, i);
		st = gate_http_head_parse(h, copy, i);
		free(copy);
	}
	return st;
}

/* Both ways must agree on status, error and every result. */
static enum gate_http_status hh_parse(struct gate_http_head *h, const char *buf)
{
	size_t len = strlen(buf);
	struct gate_http_head *h2 = malloc(sizeof *h2);
	enum gate_http_status a = hh_once(h, buf, len);
	enum gate_http_status b = hh_bytewise(h2, buf, len);
	cr_assert_eq(a, b, "at once %d, byte by byte %d", a, b);
	if (a == GATE_HTTP_ERROR)
		cr_assert_str_eq(h->error, h2->error);
	if (a == GATE_HTTP_DONE) {
		cr_assert_eq(h->head_len, h2->head_len);
		cr_assert_eq(h->n_fields, h2->n_fields);
		cr_assert_eq(memcmp(h->field, h2->field,
				    h->n_fields * sizeof h->field[0]),
			     0);
		cr_assert_eq(h->content_length, h2->content_length);
		cr_assert_eq(h->chunked, h2->chunked);
	}
	free(h2);
	return a;
}

static void hh_bad(const char *buf, const char *why)
{
	struct gate_http_head h;
	cr_assert_eq(hh_parse(&h, buf), GATE_HTTP_ERROR, "accepted: %s", buf);
	assert_has(h.error, why);
}

static void hh_good(struct gate_http_head *h, const char *buf)
{
	enum gate_http_status st = hh_parse(h, buf);
	cr_assert_eq(st, GATE_HTTP_DONE, "status %d (%s) for %s", st,
		     st == GATE_HTTP_ERROR ? h->error : "", buf);
}

/* ---- heads ------------------------------------------------------------- */

Test(gate_http, absolute_form_get)
{
	const char *req = "GET http://example.com/a?b=1 HTTP/1.1\r\n"
			  "Host: example.com\r\n"
			  "User-Agent:  curl/8.0 \t\r\n"
			  "Accept: */*\r\n"
			  "\r\n"
			  "BODY";
	struct gate_http_head h;
	hh_good(&h, req);
	assert_span(req, h.method, "GET");
	assert_span(req, h.target, "http://example.com/a?b=1");
	cr_assert_eq(h.version, 11);
	cr_assert_eq(h.n_fields, 3);
	assert_span(req, h.field[0].name, "Host");
	assert_span(req, h.field[0].value, "example.com");
	assert_span(req, h.field[1].value, "curl/8.0");
	assert_span(req, h.field[2].name, "Accept");
	cr_assert_eq(h.head_len, strlen(req) - 4);
	cr_assert_not(h.has_length);
	cr_assert_not(h.chunked);
}

Test(gate_http, connect_and_http10)
{
	const char *req = "CONNECT example.com:443 HTTP/1.0\r\n\r\n";
	struct gate_http_head h;
	hh_good(&h, req);
	assert_span(req, h.method, "CONNECT");
	assert_span(req, h.target, "example.com:443");
	cr_assert_eq(h.version, 10);
	cr_assert_eq(h.n_fields, 0);
	cr_assert_eq(h.head_len, strlen(req));
}

Test(gate_http, field_lookup_is_case_insensitive)
{
	const char *req = "GET http://a/ HTTP/1.1\r\nhOsT: a\r\nX-Empty:\r\n"
			  "X-Tab:\tv\r\n\r\n";
	struct gate_http_head h;
	hh_good(&h, req);
	const struct gate_http_field *f = gate_http_head_field(&h, req, "Host");
	cr_assert_not_null(f);
	assert_span(req, f->value, "a");
	f = gate_http_head_field(&h, req, "x-empty");
	cr_assert_not_null(f);
	cr_assert_eq(f->value.len, 0);
	assert_span(req, gate_http_head_field(&h, req, "x-tab")->value, "v");
	cr_assert_null(gate_http_head_field(&h, req, "Hos"));
	cr_assert_null(gate_http_head_field(&h, req, "Hostx"));
}

Test(gate_http, need_more_for_every_proper_prefix)
{
	const char *req = "POST http://a.test/x HTTP/1.1\r\nHost: a.test\r\n"
			  "Content-Length: 3\r\n\r\n";
	size_t len = strlen(req);
	for (size_t i = 0; i < len; i++) {
		struct gate_http_head h;
		cr_assert_eq(hh_once(&h, req, i), GATE_HTTP_NEED_MORE, "prefix %zu", i);
	}
	struct gate_http_head h;
	hh_good(&h, req);
	cr_assert(h.has_length);
	cr_assert_eq(h.content_length, 3);
}

Test(gate_http, done_and_error_are_sticky)
{
	const char *req = "GET http://a/ HTTP/1.1\r\n\r\nGET http://b/ HTTP/1.1\r\n";
	struct gate_http_head h;
	cr_assert_eq(hh_once(&h, req, strlen(req)), GATE_HTTP_DONE);
	size_t hl = h.head_len;
	cr_assert_eq(gate_http_head_parse(&h, req, strlen(req)), GATE_HTTP_DONE);
	cr_assert_eq(h.head_len, hl);
	cr_assert_eq(hl, strlen("GET http://a/ HTTP/1.1\r\n\r\n"));

	cr_assert_eq(hh_once(&h, "GET\n", 4), GATE_HTTP_ERROR);
	const char *err = h.error;
	cr_assert_eq(gate_http_head_parse(&h, "GET / HTTP/1.1\r\n\r\n", 18),
		     GATE_HTTP_ERROR);
	cr_assert_eq(h.error, err);
}

Test(gate_http, leading_empty_lines_are_skipped)
{
	const char *req = "\r\n\r\nGET http://a/ HTTP/1.1\r\n\r\n";
	struct gate_http_head h;
	hh_good(&h, req);
	assert_span(req, h.method, "GET");
	cr_assert_eq(h.head_len, strlen(req));
}

Test(gate_http, strict_line_endings)
{
	hh_bad("GET http://a/ HTTP/1.1\n\n", "bare LF");
	hh_bad("GET http://a/ HTTP/1.1\r\nHost: a\n\r\n", "bare LF");
	hh_bad("GET http://a/ HTTP/1.1\r\nHost: a\r\n\n", "bare LF");
	hh_bad("\nGET http://a/ HTTP/1.1\r\n\r\n", "bare LF");
	hh_bad("GET http://a/ HTTP/1.1\r\nHost: a\rX: b\r\n\r\n", "bare CR");
	hh_bad("GET http://a/\r HTTP/1.1\r\n\r\n", "bare CR");
	hh_bad("GET http://a/ HTTP/1.1\r\n\r\r\n", "bare CR");
}

Test(gate_http, request_line_errors)
{
	hh_bad("GET  http://a/ HTTP/1.1\r\n\r\n", "bad request target");
	hh_bad("GET http://a/  HTTP/1.1\r\n\r\n", "unsupported HTTP version");
	hh_bad("GET http://a/ HTTP/1.1 \r\n\r\n", "unsupported HTTP version");
	hh_bad(" GET http://a/ HTTP/1.1\r\n\r\n", "bad method");
	hh_bad("G(T http://a/ HTTP/1.1\r\n\r\n", "bad method");
	hh_bad("GET\r\n\r\n", "bad method");
	hh_bad("GET http://a/\r\n\r\n", "bad request target");
	hh_bad("GET http://a/ \r\n\r\n", "unsupported HTTP version");
	hh_bad("GET http://a/ HTTP/2.0\r\n\r\n", "unsupported HTTP version");
	hh_bad("GET http://a/ HTTP/1.2\r\n\r\n", "unsupported HTTP version");
	hh_bad("GET http://a/ http/1.1\r\n\r\n", "unsupported HTTP version");
	hh_bad("GET http://a/ HTTP/1.10\r\n\r\n", "unsupported HTTP version");
	hh_bad("GET http://a/\x01 HTTP/1.1\r\n\r\n", "bad request target");
	hh_bad("GET http://a/\x7f HTTP/1.1\r\n\r\n", "bad request target");
	hh_bad("GET http://a/\xc3\xa4 HTTP/1.1\r\n\r\n", "bad request target");
	hh_bad("GET http://a/\tx HTTP/1.1\r\n\r\n", "bad request target");
}

Test(gate_http, field_line_errors)
{
	hh_bad("GET http://a/ HTTP/1.1\r\nHost: a\r\n folded\r\n\r\n",
	       "obsolete line folding");
	hh_bad("GET http://a/ HTTP/1.1\r\nHost: a\r\n\tfolded\r\n\r\n",
	       "obsolete line folding");
	hh_bad("GET http://a/ HTTP/1.1\r\nHost : a\r\n\r\n", "whitespace before ':'");
	hh_bad("GET http://a/ HTTP/1.1\r\nHost\t: a\r\n\r\n", "whitespace before ':'");
	hh_bad("GET http://a/ HTTP/1.1\r\n: a\r\n\r\n", "bad field name");
	hh_bad("GET http://a/ HTTP/1.1\r\nHo(st: a\r\n\r\n", "bad field name");
	hh_bad("GET http://a/ HTTP/1.1\r\nHo\"st: a\r\n\r\n", "bad field name");
	hh_bad("GET http://a/ HTTP/1.1\r\nNoColon\r\n\r\n", "bad field name");
	hh_bad("GET http://a/ HTTP/1.1\r\nX: a\x01z\r\n\r\n", "control character");
	hh_bad("GET http://a/ HTTP/1.1\r\nX: a\x7fz\r\n\r\n", "control character");
	hh_bad("GET http://a/ HTTP/1.1\r\nX: a\x1b[31m\r\n\r\n", "control character");
}

Test(gate_http, nul_byte_in_field_value)
{
	static const char req[] = "GET http://a/ HTTP/1.1\r\nX: a\0b\r\n\r\n";
	struct gate_http_head h;
	cr_assert_eq(hh_once(&h, req, sizeof req - 1), GATE_HTTP_ERROR);
	assert_has(h.error, "control character");
}

Test(gate_http, obs_text_in_value_is_kept)
{
	const char *req = "GET http://a/ HTTP/1.1\r\nX: caf\xc3\xa9\r\n\r\n";
	struct gate_http_head h;
	hh_good(&h, req);
	assert_span(req, h.field[0].value, "caf\xc3\xa9");
}

Test(gate_http, content_length_rules)
{
	struct gate_http_head h;
	hh_good(&h, "POST http://a/ HTTP/1.1\r\nContent-Length: 5\r\n"
		    "content-length: 5\r\n\r\n");
	cr_assert_eq(h.content_length, 5);
	hh_good(&h, "POST http://a/ HTTP/1.1\r\nContent-Length: 5, 5 ,5\r\n\r\n");
	cr_assert_eq(h.content_length, 5);
	hh_good(&h, "POST http://a/ HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
	cr_assert(h.has_length);
	cr_assert_eq(h.content_length, 0);
	hh_good(&h, "POST http://a/ HTTP/1.1\r\nContent-Length: 999999999999999999\r\n\r\n");
	cr_assert_eq(h.content_length, 999999999999999999ULL);

	hh_bad("POST http://a/ HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
	       "conflicting Content-Length");
	hh_bad("POST http://a/ HTTP/1.1\r\nContent-Length: 5, 6\r\n\r\n",
	       "conflicting Content-Length");
	hh_bad("POST http://a/ HTTP/1.1\r\nContent-Length: 5a\r\n\r\n", "bad Content-Length");
	hh_bad("POST http://a/ HTTP/1.1\r\nContent-Length: -5\r\n\r\n", "bad Content-Length");
	hh_bad("POST http://a/ HTTP/1.1\r\nContent-Length: +5\r\n\r\n", "bad Content-Length");
	hh_bad("POST http://a/ HTTP/1.1\r\nContent-Length:\r\n\r\n", "bad Content-Length");
	hh_bad("POST http://a/ HTTP/1.1\r\nContent-Length: 5,\r\n\r\n", "bad Content-Length");
	hh_bad("POST http://a/ HTTP/1.1\r\nContent-Length: 0x10\r\n\r\n", "bad Content-Length");
	hh_bad("POST http://a/ HTTP/1.1\r\nContent-Length: 1 0\r\n\r\n", "bad Content-Length");
	hh_bad("POST http://a/ HTTP/1.1\r\nContent-Length: 9999999999999999999\r\n\r\n",
	       "too large");
}

Test(gate_http, transfer_encoding_rules)
{
	struct gate_http_head h;
	hh_good(&h, "POST http://a/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n");
	cr_assert(h.chunked);
	hh_good(&h, "POST http://a/ HTTP/1.1\r\nTransfer-Encoding:  CHUNKED \r\n\r\n");
	cr_assert(h.chunked);

	hh_bad("POST http://a/ HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n",
	       "other than \"chunked\"");
	hh_bad("POST http://a/ HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
	       "other than \"chunked\"");
	hh_bad("POST http://a/ HTTP/1.1\r\nTransfer-Encoding: chunked, chunked\r\n\r\n",
	       "other than \"chunked\"");
	hh_bad("POST http://a/ HTTP/1.1\r\nTransfer-Encoding: xchunked\r\n\r\n",
	       "other than \"chunked\"");
	hh_bad("POST http://a/ HTTP/1.1\r\nTransfer-Encoding:\r\n\r\n",
	       "other than \"chunked\"");
	hh_bad("POST http://a/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\n"
	       "Transfer-Encoding: chunked\r\n\r\n",
	       "more than one Transfer-Encoding");
	hh_bad("POST http://a/ HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
	       "HTTP/1.0");
}

Test(gate_http, content_length_with_transfer_encoding)
{
	hh_bad("POST http://a/ HTTP/1.1\r\nContent-Length: 5\r\n"
	       "Transfer-Encoding: chunked\r\n\r\n",
	       "both Content-Length and Transfer-Encoding");
	hh_bad("POST http://a/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\n"
	       "Content-Length: 5\r\n\r\n",
	       "both Content-Length and Transfer-Encoding");
}

Test(gate_http, duplicate_host)
{
	hh_bad("GET http://a/ HTTP/1.1\r\nHost: a\r\nHOST: b\r\n\r\n",
	       "more than one Host");
}

static char *hh_with_fields(int n)
{
	size_t cap = 64 + (size_t)n * 16;
	char *buf = malloc(cap);
	size_t o = (size_t)snprintf(buf, cap, "GET http://a/ HTTP/1.1\r\n");
	for (int i = 0; i < n; i++)
		o += (size_t)snprintf(buf + o, cap - o, "X-%d: %d\r\n", i, i);
	snprintf(buf + o, cap - o, "\r\n");
	return buf;
}

Test(gate_http, field_count_limit)
{
	struct gate_http_head h;
	char *ok = hh_with_fields(GATE_HTTP_FIELDS_MAX);
	hh_good(&h, ok);
	cr_assert_eq(h.n_fields, GATE_HTTP_FIELDS_MAX);
	free(ok);
	char *bad = hh_with_fields(GATE_HTTP_FIELDS_MAX + 1);
	hh_bad(bad, "too many header fields");
	free(bad);
}

/* A head of exactly n bytes: request line, one padding field, blank line. */
static char *hh_of_size(size_t n)
{
	const char *start = "GET http://a/ HTTP/1.1\r\nX: ";
	char *buf = malloc(n + 1);
	size_t s = strlen(start);
	memcpy(buf, start, s);
	memset(buf + s, 'v', n - s - 4);
	memcpy(buf + n - 4, "\r\n\r\n", 4);
	buf[n] = '\0';
	return buf;
}

Test(gate_http, head_size_limit)
{
	struct gate_http_head h;
	char *ok = hh_of_size(GATE_HTTP_HEAD_MAX);
	cr_assert_eq(hh_once(&h, ok, GATE_HTTP_HEAD_MAX), GATE_HTTP_DONE);
	cr_assert_eq(h.head_len, GATE_HTTP_HEAD_MAX);
	free(ok);

	char *big = hh_of_size(GATE_HTTP_HEAD_MAX + 1);
	cr_assert_eq(hh_once(&h, big, GATE_HTTP_HEAD_MAX + 1), GATE_HTTP_ERROR);
	assert_has(h.error, "larger than 64 KiB");
	/* fed in chunks: NEED_MORE up to the limit, then the same error */
	gate_http_head_init(&h);
	cr_assert_eq(gate_http_head_parse(&h, big, GATE_HTTP_HEAD_MAX - 1),
		     GATE_HTTP_NEED_MORE);
	cr_assert_eq(gate_http_head_parse(&h, big, GATE_HTTP_HEAD_MAX),
		     GATE_HTTP_ERROR);
	assert_has(h.error, "larger than 64 KiB");
	free(big);

	/* one endless line, no LF at all */
	char *line = malloc(GATE_HTTP_HEAD_MAX * 2);
	memset(line, 'A', GATE_HTTP_HEAD_MAX * 2);
	cr_assert_eq(hh_once(&h, line, GATE_HTTP_HEAD_MAX * 2), GATE_HTTP_ERROR);
	free(line);
}

Test(gate_http, bytewise_matches_once_on_many_inputs)
{
	const char *reqs[] = {
		"GET http://a/ HTTP/1.1\r\nHost: a\r\n\r\n",
		"CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\nProxy-Authorization: x\r\n\r\n",
		"GET http://a/ HTTP/1.1\r\nX: 1\r\nX: 2\r\n\r\nextra",
		"GET http://a/ HTTP/1.1\r\nX\x01: 1\r\n\r\n",
		"GET http://a/ HTTP/1.1\r\nX: 1\r\n \r\n\r\n",
		"\r\n\r\n\r\nGET http://a/ HTTP/1.1\r\n\r\n",
		"GET http://a/ HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n",
	};
	for (size_t i = 0; i < sizeof reqs / sizeof *reqs; i++) {
		struct gate_http_head h;
		hh_parse(&h, reqs[i]);
	}
}

Test(gate_http, shrinking_input_is_an_error)
{
	struct gate_http_head h;
	gate_http_head_init(&h);
	const char *req = "GET http://a/ HTTP/1.1\r\nHo";
	cr_assert_eq(gate_http_head_parse(&h, req, strlen(req)), GATE_HTTP_NEED_MORE);
	cr_assert_eq(gate_http_head_parse(&h, req, 3), GATE_HTTP_ERROR);
}

/* ---- absolute-URI ------------------------------------------------------ */

static struct gate_http_dest hh_uri(const char *s)
{
	struct gate_http_dest d;
	const char *err = "(none)";
	cr_assert_eq(gate_http_parse_uri(s, strlen(s), &d, &err), 0, "%s: %s", s, err);
	return d;
}

static void hh_uri_bad(const char *s, const char *why)
{
	struct gate_http_dest d;
	const char *err = NULL;
	cr_assert_eq(gate_http_parse_uri(s, strlen(s), &d, &err), -1, "%s accepted", s);
	cr_assert_not_null(err);
	assert_has(err, why);
}

static void hh_origin(const struct gate_http_dest *d, char *out, size_t cap)
{
	snprintf(out, cap, "%.*s%.*s", (int)d->path_len, d->path,
		 (int)d->query_len, d->query);
}

Test(gate_http, uri_basic)
{
	char o[256];
	struct gate_http_dest d = hh_uri("http://example.com/a/b?c=d&e");
	cr_assert_str_eq(d.host, "example.com");
	cr_assert_eq(d.port, 80);
	hh_origin(&d, o, sizeof o);
	cr_assert_str_eq(o, "/a/b?c=d&e");
	cr_assert_eq(d.query_len, 6);

	d = hh_uri("HTTP://Example.COM:8080/x");
	cr_assert_str_eq(d.host, "example.com");
	cr_assert_eq(d.port, 8080);
	hh_origin(&d, o, sizeof o);
	cr_assert_str_eq(o, "/x");
}

Test(gate_http, uri_empty_path_becomes_slash)
{
	char o[256];
	struct gate_http_dest d = hh_uri("http://example.com");
	hh_origin(&d, o, sizeof o);
	cr_assert_str_eq(o, "/");
	d = hh_uri("http://example.com?q=1");
	hh_origin(&d, o, sizeof o);
	cr_assert_str_eq(o, "/?q=1");
	d = hh_uri("http://example.com:81");
	cr_assert_eq(d.port, 81);
	hh_origin(&d, o, sizeof o);
	cr_assert_str_eq(o, "/");
	d = hh_uri("http://example.com:/p"); /* empty port: the default */
	cr_assert_eq(d.port, 80);
}

Test(gate_http, uri_ip_hosts)
{
	struct gate_http_dest d = hh_uri("http://[2001:DB8::1]:8080/");
	cr_assert_str_eq(d.host, "2001:db8::1");
	cr_assert_eq(d.port, 8080);
	d = hh_uri("http://[::ffff:127.0.0.1]/");
	cr_assert_str_eq(d.host, "::ffff:127.0.0.1");
	cr_assert_eq(d.port, 80);
	d = hh_uri("http://192.0.2.1:65535/");
	cr_assert_str_eq(d.host, "192.0.2.1");
	cr_assert_eq(d.port, 65535);
}

Test(gate_http, uri_errors)
{
	hh_uri_bad("https://example.com/", "only http://");
	hh_uri_bad("ftp://example.com/", "only http://");
	hh_uri_bad("httpx://example.com/", "only http://");
	hh_uri_bad("/relative/path", "not an absolute URI");
	hh_uri_bad("example.com:80", "only http://");
	hh_uri_bad("http:/example.com/", "not an absolute URI");
	hh_uri_bad("http:example.com", "not an absolute URI");
	hh_uri_bad("", "not an absolute URI");
	hh_uri_bad("http://user@example.com/", "userinfo");
	hh_uri_bad("http://user:pw@example.com/", "userinfo");
	hh_uri_bad("http://evil.test@good.test/", "userinfo");
	hh_uri_bad("http://example.com/#frag", "fragment");
	hh_uri_bad("http://example.com#frag", "fragment");
	hh_uri_bad("http://exa%6dple.com/", "bad character in host");
	hh_uri_bad("http://exa mple.com/", "bad character in host");
	hh_uri_bad("http:///path", "empty host");
	hh_uri_bad("http://:80/", "empty host");
	hh_uri_bad("http://example.com:0/", "out of range");
	hh_uri_bad("http://example.com:65536/", "out of range");
	hh_uri_bad("http://example.com:123456/", "bad port");
	hh_uri_bad("http://example.com:8o/", "bad port");
	hh_uri_bad("http://example.com:-1/", "bad port");
	hh_uri_bad("http://[fe80::1%25eth0]/", "bad IPv6");
	hh_uri_bad("http://[::1/", "missing ']'");
	hh_uri_bad("http://[]/", "bad IPv6");
	hh_uri_bad("http://[example.com]/", "bad IPv6");
	hh_uri_bad("http://[::1]x/", "junk after host");
	hh_uri_bad("http://::1/", "empty host");
}

Test(gate_http, uri_host_length)
{
	char uri[400];
	char host[300];
	memset(host, 'a', 255);
	host[255] = '\0';
	snprintf(uri, sizeof uri, "http://%s/", host);
	struct gate_http_dest d = hh_uri(uri);
	cr_assert_eq(strlen(d.host), 255);
	memset(host, 'a', 256);
	host[256] = '\0';
	snprintf(uri, sizeof uri, "http://%s/", host);
	hh_uri_bad(uri, "too long");
}

Test(gate_http, uri_is_length_bounded)
{
	/* only len bytes are read: the port ends where len ends */
	const char *s = "http://example.com:655361";
	struct gate_http_dest d;
	const char *err = NULL;
	cr_assert_eq(gate_http_parse_uri(s, strlen(s), &d, &err), -1);
	cr_assert_eq(gate_http_parse_uri(s, strlen(s) - 1, &d, &err), -1);
	cr_assert_eq(gate_http_parse_uri(s, strlen(s) - 2, &d, &err), 0);
	cr_assert_eq(d.port, 6553);
}

/* ---- CONNECT authority ------------------------------------------------- */

Test(gate_http, authority_forms)
{
	struct gate_http_dest d;
	const char *err = NULL;
	cr_assert_eq(gate_http_parse_authority("Example.com:443", 15, &d, &err), 0);
	cr_assert_str_eq(d.host, "example.com");
	cr_assert_eq(d.port, 443);
	cr_assert_eq(d.path_len + d.query_len, 0);
	cr_assert_eq(gate_http_parse_authority("[::1]:8443", 10, &d, &err), 0);
	cr_assert_str_eq(d.host, "::1");
	cr_assert_eq(d.port, 8443);
	cr_assert_eq(gate_http_parse_authority("192.0.2.1:22", 12, &d, &err), 0);
	cr_assert_str_eq(d.host, "192.0.2.1");
	cr_assert_eq(d.port, 22);
}

static void hh_auth_bad(const char *s, const char *why)
{
	struct gate_http_dest d;
	const char *err = NULL;
	cr_assert_eq(gate_http_parse_authority(s, strlen(s), &d, &err), -1,
		     "%s accepted", s);
	assert_has(err, why);
}

Test(gate_http, authority_errors)
{
	hh_auth_bad("example.com", "port required");
	hh_auth_bad("example.com:", "port required");
	hh_auth_bad("[::1]", "port required");
	hh_auth_bad("example.com:0", "out of range");
	hh_auth_bad("example.com:70000", "out of range");
	hh_auth_bad(":443", "empty host");
	hh_auth_bad("", "empty host");
	hh_auth_bad("user@example.com:443", "userinfo");
	hh_auth_bad("example.com:443/x", "bad port");
	hh_auth_bad("http://example.com:443", "bad port");
	hh_auth_bad("::1:443", "empty host");
	hh_auth_bad("[::1]443", "junk after host");
}
