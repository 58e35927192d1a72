/* The browser guard: a web page in the user's browser must not drive the
 * daemon. Browsers send Origin on every cross-origin request and on
 * same-origin POSTs, so a page on any other site (or one that rebinds its
 * DNS name to 127.0.0.1) is refused by its Origin; a rebound page's
 * same-origin GET carries no Origin but names its own host in Host, which
 * matters only when there is no token for it to lack. */
#ifndef MOAT_SERVE_BROWSER_H
#define MOAT_SERVE_BROWSER_H

#include <stdbool.h>

/* origin: the Origin header's value. NULL (no header: not a browser)
 * passes; else it must be http(s)://HOST[:PORT] with HOST loopback
 * (localhost, 127.0.0.0/8, [::1]) or listen_host (the --listen host,
 * brackets off for IPv6), or equal (ignoring case) one of allowed
 * (--allow-origin, NULL-terminated, may be NULL). "null", other schemes,
 * user info or a path are refused. */
bool browser_origin_ok(const char *origin, const char *listen_host, char *const *allowed);

/* host: the Host header's value, HOST[:PORT] with the same rules for HOST,
 * except that a single label (no dot: no name a remote attacker's DNS can
 * serve) passes; NULL (HTTP/1.0) passes. */
bool browser_host_ok(const char *host, const char *listen_host);

#endif
