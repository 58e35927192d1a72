/* An incremental parser of server-sent events (text/event-stream, WHATWG
 * HTML "server-sent events" 9.2.6): bytes are fed as they arrive, and each
 * dispatched event's type and data go to a callback. Lines end with CRLF,
 * LF or CR; "data:" lines join with "\n"; comments and "id:"/"retry:" are
 * ignored (moat mcp never reconnects a stream); an event still open when
 * the stream ends is dropped, as the standard says. The data of one event
 * is bounded. Pure: no I/O. */
#ifndef MOAT_CLIENT_SSE_H
#define MOAT_CLIENT_SSE_H

#include <moat/err.h>

#include <stdbool.h>
#include <stddef.h>

/* type: the "event:" field, "message" when there was none. data is
 * NUL-terminated (not counted in len). Returns -1 (e filled) to stop. */
typedef int (*sse_cb)(void *arg, const char *type, const char *data, size_t len,
		      struct moat_err *e);

struct sse {
	char *line;          /* the current line */
	size_t llen, lcap;
	char *data;          /* the current event's data */
	size_t dlen, dcap;
	bool has_data;
	char type[64];
	size_t max;          /* bound of a line and of an event's data */
	bool after_cr;       /* the last byte was a CR: a following LF is its pair */
};

void sse_init(struct sse *s, size_t max);
void sse_free(struct sse *s);

/* Feed n bytes. -1 (e filled) when a line or an event is over the bound,
 * memory runs out or cb fails; the parser must not be fed again then. */
int sse_feed(struct sse *s, const char *p, size_t n, sse_cb cb, void *arg,
	     struct moat_err *e);

#endif
