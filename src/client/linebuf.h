/* Bounded newline framing of a byte stream (moat mcp's stdin): bytes are fed
 * as they are read, and each complete line is handed to a callback. A line
 * longer than the bound is reported once and its bytes are dropped up to
 * the next newline, so that one oversized message cannot stall the rest.
 * Pure: no I/O. */
#ifndef MOAT_CLIENT_LINEBUF_H
#define MOAT_CLIENT_LINEBUF_H

#include <moat/err.h>

#include <stdbool.h>
#include <stddef.h>

/* One line without its "\n" (a "\r" before it is dropped too), or, when
 * too_long, the first `max` bytes of an oversized line. Returns -1 (e
 * filled) to stop the feed. */
typedef int (*linebuf_cb)(void *arg, const char *line, size_t len, bool too_long,
			  struct moat_err *e);

struct linebuf {
	char *buf;
	size_t len, cap;
	size_t max;     /* longest line accepted, in bytes */
	bool dropping;  /* inside an oversized line: skip to its end */
};

/* An empty buffer accepting lines of at most max bytes (max >= 1). */
void linebuf_init(struct linebuf *lb, size_t max);
void linebuf_free(struct linebuf *lb);

/* Feed n bytes; cb runs for each line they complete. -1 (e filled) when cb
 * fails or memory runs out. */
int linebuf_feed(struct linebuf *lb, const char *data, size_t n, linebuf_cb cb,
		 void *arg, struct moat_err *e);

/* End of input: a last line without a newline goes to cb. */
int linebuf_finish(struct linebuf *lb, linebuf_cb cb, void *arg, struct moat_err *e);

#endif
