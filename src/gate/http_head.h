/* Egress gateway: HTTP/1.0 and 1.1 request heads from proxy clients, and
 * the two request-target forms a proxy acts on (absolute-URI for plain
 * forwarding, authority for CONNECT). Pure: no I/O, no allocation.
 *
 * The head parser is incremental: the caller keeps every byte received so
 * far in one buffer and calls gate_http_head_parse() with all of it after
 * each read; complete lines are checked once, in order, so feeding a head
 * byte by byte gives the same result (and the same error) as all at once.
 * Results are spans (offsets into that buffer, so it may be moved or
 * reallocated between calls).
 *
 * Strict on purpose (a proxy that is lenient where the next hop is not
 * invites request smuggling):
 *   - every line ends in CRLF; a bare LF or bare CR is an error (LF-only
 *     heads are refused; real clients send CRLF). Empty lines before the
 *     request line are skipped (RFC 9112 2.2).
 *   - request line: METHOD SP TARGET SP HTTP/1.0|HTTP/1.1, single spaces,
 *     method a token, target visible ASCII.
 *   - field lines: a token name, ':' right after it (no space), value with
 *     surrounding spaces/tabs trimmed; control characters (other than tab)
 *     and DEL are errors; obs-fold (a line starting with SP/HTAB) is an
 *     error. At most GATE_HTTP_FIELDS_MAX fields.
 *   - Content-Length: digits; repeated (or "5, 5") only when all equal.
 *     Transfer-Encoding: exactly one field, value exactly "chunked"
 *     (any case), not in HTTP/1.0, never together with Content-Length.
 *     More than one Host field is an error.
 *   - the head (request line to the empty line, inclusive) is at most
 *     GATE_HTTP_HEAD_MAX bytes. */
#ifndef MOAT_GATE_HTTP_HEAD_H
#define MOAT_GATE_HTTP_HEAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GATE_HTTP_HEAD_MAX 65536
#define GATE_HTTP_FIELDS_MAX 100
#define GATE_HOST_CAP 256 /* a host name of up to 255 bytes + NUL */

enum gate_http_status {
	GATE_HTTP_NEED_MORE,
	GATE_HTTP_DONE,
	GATE_HTTP_ERROR,
};

/* Bytes [off, off + len) of the caller's buffer. */
struct gate_span {
	size_t off, len;
};

struct gate_http_field {
	struct gate_span name, value;
};

struct gate_http_head {
	/* Results, valid after GATE_HTTP_DONE: */
	struct gate_span method, target;
	int version;                 /* 10 or 11 */
	size_t n_fields;
	struct gate_http_field field[GATE_HTTP_FIELDS_MAX];
	size_t head_len;             /* bytes of the head; the body follows */
	bool has_length;             /* Content-Length present */
	uint64_t content_length;
	bool chunked;                /* Transfer-Encoding: chunked */
	/* After GATE_HTTP_ERROR: a static one-line message. */
	const char *error;
	/* Private state. */
	enum gate_http_status status;
	size_t pos;                  /* start of the first unchecked line */
	bool seen_line, seen_host, seen_te;
};

void gate_http_head_init(struct gate_http_head *h);

/* Parse buf[0..len), all bytes received so far (the same prefix each
 * call, growing). NEED_MORE: read more (len has not reached the limit).
 * DONE: h describes the head, h->head_len bytes long. ERROR: h->error
 * says why. Once DONE or ERROR, further calls return the same. */
enum gate_http_status gate_http_head_parse(struct gate_http_head *h,
					   const char *buf, size_t len);

/* The first field named name (case-insensitive), or NULL. */
const struct gate_http_field *gate_http_head_field(
	const struct gate_http_head *h, const char *buf, const char *name);

/* Where a request goes. */
struct gate_http_dest {
	char host[GATE_HOST_CAP];    /* lower case; IPv6 without brackets */
	uint16_t port;
	/* Absolute-URI only: the origin-form for the upstream request is
	 * path followed by query. path points into the parsed text, or is
	 * "/" when the URI has an empty path; query is "" or starts with
	 * '?'. */
	const char *path;
	size_t path_len;
	const char *query;
	size_t query_len;
};

/* Parse an absolute-URI "http://host[:port][/path][?query]" (scheme in any
 * case; host a name, an IPv4 literal or [IPv6]; port 1..65535, default
 * 80). Refused: other schemes (https:// and the like must use CONNECT),
 * userinfo ("user@"), a fragment, percent-encoded or non-DNS characters in
 * the host, IPv6 zone ids. Returns 0, or -1 with *err (static) set. */
int gate_http_parse_uri(const char *s, size_t len, struct gate_http_dest *out,
			const char **err);

/* Parse a CONNECT authority "host:port" (host as above, port required).
 * path and query are left empty. Returns 0, or -1 with *err set. */
int gate_http_parse_authority(const char *s, size_t len,
			      struct gate_http_dest *out, const char **err);

#endif
