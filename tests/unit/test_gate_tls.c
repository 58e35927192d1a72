/* Unit tests for src/gate/tls.c. Everything runs in memory: handshakes go
 * through BIO pairs, and the "real upstream" is an OpenSSL server whose CA
 * and certificates are made here with plain OpenSSL calls, independently
 * of the code under test. */
#include <criterion/criterion.h>

#include "gate/tls.h"

#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define gtls_assert_has(hay, needle)                                            \
	cr_assert(strstr((hay), (needle)) != NULL, "expected \"%s\" in \"%s\"", \
		  (needle), (hay))

/* ---- helpers: certificates made without the code under test ---- */

struct gtls_pki {
	EVP_PKEY *key;
	X509 *cert;
};

static void gtls_ext(X509 *x, X509 *issuer, int nid, const char *value)
{
	X509V3_CTX ctx;
	X509V3_set_ctx(&ctx, issuer, x, NULL, NULL, 0);
	X509_EXTENSION *ext = X509V3_EXT_nconf_nid(NULL, &ctx, nid, value);
	cr_assert_not_null(ext, "extension %d=%s", nid, value);
	cr_assert_eq(X509_add_ext(x, ext, -1), 1);
	X509_EXTENSION_free(ext);
}

/* issuer NULL: a self-signed CA named cn. Otherwise a server leaf with
 * subjectAltName san ("DNS:..." or "IP:..."), signed by issuer. */
static struct gtls_pki gtls_make(const struct gtls_pki *issuer, const char *cn, const char *san)
{
	struct gtls_pki p;
	p.key = EVP_EC_gen("P-256");
	cr_assert_not_null(p.key);
	p.cert = X509_new();
	cr_assert_not_null(p.cert);
	X509 *x = p.cert;
	cr_assert_eq(X509_set_version(x, X509_VERSION_3), 1);
	static long serial = 1000;
	cr_assert_eq(ASN1_INTEGER_set(X509_get_serialNumber(x), serial++), 1);
	cr_assert_not_null(X509_gmtime_adj(X509_getm_notBefore(x), -60));
	cr_assert_not_null(X509_gmtime_adj(X509_getm_notAfter(x), 86400));
	cr_assert_eq(X509_set_pubkey(x, p.key), 1);
	X509_NAME *name = X509_get_subject_name(x);
	cr_assert_eq(X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
						(const unsigned char *)cn, -1, -1, 0), 1);
	X509 *icert = issuer ? issuer->cert : x;
	cr_assert_eq(X509_set_issuer_name(x, X509_get_subject_name(icert)), 1);
	if (!issuer) {
		gtls_ext(x, x, NID_basic_constraints, "critical,CA:TRUE");
		gtls_ext(x, x, NID_key_usage, "critical,keyCertSign,cRLSign");
		gtls_ext(x, x, NID_subject_key_identifier, "hash");
	} else {
		gtls_ext(x, icert, NID_basic_constraints, "critical,CA:FALSE");
		gtls_ext(x, icert, NID_ext_key_usage, "serverAuth");
		gtls_ext(x, icert, NID_authority_key_identifier, "keyid:always");
		gtls_ext(x, icert, NID_subject_alt_name, san);
	}
	cr_assert_gt(X509_sign(x, issuer ? issuer->key : p.key, EVP_sha256()), 0);
	return p;
}

static void gtls_pki_free(struct gtls_pki *p)
{
	X509_free(p->cert);
	EVP_PKEY_free(p->key);
}

/* Write a certificate to a temporary PEM file; path needs 64 bytes. */
static void gtls_write_pem(X509 *x, char *path)
{
	strcpy(path, "/tmp/moat-test-ca-XXXXXX");
	int fd = mkstemp(path);
	cr_assert_geq(fd, 0);
	FILE *f = fdopen(fd, "w");
	cr_assert_not_null(f);
	cr_assert_eq(PEM_write_X509(f, x), 1);
	cr_assert_eq(fclose(f), 0);
}

static X509 *gtls_parse_pem(const char *pem)
{
	BIO *b = BIO_new_mem_buf(pem, -1);
	cr_assert_not_null(b);
	X509 *x = PEM_read_bio_X509(b, NULL, NULL, NULL);
	BIO_free(b);
	cr_assert_not_null(x, "CA PEM does not parse");
	return x;
}

/* A client trusting only the certificate in ca_pem, verifying host, offering
 * the ALPN list alpn (wire format, may be NULL). */
static SSL *gtls_client(const char *ca_pem, const char *host, const unsigned char *alpn,
			size_t alpn_len)
{
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	cr_assert_not_null(ctx);
	X509 *ca = gtls_parse_pem(ca_pem);
	/* strict RFC 5280 checks, as Python 3.13's default context does */
	cr_assert_eq(X509_STORE_set_flags(SSL_CTX_get_cert_store(ctx), X509_V_FLAG_X509_STRICT), 1);
	cr_assert_eq(X509_STORE_add_cert(SSL_CTX_get_cert_store(ctx), ca), 1);
	X509_free(ca);
	SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
	if (alpn)
		cr_assert_eq(SSL_CTX_set_alpn_protos(ctx, alpn, (unsigned)alpn_len), 0);
	SSL *ssl = SSL_new(ctx);
	SSL_CTX_free(ctx); /* the SSL keeps its own reference */
	cr_assert_not_null(ssl);
	cr_assert_eq(SSL_set_tlsext_host_name(ssl, host), 1);
	cr_assert_eq(SSL_set1_host(ssl, host), 1);
	SSL_set_connect_state(ssl);
	return ssl;
}

/* Prefers h2 whenever offered, as real servers do. */
static int gtls_alpn_prefer_h2(SSL *ssl, const unsigned char **out, unsigned char *outlen,
			       const unsigned char *in, unsigned int inlen, void *arg)
{
	static const unsigned char mine[] = "\x02h2\x08http/1.1";
	(void)ssl;
	(void)arg;
	if (SSL_select_next_proto((unsigned char **)out, outlen, mine, sizeof mine - 1, in,
				  inlen) != OPENSSL_NPN_NEGOTIATED)
		return SSL_TLSEXT_ERR_NOACK;
	return SSL_TLSEXT_ERR_OK;
}

/* A plain server presenting p's certificate. */
static SSL *gtls_server(const struct gtls_pki *p)
{
	SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
	cr_assert_not_null(ctx);
	SSL_CTX_set_alpn_select_cb(ctx, gtls_alpn_prefer_h2, NULL);
	SSL *ssl = SSL_new(ctx);
	SSL_CTX_free(ctx);
	cr_assert_not_null(ssl);
	cr_assert_eq(SSL_use_certificate(ssl, p->cert), 1);
	cr_assert_eq(SSL_use_PrivateKey(ssl, p->key), 1);
	SSL_set_accept_state(ssl);
	return ssl;
}

/* Connect client and server through a BIO pair and drive both handshakes
 * until each has finished or failed. Returns true when both succeeded. */
static bool gtls_handshake(SSL *client, SSL *server)
{
	BIO *bc, *bs;
	cr_assert_eq(BIO_new_bio_pair(&bc, 0, &bs, 0), 1);
	SSL_set_bio(client, bc, bc);
	SSL_set_bio(server, bs, bs);
	int cstate = 0, sstate = 0; /* 0 running, 1 done, -1 failed */
	for (int round = 0; round < 50 && (cstate == 0 || sstate == 0); round++) {
		if (cstate == 0) {
			int r = SSL_do_handshake(client);
			int err = SSL_get_error(client, r);
			if (r == 1)
				cstate = 1;
			else if (err != SSL_ERROR_WANT_READ && err != SSL_ERROR_WANT_WRITE)
				cstate = -1;
		}
		if (sstate == 0) {
			int r = SSL_do_handshake(server);
			int err = SSL_get_error(server, r);
			if (r == 1)
				sstate = 1;
			else if (err != SSL_ERROR_WANT_READ && err != SSL_ERROR_WANT_WRITE)
				sstate = -1;
		}
		/* one side failing leaves the other waiting for bytes that never
		 * come (or reading the alert): that is an end too */
		if (cstate == -1 || sstate == -1) {
			if (round > 0 && (cstate != 1 || sstate != 1))
				break;
		}
	}
	ERR_clear_error();
	return cstate == 1 && sstate == 1;
}

/* After a successful handshake: bytes get through both ways. */
static void gtls_exchange(SSL *client, SSL *server)
{
	char buf[16];
	cr_assert_eq(SSL_write(client, "ping", 4), 4);
	cr_assert_eq(SSL_read(server, buf, sizeof buf), 4);
	cr_assert_eq(memcmp(buf, "ping", 4), 0);
	cr_assert_eq(SSL_write(server, "pong", 4), 4);
	cr_assert_eq(SSL_read(client, buf, sizeof buf), 4);
	cr_assert_eq(memcmp(buf, "pong", 4), 0);
}

static void gtls_assert_alpn(SSL *ssl, const char *want)
{
	const unsigned char *p;
	unsigned int n;
	SSL_get0_alpn_selected(ssl, &p, &n);
	if (!want) {
		cr_assert_eq(n, 0, "no ALPN expected, got %.*s", (int)n, (const char *)p);
		return;
	}
	cr_assert_eq(n, strlen(want), "ALPN: got \"%.*s\"", (int)n, p ? (const char *)p : "");
	cr_assert_eq(memcmp(p, want, n), 0);
}

/* Verify leaf against the CA in ca_pem, for host (or IP when ip). */
static int gtls_verify(const char *ca_pem, X509 *leaf, const char *host, bool ip)
{
	X509_STORE *store = X509_STORE_new();
	cr_assert_not_null(store);
	X509 *ca = gtls_parse_pem(ca_pem);
	cr_assert_eq(X509_STORE_add_cert(store, ca), 1);
	X509_free(ca);
	X509_STORE_CTX *ctx = X509_STORE_CTX_new();
	cr_assert_not_null(ctx);
	cr_assert_eq(X509_STORE_CTX_init(ctx, store, leaf, NULL), 1);
	X509_VERIFY_PARAM *param = X509_STORE_CTX_get0_param(ctx);
	X509_VERIFY_PARAM_set_flags(param, X509_V_FLAG_X509_STRICT);
	cr_assert_eq(X509_VERIFY_PARAM_set_purpose(param, X509_PURPOSE_SSL_SERVER), 1);
	if (ip)
		cr_assert_eq(X509_VERIFY_PARAM_set1_ip_asc(param, host), 1);
	else
		cr_assert_eq(X509_VERIFY_PARAM_set1_host(param, host, 0), 1);
	int r = X509_verify_cert(ctx);
	int err = X509_STORE_CTX_get_error(ctx);
	X509_STORE_CTX_free(ctx);
	X509_STORE_free(store);
	ERR_clear_error();
	return r == 1 ? X509_V_OK : (err ? err : -1);
}

/* The leaf a server SSL from the code under test presents (new reference). */
static X509 *gtls_leaf(struct gate_ca *ca, const char *host)
{
	struct moat_err e = {0};
	SSL *ssl = gate_ca_server_ssl(ca, host, &e);
	cr_assert_not_null(ssl, "gate_ca_server_ssl(%s): %s", host, e.msg);
	X509 *x = SSL_get_certificate(ssl);
	cr_assert_not_null(x);
	cr_assert_eq(X509_up_ref(x), 1);
	SSL_free(ssl);
	return x;
}

static struct gate_ca *gtls_ca(const char *name)
{
	struct moat_err e = {0};
	struct gate_ca *ca = gate_ca_new(name, &e);
	cr_assert_not_null(ca, "gate_ca_new: %s", e.msg);
	return ca;
}

/* The one GENERAL_NAME in x's subjectAltName. */
static void gtls_assert_san(X509 *x, int type, const void *want, size_t len)
{
	GENERAL_NAMES *gens = X509_get_ext_d2i(x, NID_subject_alt_name, NULL, NULL);
	cr_assert_not_null(gens, "no subjectAltName");
	cr_assert_eq(sk_GENERAL_NAME_num(gens), 1);
	GENERAL_NAME *g = sk_GENERAL_NAME_value(gens, 0);
	int got_type;
	ASN1_STRING *s = GENERAL_NAME_get0_value(g, &got_type);
	cr_assert_eq(got_type, type);
	cr_assert_eq((size_t)ASN1_STRING_length(s), len);
	cr_assert_eq(memcmp(ASN1_STRING_get0_data(s), want, len), 0);
	GENERAL_NAMES_free(gens);
}

static long gtls_days_left(const ASN1_TIME *t)
{
	int days, secs;
	cr_assert_eq(ASN1_TIME_diff(&days, &secs, NULL, t), 1);
	return days;
}

/* ---- the per-sandbox CA ---- */

Test(gate_tls, ca_pem_is_a_ca)
{
	struct gate_ca *ca = gtls_ca("box1");
	const char *pem = gate_ca_pem(ca);
	gtls_assert_has(pem, "-----BEGIN CERTIFICATE-----");
	X509 *x = gtls_parse_pem(pem);

	cr_assert_eq(X509_get_version(x), X509_VERSION_3);
	cr_assert_eq(X509_check_ca(x), 1);
	/* CA:TRUE, critical, pathlen 0 */
	int crit = -1;
	BASIC_CONSTRAINTS *bc = X509_get_ext_d2i(x, NID_basic_constraints, &crit, NULL);
	cr_assert_not_null(bc);
	cr_assert(bc->ca);
	cr_assert_eq(crit, 1);
	cr_assert_not_null(bc->pathlen);
	cr_assert_eq(ASN1_INTEGER_get(bc->pathlen), 0);
	BASIC_CONSTRAINTS_free(bc);
	cr_assert_eq(X509_get_key_usage(x), KU_KEY_CERT_SIGN | KU_CRL_SIGN);
	cr_assert_eq(X509_get_extension_flags(x) & EXFLAG_SS, EXFLAG_SS, "self-signed");

	char cn[128];
	cr_assert_gt(X509_NAME_get_text_by_NID(X509_get_subject_name(x), NID_commonName, cn,
					       sizeof cn), 0);
	cr_assert_str_eq(cn, "moat sandbox CA box1");

	/* EC P-256, and the signature checks with its own key */
	EVP_PKEY *pub = X509_get0_pubkey(x);
	cr_assert_not_null(pub);
	cr_assert(EVP_PKEY_is_a(pub, "EC"));
	char group[32];
	size_t glen;
	cr_assert_eq(EVP_PKEY_get_group_name(pub, group, sizeof group, &glen), 1);
	cr_assert_str_eq(group, "prime256v1");
	cr_assert_eq(X509_verify(x, pub), 1);

	/* validity: started about an hour ago, ends in about 30 days */
	cr_assert_eq(X509_cmp_current_time(X509_get0_notBefore(x)), -1);
	cr_assert_eq(X509_cmp_time(X509_get0_notBefore(x), &(time_t){time(NULL) - 3500}), -1);
	long left = gtls_days_left(X509_get0_notAfter(x));
	cr_assert(left >= 29 && left <= 30, "CA valid for %ld more days", left);

	/* serial: random, at most 128 bits (and >64 unless very unlucky) */
	BIGNUM *bn = ASN1_INTEGER_to_BN(X509_get0_serialNumber(x), NULL);
	cr_assert_not_null(bn);
	cr_assert(BN_num_bits(bn) > 64 && BN_num_bits(bn) <= 128, "serial has %d bits",
		  BN_num_bits(bn));
	cr_assert(!BN_is_negative(bn));
	BN_free(bn);

	X509_free(x);
	gate_ca_free(ca);
}

Test(gate_tls, cas_are_distinct_and_names_sanitised)
{
	char longname[300];
	memset(longname, 'n', sizeof longname - 1);
	longname[sizeof longname - 1] = '\0';
	longname[3] = '\n';
	struct gate_ca *a = gtls_ca(longname);
	struct gate_ca *b = gtls_ca(NULL);
	cr_assert_str_neq(gate_ca_pem(a), gate_ca_pem(b));
	X509 *xa = gtls_parse_pem(gate_ca_pem(a));
	X509 *xb = gtls_parse_pem(gate_ca_pem(b));
	cr_assert_neq(ASN1_INTEGER_cmp(X509_get0_serialNumber(xa), X509_get0_serialNumber(xb)), 0);
	cr_assert_neq(EVP_PKEY_eq(X509_get0_pubkey(xa), X509_get0_pubkey(xb)), 1);
	char cn[128];
	int n = X509_NAME_get_text_by_NID(X509_get_subject_name(xa), NID_commonName, cn, sizeof cn);
	cr_assert_eq(n, 64, "CN cut to 64, got %d", n);
	cr_assert_eq(strncmp(cn, "moat sandbox CA nnn?nnn", 23), 0, "CN \"%s\"", cn);
	X509_free(xa);
	X509_free(xb);
	gate_ca_free(a);
	gate_ca_free(b);
}

/* ---- leaves ---- */

Test(gate_tls, leaf_for_name_verifies_with_san_and_eku)
{
	struct gate_ca *ca = gtls_ca("box");
	X509 *leaf = gtls_leaf(ca, "api.example.test");
	cr_assert_eq(gtls_verify(gate_ca_pem(ca), leaf, "api.example.test", false), X509_V_OK);
	cr_assert_eq(gtls_verify(gate_ca_pem(ca), leaf, "other.example.test", false),
		     X509_V_ERR_HOSTNAME_MISMATCH);

	gtls_assert_san(leaf, GEN_DNS, "api.example.test", 16);
	cr_assert_eq(X509_get_extended_key_usage(leaf), XKU_SSL_SERVER);
	cr_assert_eq(X509_check_ca(leaf), 0);
	cr_assert_eq(X509_get_key_usage(leaf), KU_DIGITAL_SIGNATURE);
	cr_assert_eq(X509_check_host(leaf, "api.example.test", 0, 0, NULL), 1);
	long left = gtls_days_left(X509_get0_notAfter(leaf));
	cr_assert(left >= 6 && left <= 7, "leaf valid for %ld more days", left);
	cr_assert_eq(X509_cmp_time(X509_get0_notBefore(leaf), &(time_t){time(NULL) - 3500}), -1);
	EVP_PKEY *pub = X509_get0_pubkey(leaf);
	char group[32];
	size_t glen;
	cr_assert_eq(EVP_PKEY_get_group_name(pub, group, sizeof group, &glen), 1);
	cr_assert_str_eq(group, "prime256v1");

	/* and not against some other CA */
	struct gate_ca *other = gtls_ca("other");
	cr_assert_neq(gtls_verify(gate_ca_pem(other), leaf, "api.example.test", false), X509_V_OK);
	gate_ca_free(other);
	X509_free(leaf);
	gate_ca_free(ca);
}

Test(gate_tls, leaf_for_ip_literal_has_ip_san)
{
	struct gate_ca *ca = gtls_ca("box");
	X509 *v4 = gtls_leaf(ca, "192.0.2.7");
	gtls_assert_san(v4, GEN_IPADD, "\xc0\x00\x02\x07", 4);
	cr_assert_eq(gtls_verify(gate_ca_pem(ca), v4, "192.0.2.7", true), X509_V_OK);
	cr_assert_eq(gtls_verify(gate_ca_pem(ca), v4, "192.0.2.8", true),
		     X509_V_ERR_IP_ADDRESS_MISMATCH);

	X509 *v6 = gtls_leaf(ca, "[2001:DB8::1]");
	gtls_assert_san(v6, GEN_IPADD,
			"\x20\x01\x0d\xb8\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01", 16);
	cr_assert_eq(gtls_verify(gate_ca_pem(ca), v6, "2001:db8::1", true), X509_V_OK);
	X509_free(v4);
	X509_free(v6);
	gate_ca_free(ca);
}

Test(gate_tls, leaf_for_long_name_has_no_cn_but_verifies)
{
	/* 4 labels of 63 = 255 is too long, so 3 of 63 + one of 10 */
	char host[256];
	snprintf(host, sizeof host, "%063d.%063d.%063d.abcdefghij", 0, 0, 0);
	cr_assert_eq(strlen(host), 202);
	struct gate_ca *ca = gtls_ca("box");
	X509 *leaf = gtls_leaf(ca, host);
	cr_assert_eq(X509_NAME_get_index_by_NID(X509_get_subject_name(leaf), NID_commonName, -1),
		     -1);
	cr_assert_eq(gtls_verify(gate_ca_pem(ca), leaf, host, false), X509_V_OK);
	X509_free(leaf);
	gate_ca_free(ca);
}

Test(gate_tls, leaf_cache_same_host_same_cert)
{
	struct gate_ca *ca = gtls_ca("box");
	X509 *a = gtls_leaf(ca, "api.example.test");
	X509 *b = gtls_leaf(ca, "api.example.test");
	/* case and a trailing dot do not make another host */
	X509 *c = gtls_leaf(ca, "API.Example.TEST.");
	X509 *d = gtls_leaf(ca, "www.example.test");
	cr_assert_eq(a, b, "same host, same cached certificate");
	cr_assert_eq(a, c);
	cr_assert_neq(a, d);
	cr_assert_neq(X509_cmp(a, d), 0);
	/* "::1" and "0::1" are one address */
	X509 *e6 = gtls_leaf(ca, "::1");
	X509 *f6 = gtls_leaf(ca, "0::1");
	cr_assert_eq(e6, f6);
	cr_assert_eq(gate_ca_cached(ca), 3);
	X509_free(a);
	X509_free(b);
	X509_free(c);
	X509_free(d);
	X509_free(e6);
	X509_free(f6);
	gate_ca_free(ca);
}

Test(gate_tls, leaf_cache_is_bounded_lru)
{
	struct gate_ca *ca = gtls_ca("box");
	X509 *first = gtls_leaf(ca, "h0.example.test");
	X509 *kept = gtls_leaf(ca, "h1.example.test");
	char host[64];
	for (int i = 2; i < GATE_CA_CACHE + 40; i++) {
		snprintf(host, sizeof host, "h%d.example.test", i);
		X509 *x = gtls_leaf(ca, host);
		X509_free(x);
		/* keep h1 recently used so it survives */
		x = gtls_leaf(ca, "h1.example.test");
		X509_free(x);
		cr_assert_leq(gate_ca_cached(ca), GATE_CA_CACHE);
	}
	cr_assert_eq(gate_ca_cached(ca), GATE_CA_CACHE);
	X509 *again = gtls_leaf(ca, "h0.example.test");
	cr_assert_neq(again, first, "h0 was evicted and minted anew");
	X509 *kept2 = gtls_leaf(ca, "h1.example.test");
	cr_assert_eq(kept2, kept, "recently used h1 stays cached");
	/* the evicted leaf is still valid for whoever holds it */
	cr_assert_eq(gtls_verify(gate_ca_pem(ca), first, "h0.example.test", false), X509_V_OK);
	X509_free(first);
	X509_free(kept);
	X509_free(again);
	X509_free(kept2);
	gate_ca_free(ca);
}

Test(gate_tls, bad_hosts_refused)
{
	struct gate_ca *ca = gtls_ca("box");
	struct moat_err e = {0};
	char toolong[300];
	memset(toolong, 'a', sizeof toolong - 1);
	toolong[sizeof toolong - 1] = '\0';
	char longlabel[80];
	memset(longlabel, 'b', 64);
	strcpy(longlabel + 64, ".test");
	const char *bad[] = {"",          "a b.test", "*.example.test", "foo..test",
			     ".foo.test", "foo.test..", "[192.0.2.1]", "[::1",
			     "evil.test,DNS:bank.test", "x\ny.test", toolong, longlabel};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		memset(&e, 0, sizeof e);
		SSL *ssl = gate_ca_server_ssl(ca, bad[i], &e);
		cr_assert_null(ssl, "host \"%s\" accepted", bad[i]);
		cr_assert_eq(e.kind, MOAT_E_USAGE);
		gtls_assert_has(e.msg, "TLS host name");
	}
	cr_assert_null(gate_ca_server_ssl(ca, NULL, &e));
	cr_assert_eq(gate_ca_cached(ca), 0);
	gate_ca_free(ca);
}

/* ---- the sandbox side: a client trusting only the sandbox CA ---- */

static const unsigned char gtls_h2_http11[] = "\x02h2\x08http/1.1";

Test(gate_tls, server_handshake_trusting_ca_succeeds)
{
	struct gate_ca *ca = gtls_ca("box");
	struct moat_err e = {0};
	SSL *s = gate_ca_server_ssl(ca, "api.example.test", &e);
	cr_assert_not_null(s, "%s", e.msg);
	cr_assert_eq(SSL_get_min_proto_version(s), TLS1_2_VERSION);
	/* the client would like h2: the gateway must pick http/1.1 */
	SSL *c = gtls_client(gate_ca_pem(ca), "api.example.test", gtls_h2_http11,
			     sizeof gtls_h2_http11 - 1);
	cr_assert(gtls_handshake(c, s), "handshake failed: %s",
		  X509_verify_cert_error_string(SSL_get_verify_result(c)));
	cr_assert_eq(SSL_get_verify_result(c), X509_V_OK);
	gtls_assert_alpn(c, "http/1.1");
	gtls_assert_alpn(s, "http/1.1");
	gtls_exchange(c, s);
	SSL_free(c);
	SSL_free(s);
	gate_ca_free(ca);
}

Test(gate_tls, server_handshake_wrong_hostname_fails)
{
	struct gate_ca *ca = gtls_ca("box");
	struct moat_err e = {0};
	SSL *s = gate_ca_server_ssl(ca, "api.example.test", &e);
	cr_assert_not_null(s, "%s", e.msg);
	SSL *c = gtls_client(gate_ca_pem(ca), "bank.example.test", NULL, 0);
	cr_assert_not(gtls_handshake(c, s));
	cr_assert_eq(SSL_get_verify_result(c), X509_V_ERR_HOSTNAME_MISMATCH);
	SSL_free(c);
	SSL_free(s);
	gate_ca_free(ca);
}

Test(gate_tls, server_handshake_other_sandbox_ca_fails)
{
	/* one sandbox's CA must not vouch for another sandbox's leaves */
	struct gate_ca *ca = gtls_ca("a");
	struct gate_ca *other = gtls_ca("b");
	struct moat_err e = {0};
	SSL *s = gate_ca_server_ssl(ca, "api.example.test", &e);
	cr_assert_not_null(s, "%s", e.msg);
	SSL *c = gtls_client(gate_ca_pem(other), "api.example.test", NULL, 0);
	cr_assert_not(gtls_handshake(c, s));
	cr_assert_eq(SSL_get_verify_result(c), X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY);
	SSL_free(c);
	SSL_free(s);
	gate_ca_free(other);
	gate_ca_free(ca);
}

Test(gate_tls, server_alpn_h2_only_client_gets_none)
{
	static const unsigned char h2[] = "\x02h2";
	struct gate_ca *ca = gtls_ca("box");
	struct moat_err e = {0};
	SSL *s = gate_ca_server_ssl(ca, "api.example.test", &e);
	cr_assert_not_null(s, "%s", e.msg);
	SSL *c = gtls_client(gate_ca_pem(ca), "api.example.test", h2, sizeof h2 - 1);
	cr_assert(gtls_handshake(c, s));
	gtls_assert_alpn(c, NULL);
	SSL_free(c);
	SSL_free(s);
	gate_ca_free(ca);
}

Test(gate_tls, server_handshake_ip_literal)
{
	struct gate_ca *ca = gtls_ca("box");
	struct moat_err e = {0};
	SSL *s = gate_ca_server_ssl(ca, "127.0.0.1", &e);
	cr_assert_not_null(s, "%s", e.msg);
	SSL *c = gtls_client(gate_ca_pem(ca), "localhost", NULL, 0);
	X509_VERIFY_PARAM *p = SSL_get0_param(c);
	cr_assert_eq(X509_VERIFY_PARAM_set1_host(p, NULL, 0), 1);
	cr_assert_eq(X509_VERIFY_PARAM_set1_ip_asc(p, "127.0.0.1"), 1);
	cr_assert(gtls_handshake(c, s), "%s", X509_verify_cert_error_string(SSL_get_verify_result(c)));
	SSL_free(c);
	SSL_free(s);
	gate_ca_free(ca);
}

/* ---- the upstream side: gate_tls_client_ssl against a real-style server ---- */

struct gtls_up {
	struct gtls_pki ca;
	char ca_path[64];
	struct gate_tls *tls;
};

static void gtls_up_init(struct gtls_up *u)
{
	u->ca = gtls_make(NULL, "test upstream CA", NULL);
	gtls_write_pem(u->ca.cert, u->ca_path);
	struct moat_err e = {0};
	u->tls = gate_tls_new(u->ca_path, &e);
	cr_assert_not_null(u->tls, "gate_tls_new: %s", e.msg);
}

static void gtls_up_fini(struct gtls_up *u)
{
	gate_tls_free(u->tls);
	unlink(u->ca_path);
	gtls_pki_free(&u->ca);
}

/* Handshake gate_tls_client_ssl(host) with a server presenting leaf. On
 * return *verify holds the client's verification result and sni what the
 * server saw (needs 256 bytes). */
static bool gtls_up_connect(struct gtls_up *u, const char *host, const struct gtls_pki *leaf,
			    long *verify, char *sni, char *alpn)
{
	struct moat_err e = {0};
	SSL *c = gate_tls_client_ssl(u->tls, host, &e);
	cr_assert_not_null(c, "gate_tls_client_ssl: %s", e.msg);
	cr_assert_eq(SSL_get_min_proto_version(c), TLS1_2_VERSION);
	cr_assert_eq(SSL_get_verify_mode(c) & SSL_VERIFY_PEER, SSL_VERIFY_PEER);
	SSL *s = gtls_server(leaf);
	bool ok = gtls_handshake(c, s);
	*verify = SSL_get_verify_result(c);
	const char *name = SSL_get_servername(s, TLSEXT_NAMETYPE_host_name);
	snprintf(sni, 256, "%s", name ? name : "");
	const unsigned char *p;
	unsigned int n;
	SSL_get0_alpn_selected(c, &p, &n);
	snprintf(alpn, 32, "%.*s", (int)n, p ? (const char *)p : "");
	if (ok)
		gtls_exchange(c, s);
	else
		cr_assert_str_neq(gate_tls_verify_error(c), "ok");
	SSL_free(c);
	SSL_free(s);
	return ok;
}

Test(gate_tls, client_upstream_verified_ok)
{
	struct gtls_up u;
	gtls_up_init(&u);
	struct gtls_pki leaf = gtls_make(&u.ca, "up.example.test", "DNS:up.example.test");
	long verify;
	char sni[256], alpn[32];
	cr_assert(gtls_up_connect(&u, "up.example.test", &leaf, &verify, sni, alpn),
		  "verify: %s", X509_verify_cert_error_string(verify));
	cr_assert_eq(verify, X509_V_OK);
	cr_assert_str_eq(sni, "up.example.test");
	/* the server prefers h2, but we only offered http/1.1 */
	cr_assert_str_eq(alpn, "http/1.1");
	/* a trailing dot and capitals are the same name; SNI goes without */
	cr_assert(gtls_up_connect(&u, "UP.example.test.", &leaf, &verify, sni, alpn));
	cr_assert_str_eq(sni, "up.example.test");
	gtls_pki_free(&leaf);
	gtls_up_fini(&u);
}

Test(gate_tls, client_upstream_wrong_name_fails)
{
	struct gtls_up u;
	gtls_up_init(&u);
	struct gtls_pki leaf = gtls_make(&u.ca, "other.example.test", "DNS:other.example.test");
	long verify;
	char sni[256], alpn[32];
	cr_assert_not(gtls_up_connect(&u, "up.example.test", &leaf, &verify, sni, alpn));
	cr_assert_eq(verify, X509_V_ERR_HOSTNAME_MISMATCH);
	gtls_pki_free(&leaf);
	/* nor may a wildcard cover a name one level further down */
	leaf = gtls_make(&u.ca, "wild", "DNS:*.example.test");
	cr_assert_not(gtls_up_connect(&u, "a.up.example.test", &leaf, &verify, sni, alpn));
	cr_assert_eq(verify, X509_V_ERR_HOSTNAME_MISMATCH);
	cr_assert(gtls_up_connect(&u, "up.example.test", &leaf, &verify, sni, alpn));
	gtls_pki_free(&leaf);
	gtls_up_fini(&u);
}

Test(gate_tls, client_upstream_other_ca_fails)
{
	struct gtls_up u;
	gtls_up_init(&u);
	struct gtls_pki rogue = gtls_make(NULL, "rogue CA", NULL);
	struct gtls_pki leaf = gtls_make(&rogue, "up.example.test", "DNS:up.example.test");
	long verify;
	char sni[256], alpn[32];
	cr_assert_not(gtls_up_connect(&u, "up.example.test", &leaf, &verify, sni, alpn));
	cr_assert_eq(verify, X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY);
	gtls_pki_free(&leaf);
	/* nor a self-signed certificate with the right name */
	struct gtls_pki self = gtls_make(NULL, "up.example.test", NULL);
	cr_assert_not(gtls_up_connect(&u, "up.example.test", &self, &verify, sni, alpn));
	cr_assert_neq(verify, X509_V_OK);
	gtls_pki_free(&self);
	gtls_pki_free(&rogue);
	gtls_up_fini(&u);
}

Test(gate_tls, client_upstream_ip_literal_no_sni)
{
	struct gtls_up u;
	gtls_up_init(&u);
	struct gtls_pki leaf = gtls_make(&u.ca, "ip", "IP:127.0.0.1");
	long verify;
	char sni[256], alpn[32];
	cr_assert(gtls_up_connect(&u, "127.0.0.1", &leaf, &verify, sni, alpn), "verify: %s",
		  X509_verify_cert_error_string(verify));
	cr_assert_str_eq(sni, "", "no SNI for an IP literal");
	cr_assert_not(gtls_up_connect(&u, "127.0.0.2", &leaf, &verify, sni, alpn));
	cr_assert_eq(verify, X509_V_ERR_IP_ADDRESS_MISMATCH);
	gtls_pki_free(&leaf);
	gtls_up_fini(&u);
}

Test(gate_tls, client_refuses_tls11_server)
{
	struct gtls_up u;
	gtls_up_init(&u);
	struct gtls_pki leaf = gtls_make(&u.ca, "up.example.test", "DNS:up.example.test");
	struct moat_err e = {0};
	SSL *c = gate_tls_client_ssl(u.tls, "up.example.test", &e);
	cr_assert_not_null(c, "%s", e.msg);
	SSL *s = gtls_server(&leaf);
	/* a server that would speak TLS 1.1 at most, even at security level 0 */
	SSL_set_security_level(s, 0);
	cr_assert_eq(SSL_set_max_proto_version(s, TLS1_1_VERSION), 1);
	cr_assert_not(gtls_handshake(c, s));
	SSL_free(c);
	SSL_free(s);
	gtls_pki_free(&leaf);
	gtls_up_fini(&u);
}

Test(gate_tls, client_bad_inputs)
{
	struct moat_err e = {0};
	cr_assert_null(gate_tls_new("/nonexistent/moat-ca.pem", &e));
	gtls_assert_has(e.msg, "/nonexistent/moat-ca.pem");

	/* a file that is not PEM at all */
	char path[] = "/tmp/moat-test-junk-XXXXXX";
	int fd = mkstemp(path);
	cr_assert_geq(fd, 0);
	cr_assert_eq(write(fd, "junk\n", 5), 5);
	cr_assert_eq(close(fd), 0);
	memset(&e, 0, sizeof e);
	cr_assert_null(gate_tls_new(path, &e));
	gtls_assert_has(e.msg, path);
	unlink(path);
	cr_assert_eq(ERR_peek_error(), 0, "OpenSSL error queue left non-empty");

	/* the system store loads */
	struct gate_tls *t = gate_tls_new(NULL, &e);
	cr_assert_not_null(t, "%s", e.msg);
	memset(&e, 0, sizeof e);
	cr_assert_null(gate_tls_client_ssl(t, "bad host", &e));
	gtls_assert_has(e.msg, "not a valid TLS host name");
	gate_tls_free(t);
	gate_tls_free(NULL);
	gate_ca_free(NULL);
}
