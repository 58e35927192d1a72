/* Unit tests for src/base/dns.c (the answer to a sandbox's query) and
 * src/base/dnsd.c (the resolver: UDP, TCP framing, the list of names). */
#define _GNU_SOURCE
#include <criterion/criterion.h>

#include "base/dns.h"
#include "base/dnsd.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static size_t mkq(uint8_t *b, const char *const *labels, uint16_t id, uint8_t flags2)
{
	uint8_t h[12] = {(uint8_t)(id >> 8), (uint8_t)id, flags2, 0, 0, 1};
	memcpy(b, h, 12);
	size_t o = 12;
	for (size_t i = 0; labels[i]; i++) {
		size_t l = strlen(labels[i]);
		b[o++] = (uint8_t)l;
		memcpy(b + o, labels[i], l);
		o += l;
	}
	b[o++] = 0;
	memcpy(b + o, "\0\1\0\1", 4);
	return o + 4;
}

Test(dns, refuses_with_nxdomain_echoing_id_and_question)
{
	uint8_t q[300], a[MOAT_DNS_ANSWER_MAX];
	char name[MOAT_DNS_NAME_CAP];
	size_t n = mkq(q, (const char *const[]){"Registry", "NPMJS", "org", NULL}, 0xbeef, 0x01);
	size_t al = moat_dns_answer(q, n, a, name);
	cr_assert_eq(al, n);
	cr_assert_str_eq(name, "registry.npmjs.org");
	cr_assert_eq(a[0], 0xbe);
	cr_assert_eq(a[1], 0xef);
	cr_assert_eq(a[2], 0x81); /* QR, RD */
	cr_assert_eq(a[3], MOAT_DNS_RCODE);
	cr_assert(!memcmp(a + 4, "\0\1\0\0\0\0\0\0", 8));
	cr_assert(!memcmp(a + 12, q + 12, n - 12));
}

Test(dns, the_root_and_escapes)
{
	uint8_t q[300], a[MOAT_DNS_ANSWER_MAX];
	char name[MOAT_DNS_NAME_CAP];
	size_t n = mkq(q, (const char *const[]){NULL}, 1, 0);
	cr_assert_eq(moat_dns_answer(q, n, a, name), n);
	cr_assert_str_eq(name, ".");
	n = mkq(q, (const char *const[]){"\x1b[1m", "a.b", NULL}, 1, 0);
	cr_assert_eq(moat_dns_answer(q, n, a, name), n);
	cr_assert_str_eq(name, "\\027\\0911m.a\\046b");
}

Test(dns, drops_what_it_must_not_answer)
{
	uint8_t q[300], a[MOAT_DNS_ANSWER_MAX];
	char name[MOAT_DNS_NAME_CAP];
	size_t n = mkq(q, (const char *const[]){"x", NULL}, 1, 0x80); /* a response */
	cr_assert_eq(moat_dns_answer(q, n, a, name), 0);
	cr_assert_eq(moat_dns_answer(q, 11, a, name), 0);
	cr_assert_str_eq(name, "");
}

Test(dns, malformed_queries_get_formerr_or_notimp_and_no_name)
{
	uint8_t q[600], a[MOAT_DNS_ANSWER_MAX];
	char name[MOAT_DNS_NAME_CAP];
	size_t n = mkq(q, (const char *const[]){"abc", "def", NULL}, 7, 0);
	/* cut inside the name, at the type, and a pointer: found by fuzz_dns
	 * (a partial name was left behind) */
	for (size_t cut = 13; cut < n; cut++) {
		cr_assert_eq(moat_dns_answer(q, cut, a, name), 12, "cut %zu", cut);
		cr_assert_eq(a[3] & 0xf, MOAT_DNS_FORMERR);
		cr_assert_str_eq(name, "");
	}
	q[12] = 0xc0;
	cr_assert_eq(moat_dns_answer(q, n, a, name), 12);
	cr_assert_eq(a[3] & 0xf, MOAT_DNS_FORMERR);
	n = mkq(q, (const char *const[]){"abc", NULL}, 7, 0);
	q[5] = 2; /* two questions */
	cr_assert_eq(moat_dns_answer(q, n, a, name), 12);
	cr_assert_eq(a[3] & 0xf, MOAT_DNS_FORMERR);
	q[5] = 1;
	q[2] = 2 << 3; /* a status request */
	cr_assert_eq(moat_dns_answer(q, n, a, name), 12);
	cr_assert_eq(a[3] & 0xf, MOAT_DNS_NOTIMP);
	/* a name of more than 255 bytes */
	char l[64];
	memset(l, 'a', 63);
	l[63] = '\0';
	n = mkq(q, (const char *const[]){l, l, l, l, NULL}, 7, 0);
	cr_assert_eq(moat_dns_answer(q, n, a, name), 12);
	cr_assert_str_eq(name, "");
	/* 3 * 64 + 1 + 62 + 1: 256 bytes, one too many; one less is fine */
	n = mkq(q, (const char *const[]){l, l, l, l + 1, NULL}, 7, 0);
	cr_assert_eq(moat_dns_answer(q, n, a, name), 12);
	n = mkq(q, (const char *const[]){l, l, l, l + 2, NULL}, 7, 0);
	cr_assert_eq(moat_dns_answer(q, n, a, name), n);
	cr_assert_eq(strlen(name), 255 - 2);
}

static int calls;
static void count(void *arg, const char *name)
{
	(void)arg;
	(void)name;
	calls++;
}

static void serve_until(struct moat_dnsd *d, int fd)
{
	for (int k = 0; k < 100; k++) {
		struct pollfd pf = {.fd = fd, .events = POLLIN};
		if (poll(&pf, 1, 0) > 0)
			return;
		struct pollfd w = {.fd = moat_dnsd_fd(d), .events = POLLIN};
		poll(&w, 1, 50);
		moat_dnsd_serve(d);
	}
}

Test(dnsd, udp_names_deduplicated_and_bounded)
{
	int sp[2];
	cr_assert_eq(socketpair(AF_UNIX, SOCK_DGRAM, 0, sp), 0);
	calls = 0;
	struct moat_dnsd *d = moat_dnsd_new(sp[0], -1, count, NULL);
	cr_assert(d);
	for (int i = 0; i < MOAT_DNSD_NAMES + 10; i++)
		for (int rep = 0; rep < 2; rep++) {
			char lab[16];
			snprintf(lab, sizeof lab, "n%d", i);
			uint8_t q[64], a[600];
			size_t n = mkq(q, (const char *const[]){lab, "example", NULL}, (uint16_t)i, 1);
			cr_assert_eq(send(sp[1], q, n, 0), (ssize_t)n);
			serve_until(d, sp[1]);
			cr_assert_eq(recv(sp[1], a, sizeof a, 0), (ssize_t)n);
			cr_assert_eq(a[3], MOAT_DNS_RCODE);
		}
	const char *const *names;
	size_t more;
	cr_assert_eq(moat_dnsd_names(d, &names, &more), MOAT_DNSD_NAMES);
	cr_assert_eq(more, 10);
	cr_assert_eq(calls, MOAT_DNSD_NAMES);
	cr_assert_str_eq(names[0], "n0.example");
	moat_dnsd_free(d);
	close(sp[1]);
}

Test(dnsd, tcp_framing)
{
	int l = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t sl = sizeof sa;
	cr_assert_eq(bind(l, (struct sockaddr *)&sa, sizeof sa), 0);
	cr_assert_eq(listen(l, 8), 0);
	cr_assert_eq(getsockname(l, (struct sockaddr *)&sa, &sl), 0);
	struct moat_dnsd *d = moat_dnsd_new(-1, l, NULL, NULL);
	cr_assert(d);
	int c = socket(AF_INET, SOCK_STREAM, 0);
	cr_assert_eq(connect(c, (struct sockaddr *)&sa, sizeof sa), 0);
	/* two queries in one write, the second split in two */
	uint8_t q[64], buf[256];
	size_t n = mkq(q, (const char *const[]){"one", "example", NULL}, 1, 1);
	buf[0] = 0;
	buf[1] = (uint8_t)n;
	memcpy(buf + 2, q, n);
	memcpy(buf + 2 + n, buf, 2 + n);
	cr_assert_eq(send(c, buf, 2 * (2 + n) - 5, 0), (ssize_t)(2 * (2 + n) - 5));
	serve_until(d, c);
	usleep(1000);
	cr_assert_eq(send(c, buf + 2 * (2 + n) - 5, 5, 0), 5);
	uint8_t a[512];
	size_t got = 0;
	while (got < 2 * (2 + n)) {
		serve_until(d, c);
		ssize_t r = recv(c, a + got, sizeof a - got, MSG_DONTWAIT);
		if (r > 0)
			got += (size_t)r;
	}
	cr_assert_eq(got, 2 * (2 + n));
	cr_assert_eq(a[1], n);
	cr_assert_eq(a[2 + 3], MOAT_DNS_RCODE);
	cr_assert_eq(a[2 + n + 2 + 3], MOAT_DNS_RCODE);
	/* an oversized frame: the connection goes */
	uint8_t big[2] = {0xff, 0xff};
	cr_assert_eq(send(c, big, 2, 0), 2);
	serve_until(d, c);
	cr_assert_eq(recv(c, a, sizeof a, 0), 0);
	close(c);
	moat_dnsd_free(d);
}

/* A sandbox that keeps writing queries on one connection must not keep
 * the host (moat run's thread, moat serve's event loop) in one call: a
 * call answers a bounded batch, and the rest on the next calls. */
Test(dnsd, tcp_flood_is_served_in_bounded_batches)
{
	int l = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t sl = sizeof sa;
	cr_assert_eq(bind(l, (struct sockaddr *)&sa, sizeof sa), 0);
	/* no Nagle (the accepted socket inherits it): every byte sent is
	 * there at once, both ways */
	int one = 1;
	cr_assert_eq(setsockopt(l, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one), 0);
	cr_assert_eq(listen(l, 8), 0);
	cr_assert_eq(getsockname(l, (struct sockaddr *)&sa, &sl), 0);
	struct moat_dnsd *d = moat_dnsd_new(-1, l, NULL, NULL);
	cr_assert(d);
	int c = socket(AF_INET, SOCK_STREAM, 0);
	cr_assert_eq(setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one), 0);
	cr_assert_eq(connect(c, (struct sockaddr *)&sa, sizeof sa), 0);
	uint8_t q[64], a[4096];
	size_t n = mkq(q, (const char *const[]){"x", "example", NULL}, 1, 1);
	uint8_t frame[66];
	frame[0] = 0;
	frame[1] = (uint8_t)n;
	memcpy(frame + 2, q, n);
	/* the first query: the connection is accepted and served */
	cr_assert_eq(send(c, frame, 2 + n, 0), (ssize_t)(2 + n));
	serve_until(d, c);
	cr_assert_eq(recv(c, a, sizeof a, 0), (ssize_t)(2 + n));
	/* then a flood, all of it queued before the host looks */
	enum { FLOOD = 1000 };
	for (int i = 0; i < FLOOD; i++)
		cr_assert_eq(send(c, frame, 2 + n, 0), (ssize_t)(2 + n));
	struct pollfd w = {.fd = moat_dnsd_fd(d), .events = POLLIN};
	cr_assert_eq(poll(&w, 1, 10000), 1);
	moat_dnsd_serve(d);
	size_t got = 0;
	ssize_t r;
	while ((r = recv(c, a, sizeof a, MSG_DONTWAIT)) > 0)
		got += (size_t)r;
	cr_assert_gt(got, 0);
	cr_assert_lt(got, (size_t)FLOOD * (2 + n), "one call answered the whole flood");
	/* nothing is lost: the next calls answer the rest */
	while (got < (size_t)FLOOD * (2 + n)) {
		struct pollfd pf[2] = {{.fd = moat_dnsd_fd(d), .events = POLLIN},
				       {.fd = c, .events = POLLIN}};
		cr_assert_gt(poll(pf, 2, 10000), 0, "queries left unanswered");
		moat_dnsd_serve(d);
		while ((r = recv(c, a, sizeof a, MSG_DONTWAIT)) > 0)
			got += (size_t)r;
	}
	cr_assert_eq(got, (size_t)FLOOD * (2 + n));
	close(c);
	moat_dnsd_free(d);
}

Test(dnsd, short_names)
{
	char s[8];
	moat_dnsd_short("abc", s, sizeof s);
	cr_assert_str_eq(s, "abc");
	moat_dnsd_short("abcdefghij", s, sizeof s);
	cr_assert_str_eq(s, "abcd...");
}
