/* Unit tests for src/gate/policy: pattern forms and their errors, name
 * decisions (wildcards, ports, lookalikes, IP literals, deny over allow),
 * pins and the address check made on the address actually connected to. */
#define _GNU_SOURCE
#include <criterion/criterion.h>

#include "gate/addr.h"
#include "gate/policy.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

#define assert_has(hay, needle)                                                \
	cr_assert(strstr((hay), (needle)) != NULL, "expected \"%s\" in \"%s\"", \
		  (needle), (hay))

/* Parse a pattern that must be valid; returns its canonical text. */
static struct gate_rule pol_rule(const char *pat)
{
	struct gate_rule r;
	struct moat_err e = {0};
	cr_assert_eq(gate_rule_parse(pat, &r, &e), 0, "\"%s\": %s", pat, e.msg);
	return r;
}

/* A pattern that must be refused with a message naming it and saying why. */
static void pol_bad(const char *pat, const char *why)
{
	struct gate_rule r;
	struct moat_err e = {0};
	memset(&r, 0x5a, sizeof r);
	cr_assert_eq(gate_rule_parse(pat, &r, &e), -1, "\"%s\" accepted as %s",
		     pat, r.text);
	cr_assert_eq(e.kind, MOAT_E_USAGE);
	char quoted[300];
	snprintf(quoted, sizeof quoted, "\"%s\"", pat);
	bool plain = strlen(pat) < 200;
	for (const char *c = pat; *c; c++)
		if (*c < 0x20 || *c >= 0x7f || *c == '"' || *c == '\\')
			plain = false;
	if (plain)
		assert_has(e.msg, quoted);
	assert_has(e.msg, why);
	cr_assert_eq(((unsigned char *)&r)[0], 0x5a, "output touched");
}

static void pol_build(struct gate_policy *p, const char *const *allow,
		      const char *const *deny, const char *const *pins)
{
	struct moat_err e = {0};
	gate_policy_init(p);
	for (; allow && *allow; allow++)
		cr_assert_eq(gate_policy_add_allow(p, *allow, &e), 0, "%s", e.msg);
	for (; deny && *deny; deny++)
		cr_assert_eq(gate_policy_add_deny(p, *deny, &e), 0, "%s", e.msg);
	for (; pins && *pins; pins++)
		cr_assert_eq(gate_policy_add_pin(p, *pins, &e), 0, "%s", e.msg);
}

static bool pol_ok(const struct gate_policy *p, const char *host, uint16_t port)
{
	char why[GATE_WHY_CAP];
	return gate_check_name(p, host, port, why) == GATE_ALLOW;
}

#define assert_allowed(p, h, port)                                             \
	cr_assert(pol_ok((p), (h), (port)), "%s:%u should be allowed", (h),   \
		  (unsigned)(port))
#define assert_denied(p, h, port)                                              \
	cr_assert(!pol_ok((p), (h), (port)), "%s:%u should be denied", (h),   \
		  (unsigned)(port))

static struct sockaddr_storage pol_sa(const char *s, uint16_t port)
{
	struct sockaddr_storage ss;
	cr_assert(gate_addr_parse(s, &ss), "%s", s);
	if (ss.ss_family == AF_INET)
		((struct sockaddr_in *)&ss)->sin_port = htons(port);
	else
		((struct sockaddr_in6 *)&ss)->sin6_port = htons(port);
	return ss;
}

static enum gate_verdict pol_addr(const struct gate_policy *p, const char *host,
				  uint16_t port, const char *addr, char *why)
{
	struct sockaddr_storage ss = pol_sa(addr, port);
	return gate_check_addr(p, host, port, (struct sockaddr *)&ss, why);
}

/* ---- pattern forms ----------------------------------------------------- */

Test(gate_policy, pattern_exact_name)
{
	struct gate_rule r = pol_rule("example.com");
	cr_assert_eq(r.kind, GATE_RULE_NAME);
	cr_assert_str_eq(r.name, "example.com");
	cr_assert_eq(r.port, 0);
	cr_assert_str_eq(r.text, "example.com");
}

Test(gate_policy, pattern_wildcard)
{
	struct gate_rule r = pol_rule("*.example.com");
	cr_assert_eq(r.kind, GATE_RULE_SUFFIX);
	cr_assert_str_eq(r.name, "example.com");
	cr_assert_str_eq(r.text, "*.example.com");
	r = pol_rule("*.com");
	cr_assert_str_eq(r.name, "com");
}

Test(gate_policy, pattern_names_with_ports)
{
	struct gate_rule r = pol_rule("example.com:443");
	cr_assert_eq(r.kind, GATE_RULE_NAME);
	cr_assert_eq(r.port, 443);
	cr_assert_str_eq(r.text, "example.com:443");
	r = pol_rule("*.example.com:8443");
	cr_assert_eq(r.kind, GATE_RULE_SUFFIX);
	cr_assert_eq(r.port, 8443);
	cr_assert_str_eq(r.text, "*.example.com:8443");
	cr_assert_eq(pol_rule("a.b:1").port, 1);
	cr_assert_eq(pol_rule("a.b:65535").port, 65535);
}

Test(gate_policy, pattern_case_and_trailing_dot)
{
	struct gate_rule r = pol_rule("WWW.Example.COM.");
	cr_assert_str_eq(r.text, "www.example.com");
	r = pol_rule("*.Example.Com.:80");
	cr_assert_str_eq(r.text, "*.example.com:80");
	cr_assert_str_eq(pol_rule("under_score-ok.test").name, "under_score-ok.test");
	cr_assert_str_eq(pol_rule("localhost").name, "localhost");
}

Test(gate_policy, pattern_ip_literals)
{
	struct gate_rule r = pol_rule("192.0.2.7");
	cr_assert_eq(r.kind, GATE_RULE_NET);
	cr_assert_eq(r.family, AF_INET);
	cr_assert_eq(r.prefix, 32);
	cr_assert_str_eq(r.text, "192.0.2.7");
	r = pol_rule("192.0.2.7:8080");
	cr_assert_eq(r.port, 8080);
	cr_assert_str_eq(r.text, "192.0.2.7:8080");
	r = pol_rule("2001:DB8::1");
	cr_assert_eq(r.family, AF_INET6);
	cr_assert_eq(r.prefix, 128);
	cr_assert_str_eq(r.text, "2001:db8::1");
	r = pol_rule("[2001:db8::1]");
	cr_assert_str_eq(r.text, "2001:db8::1");
	r = pol_rule("[::1]:443");
	cr_assert_eq(r.port, 443);
	cr_assert_str_eq(r.text, "[::1]:443");
}

Test(gate_policy, pattern_cidrs)
{
	struct gate_rule r = pol_rule("10.0.0.0/8");
	cr_assert_eq(r.kind, GATE_RULE_NET);
	cr_assert_eq(r.prefix, 8);
	cr_assert_str_eq(r.text, "10.0.0.0/8");
	r = pol_rule("10.0.0.0/8:443");
	cr_assert_eq(r.port, 443);
	cr_assert_str_eq(r.text, "10.0.0.0/8:443");
	r = pol_rule("fd00::/8");
	cr_assert_eq(r.family, AF_INET6);
	cr_assert_eq(r.prefix, 8);
	cr_assert_str_eq(r.text, "fd00::/8");
	r = pol_rule("[fd00::/8]:443");
	cr_assert_eq(r.port, 443);
	cr_assert_str_eq(r.text, "[fd00::/8]:443");
	cr_assert_str_eq(pol_rule("0.0.0.0/0").text, "0.0.0.0/0");
	cr_assert_str_eq(pol_rule("::/0").text, "::/0");
	cr_assert_str_eq(pol_rule("192.0.2.0/24").text, "192.0.2.0/24");
	cr_assert_str_eq(pol_rule("169.254.169.254/32").text, "169.254.169.254");
}

Test(gate_policy, pattern_v4_mapped_becomes_v4)
{
	struct gate_rule r = pol_rule("::ffff:10.0.0.0/104");
	cr_assert_eq(r.family, AF_INET);
	cr_assert_eq(r.prefix, 8);
	cr_assert_str_eq(r.text, "10.0.0.0/8");
	cr_assert_str_eq(pol_rule("::ffff:127.0.0.1").text, "127.0.0.1");
	pol_bad("::ffff:0:0/95", "/96 or longer");
}

Test(gate_policy, pattern_canonical_text_reparses_the_same)
{
	const char *pats[] = {"Example.com.:443", "*.A.b", "10.0.0.0/8:22",
			      "[FD00::/16]:53",   "::1",    "1.2.3.4",
			      "[2001:db8::]/32"};
	for (size_t i = 0; i < sizeof pats / sizeof *pats; i++) {
		struct gate_rule r;
		struct moat_err e = {0};
		if (gate_rule_parse(pats[i], &r, &e) < 0)
			continue; /* "[2001:db8::]/32" is not a form we accept */
		struct gate_rule again = pol_rule(r.text);
		cr_assert_str_eq(again.text, r.text);
		cr_assert_eq(again.kind, r.kind);
		cr_assert_eq(again.port, r.port);
		cr_assert_eq(again.prefix, r.prefix);
		cr_assert_eq(memcmp(again.net, r.net, 16), 0);
	}
}

Test(gate_policy, pattern_length_limits)
{
	char label63[64], label64[65];
	memset(label63, 'a', 63);
	label63[63] = '\0';
	memset(label64, 'a', 64);
	label64[64] = '\0';
	char name[300];
	snprintf(name, sizeof name, "%s.test", label63);
	pol_rule(name);
	snprintf(name, sizeof name, "%s.test", label64);
	pol_bad(name, "label longer than 63");

	/* 4 x 63 + 3 dots = 255 > 253; 3 x 63 + 61 + 3 dots = 253 */
	char n253[260], n254[260];
	snprintf(n253, sizeof n253, "%s.%s.%s.%.*s", label63, label63, label63,
		 61, label63);
	cr_assert_eq(strlen(n253), 253);
	pol_rule(n253);
	snprintf(n254, sizeof n254, "%s.%s.%s.%.*s", label63, label63, label63,
		 62, label63);
	pol_bad(n254, "longer than 253");
	char dotted[260];
	snprintf(dotted, sizeof dotted, "%s.", n253); /* trailing dot is free */
	pol_rule(dotted);
}

Test(gate_policy, pattern_name_errors)
{
	pol_bad("", "empty pattern");
	pol_bad("a..b", "empty label");
	pol_bad(".example.com", "empty label");
	pol_bad("example.com..", "empty label");
	pol_bad(".", "empty name");
	pol_bad("exa mple.com", "invalid character");
	pol_bad("ex!.com", "invalid character");
	pol_bad("b\xc3\xa4r.de", "invalid character");
	pol_bad("exa/mple.com", "not an IP address or CIDR");
}

Test(gate_policy, pattern_wildcard_errors)
{
	pol_bad("*", "leading \"*.\"");
	pol_bad("*example.com", "leading \"*.\"");
	pol_bad("a.*.com", "leading \"*.\"");
	pol_bad("*.*.com", "leading \"*.\"");
	pol_bad("**.com", "leading \"*.\"");
	pol_bad("example.*", "leading \"*.\"");
	pol_bad("*.", "empty name");
	pol_bad("*.1.2.3", "needs a name");
}

Test(gate_policy, pattern_port_errors)
{
	pol_bad("example.com:0", "bad port");
	pol_bad("example.com:65536", "bad port");
	pol_bad("example.com:", "bad port");
	pol_bad("example.com:080", "bad port");
	pol_bad("example.com:https", "bad port");
	pol_bad("example.com:-1", "bad port");
	pol_bad("10.0.0.0/8:99999", "bad port");
	pol_bad("[::1]:0", "bad port");
	pol_bad("[::1]:", "bad port");
}

Test(gate_policy, pattern_address_errors)
{
	pol_bad("10.0.0.0/33", "out of range");
	pol_bad("fd00::/129", "out of range");
	pol_bad("10.1.0.0/8", "host bits set");
	pol_bad("fd00::1/8", "host bits set");
	pol_bad("10.0.0.0/", "bad prefix length");
	pol_bad("10.0.0.0/08", "bad prefix length");
	pol_bad("10.0.0.0/x", "bad prefix length");
	pol_bad("1.2.3/8", "not an IP address");
	pol_bad("1.2.3", "not a valid IPv4");
	pol_bad("127.1", "not a valid IPv4");
	pol_bad("0x7f.1", "not a valid IPv4");
	pol_bad("2130706433", "not a valid IPv4");
	pol_bad("1.2.3.04", "not a valid IPv4");
	pol_bad("1.2.3.4.", "not a valid IPv4");
	pol_bad("[1.2.3.4]", "brackets are for IPv6");
	pol_bad("[::1", "missing ']'");
	pol_bad("[::1]x", "junk after ']'");
	pol_bad("[fe80::1%eth0]", "not an IP address");
	pol_bad("fd00::/8:443", "needs brackets");
	pol_bad("::1:443:x", "not an IP address");
}

Test(gate_policy, pattern_error_quotes_untrusted_bytes)
{
	struct gate_rule r;
	struct moat_err e = {0};
	cr_assert_eq(gate_rule_parse("evil\n\"name", &r, &e), -1);
	assert_has(e.msg, "evil\\x0a\\x22name");
	cr_assert_null(strchr(e.msg, '\n'));
}

/* ---- names ------------------------------------------------------------- */

Test(gate_policy, exact_name_matches_only_itself)
{
	struct gate_policy p;
	pol_build(&p, (const char *[]){"example.com", NULL}, NULL, NULL);
	assert_allowed(&p, "example.com", 443);
	assert_allowed(&p, "example.com", 80);
	assert_allowed(&p, "EXAMPLE.Com", 443);
	assert_allowed(&p, "example.com.", 443);
	assert_denied(&p, "www.example.com", 443);
	assert_denied(&p, "example.org", 443);
	gate_policy_free(&p);
}

Test(gate_policy, lookalikes_never_match)
{
	struct gate_policy p;
	pol_build(&p, (const char *[]){"example.com", "*.example.com", NULL},
		  NULL, NULL);
	const char *evil[] = {"example.com.evil.test", "evilexample.com",
			      "xexample.com",          "example.co",
			      "ample.com",             "example.comm",
			      "www.example.com.evil.test", "example-com",
			      "wwwexample.com",        "example.com.."};
	for (size_t i = 0; i < sizeof evil / sizeof *evil; i++)
		assert_denied(&p, evil[i], 443);
	gate_policy_free(&p);
}

Test(gate_policy, wildcard_means_strictly_below)
{
	struct gate_policy p;
	pol_build(&p, (const char *[]){"*.example.com", NULL}, NULL, NULL);
	assert_allowed(&p, "a.example.com", 443);
	assert_allowed(&p, "a.b.c.example.com", 443);
	assert_allowed(&p, "API.Example.com.", 443);
	assert_denied(&p, "example.com", 443);
	assert_denied(&p, ".example.com", 443);
	assert_denied(&p, "evilexample.com", 443);
	assert_denied(&p, "a.example.com.evil.test", 443);
	gate_policy_free(&p);
}

Test(gate_policy, ports_restrict_rules)
{
	struct gate_policy p;
	pol_build(&p, (const char *[]){"example.com:443", "*.cdn.test:8443", NULL},
		  NULL, NULL);
	assert_allowed(&p, "example.com", 443);
	assert_denied(&p, "example.com", 80);
	assert_allowed(&p, "x.cdn.test", 8443);
	assert_denied(&p, "x.cdn.test", 443);
	assert_denied(&p, "example.com", 0);
	gate_policy_free(&p);
}

Test(gate_policy, deny_wins_over_allow)
{
	struct gate_policy p;
	pol_build(&p, (const char *[]){"*.example.com", "api.example.com", NULL},
		  (const char *[]){"api.example.com", "*.internal.example.com",
				   "example.com:25", NULL},
		  NULL);
	char why[GATE_WHY_CAP];
	cr_assert_eq(gate_check_name(&p, "api.example.com", 443, why), GATE_DENY);
	cr_assert_str_eq(why, "denied by api.example.com");
	assert_denied(&p, "db.internal.example.com", 443);
	assert_allowed(&p, "www.example.com", 443);
	gate_policy_free(&p);

	pol_build(&p, (const char *[]){"example.com", NULL},
		  (const char *[]){"example.com:25", NULL}, NULL);
	assert_allowed(&p, "example.com", 443);
	assert_denied(&p, "example.com", 25);
	gate_policy_free(&p);
}

Test(gate_policy, no_rule_means_deny)
{
	struct gate_policy p;
	gate_policy_init(&p);
	char why[GATE_WHY_CAP];
	cr_assert_eq(gate_check_name(&p, "example.com", 443, why), GATE_DENY);
	cr_assert_str_eq(why, "no allow rule matches");
	cr_assert_eq(gate_check_name(&p, "1.2.3.4", 443, NULL), GATE_DENY);
	gate_policy_free(&p);
	gate_policy_free(&p); /* harmless twice */
}

Test(gate_policy, reasons_name_the_rule)
{
	struct gate_policy p;
	pol_build(&p, (const char *[]){"*.Example.com:443", NULL}, NULL, NULL);
	char why[GATE_WHY_CAP];
	cr_assert_eq(gate_check_name(&p, "a.example.com", 443, why), GATE_ALLOW);
	cr_assert_str_eq(why, "allowed by *.example.com:443");
	cr_assert_eq(gate_check_name(&p, "a b", 443, why), GATE_DENY);
	assert_has(why, "invalid host");
	cr_assert_eq(gate_check_name(&p, "a.example.com", 0, why), GATE_DENY);
	cr_assert_str_eq(why, "invalid port 0");
	gate_policy_free(&p);
}

Test(gate_policy, ip_hosts_match_ip_rules_only)
{
	struct gate_policy p;
	pol_build(&p,
		  (const char *[]){"example.com", "*.2.0.192.in-addr.arpa",
				   "192.0.2.0/24", "2001:db8::/32", "[::1]:8080",
				   "198.51.100.7:443", NULL},
		  NULL, NULL);
	assert_allowed(&p, "192.0.2.200", 80);
	assert_allowed(&p, "2001:db8:1::5", 443);
	assert_allowed(&p, "[2001:db8::5]", 443);
	assert_allowed(&p, "::ffff:192.0.2.1", 443); /* mapped = the v4 */
	assert_allowed(&p, "::1", 8080);
	assert_denied(&p, "::1", 80);
	assert_allowed(&p, "198.51.100.7", 443);
	assert_denied(&p, "198.51.100.7", 80);
	assert_denied(&p, "198.51.100.8", 443);
	assert_denied(&p, "192.0.3.1", 80);
	assert_denied(&p, "2001:db9::1", 443);
	/* a name rule never matches an address, an address rule never a name */
	assert_denied(&p, "93.184.216.34", 443);
	assert_allowed(&p, "7.2.0.192.in-addr.arpa", 443);
	gate_policy_free(&p);
}

Test(gate_policy, numeric_names_are_not_names)
{
	struct gate_policy p;
	pol_build(&p, (const char *[]){"127.0.0.0/8", "*.test", NULL}, NULL, NULL);
	char why[GATE_WHY_CAP];
	const char *bad[] = {"127.1", "2130706433", "0x7f000001", "0x7f.0.0.1",
			     "127.0.0.01", "1.2.3.4.5", "017700000001", "1.test.0x"};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		cr_assert_eq(gate_check_name(&p, bad[i], 80, why), GATE_DENY,
			     "%s allowed", bad[i]);
		assert_has(why, "numeric");
	}
	assert_allowed(&p, "127.0.0.1", 80);
	assert_allowed(&p, "0x7f.test", 80);
	gate_policy_free(&p);
}

Test(gate_policy, invalid_hosts_are_denied)
{
	struct gate_policy p;
	pol_build(&p, (const char *[]){"*.com", "*.example.com", NULL}, NULL, NULL);
	const char *bad[] = {"",
			     "a..example.com",
			     "*.example.com",
			     "a b.example.com",
			     "a\x01.example.com",
			     "fe80::1%eth0",
			     "[example.com]",
			     "a.example.com:443",
			     "a/b.example.com"};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
		assert_denied(&p, bad[i], 443);
	char longname[600];
	memset(longname, 'a', sizeof longname);
	memcpy(longname + sizeof longname - 5, ".com", 5);
	assert_denied(&p, longname, 443);
	gate_policy_free(&p);
}

Test(gate_policy, many_rules)
{
	struct gate_policy p;
	struct moat_err e = {0};
	gate_policy_init(&p);
	for (int i = 0; i < 300; i++) {
		char pat[64];
		snprintf(pat, sizeof pat, "host%d.example.com", i);
		cr_assert_eq(gate_policy_add_allow(&p, pat, &e), 0);
	}
	cr_assert_eq(p.n_allow, 300);
	assert_allowed(&p, "host0.example.com", 1);
	assert_allowed(&p, "host299.example.com", 1);
	assert_denied(&p, "host300.example.com", 1);
	cr_assert_eq(gate_policy_add_deny(&p, "bad..x", &e), -1);
	cr_assert_eq(p.n_deny, 0);
	gate_policy_free(&p);
}

/* ---- pins -------------------------------------------------------------- */

static void pol_pin_bad(const char *spec, const char *why)
{
	struct gate_policy p;
	struct moat_err e = {0};
	gate_policy_init(&p);
	cr_assert_eq(gate_policy_add_pin(&p, spec, &e), -1, "\"%s\" accepted", spec);
	char quoted[300];
	snprintf(quoted, sizeof quoted, "\"%s\"", spec);
	assert_has(e.msg, quoted);
	assert_has(e.msg, why);
	cr_assert_eq(p.n_pins, 0);
	gate_policy_free(&p);
}

Test(gate_policy, pin_forms)
{
	struct gate_policy p;
	pol_build(&p, NULL, NULL,
		  (const char *[]){"A.Test.:127.0.0.1", "b.test:8080:127.0.0.2",
				   "c.test:[::1]", "d.test:443:[::1],127.0.0.3",
				   "e.test:1.2.3.4,5.6.7.8", NULL});
	cr_assert_eq(p.n_pins, 5);
	cr_assert_str_eq(p.pins[0].host, "a.test");
	cr_assert_eq(p.pins[0].port, 0);
	cr_assert_eq(p.pins[1].port, 8080);
	cr_assert_eq(p.pins[2].addr[0].ss_family, AF_INET6);
	cr_assert_eq(p.pins[3].n, 2);
	cr_assert_eq(p.pins[3].port, 443);
	cr_assert_eq(p.pins[4].n, 2);
	gate_policy_free(&p);
}

Test(gate_policy, pin_errors)
{
	pol_pin_bad("example.test", "HOST[:PORT]:ADDR");
	pol_pin_bad("example.test:", "empty address");
	pol_pin_bad("example.test:443:", "empty address");
	pol_pin_bad("example.test:1.2.3.4,", "empty address");
	pol_pin_bad("example.test:::1", "needs brackets");
	pol_pin_bad("example.test:443:::1", "needs brackets");
	pol_pin_bad("example.test:1.2.3", "not an IP address");
	pol_pin_bad("example.test:[1.2.3.4]", "not an IP address");
	pol_pin_bad("example.test:localhost", "not an IP address");
	pol_pin_bad("example.test:0:1.2.3.4", "bad port");
	pol_pin_bad("example.test:70000:1.2.3.4", "bad port");
	pol_pin_bad("*.example.test:1.2.3.4", "leading \"*.\"");
	pol_pin_bad("1.2.3.4:5.6.7.8", "must be a name");
	pol_pin_bad(":1.2.3.4", "empty name");
	pol_pin_bad("a.test:1.1.1.1,1.1.1.2,1.1.1.3,1.1.1.4,1.1.1.5,1.1.1.6,"
		    "1.1.1.7,1.1.1.8,1.1.1.9",
		    "too many addresses");
}

Test(gate_policy, pin_lookup)
{
	struct gate_policy p;
	pol_build(&p, NULL, NULL,
		  (const char *[]){"a.test:127.0.0.1", "a.test:[::1]",
				   "a.test:8443:127.0.0.9", "b.test:443:10.0.0.1",
				   NULL});
	struct sockaddr_storage out[4];
	char s[GATE_ADDR_FMT_CAP];
	cr_assert_eq(gate_pin_lookup(&p, "A.test.", 80, out, 4), 2);
	cr_assert_str_eq(gate_addr_format((struct sockaddr *)&out[0], true, s),
			 "127.0.0.1:80");
	cr_assert_str_eq(gate_addr_format((struct sockaddr *)&out[1], true, s),
			 "[::1]:80");
	/* a pin for exactly this port shadows the port-less ones */
	cr_assert_eq(gate_pin_lookup(&p, "a.test", 8443, out, 4), 1);
	cr_assert_str_eq(gate_addr_format((struct sockaddr *)&out[0], true, s),
			 "127.0.0.9:8443");
	cr_assert_eq(gate_pin_lookup(&p, "a.test", 80, out, 1), 1);
	cr_assert_eq(gate_pin_lookup(&p, "b.test", 443, out, 4), 1);
	cr_assert_eq(gate_pin_lookup(&p, "b.test", 80, out, 4), 0);
	cr_assert_eq(gate_pin_lookup(&p, "x.a.test", 80, out, 4), 0);
	cr_assert_eq(gate_pin_lookup(&p, "127.0.0.1", 80, out, 4), 0);
	cr_assert_eq(gate_pin_lookup(&p, "a.test", 0, out, 4), 0);
	gate_policy_free(&p);
}

/* ---- addresses --------------------------------------------------------- */

Test(gate_policy, public_addresses_pass_special_ones_do_not)
{
	struct gate_policy p;
	pol_build(&p, (const char *[]){"example.com", NULL}, NULL, NULL);
	char why[GATE_WHY_CAP];
	cr_assert_eq(pol_addr(&p, "example.com", 443, "93.184.216.34", why),
		     GATE_ALLOW);
	cr_assert_eq(pol_addr(&p, "example.com", 443, "2606:2800:220:1::1", why),
		     GATE_ALLOW);
	const char *special[] = {"127.0.0.1", "10.0.0.1", "169.254.169.254",
				 "::1", "fd00::1", "::ffff:127.0.0.1",
				 "64:ff9b::a9fe:a9fe", "2002:7f00:1::1",
				 "0.0.0.0", "100.64.0.1"};
	for (size_t i = 0; i < sizeof special / sizeof *special; i++)
		cr_assert_eq(pol_addr(&p, "example.com", 443, special[i], why),
			     GATE_DENY, "%s allowed", special[i]);
	cr_assert_eq(pol_addr(&p, "example.com", 80, "169.254.169.254", why),
		     GATE_DENY);
	cr_assert_str_eq(why, "169.254.169.254 is link-local and not explicitly allowed");
	gate_policy_free(&p);
}

Test(gate_policy, special_allowed_by_address_rule)
{
	struct gate_policy p;
	pol_build(&p,
		  (const char *[]){"local.test", "127.0.0.0/8:8080", "[::1]",
				   "10.1.2.3", NULL},
		  NULL, NULL);
	char why[GATE_WHY_CAP];
	cr_assert_eq(pol_addr(&p, "local.test", 8080, "127.0.0.5", why), GATE_ALLOW);
	cr_assert_str_eq(why, "127.0.0.5 (loopback) allowed by 127.0.0.0/8:8080");
	cr_assert_eq(pol_addr(&p, "local.test", 8081, "127.0.0.5", why), GATE_DENY);
	cr_assert_eq(pol_addr(&p, "local.test", 1, "::1", why), GATE_ALLOW);
	cr_assert_eq(pol_addr(&p, "local.test", 1, "::ffff:127.0.0.1", why), GATE_DENY);
	cr_assert_eq(pol_addr(&p, "local.test", 80, "10.1.2.3", why), GATE_ALLOW);
	cr_assert_eq(pol_addr(&p, "local.test", 80, "10.1.2.4", why), GATE_DENY);
	/* the same rule, reached through a v4-mapped address */
	cr_assert_eq(pol_addr(&p, "local.test", 80, "::ffff:10.1.2.3", why),
		     GATE_ALLOW);
	gate_policy_free(&p);
}

Test(gate_policy, pin_allows_special_address_for_that_host_only)
{
	struct gate_policy p;
	pol_build(&p, (const char *[]){"*.test", NULL}, NULL,
		  (const char *[]){"api.test:127.0.0.1", "web.test:8080:[::1]", NULL});
	char why[GATE_WHY_CAP];
	cr_assert_eq(pol_addr(&p, "api.test", 443, "127.0.0.1", why), GATE_ALLOW);
	cr_assert_str_eq(why, "127.0.0.1 (loopback) pinned for api.test");
	cr_assert_eq(pol_addr(&p, "API.test.", 443, "::ffff:127.0.0.1", why),
		     GATE_ALLOW);
	cr_assert_eq(pol_addr(&p, "api.test", 443, "127.0.0.2", why), GATE_DENY);
	cr_assert_eq(pol_addr(&p, "other.test", 443, "127.0.0.1", why), GATE_DENY);
	cr_assert_eq(pol_addr(&p, "127.0.0.1", 443, "127.0.0.1", why), GATE_DENY);
	cr_assert_eq(pol_addr(&p, NULL, 443, "127.0.0.1", why),
		     GATE_DENY);
	cr_assert_eq(pol_addr(&p, "web.test", 8080, "::1", why), GATE_ALLOW);
	cr_assert_eq(pol_addr(&p, "web.test", 80, "::1", why), GATE_DENY);
	gate_policy_free(&p);
}

Test(gate_policy, deny_address_rules_cover_resolved_addresses)
{
	struct gate_policy p;
	pol_build(&p, (const char *[]){"*.test", "127.0.0.0/8", NULL},
		  (const char *[]){"203.0.113.0/24", "127.0.0.2", NULL},
		  (const char *[]){"a.test:127.0.0.2", NULL});
	char why[GATE_WHY_CAP];
	cr_assert_eq(pol_addr(&p, "a.test", 80, "203.0.113.9", why), GATE_DENY);
	cr_assert_str_eq(why, "203.0.113.9 denied by 203.0.113.0/24");
	/* deny beats both an allow CIDR and a pin */
	cr_assert_eq(pol_addr(&p, "a.test", 80, "127.0.0.2", why), GATE_DENY);
	cr_assert_eq(pol_addr(&p, "a.test", 80, "127.0.0.3", why), GATE_ALLOW);
	cr_assert_eq(pol_addr(&p, "a.test", 443, "::ffff:203.0.113.1", why), GATE_DENY);
	gate_policy_free(&p);

	/* an IPv6 deny with a port: only that port */
	pol_build(&p, (const char *[]){"*.test", NULL},
		  (const char *[]){"[2606:4700::/32]:443", NULL}, NULL);
	cr_assert_eq(pol_addr(&p, "a.test", 443, "2606:4700::1", why), GATE_DENY);
	cr_assert_eq(pol_addr(&p, "a.test", 80, "2606:4700::1", why), GATE_ALLOW);
	gate_policy_free(&p);
}

Test(gate_policy, check_addr_refuses_non_ip)
{
	struct gate_policy p;
	pol_build(&p, (const char *[]){"0.0.0.0/0", "::/0", NULL}, NULL, NULL);
	struct sockaddr_storage ss;
	memset(&ss, 0, sizeof ss);
	ss.ss_family = AF_UNIX;
	char why[GATE_WHY_CAP];
	cr_assert_eq(gate_check_addr(&p, "x.test", 80, (struct sockaddr *)&ss, why),
		     GATE_DENY);
	cr_assert_eq(gate_check_addr(&p, "x.test", 80, NULL, why), GATE_DENY);
	/* 0.0.0.0/0 is an explicit allow of everything v4, special included */
	cr_assert_eq(pol_addr(&p, "x.test", 80, "127.0.0.1", why), GATE_ALLOW);
	gate_policy_free(&p);
}
