/* Egress gateway: the server side of a SOCKS5 handshake (RFC 1928),
 * CONNECT only, no authentication. Pure: no I/O, no allocation.
 *
 * Flow: parse the greeting, send gate_socks5_method_reply() with the
 * method it chose (on 0xFF close after sending), parse the request from
 * the bytes after the greeting, decide, send gate_socks5_reply(). The
 * parsers are incremental the simple way: call them again with all bytes
 * received so far until they stop saying NEED_MORE (the messages are at
 * most 262 bytes). Errors are decided in byte order, so feeding byte by
 * byte gives the same result as all at once. */
#ifndef MOAT_GATE_SOCKS5_H
#define MOAT_GATE_SOCKS5_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#define GATE_SOCKS5_NOAUTH 0x00
#define GATE_SOCKS5_NO_METHOD 0xff

/* Reply codes (REP). */
enum gate_socks5_rep {
	GATE_SOCKS5_OK = 0,
	GATE_SOCKS5_GENERAL_FAILURE = 1,
	GATE_SOCKS5_NOT_ALLOWED = 2,       /* connection not allowed by ruleset */
	GATE_SOCKS5_NET_UNREACHABLE = 3,
	GATE_SOCKS5_HOST_UNREACHABLE = 4,
	GATE_SOCKS5_REFUSED = 5,
	GATE_SOCKS5_TTL_EXPIRED = 6,
	GATE_SOCKS5_CMD_UNSUPPORTED = 7,
	GATE_SOCKS5_ATYP_UNSUPPORTED = 8,
};

enum gate_socks5_status {
	GATE_SOCKS5_NEED_MORE,
	GATE_SOCKS5_DONE,
	GATE_SOCKS5_ERROR,
};

/* Greeting: VER=5 NMETHODS METHODS... DONE: *used is its length and
 * *method is GATE_SOCKS5_NOAUTH when offered, else GATE_SOCKS5_NO_METHOD
 * (also for NMETHODS = 0). ERROR (*err set): not SOCKS version 5; close
 * without a reply. */
enum gate_socks5_status gate_socks5_parse_greeting(const uint8_t *buf,
						   size_t len, size_t *used,
						   uint8_t *method,
						   const char **err);

struct gate_socks5_request {
	uint8_t atyp;             /* 1 IPv4, 3 domain, 4 IPv6 */
	char host[256];           /* domain as sent (1..255 bytes, no NUL),
				   * or the address as "1.2.3.4" / "2001:db8::1" */
	uint16_t port;
	uint8_t rep;              /* on ERROR: the REP code to answer with */
	const char *err;          /* on ERROR: static message */
};

/* Request: VER=5 CMD RSV=0 ATYP DST.ADDR DST.PORT. DONE: *used is its
 * length and req holds the destination (port may be 0: the caller's policy
 * refuses it). ERROR: req->err and req->rep are set; send
 * gate_socks5_reply(req->rep) and close. Errors: VER not 5 (rep 1), CMD
 * other than CONNECT (rep 7), RSV not 0 (rep 1), ATYP not 1/3/4 (rep 8),
 * domain of length 0 or containing NUL (rep 1). */
enum gate_socks5_status gate_socks5_parse_request(
	const uint8_t *buf, size_t len, size_t *used,
	struct gate_socks5_request *req);

/* The method-selection message: 05 method. Returns 2. */
size_t gate_socks5_method_reply(uint8_t out[2], uint8_t method);

/* The reply: 05 REP 00 ATYP BND.ADDR BND.PORT, with bound (AF_INET or
 * AF_INET6) or 0.0.0.0:0 when bound is NULL or of another family.
 * Returns the length: 10 (IPv4) or 22 (IPv6). */
#define GATE_SOCKS5_REPLY_MAX 22
size_t gate_socks5_reply(uint8_t out[GATE_SOCKS5_REPLY_MAX], uint8_t rep,
			 const struct sockaddr *bound);

#endif
