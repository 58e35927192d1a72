/* Egress gateway: the server name (SNI, RFC 6066) from the first bytes a
 * client sends on a TLS connection, so that a CONNECT tunnel can insist
 * that it matches the CONNECT host (no domain fronting). Pure: no I/O, no
 * allocation (a 16 KiB stack buffer when the hello spans records).
 *
 * Call gate_sni_parse() with all bytes received so far until it stops
 * saying NEED_MORE; nothing is consumed, forward the bytes afterwards.
 * Handled: TLS records (type 22, version 3.x, length 1..16384) carrying
 * one ClientHello, which may span several records (it is reassembled);
 * the hello is at most GATE_SNI_HELLO_MAX bytes and the records carrying
 * it must end within the first GATE_SNI_INPUT_MAX bytes, so a caller
 * never needs to buffer more than that. Every length is checked against
 * its enclosing one; a hello whose lengths do not add up exactly, with
 * two server_name extensions, two host names, a name type other than
 * host_name (0) or a host name that is empty, longer than 255 bytes or
 * has characters outside [A-Za-z0-9._-] is ERROR. */
#ifndef MOAT_GATE_SNI_H
#define MOAT_GATE_SNI_H

#include <stddef.h>
#include <stdint.h>

#define GATE_SNI_HELLO_MAX 16384  /* handshake header + ClientHello body */
#define GATE_SNI_INPUT_MAX 32768
#define GATE_SNI_HOST_CAP 256

enum gate_sni_status {
	GATE_SNI_NEED_MORE, /* a valid prefix: read more */
	GATE_SNI_FOUND,     /* host holds the server name, as sent */
	GATE_SNI_NONE,      /* a valid ClientHello without a server name */
	GATE_SNI_ERROR,     /* not TLS, or malformed: *err says why */
};

/* host receives the name on FOUND only; err (may be NULL) a static
 * message on ERROR. Decisions are made in byte order, so feeding byte by
 * byte gives the same result as all at once. */
enum gate_sni_status gate_sni_parse(const uint8_t *buf, size_t len,
				    char host[GATE_SNI_HOST_CAP],
				    const char **err);

#endif
