/* HTTP/1.x request heads and proxy request targets: see http_head.h. */
#include "gate/http_head.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>

/* RFC 9110 5.6.2 tchar */
static bool is_tchar(unsigned char c)
{
	if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	    (c >= '0' && c <= '9'))
		return true;
	return c && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

static char lower(char c)
{
	return c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
}

/* Case-insensitive compare of n bytes at p with the lower-case word w. */
static bool ieq(const char *p, size_t n, const char *w)
{
	if (strlen(w) != n)
		return false;
	for (size_t i = 0; i < n; i++)
		if (lower(p[i]) != w[i])
			return false;
	return true;
}

static enum gate_http_status fail(struct gate_http_head *h, const char *msg)
{
	h->error = msg;
	h->status = GATE_HTTP_ERROR;
	return h->status;
}

void gate_http_head_init(struct gate_http_head *h)
{
	memset(h, 0, sizeof *h);
	h->status = GATE_HTTP_NEED_MORE;
}

/* METHOD SP TARGET SP HTTP/1.x, line = [a, b). */
static const char *request_line(struct gate_http_head *h, const char *buf,
				size_t a, size_t b)
{
	size_t i = a;
	while (i < b && is_tchar((unsigned char)buf[i]))
		i++;
	if (i == a || i >= b || buf[i] != ' ')
		return "bad method in request line";
	h->method = (struct gate_span){a, i - a};
	size_t t = ++i;
	while (i < b && buf[i] > 0x20 && buf[i] < 0x7f)
		i++;
	if (i == t || i >= b || buf[i] != ' ')
		return "bad request target";
	h->target = (struct gate_span){t, i - t};
	i++;
	if (b - i != 8 || memcmp(buf + i, "HTTP/1.", 7) != 0 ||
	    (buf[i + 7] != '0' && buf[i + 7] != '1'))
		return "unsupported HTTP version (HTTP/1.0 or HTTP/1.1 only)";
	h->version = buf[i + 7] == '0' ? 10 : 11;
	return NULL;
}

/* A Content-Length value: one or more equal decimals separated by
 * commas (RFC 9110 8.6), agreeing with an earlier field if any. */
static const char *content_length(struct gate_http_head *h, const char *v,
				  size_t n)
{
	size_t i = 0;
	for (;;) {
		while (i < n && (v[i] == ' ' || v[i] == '\t'))
			i++;
		size_t d = i;
		uint64_t x = 0;
		while (i < n && v[i] >= '0' && v[i] <= '9') {
			if (i - d >= 18)
				return "Content-Length too large";
			x = x * 10 + (uint64_t)(v[i] - '0');
			i++;
		}
		if (i == d)
			return "bad Content-Length";
		if (h->has_length && x != h->content_length)
			return "conflicting Content-Length values";
		h->has_length = true;
		h->content_length = x;
		while (i < n && (v[i] == ' ' || v[i] == '\t'))
			i++;
		if (i == n)
			return NULL;
		if (v[i] != ',')
			return "bad Content-Length";
		i++;
	}
}

/* name: value, line = [a, b). */
static const char *field_line(struct gate_http_head *h, const char *buf,
			      size_t a, size_t b)
{
	if (buf[a] == ' ' || buf[a] == '\t')
		return "obsolete line folding";
	size_t i = a;
	while (i < b && is_tchar((unsigned char)buf[i]))
		i++;
	if (i == a || i >= b || buf[i] != ':')
		return i < b && (buf[i] == ' ' || buf[i] == '\t')
			       ? "whitespace before ':' in field"
			       : "bad field name";
	if (h->n_fields == GATE_HTTP_FIELDS_MAX)
		return "too many header fields";
	size_t name = a, name_len = i - a;
	i++;
	while (i < b && (buf[i] == ' ' || buf[i] == '\t'))
		i++;
	size_t v = i, e = b;
	while (e > v && (buf[e - 1] == ' ' || buf[e - 1] == '\t'))
		e--;
	for (size_t k = v; k < e; k++) {
		unsigned char c = (unsigned char)buf[k];
		if ((c < 0x20 && c != '\t') || c == 0x7f)
			return "control character in field value";
	}
	h->field[h->n_fields++] = (struct gate_http_field){
		{name, name_len}, {v, e - v}};

	const char *np = buf + name;
	if (ieq(np, name_len, "content-length"))
		return content_length(h, buf + v, e - v);
	if (ieq(np, name_len, "transfer-encoding")) {
		if (h->seen_te)
			return "more than one Transfer-Encoding field";
		h->seen_te = true;
		if (!ieq(buf + v, e - v, "chunked"))
			return "Transfer-Encoding other than \"chunked\"";
		h->chunked = true;
	} else if (ieq(np, name_len, "host")) {
		if (h->seen_host)
			return "more than one Host field";
		h->seen_host = true;
	}
	return NULL;
}

/* The whole head is there: checks across fields. */
static const char *head_done(struct gate_http_head *h)
{
	if (h->chunked && h->version == 10)
		return "Transfer-Encoding in an HTTP/1.0 request";
	if (h->chunked && h->has_length)
		return "both Content-Length and Transfer-Encoding";
	return NULL;
}

enum gate_http_status gate_http_head_parse(struct gate_http_head *h,
					   const char *buf, size_t len)
{
	if (h->status != GATE_HTTP_NEED_MORE)
		return h->status;
	if (len < h->pos)
		return fail(h, "input shrank between calls");
	/* Only the first GATE_HTTP_HEAD_MAX bytes can belong to the head. */
	size_t window = len < GATE_HTTP_HEAD_MAX ? len : GATE_HTTP_HEAD_MAX;
	while (h->pos < window) {
		size_t a = h->pos;
		const char *lf = memchr(buf + a, '\n', window - a);
		if (!lf)
			break;
		size_t nl = (size_t)(lf - buf);
		if (nl == a || buf[nl - 1] != '\r')
			return fail(h, "bare LF (lines must end in CRLF)");
		size_t b = nl - 1; /* the line is [a, b) */
		if (memchr(buf + a, '\r', b - a))
			return fail(h, "bare CR");
		h->pos = nl + 1;
		const char *err = NULL;
		if (a == b) {
			if (!h->seen_line)
				continue; /* empty lines before the request */
			if ((err = head_done(h)))
				return fail(h, err);
			h->head_len = h->pos;
			h->status = GATE_HTTP_DONE;
			return h->status;
		}
		if (!h->seen_line) {
			h->seen_line = true;
			err = request_line(h, buf, a, b);
		} else {
			err = field_line(h, buf, a, b);
		}
		if (err)
			return fail(h, err);
	}
	if (len >= GATE_HTTP_HEAD_MAX)
		return fail(h, "request head larger than 64 KiB");
	return GATE_HTTP_NEED_MORE;
}

const struct gate_http_field *gate_http_head_field(
	const struct gate_http_head *h, const char *buf, const char *name)
{
	size_t n = strlen(name);
	for (size_t i = 0; i < h->n_fields; i++) {
		const struct gate_http_field *f = &h->field[i];
		if (f->name.len != n)
			continue;
		size_t k = 0;
		while (k < n && lower(buf[f->name.off + k]) == lower(name[k]))
			k++;
		if (k == n)
			return f;
	}
	return NULL;
}

/* ---- request targets --------------------------------------------------- */

/* host [":" port] at s[0..n): fills out->host and out->port (def_port when
 * there is no port; 0 means one is required). */
static const char *authority(const char *s, size_t n, uint16_t def_port,
			     struct gate_http_dest *out)
{
	size_t hl; /* length of the host part, brackets included */
	if (n > 0 && s[0] == '[') {
		const char *close = memchr(s, ']', n);
		if (!close)
			return "missing ']' in host";
		hl = (size_t)(close - s) + 1;
		char a[INET6_ADDRSTRLEN];
		struct in6_addr a6;
		size_t al = hl - 2;
		if (al == 0 || al >= sizeof a)
			return "bad IPv6 address";
		memcpy(a, s + 1, al);
		a[al] = '\0';
		if (inet_pton(AF_INET6, a, &a6) != 1)
			return "bad IPv6 address";
		for (size_t i = 0; i <= al; i++)
			out->host[i] = lower(a[i]);
	} else {
		hl = 0;
		while (hl < n && s[hl] != ':') {
			char c = lower(s[hl]);
			if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
			      c == '-' || c == '.' || c == '_'))
				return s[hl] == '@' ? "userinfo in URI"
						    : "bad character in host";
			if (hl == GATE_HOST_CAP - 1)
				return "host name too long";
			out->host[hl++] = c;
		}
		if (hl == 0)
			return "empty host";
		out->host[hl] = '\0';
	}
	if (hl == n) {
		if (!def_port)
			return "port required";
		out->port = def_port;
		return NULL;
	}
	if (s[hl] != ':')
		return "junk after host";
	size_t d = hl + 1;
	if (d == n) {
		if (!def_port)
			return "port required";
		out->port = def_port; /* "host:" is the default port */
		return NULL;
	}
	unsigned v = 0;
	for (size_t i = d; i < n; i++) {
		if (s[i] < '0' || s[i] > '9' || i - d >= 5)
			return "bad port";
		v = v * 10 + (unsigned)(s[i] - '0');
	}
	if (v == 0 || v > 65535)
		return "port out of range (1-65535)";
	out->port = (uint16_t)v;
	return NULL;
}

int gate_http_parse_uri(const char *s, size_t len, struct gate_http_dest *out,
			const char **err)
{
	struct gate_http_dest d;
	memset(&d, 0, sizeof d);
	const char *msg = NULL;
	size_t i = 0;
	while (i < len && s[i] != ':' && s[i] != '/' && s[i] != '?' && s[i] != '#')
		i++;
	if (i == len || s[i] != ':' || i == 0) {
		msg = "not an absolute URI";
		goto out;
	}
	if (!ieq(s, i, "http")) {
		msg = "only http:// URIs are forwarded (use CONNECT)";
		goto out;
	}
	if (len - i < 3 || memcmp(s + i, "://", 3) != 0) {
		msg = "not an absolute URI";
		goto out;
	}
	size_t a = i + 3, b = a;
	while (b < len && s[b] != '/' && s[b] != '?' && s[b] != '#')
		b++;
	if (memchr(s + a, '@', b - a)) {
		msg = "userinfo in URI";
		goto out;
	}
	if ((msg = authority(s + a, b - a, 80, &d)))
		goto out;
	if (memchr(s + b, '#', len - b)) {
		msg = "fragment in request target";
		goto out;
	}
	const char *q = memchr(s + b, '?', len - b);
	size_t qpos = q ? (size_t)(q - s) : len;
	if (qpos == b) {
		d.path = "/";
		d.path_len = 1;
	} else {
		d.path = s + b;
		d.path_len = qpos - b;
	}
	d.query = s + qpos;
	d.query_len = len - qpos;
out:
	if (msg) {
		if (err)
			*err = msg;
		return -1;
	}
	*out = d;
	return 0;
}

int gate_http_parse_authority(const char *s, size_t len,
			      struct gate_http_dest *out, const char **err)
{
	struct gate_http_dest d;
	memset(&d, 0, sizeof d);
	const char *msg = authority(s, len, 0, &d);
	if (msg) {
		if (err)
			*err = msg;
		return -1;
	}
	d.path = d.query = "";
	*out = d;
	return 0;
}
