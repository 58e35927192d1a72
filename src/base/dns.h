/* The answer a sandbox without a network gets to a DNS query: the query's
 * id and question echoed, the rcode below, no records. Pure code on bytes
 * that come from the sandbox (fuzzed: tests/fuzz/fuzz_dns.c). */
#ifndef MOAT_DNS_H
#define MOAT_DNS_H

#include <stddef.h>
#include <stdint.h>

/* NXDOMAIN, not REFUSED: glibc maps REFUSED to EAI_AGAIN ("temporary
 * failure", which callers retry) and NXDOMAIN to EAI_NONAME; with no SOA
 * record in the answer nothing may cache it (RFC 2308 section 5).
 * Measurements: docs/benchmarks.md "Lookups with the network off". */
#define MOAT_DNS_RCODE 3
#define MOAT_DNS_FORMERR 1
#define MOAT_DNS_NOTIMP 4

/* The longest answer: header, a question of at most 255 bytes of name. */
#define MOAT_DNS_ANSWER_MAX (12 + 255 + 4)
/* A name in presentation form: every byte outside [a-z0-9-_] as \DDD. */
#define MOAT_DNS_NAME_CAP (255 * 4 + 2)

/* Answer the query q[0..n). Returns the answer's length (written to out,
 * which holds MOAT_DNS_ANSWER_MAX bytes), or 0 when the packet is to be
 * dropped (too short to carry an id, or a response). name gets the
 * question's name (lower case, presentation form, "." for the root) when
 * the answer is MOAT_DNS_RCODE, else "". */
size_t moat_dns_answer(const uint8_t *q, size_t n, uint8_t out[MOAT_DNS_ANSWER_MAX],
		       char name[MOAT_DNS_NAME_CAP]);

#endif
