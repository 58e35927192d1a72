/* libFuzzer target: the WebSocket reader (src/proto/ws.c), which the
 * daemon's attach door runs on what any client sends and the client on
 * what the server sends. The input is read as a server (masked frames)
 * and as a client, whole and again fed one byte more at a time (as a
 * socket may deliver it): both readings must give the same events, an
 * event must stay inside its input, a message within the limit, a text
 * message and a close reason UTF-8. The first byte picks the size limit;
 * the input also goes through the accept-key check. */
#include "proto/ws.h"
#include "base/utf8.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void utf8_or_die(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n;) {
		size_t l = moat_utf8_seq(p + i, n - i);
		if (!l)
			abort();
		i += l;
	}
}

/* Events of in (a private copy), as a sum that a second reading must match. */
static uint64_t read_all(bool server, size_t max, const uint8_t *in, size_t n, bool trickle)
{
	uint8_t *buf = malloc(n ? n : 1);
	if (!buf)
		return 0;
	memcpy(buf, in, n);
	struct ws_reader r = {.server = server, .max_message = max};
	uint64_t sum = 0;
	size_t off = 0, avail = trickle ? 0 : n;
	for (;;) {
		struct ws_event ev;
		size_t used = ws_read(&r, buf + off, avail - off, &ev);
		if (used > avail - off)
			abort();
		if (ev.kind == WS_FAIL) {
			if (used || ev.code < 1000)
				abort();
			sum = sum * 31 + ev.code;
			break;
		}
		if (ev.kind == WS_MESSAGE || ev.kind == WS_CONTROL) {
			if (ev.len > max || (ev.len && !ev.data))
				abort();
			if (ev.kind == WS_MESSAGE && ev.opcode == WS_TEXT)
				utf8_or_die(ev.data, ev.len);
			if (ev.kind == WS_CONTROL && ev.len > 125)
				abort();
			sum = sum * 31 + (uint64_t)ev.opcode * 1000003u + ev.len;
			for (size_t i = 0; i < ev.len; i++)
				sum = sum * 131 + ev.data[i];
		}
		if (ev.kind == WS_NEED && !used) {
			if (avail == n)
				break;
			avail++; /* one more byte arrives */
			continue;
		}
		off += used;
	}
	ws_reader_free(&r);
	free(buf);
	return sum;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!size)
		return 0;
	size_t max = (size_t)1 << (data[0] % 21); /* 1 byte to 1 MiB */
	const uint8_t *in = data + 1;
	size_t n = size - 1;
	for (int server = 0; server < 2; server++)
		if (read_all(server, max, in, n, false) != read_all(server, max, in, n, true))
			abort();
	char key[64], out[29];
	size_t kl = n < sizeof key - 1 ? n : sizeof key - 1;
	memcpy(key, in, kl);
	key[kl] = '\0';
	if (ws_accept_key(key, out) && strlen(out) != 28)
		abort();
	uint8_t cp[125];
	if (ws_close_payload(cp, 1000, key) > 125)
		abort();
	return 0;
}
