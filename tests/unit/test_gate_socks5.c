/* Unit tests for src/gate/socks5: greeting and request parsing (every
 * address type, every refusal and its reply code, prefixes and byte by byte
 * feeding) and the encoded replies. */
#define _GNU_SOURCE
#include <criterion/criterion.h>

#include "gate/socks5.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/un.h>

#define S5(...) ((const uint8_t[]){__VA_ARGS__}), sizeof((const uint8_t[]){__VA_ARGS__})

static enum gate_socks5_status s5_greet(const uint8_t *b, size_t n,
					size_t *used, uint8_t *method)
{
	const char *err = NULL;
	return gate_socks5_parse_greeting(b, n, used, method, &err);
}

/* Every proper prefix of a complete message must be NEED_MORE, and the
 * full message the given status: the same answer whatever the chunking. */
static void s5_req_prefixes(const uint8_t *b, size_t n,
			    enum gate_socks5_status want)
{
	struct gate_socks5_request r;
	size_t used = 0;
	for (size_t i = 0; i < n; i++)
		cr_assert_eq(gate_socks5_parse_request(b, i, &used, &r),
			     GATE_SOCKS5_NEED_MORE, "prefix %zu", i);
	cr_assert_eq(gate_socks5_parse_request(b, n, &used, &r), want);
}

Test(gate_socks5, greeting_noauth)
{
	size_t used = 0;
	uint8_t m = 0x42;
	cr_assert_eq(s5_greet(S5(5, 1, 0), &used, &m), GATE_SOCKS5_DONE);
	cr_assert_eq(used, 3);
	cr_assert_eq(m, GATE_SOCKS5_NOAUTH);
	cr_assert_eq(s5_greet(S5(5, 3, 2, 1, 0), &used, &m), GATE_SOCKS5_DONE);
	cr_assert_eq(used, 5);
	cr_assert_eq(m, GATE_SOCKS5_NOAUTH);
}

Test(gate_socks5, greeting_without_noauth_gets_ff)
{
	size_t used = 0;
	uint8_t m = 0;
	cr_assert_eq(s5_greet(S5(5, 1, 2), &used, &m), GATE_SOCKS5_DONE);
	cr_assert_eq(m, GATE_SOCKS5_NO_METHOD);
	cr_assert_eq(s5_greet(S5(5, 2, 1, 0x80), &used, &m), GATE_SOCKS5_DONE);
	cr_assert_eq(m, GATE_SOCKS5_NO_METHOD);
	cr_assert_eq(s5_greet(S5(5, 0), &used, &m), GATE_SOCKS5_DONE);
	cr_assert_eq(used, 2);
	cr_assert_eq(m, GATE_SOCKS5_NO_METHOD);
}

Test(gate_socks5, greeting_prefixes_and_pipelined_request)
{
	const uint8_t b[] = {5, 2, 2, 0, 5, 1, 0, 1, 127, 0, 0, 1, 0, 80};
	size_t used = 0;
	uint8_t m = 0x42;
	for (size_t i = 0; i < 4; i++)
		cr_assert_eq(s5_greet(b, i, &used, &m), GATE_SOCKS5_NEED_MORE);
	cr_assert_eq(s5_greet(b, sizeof b, &used, &m), GATE_SOCKS5_DONE);
	cr_assert_eq(used, 4);
	struct gate_socks5_request r;
	size_t used2 = 0;
	cr_assert_eq(gate_socks5_parse_request(b + used, sizeof b - used, &used2, &r),
		     GATE_SOCKS5_DONE);
	cr_assert_eq(used2, 10);
	cr_assert_str_eq(r.host, "127.0.0.1");
}

Test(gate_socks5, greeting_wrong_version)
{
	size_t used = 0;
	uint8_t m = 0;
	const char *err = NULL;
	cr_assert_eq(gate_socks5_parse_greeting(S5(4, 1, 0, 80), &used, &m, &err),
		     GATE_SOCKS5_ERROR);
	cr_assert_str_eq(err, "SOCKS4 is not supported");
	cr_assert_eq(gate_socks5_parse_greeting(S5('G', 'E', 'T'), &used, &m, &err),
		     GATE_SOCKS5_ERROR);
	cr_assert_str_eq(err, "not a SOCKS5 greeting");
	/* decided on the first byte */
	cr_assert_eq(gate_socks5_parse_greeting(S5(0x16), &used, &m, NULL),
		     GATE_SOCKS5_ERROR);
}

Test(gate_socks5, request_ipv4)
{
	const uint8_t b[] = {5, 1, 0, 1, 192, 0, 2, 1, 0x1f, 0x90};
	s5_req_prefixes(b, sizeof b, GATE_SOCKS5_DONE);
	struct gate_socks5_request r;
	size_t used = 0;
	gate_socks5_parse_request(b, sizeof b, &used, &r);
	cr_assert_eq(used, 10);
	cr_assert_eq(r.atyp, 1);
	cr_assert_str_eq(r.host, "192.0.2.1");
	cr_assert_eq(r.port, 8080);
}

Test(gate_socks5, request_domain)
{
	const uint8_t b[] = {5, 1, 0, 3, 11, 'e', 'x', 'a', 'm', 'p', 'l', 'e',
			     '.', 'c', 'o', 'm', 1, 0xbb, 0xee};
	s5_req_prefixes(b, sizeof b - 1, GATE_SOCKS5_DONE);
	struct gate_socks5_request r;
	size_t used = 0;
	cr_assert_eq(gate_socks5_parse_request(b, sizeof b, &used, &r),
		     GATE_SOCKS5_DONE);
	cr_assert_eq(used, sizeof b - 1); /* trailing data is the tunnel's */
	cr_assert_eq(r.atyp, 3);
	cr_assert_str_eq(r.host, "example.com");
	cr_assert_eq(r.port, 443);
}

Test(gate_socks5, request_ipv6)
{
	uint8_t b[22] = {5, 1, 0, 4};
	struct in6_addr a;
	inet_pton(AF_INET6, "2001:db8::7", &a);
	memcpy(b + 4, &a, 16);
	b[20] = 0;
	b[21] = 22;
	s5_req_prefixes(b, sizeof b, GATE_SOCKS5_DONE);
	struct gate_socks5_request r;
	size_t used = 0;
	gate_socks5_parse_request(b, sizeof b, &used, &r);
	cr_assert_eq(used, 22);
	cr_assert_eq(r.atyp, 4);
	cr_assert_str_eq(r.host, "2001:db8::7");
	cr_assert_eq(r.port, 22);
}

Test(gate_socks5, request_longest_domain)
{
	uint8_t b[4 + 1 + 255 + 2] = {5, 1, 0, 3, 255};
	memset(b + 5, 'a', 255);
	b[260] = 0;
	b[261] = 80;
	s5_req_prefixes(b, sizeof b, GATE_SOCKS5_DONE);
	struct gate_socks5_request r;
	size_t used = 0;
	gate_socks5_parse_request(b, sizeof b, &used, &r);
	cr_assert_eq(strlen(r.host), 255);
	cr_assert_eq(used, 262);
}

static void s5_req_bad(const uint8_t *b, size_t n, uint8_t rep, const char *why)
{
	struct gate_socks5_request r;
	size_t used = 0;
	cr_assert_eq(gate_socks5_parse_request(b, n, &used, &r), GATE_SOCKS5_ERROR);
	cr_assert_eq(r.rep, rep, "rep %u, want %u", r.rep, rep);
	cr_assert_not_null(r.err);
	cr_assert(strstr(r.err, why), "\"%s\" not in \"%s\"", why, r.err);
}

Test(gate_socks5, request_commands_other_than_connect)
{
	s5_req_bad(S5(5, 2, 0, 1, 1, 2, 3, 4, 0, 80), GATE_SOCKS5_CMD_UNSUPPORTED,
		   "BIND");
	s5_req_bad(S5(5, 3, 0, 1, 0, 0, 0, 0, 0, 0), GATE_SOCKS5_CMD_UNSUPPORTED,
		   "UDP ASSOCIATE");
	s5_req_bad(S5(5, 9), GATE_SOCKS5_CMD_UNSUPPORTED, "unknown command");
	s5_req_bad(S5(5, 0), GATE_SOCKS5_CMD_UNSUPPORTED, "unknown command");
	cr_assert_eq(GATE_SOCKS5_CMD_UNSUPPORTED, 7);
}

Test(gate_socks5, request_bad_fields)
{
	s5_req_bad(S5(4, 1, 0, 1), GATE_SOCKS5_GENERAL_FAILURE, "not a SOCKS5");
	s5_req_bad(S5(5, 1, 1, 1), GATE_SOCKS5_GENERAL_FAILURE, "reserved");
	s5_req_bad(S5(5, 1, 0, 2), GATE_SOCKS5_ATYP_UNSUPPORTED, "address type");
	s5_req_bad(S5(5, 1, 0, 0), GATE_SOCKS5_ATYP_UNSUPPORTED, "address type");
	s5_req_bad(S5(5, 1, 0, 5, 1, 2), GATE_SOCKS5_ATYP_UNSUPPORTED, "address type");
	s5_req_bad(S5(5, 1, 0, 3, 0, 0, 80), GATE_SOCKS5_GENERAL_FAILURE, "empty domain");
	s5_req_bad(S5(5, 1, 0, 3, 3, 'a', 0, 'b', 0, 80), GATE_SOCKS5_GENERAL_FAILURE,
		   "NUL");
	cr_assert_eq(GATE_SOCKS5_ATYP_UNSUPPORTED, 8);
}

Test(gate_socks5, request_errors_come_in_byte_order)
{
	/* the same verdict from the first byte that decides it, onwards */
	const uint8_t bind[] = {5, 2, 0, 9, 1, 2, 3};
	for (size_t i = 2; i <= sizeof bind; i++)
		s5_req_bad(bind, i, GATE_SOCKS5_CMD_UNSUPPORTED, "BIND");
	const uint8_t atyp[] = {5, 1, 0, 7, 1, 2, 3, 4, 5, 6};
	for (size_t i = 4; i <= sizeof atyp; i++)
		s5_req_bad(atyp, i, GATE_SOCKS5_ATYP_UNSUPPORTED, "address type");
	/* a NUL is only seen once the whole name is there */
	const uint8_t nul[] = {5, 1, 0, 3, 2, 0, 'a', 0, 80};
	struct gate_socks5_request r;
	size_t used;
	for (size_t i = 0; i < sizeof nul; i++)
		cr_assert_eq(gate_socks5_parse_request(nul, i, &used, &r),
			     GATE_SOCKS5_NEED_MORE);
	s5_req_bad(nul, sizeof nul, GATE_SOCKS5_GENERAL_FAILURE, "NUL");
}

Test(gate_socks5, method_reply)
{
	uint8_t out[2];
	cr_assert_eq(gate_socks5_method_reply(out, GATE_SOCKS5_NOAUTH), 2);
	cr_assert_eq(out[0], 5);
	cr_assert_eq(out[1], 0);
	gate_socks5_method_reply(out, GATE_SOCKS5_NO_METHOD);
	cr_assert_eq(out[1], 0xff);
}

Test(gate_socks5, reply_without_bound_address)
{
	uint8_t out[GATE_SOCKS5_REPLY_MAX];
	static const uint8_t codes[] = {GATE_SOCKS5_OK, GATE_SOCKS5_NOT_ALLOWED,
					GATE_SOCKS5_HOST_UNREACHABLE,
					GATE_SOCKS5_REFUSED,
					GATE_SOCKS5_CMD_UNSUPPORTED,
					GATE_SOCKS5_ATYP_UNSUPPORTED};
	static const uint8_t wire[] = {0, 2, 4, 5, 7, 8};
	for (size_t i = 0; i < sizeof codes; i++) {
		memset(out, 0xaa, sizeof out);
		cr_assert_eq(gate_socks5_reply(out, codes[i], NULL), 10);
		const uint8_t want[10] = {5, wire[i], 0, 1, 0, 0, 0, 0, 0, 0};
		cr_assert_eq(memcmp(out, want, 10), 0, "code %u", codes[i]);
	}
	struct sockaddr_un un = {.sun_family = AF_UNIX};
	cr_assert_eq(gate_socks5_reply(out, 1, (struct sockaddr *)&un), 10);
	cr_assert_eq(out[3], 1);
	cr_assert_eq(out[4] | out[5] | out[6] | out[7] | out[8] | out[9], 0);
}

Test(gate_socks5, reply_with_bound_address)
{
	uint8_t out[GATE_SOCKS5_REPLY_MAX];
	struct sockaddr_in in = {.sin_family = AF_INET, .sin_port = htons(40000)};
	inet_pton(AF_INET, "10.0.0.2", &in.sin_addr);
	cr_assert_eq(gate_socks5_reply(out, GATE_SOCKS5_OK, (struct sockaddr *)&in), 10);
	const uint8_t want4[10] = {5, 0, 0, 1, 10, 0, 0, 2, 0x9c, 0x40};
	cr_assert_eq(memcmp(out, want4, 10), 0);

	struct sockaddr_in6 in6 = {.sin6_family = AF_INET6, .sin6_port = htons(443)};
	inet_pton(AF_INET6, "2001:db8::1", &in6.sin6_addr);
	cr_assert_eq(gate_socks5_reply(out, GATE_SOCKS5_OK, (struct sockaddr *)&in6), 22);
	cr_assert_eq(out[3], 4);
	cr_assert_eq(out[4], 0x20);
	cr_assert_eq(out[5], 0x01);
	cr_assert_eq(out[19], 1);
	cr_assert_eq(out[20], 1);
	cr_assert_eq(out[21], 0xbb);
}
