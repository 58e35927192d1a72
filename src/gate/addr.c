/* IP address classification and literals: see addr.h. */
#include "gate/addr.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

/* A v4 range, network and mask in host order. */
struct v4range {
	uint32_t net;
	unsigned len;
	const char *kind;
};

#define V4(a, b, c, d) (((uint32_t)(a) << 24) | ((b) << 16) | ((c) << 8) | (d))

/* IANA IPv4 special-purpose registry entries that are not globally
 * reachable, plus multicast and the reserved 240/4. */
static const struct v4range v4_special[] = {
	{V4(0, 0, 0, 0), 8, "this-network"},
	{V4(10, 0, 0, 0), 8, "private"},
	{V4(100, 64, 0, 0), 10, "shared (CGNAT)"},
	{V4(127, 0, 0, 0), 8, "loopback"},
	{V4(169, 254, 0, 0), 16, "link-local"},
	{V4(172, 16, 0, 0), 12, "private"},
	{V4(192, 0, 0, 0), 24, "IETF protocol assignments"},
	{V4(192, 0, 2, 0), 24, "documentation"},
	{V4(192, 88, 99, 0), 24, "6to4 relay anycast"},
	{V4(192, 168, 0, 0), 16, "private"},
	{V4(198, 18, 0, 0), 15, "benchmarking"},
	{V4(198, 51, 100, 0), 24, "documentation"},
	{V4(203, 0, 113, 0), 24, "documentation"},
	{V4(224, 0, 0, 0), 4, "multicast"},
	{V4(255, 255, 255, 255), 32, "broadcast"},
	{V4(240, 0, 0, 0), 4, "reserved"},
};

static const char *v4_kind(uint32_t a)
{
	if (a == 0)
		return "unspecified";
	for (size_t i = 0; i < sizeof v4_special / sizeof *v4_special; i++) {
		const struct v4range *r = &v4_special[i];
		uint32_t mask = r->len ? ~(uint32_t)0 << (32 - r->len) : 0;
		if ((a & mask) == r->net)
			return r->kind;
	}
	return NULL;
}

static uint32_t be32_at(const uint8_t *p)
{
	return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) |
	       ((uint32_t)p[2] << 8) | p[3];
}

static bool all_zero(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i])
			return false;
	return true;
}

static const char *v6_kind(const uint8_t *a)
{
	static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
	static const uint8_t nat64[12] = {0, 0x64, 0xff, 0x9b};

	/* Embedded IPv4: the packet may end up at that v4 address, so it is
	 * judged exactly like it (::1 is 0.0.0.1 here: special too). */
	if (memcmp(a, mapped, 12) == 0 || all_zero(a, 12) ||
	    memcmp(a, nat64, 12) == 0)
		return v4_kind(be32_at(a + 12));
	if (a[0] == 0x20 && a[1] == 0x02)
		return v4_kind(be32_at(a + 2));

	if ((a[0] & 0xe0) != 0x20) {
		/* Outside global unicast: name the common ones. */
		if ((a[0] & 0xfe) == 0xfc)
			return "unique-local";
		if (a[0] == 0xfe && (a[1] & 0xc0) == 0x80)
			return "link-local";
		if (a[0] == 0xfe && (a[1] & 0xc0) == 0xc0)
			return "site-local";
		if (a[0] == 0xff)
			return "multicast";
		return "reserved";
	}
	if (a[0] == 0x20 && a[1] == 0x01 && a[2] == 0x0d && a[3] == 0xb8)
		return "documentation";
	if (a[0] == 0x3f && a[1] == 0xff && (a[2] & 0xf0) == 0)
		return "documentation";
	if (a[0] == 0x20 && a[1] == 0x01 && (a[2] & 0xfe) == 0)
		return "IETF protocol assignments";
	return NULL;
}

const char *gate_addr_special_kind(const struct sockaddr *sa)
{
	if (!sa)
		return "no address";
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
		return v4_kind(ntohl(in->sin_addr.s_addr));
	}
	if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
		return v6_kind(in6->sin6_addr.s6_addr);
	}
	return "not IP";
}

bool gate_addr_special(const struct sockaddr *sa)
{
	return gate_addr_special_kind(sa) != NULL;
}

bool gate_addr_parse(const char *s, struct sockaddr_storage *out)
{
	char buf[INET6_ADDRSTRLEN + 2];
	size_t n = strnlen(s, sizeof buf);
	if (n == 0 || n >= sizeof buf)
		return false;
	memcpy(buf, s, n + 1);

	struct in_addr a4;
	if (inet_pton(AF_INET, buf, &a4) == 1) {
		struct sockaddr_in *in = (struct sockaddr_in *)out;
		memset(out, 0, sizeof *out);
		in->sin_family = AF_INET;
		in->sin_addr = a4;
		return true;
	}
	char *p = buf;
	if (buf[0] == '[') {
		if (buf[n - 1] != ']')
			return false;
		buf[n - 1] = '\0';
		p = buf + 1;
	}
	struct in6_addr a6;
	if (inet_pton(AF_INET6, p, &a6) != 1)
		return false;
	struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)out;
	memset(out, 0, sizeof *out);
	in6->sin6_family = AF_INET6;
	in6->sin6_addr = a6;
	return true;
}

const char *gate_addr_format(const struct sockaddr *sa, bool with_port,
			     char out[GATE_ADDR_FMT_CAP])
{
	char a[INET6_ADDRSTRLEN];
	if (sa && sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
		inet_ntop(AF_INET, &in->sin_addr, a, sizeof a);
		if (with_port)
			snprintf(out, GATE_ADDR_FMT_CAP, "%s:%u", a,
				 ntohs(in->sin_port));
		else
			snprintf(out, GATE_ADDR_FMT_CAP, "%s", a);
	} else if (sa && sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
		inet_ntop(AF_INET6, &in6->sin6_addr, a, sizeof a);
		if (with_port)
			snprintf(out, GATE_ADDR_FMT_CAP, "[%s]:%u", a,
				 ntohs(in6->sin6_port));
		else
			snprintf(out, GATE_ADDR_FMT_CAP, "%s", a);
	} else {
		snprintf(out, GATE_ADDR_FMT_CAP, "?");
	}
	return out;
}

uint16_t gate_addr_port(const struct sockaddr *sa)
{
	if (sa && sa->sa_family == AF_INET)
		return ntohs(((const struct sockaddr_in *)sa)->sin_port);
	if (sa && sa->sa_family == AF_INET6)
		return ntohs(((const struct sockaddr_in6 *)sa)->sin6_port);
	return 0;
}
