/* Unit tests for src/gate/sni: server names from real ClientHellos
 * (captured from `openssl s_client` 3.0 against a local listener, see
 * below), hellos split over records, prefixes, and every kind of malformed
 * input. */
#define _GNU_SOURCE
#include <criterion/criterion.h>

#include "gate/sni.h"

#include <stdlib.h>
#include <string.h>

/* Captured with a Python listener on 127.0.0.1:PORT saving the first
 * record, and:
 *   openssl s_client -connect 127.0.0.1:PORT -servername example.test
 *   openssl s_client -connect 127.0.0.1:PORT -noservername
 *   openssl s_client -connect 127.0.0.1:PORT -servername Api.Example.Test -tls1_2 */
#include "sni_hello.h"
static const uint8_t sni_nosni[297] = {
	0x16, 0x03, 0x01, 0x01, 0x24, 0x01, 0x00, 0x01, 0x20, 0x03, 0x03, 0x89,
	0x19, 0xc6, 0x9c, 0x75, 0x5c, 0xed, 0xbe, 0xe8, 0x7a, 0xfc, 0x97, 0x72,
	0x32, 0x3f, 0x99, 0x7c, 0x3c, 0x53, 0xf9, 0x42, 0xec, 0x2d, 0x65, 0xca,
	0x28, 0xc8, 0x02, 0xfe, 0x34, 0x5d, 0xe1, 0x20, 0x17, 0x69, 0xf4, 0x53,
	0x60, 0xf1, 0xc0, 0x4c, 0x17, 0xfe, 0xed, 0x52, 0xe8, 0xd6, 0x59, 0x39,
	0x1a, 0x3c, 0xf4, 0x2c, 0x6f, 0x9c, 0xad, 0xfc, 0xb4, 0x2f, 0x44, 0x50,
	0xe6, 0xd4, 0x3c, 0x05, 0x00, 0x3e, 0x13, 0x02, 0x13, 0x03, 0x13, 0x01,
	0xc0, 0x2c, 0xc0, 0x30, 0x00, 0x9f, 0xcc, 0xa9, 0xcc, 0xa8, 0xcc, 0xaa,
	0xc0, 0x2b, 0xc0, 0x2f, 0x00, 0x9e, 0xc0, 0x24, 0xc0, 0x28, 0x00, 0x6b,
	0xc0, 0x23, 0xc0, 0x27, 0x00, 0x67, 0xc0, 0x0a, 0xc0, 0x14, 0x00, 0x39,
	0xc0, 0x09, 0xc0, 0x13, 0x00, 0x33, 0x00, 0x9d, 0x00, 0x9c, 0x00, 0x3d,
	0x00, 0x3c, 0x00, 0x35, 0x00, 0x2f, 0x00, 0xff, 0x01, 0x00, 0x00, 0x99,
	0x00, 0x0b, 0x00, 0x04, 0x03, 0x00, 0x01, 0x02, 0x00, 0x0a, 0x00, 0x16,
	0x00, 0x14, 0x00, 0x1d, 0x00, 0x17, 0x00, 0x1e, 0x00, 0x19, 0x00, 0x18,
	0x01, 0x00, 0x01, 0x01, 0x01, 0x02, 0x01, 0x03, 0x01, 0x04, 0x00, 0x23,
	0x00, 0x00, 0x00, 0x16, 0x00, 0x00, 0x00, 0x17, 0x00, 0x00, 0x00, 0x0d,
	0x00, 0x2a, 0x00, 0x28, 0x04, 0x03, 0x05, 0x03, 0x06, 0x03, 0x08, 0x07,
	0x08, 0x08, 0x08, 0x09, 0x08, 0x0a, 0x08, 0x0b, 0x08, 0x04, 0x08, 0x05,
	0x08, 0x06, 0x04, 0x01, 0x05, 0x01, 0x06, 0x01, 0x03, 0x03, 0x03, 0x01,
	0x03, 0x02, 0x04, 0x02, 0x05, 0x02, 0x06, 0x02, 0x00, 0x2b, 0x00, 0x09,
	0x08, 0x03, 0x04, 0x03, 0x03, 0x03, 0x02, 0x03, 0x01, 0x00, 0x2d, 0x00,
	0x02, 0x01, 0x01, 0x00, 0x33, 0x00, 0x26, 0x00, 0x24, 0x00, 0x1d, 0x00,
	0x20, 0x42, 0x9c, 0xf1, 0x8c, 0xdf, 0x8f, 0x79, 0x37, 0x75, 0xad, 0xda,
	0xbb, 0x60, 0x8e, 0xd2, 0xab, 0x68, 0x08, 0xaa, 0xb7, 0xca, 0xd6, 0xbb,
	0xd5, 0x64, 0x05, 0xb3, 0x8e, 0x13, 0xe5, 0x2a, 0x0e,
};
static const uint8_t sni_tls12[213] = {
	0x16, 0x03, 0x01, 0x00, 0xd0, 0x01, 0x00, 0x00, 0xcc, 0x03, 0x03, 0x45,
	0xf8, 0x4b, 0xa3, 0x24, 0x28, 0xbb, 0x6c, 0x10, 0x2f, 0x7d, 0xe2, 0xb8,
	0x05, 0x57, 0x6f, 0xc6, 0x7d, 0xc8, 0xae, 0x5c, 0x59, 0xc5, 0xf0, 0x68,
	0x90, 0xb1, 0xcb, 0xc3, 0xd5, 0x1c, 0xc7, 0x00, 0x00, 0x38, 0xc0, 0x2c,
	0xc0, 0x30, 0x00, 0x9f, 0xcc, 0xa9, 0xcc, 0xa8, 0xcc, 0xaa, 0xc0, 0x2b,
	0xc0, 0x2f, 0x00, 0x9e, 0xc0, 0x24, 0xc0, 0x28, 0x00, 0x6b, 0xc0, 0x23,
	0xc0, 0x27, 0x00, 0x67, 0xc0, 0x0a, 0xc0, 0x14, 0x00, 0x39, 0xc0, 0x09,
	0xc0, 0x13, 0x00, 0x33, 0x00, 0x9d, 0x00, 0x9c, 0x00, 0x3d, 0x00, 0x3c,
	0x00, 0x35, 0x00, 0x2f, 0x00, 0xff, 0x01, 0x00, 0x00, 0x6b, 0x00, 0x00,
	0x00, 0x15, 0x00, 0x13, 0x00, 0x00, 0x10, 0x41, 0x70, 0x69, 0x2e, 0x45,
	0x78, 0x61, 0x6d, 0x70, 0x6c, 0x65, 0x2e, 0x54, 0x65, 0x73, 0x74, 0x00,
	0x0b, 0x00, 0x04, 0x03, 0x00, 0x01, 0x02, 0x00, 0x0a, 0x00, 0x0c, 0x00,
	0x0a, 0x00, 0x1d, 0x00, 0x17, 0x00, 0x1e, 0x00, 0x19, 0x00, 0x18, 0x00,
	0x23, 0x00, 0x00, 0x00, 0x16, 0x00, 0x00, 0x00, 0x17, 0x00, 0x00, 0x00,
	0x0d, 0x00, 0x2a, 0x00, 0x28, 0x04, 0x03, 0x05, 0x03, 0x06, 0x03, 0x08,
	0x07, 0x08, 0x08, 0x08, 0x09, 0x08, 0x0a, 0x08, 0x0b, 0x08, 0x04, 0x08,
	0x05, 0x08, 0x06, 0x04, 0x01, 0x05, 0x01, 0x06, 0x01, 0x03, 0x03, 0x03,
	0x01, 0x03, 0x02, 0x04, 0x02, 0x05, 0x02, 0x06, 0x02,
};

static enum gate_sni_status sni_run(const uint8_t *b, size_t n, char *host,
				    const char **err)
{
	char h[GATE_SNI_HOST_CAP];
	const char *e = NULL;
	enum gate_sni_status st = gate_sni_parse(b, n, host ? host : h, &e);
	if (err)
		*err = e;
	if (st == GATE_SNI_ERROR)
		cr_assert_not_null(e);
	return st;
}

/* Every prefix: NEED_MORE, then one final answer that longer inputs keep
 * (what byte-by-byte feeding sees). Returns that answer. */
static enum gate_sni_status sni_stable(const uint8_t *b, size_t n)
{
	enum gate_sni_status final = sni_run(b, n, NULL, NULL);
	bool decided = false;
	for (size_t i = 0; i <= n; i++) {
		enum gate_sni_status st = sni_run(b, i, NULL, NULL);
		if (decided)
			cr_assert_eq(st, final, "prefix %zu changed its mind", i);
		else if (st != GATE_SNI_NEED_MORE) {
			cr_assert_eq(st, final, "prefix %zu: %d, final %d", i, st, final);
			decided = true;
		}
	}
	return final;
}

static void sni_bad(const uint8_t *b, size_t n, const char *why)
{
	const char *err = NULL;
	cr_assert_eq(sni_run(b, n, NULL, &err), GATE_SNI_ERROR);
	cr_assert(strstr(err, why), "\"%s\" not in \"%s\"", why, err);
}

/* A ClientHello handshake message (header included) around exts; no
 * extension block at all when exts is NULL. */
static size_t sni_hello(uint8_t *out, const uint8_t *exts, size_t exts_len)
{
	size_t o = 4;
	out[o++] = 3;
	out[o++] = 3;
	memset(out + o, 0x11, 32);
	o += 32;
	out[o++] = 0;                     /* session id */
	out[o++] = 0;
	out[o++] = 2;
	out[o++] = 0x13;
	out[o++] = 0x01;                  /* one cipher suite */
	out[o++] = 1;
	out[o++] = 0;                     /* null compression */
	if (exts) {
		out[o++] = (uint8_t)(exts_len >> 8);
		out[o++] = (uint8_t)exts_len;
		memcpy(out + o, exts, exts_len);
		o += exts_len;
	}
	size_t body = o - 4;
	out[0] = 1;
	out[1] = (uint8_t)(body >> 16);
	out[2] = (uint8_t)(body >> 8);
	out[3] = (uint8_t)body;
	return o;
}

/* Wrap a handshake message into records of at most chunk payload bytes. */
static size_t sni_records(uint8_t *out, const uint8_t *hs, size_t n, size_t chunk)
{
	size_t o = 0;
	for (size_t i = 0; i < n; i += chunk) {
		size_t k = n - i < chunk ? n - i : chunk;
		out[o++] = 22;
		out[o++] = 3;
		out[o++] = 1;
		out[o++] = (uint8_t)(k >> 8);
		out[o++] = (uint8_t)k;
		memcpy(out + o, hs + i, k);
		o += k;
	}
	return o;
}

/* A server_name extension carrying name (of len bytes). */
static size_t sni_ext(uint8_t *out, const char *name, size_t len)
{
	out[0] = 0;
	out[1] = 0;
	out[2] = (uint8_t)((len + 5) >> 8);
	out[3] = (uint8_t)(len + 5);
	out[4] = (uint8_t)((len + 3) >> 8);
	out[5] = (uint8_t)(len + 3);
	out[6] = 0;
	out[7] = (uint8_t)(len >> 8);
	out[8] = (uint8_t)len;
	memcpy(out + 9, name, len);
	return 9 + len;
}

/* A record holding a hello with the given extensions. */
static size_t sni_msg(uint8_t *out, const uint8_t *exts, size_t exts_len)
{
	uint8_t hs[GATE_SNI_HELLO_MAX];
	size_t n = sni_hello(hs, exts, exts_len);
	return sni_records(out, hs, n, 16384);
}

static uint8_t sni_buf[65536];

Test(gate_sni, captured_tls13_hello)
{
	char host[GATE_SNI_HOST_CAP];
	cr_assert_eq(sni_run(sni_tls13, sizeof sni_tls13, host, NULL), GATE_SNI_FOUND);
	cr_assert_str_eq(host, "example.test");
}

Test(gate_sni, captured_tls12_hello_keeps_case)
{
	char host[GATE_SNI_HOST_CAP];
	cr_assert_eq(sni_run(sni_tls12, sizeof sni_tls12, host, NULL), GATE_SNI_FOUND);
	cr_assert_str_eq(host, "Api.Example.Test");
}

Test(gate_sni, captured_hello_without_sni)
{
	char host[GATE_SNI_HOST_CAP] = "untouched";
	cr_assert_eq(sni_run(sni_nosni, sizeof sni_nosni, host, NULL), GATE_SNI_NONE);
	cr_assert_str_eq(host, "untouched");
}

Test(gate_sni, every_prefix_needs_more)
{
	for (size_t i = 0; i < sizeof sni_tls13; i++)
		cr_assert_eq(sni_run(sni_tls13, i, NULL, NULL), GATE_SNI_NEED_MORE,
			     "prefix %zu", i);
	cr_assert_eq(sni_stable(sni_tls12, sizeof sni_tls12), GATE_SNI_FOUND);
	cr_assert_eq(sni_stable(sni_nosni, sizeof sni_nosni), GATE_SNI_NONE);
}

Test(gate_sni, trailing_bytes_are_ignored)
{
	memcpy(sni_buf, sni_tls13, sizeof sni_tls13);
	memcpy(sni_buf + sizeof sni_tls13, "\x17\x03\x03\x00\x05hello", 10);
	char host[GATE_SNI_HOST_CAP];
	cr_assert_eq(sni_run(sni_buf, sizeof sni_tls13 + 10, host, NULL),
		     GATE_SNI_FOUND);
	cr_assert_str_eq(host, "example.test");
}

Test(gate_sni, hello_split_over_records)
{
	const uint8_t *hs = sni_tls13 + 5;
	size_t n = sizeof sni_tls13 - 5;
	const size_t chunks[] = {1, 2, 3, 4, 5, 7, 100, 200, n - 1};
	for (size_t c = 0; c < sizeof chunks / sizeof *chunks; c++) {
		size_t len = sni_records(sni_buf, hs, n, chunks[c]);
		char host[GATE_SNI_HOST_CAP];
		cr_assert_eq(sni_run(sni_buf, len, host, NULL), GATE_SNI_FOUND,
			     "chunk %zu", chunks[c]);
		cr_assert_str_eq(host, "example.test");
		cr_assert_eq(sni_stable(sni_buf, len), GATE_SNI_FOUND);
	}
}

Test(gate_sni, not_tls)
{
	sni_bad((const uint8_t *)"GET / HTTP/1.1\r\n\r\n", 18, "not a TLS handshake");
	sni_bad((const uint8_t *)"G", 1, "not a TLS handshake");
	sni_bad((const uint8_t *)"\x16\x02", 2, "not a TLS record version");
	sni_bad((const uint8_t *)"\x80\x2e\x01\x03\x01", 5, "not a TLS handshake");
	sni_bad((const uint8_t *)"\x15\x03\x01\x00\x02\x02\x28", 7, "not a TLS handshake");
	cr_assert_eq(sni_run((const uint8_t *)"", 0, NULL, NULL), GATE_SNI_NEED_MORE);
	cr_assert_eq(sni_run((const uint8_t *)"\x16\x03", 2, NULL, NULL),
		     GATE_SNI_NEED_MORE);
}

Test(gate_sni, bad_record_lengths)
{
	sni_bad((const uint8_t *)"\x16\x03\x01\x00\x00", 5, "bad TLS record length");
	sni_bad((const uint8_t *)"\x16\x03\x01\x40\x01", 5, "bad TLS record length");
	sni_bad((const uint8_t *)"\x16\x03\x01\xff\xff", 5, "bad TLS record length");
	/* 16384 is the largest allowed: a valid prefix */
	cr_assert_eq(sni_run((const uint8_t *)"\x16\x03\x01\x40\x00\x01", 6, NULL, NULL),
		     GATE_SNI_NEED_MORE);
}

Test(gate_sni, not_a_client_hello)
{
	sni_bad((const uint8_t *)"\x16\x03\x03\x00\x04\x02\x00\x00\x00", 9,
		"not a ClientHello");
	sni_bad((const uint8_t *)"\x16\x03\x01\x00\x04\x01\x00\x40\x00", 9,
		"ClientHello too long");
	sni_bad((const uint8_t *)"\x16\x03\x01\x00\x04\x01\x01\x00\x00", 9,
		"ClientHello too long");
	/* a 16380-byte body is fine so far: more records will follow */
	cr_assert_eq(sni_run((const uint8_t *)"\x16\x03\x01\x00\x04\x01\x00\x3f\xfc", 9,
			     NULL, NULL),
		     GATE_SNI_NEED_MORE);
	/* an empty ClientHello */
	sni_bad((const uint8_t *)"\x16\x03\x01\x00\x04\x01\x00\x00\x00", 9,
		"not a TLS ClientHello version");
}

Test(gate_sni, other_record_inside_the_hello)
{
	const uint8_t *hs = sni_tls13 + 5;
	size_t len = sni_records(sni_buf, hs, 100, 100);
	memcpy(sni_buf + len, "\x15\x03\x03\x00\x02\x01\x00", 7);
	sni_bad(sni_buf, len + 7, "non-handshake record");
	sni_bad(sni_buf, len + 1, "non-handshake record");
	memcpy(sni_buf + len, "\x16\x02", 2);
	sni_bad(sni_buf, len + 2, "not a TLS record version");
}

Test(gate_sni, records_must_end_within_the_input_limit)
{
	/* an 8 KB hello in 1-byte records needs 48 KB of input */
	static uint8_t ext[8000];
	size_t o = sni_ext(ext, "big.test", 8);
	ext[o++] = 0x00;
	ext[o++] = 0x15; /* padding */
	size_t pad = sizeof ext - o - 2;
	ext[o++] = (uint8_t)(pad >> 8);
	ext[o++] = (uint8_t)pad;
	memset(ext + o, 0, pad);
	static uint8_t hs[GATE_SNI_HELLO_MAX];
	size_t n = sni_hello(hs, ext, sizeof ext);
	size_t len = sni_records(sni_buf, hs, n, 16384);
	char host[GATE_SNI_HOST_CAP];
	cr_assert_eq(sni_run(sni_buf, len, host, NULL), GATE_SNI_FOUND);
	cr_assert_str_eq(host, "big.test");
	len = sni_records(sni_buf, hs, n, 4);
	cr_assert_eq(sni_run(sni_buf, len, host, NULL), GATE_SNI_FOUND);
	len = sni_records(sni_buf, hs, n, 1);
	cr_assert_gt(len, GATE_SNI_INPUT_MAX);
	sni_bad(sni_buf, len, "records too long");
	sni_bad(sni_buf, GATE_SNI_INPUT_MAX, "records too long");
}

Test(gate_sni, built_hellos)
{
	uint8_t ext[600];
	char host[GATE_SNI_HOST_CAP];
	size_t n = sni_ext(ext, "a.test", 6);
	size_t len = sni_msg(sni_buf, ext, n);
	cr_assert_eq(sni_stable(sni_buf, len), GATE_SNI_FOUND);
	sni_run(sni_buf, len, host, NULL);
	cr_assert_str_eq(host, "a.test");

	/* no extension block (TLS 1.2 and older), or an empty one */
	len = sni_msg(sni_buf, NULL, 0);
	cr_assert_eq(sni_stable(sni_buf, len), GATE_SNI_NONE);
	len = sni_msg(sni_buf, ext, 0);
	cr_assert_eq(sni_stable(sni_buf, len), GATE_SNI_NONE);

	/* other extensions around it */
	const uint8_t pre[] = {0x00, 0x17, 0x00, 0x00, 0x00, 0x2b, 0x00, 0x03, 0x02, 0x03, 0x04};
	memcpy(ext, pre, sizeof pre);
	n = sizeof pre + sni_ext(ext + sizeof pre, "b.test", 6);
	memcpy(ext + n, "\xff\x01\x00\x01\x00", 5);
	len = sni_msg(sni_buf, ext, n + 5);
	cr_assert_eq(sni_run(sni_buf, len, host, NULL), GATE_SNI_FOUND);
	cr_assert_str_eq(host, "b.test");
}

Test(gate_sni, host_name_limits)
{
	uint8_t ext[600];
	char name[300], host[GATE_SNI_HOST_CAP];
	memset(name, 'a', sizeof name);
	size_t len = sni_msg(sni_buf, ext, sni_ext(ext, name, 255));
	cr_assert_eq(sni_run(sni_buf, len, host, NULL), GATE_SNI_FOUND);
	cr_assert_eq(strlen(host), 255);
	len = sni_msg(sni_buf, ext, sni_ext(ext, name, 256));
	sni_bad(sni_buf, len, "empty or too long");
	len = sni_msg(sni_buf, ext, sni_ext(ext, name, 0));
	sni_bad(sni_buf, len, "empty or too long");
}

Test(gate_sni, host_name_characters)
{
	const char *bad[] = {"a/b.test", "ex ample.test", "a\nb", "caf\xc3\xa9.test",
			     "a:443", "a@b"};
	uint8_t ext[600];
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		size_t len = sni_msg(sni_buf, ext, sni_ext(ext, bad[i], strlen(bad[i])));
		sni_bad(sni_buf, len, "invalid character");
	}
	size_t len = sni_msg(sni_buf, ext, sni_ext(ext, "a\0b", 3));
	sni_bad(sni_buf, len, "invalid character");
	char host[GATE_SNI_HOST_CAP];
	len = sni_msg(sni_buf, ext, sni_ext(ext, "_dmarc-x.A1.test.", 17));
	cr_assert_eq(sni_run(sni_buf, len, host, NULL), GATE_SNI_FOUND);
	cr_assert_str_eq(host, "_dmarc-x.A1.test.");
}

Test(gate_sni, duplicate_names)
{
	uint8_t ext[600];
	size_t n = sni_ext(ext, "a.test", 6);
	n += sni_ext(ext + n, "b.test", 6);
	size_t len = sni_msg(sni_buf, ext, n);
	sni_bad(sni_buf, len, "more than one server_name extension");

	/* one extension, two host names in its list */
	const uint8_t two[] = {0, 0, 0, 15, 0, 13, 0, 0, 4, 'a', '.', 'b', 'c',
			       0, 0, 3, 'x', '.', 'y'};
	len = sni_msg(sni_buf, two, sizeof two);
	sni_bad(sni_buf, len, "more than one host name");
}

Test(gate_sni, malformed_server_name_extension)
{
	/* list length one short / one long of the extension */
	const uint8_t shortl[] = {0, 0, 0, 9, 0, 6, 0, 0, 4, 'a', '.', 'b', 'c'};
	size_t len = sni_msg(sni_buf, shortl, sizeof shortl);
	sni_bad(sni_buf, len, "malformed server_name");
	const uint8_t longl[] = {0, 0, 0, 9, 0, 8, 0, 0, 4, 'a', '.', 'b', 'c'};
	len = sni_msg(sni_buf, longl, sizeof longl);
	sni_bad(sni_buf, len, "malformed server_name");
	/* host name length past its list */
	const uint8_t hlen[] = {0, 0, 0, 9, 0, 7, 0, 0, 5, 'a', '.', 'b', 'c'};
	len = sni_msg(sni_buf, hlen, sizeof hlen);
	sni_bad(sni_buf, len, "malformed server_name");
	/* empty extension and empty list */
	const uint8_t empty[] = {0, 0, 0, 0};
	len = sni_msg(sni_buf, empty, sizeof empty);
	sni_bad(sni_buf, len, "malformed server_name");
	const uint8_t emptyl[] = {0, 0, 0, 2, 0, 0};
	len = sni_msg(sni_buf, emptyl, sizeof emptyl);
	sni_bad(sni_buf, len, "malformed server_name");
	/* a name type other than host_name */
	const uint8_t type1[] = {0, 0, 0, 9, 0, 7, 1, 0, 4, 'a', '.', 'b', 'c'};
	len = sni_msg(sni_buf, type1, sizeof type1);
	sni_bad(sni_buf, len, "unknown type");
}

Test(gate_sni, malformed_extension_block)
{
	uint8_t ext[64];
	size_t n = sni_ext(ext, "a.test", 6);
	size_t len = sni_msg(sni_buf, ext, n);
	/* the block length is at offset 5 + 4 + 2 + 32 + 1 + 4 + 2 */
	size_t at = 5 + 4 + 2 + 32 + 1 + 4 + 2;
	cr_assert_eq(sni_buf[at + 1], n);
	sni_buf[at + 1] = (uint8_t)(n + 1);
	sni_bad(sni_buf, len, "extensions length");
	sni_buf[at + 1] = (uint8_t)(n - 1);
	sni_bad(sni_buf, len, "extensions length");
	/* one byte of extension block */
	const uint8_t one[] = {0};
	len = sni_msg(sni_buf, one, 1);
	sni_bad(sni_buf, len, "malformed extension");
	/* an extension whose length runs past the block */
	const uint8_t past[] = {0, 0x17, 0, 5, 0};
	len = sni_msg(sni_buf, past, sizeof past);
	sni_bad(sni_buf, len, "malformed extension");
}

Test(gate_sni, malformed_hello_body)
{
	uint8_t hs[128];
	size_t n = sni_hello(hs, NULL, 0);
	size_t len;

	hs[4] = 2; /* legacy_version 2.x */
	len = sni_records(sni_buf, hs, n, 16384);
	sni_bad(sni_buf, len, "version");
	hs[4] = 3;

	hs[38] = 33; /* session id longer than 32 */
	len = sni_records(sni_buf, hs, n, 16384);
	sni_bad(sni_buf, len, "session id");
	hs[38] = 0;

	hs[40] = 1; /* odd cipher suites length */
	len = sni_records(sni_buf, hs, n, 16384);
	sni_bad(sni_buf, len, "cipher suites");
	hs[40] = 0; /* none at all */
	len = sni_records(sni_buf, hs, n, 16384);
	sni_bad(sni_buf, len, "cipher suites");
	hs[40] = 2;

	hs[43] = 0; /* no compression method */
	len = sni_records(sni_buf, hs, n, 16384);
	sni_bad(sni_buf, len, "compression");
	hs[43] = 1;

	/* the hello cut short: its own length says fewer bytes */
	hs[3] = 20;
	len = sni_records(sni_buf, hs, 24, 16384);
	sni_bad(sni_buf, len, "too short");
	hs[3] = 34;
	len = sni_records(sni_buf, hs, 38, 16384);
	sni_bad(sni_buf, len, "session id");
	hs[3] = 37;
	len = sni_records(sni_buf, hs, 41, 16384);
	sni_bad(sni_buf, len, "cipher suites");
}

Test(gate_sni, mutations_never_read_out_of_bounds)
{
	/* every byte of a real hello, flipped to a few values, on an exact
	 * heap copy (ASan flags any read past it) */
	const uint8_t vals[] = {0x00, 0x01, 0x7f, 0x80, 0xff};
	size_t n = sizeof sni_tls13;
	int found = 0;
	for (size_t i = 0; i < n; i++) {
		for (size_t v = 0; v < sizeof vals; v++) {
			uint8_t *b = malloc(n);
			memcpy(b, sni_tls13, n);
			b[i] = vals[v];
			enum gate_sni_status st = sni_run(b, n, NULL, NULL);
			cr_assert(st >= GATE_SNI_NEED_MORE && st <= GATE_SNI_ERROR);
			found += st == GATE_SNI_FOUND;
			free(b);
		}
	}
	cr_assert_gt(found, 0);
	/* and every truncation, with the record length made to match */
	for (size_t k = 1; k < n - 5; k++) {
		uint8_t *b = malloc(5 + k);
		memcpy(b, sni_tls13, 5 + k);
		b[3] = (uint8_t)(k >> 8);
		b[4] = (uint8_t)k;
		cr_assert_eq(sni_run(b, 5 + k, NULL, NULL), GATE_SNI_NEED_MORE);
		free(b);
	}
}
