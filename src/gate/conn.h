/* One proxied connection of the gateway (conn.c), and the few things of a
 * sandbox's gateway state it uses (gateway.c). Internal to src/gate/. */
#ifndef MOAT_GATE_CONN_H
#define MOAT_GATE_CONN_H

#include "gate/gateway.h"

#include <event2/buffer.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct gate_conn;
struct gate_tls;
struct gate_ca;
struct evdns_base;

/* Start serving an accepted client socket (HTTP proxy or SOCKS5). */
int gate_conn_start(struct gate_box *b, int fd, bool socks);
void gate_conn_free(struct gate_conn *c);
/* Keep the list of a box's live connections (add or remove c). */
void gate_conn_link(struct gate_conn **head, struct gate_conn *c, bool add);

/* gateway.c, for conn.c */
struct event_base *gate_base(struct gate_box *b);
struct evdns_base *gate_dns(struct gate_box *b);
const struct gate_policy *gate_policy(struct gate_box *b);
const struct gate_policy *gate_ceiling(struct gate_box *b); /* or NULL */
const struct gate_limits *gate_limits(struct gate_box *b);
struct gate_tls *gate_tls_of(struct gate_box *b);
struct gate_ca *gate_ca_of(struct gate_box *b);
bool gate_box_admit(struct gate_box *b);
void gate_box_release(struct gate_box *b);
/* Count n more bytes; false once over the sandbox's byte limit. */
bool gate_box_count(struct gate_box *b, size_t n);
void gate_box_track(struct gate_box *b, struct gate_conn *c, bool add);
void gate_log(struct gate_box *b, const char *proto, const char *host, unsigned port,
	      const char *addr, bool allowed, const char *reason, uint64_t up, uint64_t down);
/* A placeholder of a secret not meant for host, if buf holds one. */
const char *gate_box_foreign_placeholder(struct gate_box *b, const char *host,
					 const char *buf, size_t len);
/* Does a secret name this host (so its HTTPS is intercepted)? */
bool gate_box_intercepts(struct gate_box *b, const char *host);
/* Copy buf to out with this host's placeholders replaced by the values. */
int gate_box_inject(struct gate_box *b, const char *host, const char *buf, size_t len,
		    struct evbuffer *out);
/* Host names equal: case-insensitive, a trailing dot ignored. */
bool gate_name_equal(const char *a, const char *b);

#endif
