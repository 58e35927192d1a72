/* libFuzzer target: the HTTP request-head parser and the request-target
 * helpers. Checks that results stay inside the input, and that feeding the
 * input in small chunks gives the same answer as all at once. The first
 * byte picks the input's form: raw bytes, or a head assembled from lines
 * whose field names come from a table (so that Content-Length,
 * Transfer-Encoding and Host handling is reached without a dictionary). */
#include "gate/http_head.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_dest(const struct gate_http_dest *d, const char *s, size_t n)
{
	if (strlen(d->host) == 0 || strlen(d->host) >= GATE_HOST_CAP)
		abort();
	/* path and query point into s (or path is the static "/") */
	if (d->path_len && !(d->path_len == 1 && d->path[0] == '/') &&
	    (d->path < s || d->path + d->path_len > s + n))
		abort();
	if (d->query_len && (d->query < s || d->query + d->query_len > s + n ||
			     d->query[0] != '?'))
		abort();
}

static void targets(const char *s, size_t n)
{
	struct gate_http_dest d;
	const char *err = NULL;
	if (gate_http_parse_uri(s, n, &d, &err) == 0) {
		check_dest(&d, s, n);
		if (d.port == 0)
			abort();
	} else if (!err) {
		abort();
	}
	err = NULL;
	if (gate_http_parse_authority(s, n, &d, &err) == 0) {
		check_dest(&d, s, n);
		if (d.port == 0)
			abort();
	} else if (!err) {
		abort();
	}
}

static void in_head(const struct gate_http_head *h, struct gate_span s)
{
	if (s.off > h->head_len || s.len > h->head_len - s.off)
		abort();
}

static void run(const uint8_t *data, size_t size)
{
	const char *buf = (const char *)data;
	static struct gate_http_head a, b;

	gate_http_head_init(&a);
	enum gate_http_status sa = gate_http_head_parse(&a, buf, size);

	/* chunked feeding, chunk sizes from 1 to 7 */
	gate_http_head_init(&b);
	enum gate_http_status sb = GATE_HTTP_NEED_MORE;
	size_t at = 0, step = 1;
	while (sb == GATE_HTTP_NEED_MORE && at < size) {
		at = at + step > size ? size : at + step;
		step = step % 7 + 1;
		sb = gate_http_head_parse(&b, buf, at);
	}
	if (sa != sb)
		abort();
	if (sa == GATE_HTTP_ERROR && (!a.error || strcmp(a.error, b.error) != 0))
		abort();
	if (sa == GATE_HTTP_DONE) {
		if (a.head_len != b.head_len || a.n_fields != b.n_fields ||
		    memcmp(a.field, b.field, a.n_fields * sizeof a.field[0]) != 0 ||
		    a.content_length != b.content_length || a.chunked != b.chunked)
			abort();
		if (a.head_len > size || a.head_len > GATE_HTTP_HEAD_MAX ||
		    a.n_fields > GATE_HTTP_FIELDS_MAX)
			abort();
		if (a.version != 10 && a.version != 11)
			abort();
		if (a.chunked && a.has_length)
			abort();
		in_head(&a, a.method);
		in_head(&a, a.target);
		for (size_t i = 0; i < a.n_fields; i++) {
			in_head(&a, a.field[i].name);
			in_head(&a, a.field[i].value);
			if (a.field[i].name.len == 0)
				abort();
		}
		gate_http_head_field(&a, buf, "host");
		targets(buf + a.target.off, a.target.len);
	}
	/* the helpers on raw bytes, up to a NUL or a line end */
	size_t n = 0;
	while (n < size && n < 1024 && data[n] != '\n')
		n++;
	targets(buf, n);
}

static const char *const lines0[] = {
	"GET http://a.test/ HTTP/1.1",  "POST http://a.test/x?y HTTP/1.1",
	"CONNECT a.test:443 HTTP/1.1",  "POST http://[::1]:8080/ HTTP/1.0",
	"GET https://a.test/ HTTP/1.1", "PUT http://u@a.test/ HTTP/1.1",
};
static const char *const names[] = {
	"Content-Length: ", "Transfer-Encoding: ", "Host: ", "content-length:",
	"TRANSFER-ENCODING:\t", "X-A: ", "Connection: ", "", " ", "Host:",
	"Transfer-Encoding: chunked", "Content-Length: 5",
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	if (!(data[0] & 1)) {
		run(data + 1, size - 1);
		return 0;
	}
	/* request line from the table, then per input line: a name picked by
	 * its first byte and the rest as the value; CRLF line ends */
	static uint8_t head[8192];
	size_t o = 0;
	const char *l0 = lines0[(data[0] >> 1) % (sizeof lines0 / sizeof *lines0)];
	memcpy(head, l0, strlen(l0));
	o += strlen(l0);
	memcpy(head + o, "\r\n", 2);
	o += 2;
	size_t i = 1;
	while (i < size && o < sizeof head - 1100) {
		const char *nm = names[data[i] % (sizeof names / sizeof *names)];
		i++;
		memcpy(head + o, nm, strlen(nm));
		o += strlen(nm);
		while (i < size && data[i] != '\n' && o < sizeof head - 4)
			head[o++] = data[i++];
		i++;
		memcpy(head + o, "\r\n", 2);
		o += 2;
	}
	memcpy(head + o, "\r\n", 2);
	o += 2;
	uint8_t *copy = malloc(o);
	memcpy(copy, head, o);
	run(copy, o);
	free(copy);
	return 0;
}
