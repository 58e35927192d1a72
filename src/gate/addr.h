/* Egress gateway: IP addresses. Parse and format literals, and classify
 * the addresses a sandbox must not reach unless they are explicitly allowed
 * (SSRF / DNS rebinding defence). Pure: no I/O, no allocation.
 *
 * Special (gate_addr_special() true):
 *   IPv4  0/8 (incl. 0.0.0.0), 10/8, 100.64/10, 127/8, 169.254/16,
 *         172.16/12, 192.0.0/24, 192.0.2/24, 192.88.99/24, 192.168/16,
 *         198.18/15, 198.51.100/24, 203.0.113/24, 224/4, 240/4 (incl.
 *         255.255.255.255)
 *   IPv6  forms embedding an IPv4 address are judged by that address:
 *         ::ffff:0:0/96 (mapped), ::/96 (compatible; so :: and ::1 are
 *         special), 64:ff9b::/96 (NAT64), 2002::/16 (6to4, bits 16..47).
 *         Otherwise everything outside 2000::/3 (ULA, link-local, site-local,
 *         multicast, 100::/64, 64:ff9b:1::/48, ...) and, inside it,
 *         2001::/23 (IETF protocol assignments incl. Teredo, whose embedded
 *         address is obfuscated), 2001:db8::/32 and 3fff::/20
 *         (documentation).
 *   Any other address family is special (refuse what we cannot judge). */
#ifndef MOAT_GATE_ADDR_H
#define MOAT_GATE_ADDR_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

/* "255.255.255.255", "[ffff:...:255.255.255.255]:65535" + NUL fit. */
#define GATE_ADDR_FMT_CAP 56

/* Is the address special (see above)? */
bool gate_addr_special(const struct sockaddr *sa);

/* Why it is special ("loopback", "private", "link-local", ...; static), or
 * NULL when it is an ordinary public address. */
const char *gate_addr_special_kind(const struct sockaddr *sa);

/* Parse an IP literal: dotted-quad IPv4 (exactly four decimal parts, no
 * leading zeros), or IPv6 with or without surrounding brackets. No port,
 * no zone id. *out is zeroed and filled with port 0. Returns false (out
 * untouched) when s is not such a literal. */
bool gate_addr_parse(const char *s, struct sockaddr_storage *out);

/* Format as "1.2.3.4" / "2001:db8::1", or with_port "1.2.3.4:80" /
 * "[2001:db8::1]:80". Unknown families give "?". Returns out. */
const char *gate_addr_format(const struct sockaddr *sa, bool with_port,
			     char out[GATE_ADDR_FMT_CAP]);

/* The port of an AF_INET/AF_INET6 address (host order), else 0. */
uint16_t gate_addr_port(const struct sockaddr *sa);

#endif
