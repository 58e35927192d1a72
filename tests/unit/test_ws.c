/* Unit tests for the WebSocket framing (src/proto/ws.c): the RFC's accept
 * key, heads in their three length forms, and the reader's messages and
 * refusals (each with the close code RFC 6455 asks for). */
#include <criterion/criterion.h>

#include "proto/ws.h"

#include <string.h>

/* A frame as a client (masked with key, when given) or a server sends it. */
static size_t frame(uint8_t *out, int op, bool fin, const char *p, size_t n,
		    const uint8_t *key)
{
	size_t h = ws_head(out, op, n, key);
	if (!fin)
		out[0] &= 0x7f;
	memcpy(out + h, p, n);
	if (key)
		ws_mask(out + h, n, key, 0);
	return h + n;
}

static const uint8_t K[4] = {0x37, 0xfa, 0x21, 0x3d};

Test(ws, accept_key_of_the_rfc_example)
{
	char out[29];
	cr_assert(ws_accept_key("dGhlIHNhbXBsZSBub25jZQ==", out));
	cr_assert_str_eq(out, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
	cr_assert(!ws_accept_key("dGhlIHNhbXBsZSBub25jZQ", out)); /* not 16 bytes */
	cr_assert(!ws_accept_key("dGhlIHNhbXBsZSBub2*jZQ==", out));
	cr_assert(!ws_accept_key(NULL, out));
}

Test(ws, head_length_forms)
{
	uint8_t h[WS_MAX_HEAD];
	cr_assert_eq(ws_head(h, WS_BINARY, 125, NULL), 2);
	cr_assert_eq(h[0], 0x82);
	cr_assert_eq(h[1], 125);
	cr_assert_eq(ws_head(h, WS_TEXT, 126, K), 8);
	cr_assert_eq(h[1], 0x80 | 126);
	cr_assert_eq(h[2] << 8 | h[3], 126);
	cr_assert_eq(ws_head(h, WS_BINARY, 70000, NULL), 10);
	cr_assert_eq(h[1], 127);
}

Test(ws, masked_text_message_and_the_rfc_hello)
{
	/* RFC 6455 5.7: a masked "Hello" */
	uint8_t in[] = {0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58};
	struct ws_reader r = {.server = true, .max_message = 1 << 20};
	struct ws_event ev;
	cr_assert_eq(ws_read(&r, in, sizeof in, &ev), sizeof in);
	cr_assert_eq(ev.kind, WS_MESSAGE);
	cr_assert_eq(ev.opcode, WS_TEXT);
	cr_assert_eq(ev.len, 5);
	cr_assert(!memcmp(ev.data, "Hello", 5));
	/* short input: more is needed, nothing used */
	cr_assert_eq(ws_read(&r, in, 5, &ev), 0);
	cr_assert_eq(ev.kind, WS_NEED);
	ws_reader_free(&r);
}

Test(ws, fragments_joined_with_a_ping_between)
{
	uint8_t buf[256];
	size_t n = frame(buf, WS_TEXT, false, "Hel", 3, K);
	n += frame(buf + n, WS_PING, true, "p", 1, K);
	n += frame(buf + n, WS_CONT, true, "lo", 2, K);
	struct ws_reader r = {.server = true, .max_message = 1 << 20};
	struct ws_event ev;
	size_t off = 0, u;
	u = ws_read(&r, buf, n, &ev);
	cr_assert(u > 0 && ev.kind == WS_NEED); /* a fragment taken */
	off += u;
	u = ws_read(&r, buf + off, n - off, &ev);
	cr_assert_eq(ev.kind, WS_CONTROL);
	cr_assert_eq(ev.opcode, WS_PING);
	off += u;
	u = ws_read(&r, buf + off, n - off, &ev);
	cr_assert_eq(ev.kind, WS_MESSAGE);
	cr_assert_eq(ev.len, 5);
	cr_assert(!memcmp(ev.data, "Hello", 5));
	cr_assert_eq(off + u, n);
	ws_reader_free(&r);
}

static uint16_t refusal(bool server, const uint8_t *in, size_t n, size_t max)
{
	struct ws_reader r = {.server = server, .max_message = max};
	struct ws_event ev;
	size_t off = 0;
	for (;;) {
		size_t u = ws_read(&r, (uint8_t *)in + off, n - off, &ev);
		if (ev.kind == WS_FAIL || (ev.kind == WS_NEED && !u))
			break;
		off += u;
	}
	ws_reader_free(&r);
	return ev.kind == WS_FAIL ? ev.code : 0;
}

Test(ws, refusals_carry_their_close_codes)
{
	uint8_t b[256];
	size_t n = frame(b, WS_BINARY, true, "x", 1, NULL);
	cr_assert_eq(refusal(true, b, n, 100), WS_CLOSE_PROTOCOL); /* unmasked from a client */
	n = frame(b, WS_BINARY, true, "x", 1, K);
	cr_assert_eq(refusal(false, b, n, 100), WS_CLOSE_PROTOCOL); /* masked from a server */
	uint8_t big[] = {0x82, 0xff, 0, 0, 0, 0, 0, 0x20, 0, 0}; /* a 2 MiB head only */
	cr_assert_eq(refusal(true, big, sizeof big, 1 << 20), WS_CLOSE_TOO_BIG);
	n = frame(b, WS_CONT, true, "x", 1, K);
	cr_assert_eq(refusal(true, b, n, 100), WS_CLOSE_PROTOCOL); /* stray continuation */
	n = frame(b, WS_PING, false, "x", 1, K);
	cr_assert_eq(refusal(true, b, n, 100), WS_CLOSE_PROTOCOL); /* fragmented control */
	n = frame(b, WS_TEXT, true, "\xff", 1, K);
	cr_assert_eq(refusal(true, b, n, 100), WS_CLOSE_BAD_DATA);
	n = frame(b, WS_CLOSE, true, "\x03\xed", 2, K); /* 1005 may not be sent */
	cr_assert_eq(refusal(true, b, n, 100), WS_CLOSE_PROTOCOL);
	n = frame(b, 0x3, true, "", 0, K);
	cr_assert_eq(refusal(true, b, n, 100), WS_CLOSE_PROTOCOL); /* unknown opcode */
	n = frame(b, WS_TEXT, true, "x", 1, K);
	b[0] |= 0x40; /* RSV1 */
	cr_assert_eq(refusal(true, b, n, 100), WS_CLOSE_PROTOCOL);
	n = frame(b, WS_TEXT, false, "ab", 2, K);
	n += frame(b + n, WS_CONT, true, "cd", 2, K);
	cr_assert_eq(refusal(true, b, n, 3), WS_CLOSE_TOO_BIG); /* the joined message */
}

Test(ws, close_payload_is_cut_at_a_character)
{
	uint8_t p[125];
	char reason[200];
	memset(reason, 'a', sizeof reason);
	memcpy(reason + 122, "\xc3\xa9", 2); /* an é across the 123-byte limit */
	reason[199] = '\0';
	size_t n = ws_close_payload(p, 1000, reason);
	cr_assert_eq(n, 2 + 122);
	cr_assert_eq(p[0] << 8 | p[1], 1000);
}
