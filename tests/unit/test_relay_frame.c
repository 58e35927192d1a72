/* Unit tests for `moat mcp`'s framing (src/client/linebuf.c: the host's
 * stdin in bounded lines; src/client/sse.c: the daemon's event streams),
 * each fed whole and one byte at a time: the split must not matter. */
#include <criterion/criterion.h>

#include "client/linebuf.h"
#include "client/sse.h"

#include <stdio.h>
#include <string.h>

/* What a callback saw, as text: "[line]" or "<long|prefix>" / "{type|data}". */
struct seen {
	char out[4096];
	size_t n;
};

/* Append open + a + ("|" + b when b) + close to what was seen. */
static void add(struct seen *s, char open, const char *a, size_t alen, const char *b,
		size_t blen, char close)
{
	int k = b ? snprintf(s->out + s->n, sizeof s->out - s->n, "%c%.*s|%.*s%c", open,
			     (int)alen, a, (int)blen, b, close)
		  : snprintf(s->out + s->n, sizeof s->out - s->n, "%c%.*s%c", open, (int)alen,
			     a, close);
	cr_assert(k >= 0 && (size_t)k < sizeof s->out - s->n);
	s->n += (size_t)k;
}

static int on_line(void *arg, const char *line, size_t len, bool too_long, struct moat_err *e)
{
	cr_assert_not_null(line);
	if (too_long)
		add(arg, '<', "long", 4, line, len, '>');
	else
		add(arg, '[', line, len, NULL, 0, ']');
	return 0;
}

static const char *lines(const char *in, size_t max, bool bytewise)
{
	static struct seen s;
	memset(&s, 0, sizeof s);
	struct linebuf lb;
	struct moat_err e;
	linebuf_init(&lb, max);
	size_t n = strlen(in);
	if (bytewise) {
		for (size_t i = 0; i < n; i++)
			cr_assert_eq(linebuf_feed(&lb, in + i, 1, on_line, &s, &e), 0);
	} else {
		cr_assert_eq(linebuf_feed(&lb, in, n, on_line, &s, &e), 0);
	}
	cr_assert_eq(linebuf_finish(&lb, on_line, &s, &e), 0);
	linebuf_free(&lb);
	return s.out;
}

static void lines_are(const char *in, size_t max, const char *want)
{
	cr_assert_str_eq(lines(in, max, false), want, "whole: %s", in);
	cr_assert_str_eq(lines(in, max, true), want, "bytewise: %s", in);
}

Test(relay_linebuf, splits_lines_and_strips_cr)
{
	lines_are("a\nbc\r\n\nlast", 16, "[a][bc][][last]");
	lines_are("", 16, "");
	lines_are("x\n", 16, "[x]");
	lines_are("in\rside\n", 16, "[in\rside]"); /* only a CR before the LF goes */
}

Test(relay_linebuf, over_long_line_reported_once_then_the_next_goes_on)
{
	lines_are("0123456789\nok\n", 4, "<long|0123>[ok]");
	lines_are("0123456789", 4, "<long|0123>");
	/* exactly max, with or without CRLF: accepted; max + 1: not */
	lines_are("0123\r\n0123\n01234\n", 4, "[0123][0123]<long|0123>");
}

static int on_event(void *arg, const char *type, const char *data, size_t len, struct moat_err *e)
{
	cr_assert_eq(data[len], '\0');
	add(arg, '{', type, strlen(type), data, len, '}');
	return 0;
}

static const char *events(const char *in, size_t max, bool bytewise, int *rc)
{
	static struct seen s;
	memset(&s, 0, sizeof s);
	struct sse p;
	struct moat_err e;
	sse_init(&p, max);
	size_t n = strlen(in);
	*rc = 0;
	for (size_t i = 0; i < n && *rc == 0; i += bytewise ? 1 : n)
		*rc = sse_feed(&p, in + i, bytewise ? 1 : n, on_event, &s, &e);
	sse_free(&p);
	return s.out;
}

static void events_are(const char *in, const char *want)
{
	int rc;
	cr_assert_str_eq(events(in, 1024, false, &rc), want, "whole: %s", in);
	cr_assert_eq(rc, 0);
	cr_assert_str_eq(events(in, 1024, true, &rc), want, "bytewise: %s", in);
	cr_assert_eq(rc, 0);
}

Test(relay_sse, events_fields_and_line_ends)
{
	events_are("data: {\"a\":1}\n\n", "{message|{\"a\":1}}");
	events_are("event: message\r\ndata: x\r\n\r\n", "{message|x}");
	events_are("data:a\rdata: b\r\r", "{message|a\nb}");    /* CR alone, joined by LF */
	events_are(": comment\nid: 7\nretry: 10\ndata\n\n", "{message|}");
	events_are("event: other\ndata: y\n\ndata: z\n\n", "{other|y}{message|z}");
	events_are("event: nothing\n\n", "");                  /* no data: no event */
	events_are("data: open\n", "");                        /* unterminated: dropped */
	events_are("data:  two spaces\n\n", "{message| two spaces}");
}

Test(relay_sse, an_event_over_the_bound_stops_the_parser)
{
	int rc;
	events("data: 0123456789\n\n", 8, false, &rc);
	cr_assert_eq(rc, -1);
	events("data: 0123456789\n\n", 8, true, &rc);
	cr_assert_eq(rc, -1);
	events("data: 0123\ndata: 4567\n\n", 8, false, &rc);
	cr_assert_eq(rc, -1);
}
