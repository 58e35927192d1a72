/* The egress gateway: one libevent loop serving any number of sandboxes.
 * Each sandbox brings its two listening sockets (HTTP proxy and SOCKS5,
 * created inside its network namespace, see src/jail/net.c) and its
 * policy; the gateway accepts there, decides every destination (names
 * resolved here, never inside; special addresses refused unless allowed),
 * connects, relays with back-pressure, injects secrets (through tls.h for
 * HTTPS) and logs every decision as one JSON line. A connection's sandbox
 * is the listener it arrived on, never anything the client says. */
#ifndef MOAT_GATE_GATEWAY_H
#define MOAT_GATE_GATEWAY_H

#include "gate/policy.h"

#include <moat/err.h>

#include <event2/event.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

struct gate;
struct gate_box;

struct gate_limits {
	unsigned max_conns;     /* concurrent connections; default 256 */
	uint64_t max_bytes;     /* both ways, the sandbox's whole life; 0 = none */
	unsigned idle_s;        /* a connection idle this long is closed; default 300 */
	unsigned head_s;        /* time to send a request head; default 30 */
};

/* upstream_ca: PEM file of the CAs trusted for re-encrypted upstream TLS
 * (NULL = the system's). */
struct gate *gate_new(struct event_base *base, const char *upstream_ca, struct moat_err *e);
void gate_free(struct gate *g);

/* name: for logs. pol is taken over. log may be NULL (borrowed). */
struct gate_box *gate_box_new(struct gate *g, const char *name, struct gate_policy *pol,
			      const struct gate_limits *lim, FILE *log, struct moat_err *e);
/* An operator's bound (moat serve --net-allow): a name must pass it too.
 * Borrowed; NULL = none. */
void gate_box_set_ceiling(struct gate_box *b, const struct gate_policy *ceiling);
/* Start accepting on the sandbox's listeners (taken over). */
int gate_box_listen(struct gate_box *b, int http_fd, int socks_fd, struct moat_err *e);
/* A secret: the sandbox sees `placeholder`; requests to `hosts` carry
 * `value` instead (headers and query string). */
int gate_box_secret(struct gate_box *b, const char *placeholder, const char *value,
		    char *const *hosts, struct moat_err *e);
/* PEM of the sandbox's CA certificate (created with the first secret), or
 * NULL. Valid while b lives. */
const char *gate_box_ca_pem(struct gate_box *b);
/* Each distinct refused destination so far ("host:port", reason). */
void gate_box_refused(struct gate_box *b, void (*fn)(void *arg, const char *dest,
						     const char *reason), void *arg);
void gate_box_free(struct gate_box *b);

#endif
