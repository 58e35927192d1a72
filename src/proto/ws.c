/* WebSocket framing: see ws.h. */
#define _GNU_SOURCE
#include "ws.h"

#include "../base/utf8.h"

#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

static const char GUID[] = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

static bool b64_char(char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
	       c == '+' || c == '/';
}

bool ws_accept_key(const char *key, char out[29])
{
	/* 16 bytes in base64: 22 characters and "==" */
	if (!key || strlen(key) != 24 || key[22] != '=' || key[23] != '=')
		return false;
	for (int i = 0; i < 22; i++)
		if (!b64_char(key[i]))
			return false;
	char buf[24 + sizeof GUID];
	memcpy(buf, key, 24);
	memcpy(buf + 24, GUID, sizeof GUID);
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	if (!EVP_Digest(buf, 24 + sizeof GUID - 1, md, &mdlen, EVP_sha1(), NULL) || mdlen != 20)
		return false;
	return EVP_EncodeBlock((unsigned char *)out, md, 20) == 28;
}

bool ws_new_key(char out[25])
{
	unsigned char raw[16];
	if (getrandom(raw, sizeof raw, 0) != (ssize_t)sizeof raw)
		return false;
	return EVP_EncodeBlock((unsigned char *)out, raw, sizeof raw) == 24;
}

size_t ws_head(uint8_t out[WS_MAX_HEAD], int opcode, uint64_t len, const uint8_t *mask)
{
	size_t n = 0;
	out[n++] = (uint8_t)(0x80 | (opcode & 0x0f));
	uint8_t m = mask ? 0x80 : 0;
	if (len < 126) {
		out[n++] = (uint8_t)(m | len);
	} else if (len <= 0xffff) {
		out[n++] = m | 126;
		out[n++] = (uint8_t)(len >> 8);
		out[n++] = (uint8_t)len;
	} else {
		out[n++] = m | 127;
		for (int i = 7; i >= 0; i--)
			out[n++] = (uint8_t)(len >> (8 * i));
	}
	if (mask) {
		memcpy(out + n, mask, 4);
		n += 4;
	}
	return n;
}

void ws_mask(uint8_t *p, size_t n, const uint8_t key[4], size_t off)
{
	for (size_t i = 0; i < n; i++)
		p[i] ^= key[(off + i) & 3];
}

static bool utf8_ok(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n;) {
		size_t l = moat_utf8_seq(p + i, n - i);
		if (!l)
			return false;
		i += l;
	}
	return true;
}

size_t ws_close_payload(uint8_t out[125], uint16_t code, const char *reason)
{
	out[0] = (uint8_t)(code >> 8);
	out[1] = (uint8_t)code;
	size_t n = reason ? strlen(reason) : 0;
	if (n > 123)
		n = 123;
	/* cut at a character boundary: the reason must stay UTF-8 */
	while (n && !utf8_ok((const uint8_t *)reason, n))
		n--;
	memcpy(out + 2, reason, n);
	return 2 + n;
}

static size_t fail(struct ws_event *ev, uint16_t code, const char *why)
{
	ev->kind = WS_FAIL;
	ev->code = code;
	snprintf(ev->reason, sizeof ev->reason, "%s", why);
	return 0;
}

/* A close code a peer may send (RFC 6455 7.4). */
static bool code_ok(unsigned c)
{
	if (c >= 3000 && c <= 4999)
		return true;
	return c >= 1000 && c <= 1014 && c != 1004 && c != 1005 && c != 1006;
}

size_t ws_read(struct ws_reader *r, uint8_t *in, size_t n, struct ws_event *ev)
{
	memset(ev, 0, sizeof *ev);
	ev->kind = WS_NEED;
	if (n < 2)
		return 0;
	bool fin = in[0] & 0x80;
	int op = in[0] & 0x0f;
	bool masked = in[1] & 0x80;
	uint64_t len = in[1] & 0x7f;
	size_t head = 2;
	if (in[0] & 0x70)
		return fail(ev, WS_CLOSE_PROTOCOL, "reserved bits set (no extension was agreed)");
	if (op != WS_CONT && op != WS_TEXT && op != WS_BINARY && op != WS_CLOSE &&
	    op != WS_PING && op != WS_PONG)
		return fail(ev, WS_CLOSE_PROTOCOL, "unknown opcode");
	bool control = op >= 0x8;
	if (masked != r->server)
		return fail(ev, WS_CLOSE_PROTOCOL, r->server ? "a client's frame must be masked"
							 : "a server's frame must not be masked");
	if (control && (!fin || len > 125))
		return fail(ev, WS_CLOSE_PROTOCOL,
			    "a control frame must be one frame of at most 125 bytes");
	if (len == 126) {
		if (n < 4)
			return 0;
		len = (uint64_t)in[2] << 8 | in[3];
		head = 4;
		if (len < 126)
			return fail(ev, WS_CLOSE_PROTOCOL, "frame length not in its shortest form");
	} else if (len == 127) {
		if (n < 10)
			return 0;
		len = 0;
		for (int i = 0; i < 8; i++)
			len = len << 8 | in[2 + i];
		head = 10;
		if (len >> 63)
			return fail(ev, WS_CLOSE_PROTOCOL, "frame length over 2^63");
		if (len <= 0xffff)
			return fail(ev, WS_CLOSE_PROTOCOL, "frame length not in its shortest form");
	}
	/* a message's size is known before its bytes arrive: refused at once */
	uint64_t joined = op == WS_CONT ? r->len : 0;
	if (len > r->max_message || joined + len > r->max_message)
		return fail(ev, WS_CLOSE_TOO_BIG, "message over the size limit");
	if (!control && op != WS_CONT && r->frag_op)
		return fail(ev, WS_CLOSE_PROTOCOL, "a new message inside a fragmented one");
	if (op == WS_CONT && !r->frag_op)
		return fail(ev, WS_CLOSE_PROTOCOL, "a continuation frame outside a message");
	const uint8_t *key = NULL;
	if (masked) {
		if (n < head + 4)
			return 0;
		key = in + head;
		head += 4;
	}
	if (n - head < len)
		return 0;
	uint8_t *p = in + head;
	size_t used = head + (size_t)len;
	if (key)
		ws_mask(p, (size_t)len, key, 0);
	if (control) {
		ev->kind = WS_CONTROL;
		ev->opcode = op;
		ev->data = p;
		ev->len = (size_t)len;
		if (op == WS_CLOSE) {
			ev->code = WS_CLOSE_NO_STATUS;
			if (len == 1)
				return fail(ev, WS_CLOSE_PROTOCOL, "a close frame of one byte");
			if (len >= 2) {
				ev->code = (uint16_t)(p[0] << 8 | p[1]);
				if (!code_ok(ev->code))
					return fail(ev, WS_CLOSE_PROTOCOL, "invalid close code");
				if (!utf8_ok(p + 2, (size_t)len - 2))
					return fail(ev, WS_CLOSE_BAD_DATA, "close reason not UTF-8");
				snprintf(ev->reason, sizeof ev->reason, "%.*s", (int)(len - 2),
					 (const char *)p + 2);
			}
		}
		return used;
	}
	if (fin && op != WS_CONT) {
		/* the usual case: one frame, no copy */
		if (op == WS_TEXT && !utf8_ok(p, (size_t)len))
			return fail(ev, WS_CLOSE_BAD_DATA, "text message not UTF-8");
		ev->kind = WS_MESSAGE;
		ev->opcode = op;
		ev->data = p;
		ev->len = (size_t)len;
		return used;
	}
	if (r->len + len > r->cap) {
		size_t nc = r->cap ? r->cap : 4096;
		while (nc < r->len + len)
			nc *= 2;
		uint8_t *nb = realloc(r->buf, nc);
		if (!nb)
			return fail(ev, WS_CLOSE_INTERNAL, "out of memory");
		r->buf = nb;
		r->cap = nc;
	}
	if (len)
		memcpy(r->buf + r->len, p, (size_t)len);
	r->len += (size_t)len;
	if (op != WS_CONT)
		r->frag_op = op;
	if (!fin) {
		ev->kind = WS_NEED; /* a fragment taken: call again */
		ev->opcode = WS_CONT;
		return used;
	}
	if (r->frag_op == WS_TEXT && !utf8_ok(r->buf, r->len))
		return fail(ev, WS_CLOSE_BAD_DATA, "text message not UTF-8");
	ev->kind = WS_MESSAGE;
	ev->opcode = r->frag_op;
	ev->data = r->buf;
	ev->len = r->len;
	r->frag_op = 0;
	r->len = 0; /* the buffer stays valid until the next call */
	return used;
}

void ws_reader_free(struct ws_reader *r)
{
	free(r->buf);
	r->buf = NULL;
	r->len = r->cap = 0;
	r->frag_op = 0;
}
