/* WebSocket (RFC 6455) framing, pure: the handshake's accept key, frame
 * heads, and a reader that turns received bytes into messages (fragments
 * joined, control frames between them, every protocol error named with
 * the close code to send). Shared by the daemon's attach door and the
 * client's `moat exec -it` / `moat attach`. */
#ifndef MOAT_PROTO_WS_H
#define MOAT_PROTO_WS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum { WS_CONT = 0x0, WS_TEXT = 0x1, WS_BINARY = 0x2, WS_CLOSE = 0x8, WS_PING = 0x9,
       WS_PONG = 0xA };

/* Close codes this code sends. */
#define WS_CLOSE_NORMAL 1000
#define WS_CLOSE_GOING_AWAY 1001
#define WS_CLOSE_PROTOCOL 1002
#define WS_CLOSE_NO_STATUS 1005 /* received without a code (never sent) */
#define WS_CLOSE_BAD_DATA 1007
#define WS_CLOSE_TOO_BIG 1009
#define WS_CLOSE_INTERNAL 1011

/* Largest frame head: 2 + 8 (length) + 4 (mask). */
#define WS_MAX_HEAD 14

/* Sec-WebSocket-Accept for a Sec-WebSocket-Key: base64(SHA-1(key + GUID)),
 * 28 characters and a NUL. false when key is not 16 bytes in base64 (the
 * RFC's only valid form). */
bool ws_accept_key(const char *key, char out[29]);
/* A fresh Sec-WebSocket-Key (16 random bytes, base64); false without
 * randomness. */
bool ws_new_key(char out[25]);

/* The head of one frame (FIN set: this code never fragments what it
 * sends) with opcode and len; mask: the client's masking key (the
 * payload must then be masked with ws_mask), NULL from a server. Returns
 * the head's length. */
size_t ws_head(uint8_t out[WS_MAX_HEAD], int opcode, uint64_t len, const uint8_t *mask);
/* XOR p with the masking key, starting at key offset off. */
void ws_mask(uint8_t *p, size_t n, const uint8_t key[4], size_t off);
/* A close frame's payload: code and a reason (cut to fit a control frame
 * at a UTF-8 boundary). Returns its length (at most 125). */
size_t ws_close_payload(uint8_t out[125], uint16_t code, const char *reason);

/* Reading: server true when frames come from a client (they must be
 * masked), false on the client (they must not be). */
struct ws_reader {
	bool server;
	size_t max_message;  /* a frame or a message over this: 1009 */
	/* a fragmented message being joined */
	int frag_op;         /* WS_TEXT or WS_BINARY, 0 when none */
	uint8_t *buf;
	size_t len, cap;
};

enum ws_kind { WS_NEED, WS_MESSAGE, WS_CONTROL, WS_FAIL };

struct ws_event {
	enum ws_kind kind;
	int opcode;          /* WS_TEXT/WS_BINARY (a message), WS_PING/WS_PONG/WS_CLOSE */
	const uint8_t *data; /* payload, unmasked; valid until the next ws_read */
	size_t len;
	/* WS_CONTROL close: the peer's code (WS_CLOSE_NO_STATUS when none) and
	 * reason; WS_FAIL: the code to close with and why */
	uint16_t code;
	char reason[128];
};

/* The next event from in[0..n) (unmasked in place). Returns the bytes
 * used; WS_NEED uses none. After WS_FAIL the connection must be closed
 * with ev->code. */
size_t ws_read(struct ws_reader *r, uint8_t *in, size_t n, struct ws_event *ev);
void ws_reader_free(struct ws_reader *r);

#endif
