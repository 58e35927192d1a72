/* Unit tests for src/gate/addr: special-address classification (SSRF
 * defence), including IPv6 forms that embed an IPv4 address, and IP
 * literal parsing/formatting. */
#define _GNU_SOURCE
#include <criterion/criterion.h>

#include "gate/addr.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/un.h>

static struct sockaddr_storage adr_ss(const char *s)
{
	struct sockaddr_storage ss;
	cr_assert(gate_addr_parse(s, &ss), "gate_addr_parse(\"%s\") failed", s);
	return ss;
}

static bool adr_special(const char *s)
{
	struct sockaddr_storage ss = adr_ss(s);
	return gate_addr_special((struct sockaddr *)&ss);
}

static const char *adr_kind(const char *s)
{
	struct sockaddr_storage ss = adr_ss(s);
	return gate_addr_special_kind((struct sockaddr *)&ss);
}

#define assert_special(s)                                                      \
	cr_assert(adr_special(s), "%s should be special", (s))
#define assert_ordinary(s)                                                     \
	cr_assert(!adr_special(s), "%s should not be special (%s)", (s),       \
		  adr_kind(s))
#define assert_kind(s, k)                                                      \
	do {                                                                   \
		const char *got_ = adr_kind(s);                                \
		cr_assert(got_ && strcmp(got_, (k)) == 0,                      \
			  "%s: kind %s, expected %s", (s),                     \
			  got_ ? got_ : "(none)", (k));                        \
	} while (0)

Test(gate_addr, v4_public_addresses_are_ordinary)
{
	const char *ok[] = {"8.8.8.8",        "1.1.1.1",         "93.184.216.34",
			    "100.63.255.255", "100.128.0.0",     "172.15.255.255",
			    "172.32.0.0",     "192.167.255.255", "192.169.0.0",
			    "169.253.255.255", "169.255.0.0",    "198.17.255.255",
			    "198.20.0.0",     "223.255.255.255", "11.0.0.0",
			    "9.255.255.255",  "126.255.255.255", "128.0.0.0",
			    "192.0.1.0",      "192.0.3.0",       "203.0.112.255",
			    "1.0.0.0"};
	for (size_t i = 0; i < sizeof ok / sizeof *ok; i++)
		assert_ordinary(ok[i]);
}

Test(gate_addr, v4_unspecified_and_this_network)
{
	assert_kind("0.0.0.0", "unspecified");
	assert_kind("0.0.0.1", "this-network");
	assert_kind("0.255.255.255", "this-network");
}

Test(gate_addr, v4_loopback)
{
	assert_kind("127.0.0.1", "loopback");
	assert_kind("127.0.0.0", "loopback");
	assert_kind("127.255.255.254", "loopback");
	assert_kind("127.1.2.3", "loopback");
}

Test(gate_addr, v4_private_rfc1918)
{
	assert_kind("10.0.0.0", "private");
	assert_kind("10.255.255.255", "private");
	assert_kind("172.16.0.0", "private");
	assert_kind("172.31.255.255", "private");
	assert_kind("192.168.0.1", "private");
	assert_kind("192.168.255.255", "private");
}

Test(gate_addr, v4_cgnat)
{
	assert_kind("100.64.0.0", "shared (CGNAT)");
	assert_kind("100.127.255.255", "shared (CGNAT)");
}

Test(gate_addr, v4_link_local_and_metadata)
{
	assert_kind("169.254.169.254", "link-local");
	assert_kind("169.254.0.0", "link-local");
	assert_kind("169.254.255.255", "link-local");
}

Test(gate_addr, v4_ietf_documentation_benchmarking)
{
	assert_kind("192.0.0.8", "IETF protocol assignments");
	assert_kind("192.0.0.255", "IETF protocol assignments");
	assert_kind("192.0.2.1", "documentation");
	assert_kind("198.51.100.7", "documentation");
	assert_kind("203.0.113.255", "documentation");
	assert_kind("198.18.0.0", "benchmarking");
	assert_kind("198.19.255.255", "benchmarking");
	assert_kind("192.88.99.1", "6to4 relay anycast");
}

Test(gate_addr, v4_multicast_reserved_broadcast)
{
	assert_kind("224.0.0.1", "multicast");
	assert_kind("239.255.255.255", "multicast");
	assert_kind("240.0.0.0", "reserved");
	assert_kind("254.1.2.3", "reserved");
	assert_kind("255.255.255.254", "reserved");
	assert_kind("255.255.255.255", "broadcast");
}

Test(gate_addr, v6_unspecified_and_loopback)
{
	assert_special("::");
	assert_special("::1");
}

Test(gate_addr, v6_public_addresses_are_ordinary)
{
	assert_ordinary("2606:4700:4700::1111");
	assert_ordinary("2a00:1450:4001:80b::200e");
	assert_ordinary("2001:4860:4860::8888");
	assert_ordinary("2001:200::1"); /* just past 2001::/23 */
	assert_ordinary("3ffe::1");
	assert_ordinary("3fff:1000::1"); /* just past 3fff::/20 */
}

Test(gate_addr, v6_ula_link_local_site_local_multicast)
{
	assert_kind("fc00::1", "unique-local");
	assert_kind("fd12:3456::1", "unique-local");
	assert_kind("fe80::1", "link-local");
	assert_kind("febf:ffff::1", "link-local");
	assert_kind("fec0::1", "site-local");
	assert_kind("ff02::1", "multicast");
	assert_kind("ff0e::fb", "multicast");
}

Test(gate_addr, v6_reserved_outside_global_unicast)
{
	assert_kind("100::1", "reserved");            /* discard-only */
	assert_kind("64:ff9b:1::1", "reserved");      /* local-use NAT64 */
	assert_kind("5f00::1", "reserved");           /* SRv6 SIDs */
	assert_kind("4000::1", "reserved");
	assert_kind("::ffff:0:7f00:1", "reserved"); /* SIIT translated */
}

Test(gate_addr, v6_documentation_and_ietf)
{
	assert_kind("2001:db8::1", "documentation");
	assert_kind("3fff::1", "documentation");
	assert_kind("2001::1", "IETF protocol assignments"); /* Teredo */
	assert_kind("2001:1ff::1", "IETF protocol assignments");
}

Test(gate_addr, v4_mapped_judged_by_embedded)
{
	assert_kind("::ffff:127.0.0.1", "loopback");
	assert_kind("::ffff:169.254.169.254", "link-local");
	assert_kind("::ffff:10.1.2.3", "private");
	assert_kind("::ffff:7f00:1", "loopback");
	assert_ordinary("::ffff:8.8.8.8");
}

Test(gate_addr, v4_compatible_judged_by_embedded)
{
	assert_kind("::127.0.0.1", "loopback");
	assert_kind("::192.168.1.1", "private");
	assert_ordinary("::8.8.8.8");
}

Test(gate_addr, nat64_judged_by_embedded)
{
	assert_kind("64:ff9b::127.0.0.1", "loopback");
	assert_kind("64:ff9b::a9fe:a9fe", "link-local");
	assert_ordinary("64:ff9b::808:808");
}

Test(gate_addr, sixtofour_judged_by_embedded)
{
	assert_kind("2002:7f00:1::", "loopback");
	assert_kind("2002:c0a8:101::1", "private");
	assert_kind("2002:a9fe:a9fe::", "link-local");
	assert_kind("2002::1", "unspecified");
	assert_ordinary("2002:808:808::1");
}

Test(gate_addr, other_families_are_special)
{
	struct sockaddr_un un = {.sun_family = AF_UNIX};
	cr_assert(gate_addr_special((struct sockaddr *)&un));
	cr_assert(gate_addr_special(NULL));
}

Test(gate_addr, parse_accepts_literals)
{
	struct sockaddr_storage ss = adr_ss("192.0.2.1");
	cr_assert_eq(ss.ss_family, AF_INET);
	cr_assert_eq(((struct sockaddr_in *)&ss)->sin_addr.s_addr,
		     htonl(0xc0000201));
	cr_assert_eq(gate_addr_port((struct sockaddr *)&ss), 0);
	ss = adr_ss("[2001:db8::1]");
	cr_assert_eq(ss.ss_family, AF_INET6);
	ss = adr_ss("2001:db8::1");
	cr_assert_eq(ss.ss_family, AF_INET6);
	cr_assert_eq(((struct sockaddr_in6 *)&ss)->sin6_addr.s6_addr[15], 1);
}

Test(gate_addr, parse_rejects_non_literals)
{
	const char *bad[] = {"",          "1.2.3",         "01.2.3.4",
			     "1.2.3.4:80", "1.2.3.256",     "0x7f.0.0.1",
			     "127.1",     "2130706433",    "fe80::1%eth0",
			     "[1.2.3.4]", "[::1",          "::1]",
			     "[]",        "example.com",   " 1.2.3.4",
			     "1::2::3",   "[::1]:80"};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		struct sockaddr_storage ss;
		memset(&ss, 0x5a, sizeof ss);
		cr_assert(!gate_addr_parse(bad[i], &ss), "\"%s\" accepted", bad[i]);
		cr_assert_eq(((unsigned char *)&ss)[0], 0x5a, "out touched");
	}
}

Test(gate_addr, format_with_and_without_port)
{
	char out[GATE_ADDR_FMT_CAP];
	struct sockaddr_storage ss = adr_ss("10.1.2.3");
	((struct sockaddr_in *)&ss)->sin_port = htons(8080);
	cr_assert_str_eq(gate_addr_format((struct sockaddr *)&ss, false, out),
			 "10.1.2.3");
	cr_assert_str_eq(gate_addr_format((struct sockaddr *)&ss, true, out),
			 "10.1.2.3:8080");
	cr_assert_eq(gate_addr_port((struct sockaddr *)&ss), 8080);

	ss = adr_ss("2001:DB8:0:0::1");
	((struct sockaddr_in6 *)&ss)->sin6_port = htons(443);
	cr_assert_str_eq(gate_addr_format((struct sockaddr *)&ss, false, out),
			 "2001:db8::1");
	cr_assert_str_eq(gate_addr_format((struct sockaddr *)&ss, true, out),
			 "[2001:db8::1]:443");
	cr_assert_eq(gate_addr_port((struct sockaddr *)&ss), 443);

	ss = adr_ss("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff");
	((struct sockaddr_in6 *)&ss)->sin6_port = htons(65535);
	cr_assert_str_eq(gate_addr_format((struct sockaddr *)&ss, true, out),
			 "[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:65535");

	struct sockaddr_un un = {.sun_family = AF_UNIX};
	cr_assert_str_eq(gate_addr_format((struct sockaddr *)&un, true, out), "?");
	cr_assert_eq(gate_addr_port((struct sockaddr *)&un), 0);
}
