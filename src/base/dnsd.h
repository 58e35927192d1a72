/* The resolver of a sandbox without a network: it answers every query
 * on the sandbox's 127.0.0.1:53 (UDP and TCP) with the refusal of dns.h,
 * forwards nothing, and records the names asked for. It runs on the host
 * side (moat run's thread, moat serve's event loop): one descriptor to
 * watch, work done without ever blocking. */
#ifndef MOAT_DNSD_H
#define MOAT_DNSD_H

#include <stddef.h>

/* distinct names kept; later ones are only counted */
#define MOAT_DNSD_NAMES 64

struct moat_dnsd;

/* Takes udp (a bound datagram socket) and tcp (a listening socket);
 * either may be -1. on_name(arg, name) for each name seen the first time
 * (at most MOAT_DNSD_NAMES), may be NULL. NULL on failure (fds closed). */
struct moat_dnsd *moat_dnsd_new(int udp, int tcp, void (*on_name)(void *arg, const char *name),
				void *arg);
/* Readable when there is work for moat_dnsd_serve. */
int moat_dnsd_fd(const struct moat_dnsd *d);
/* Answer what is waiting, without blocking. */
void moat_dnsd_serve(struct moat_dnsd *d);
/* The names refused, first seen first; *more: how many other names were
 * asked for (distinct, counted by hash; past 4096 of them, every lookup). */
size_t moat_dnsd_names(const struct moat_dnsd *d, const char *const **names, size_t *more);
void moat_dnsd_free(struct moat_dnsd *d);

/* A name fit for a terminal or a log line: at most cap-1 bytes, cut with
 * "..." (names are already printable ASCII, see dns.h). */
void moat_dnsd_short(const char *name, char *out, size_t cap);

#endif
