/* TLS for the egress gateway: see tls.h. */
#define _GNU_SOURCE
#include "gate/tls.h"

#include "base/util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#define HOST_MAX 253         /* longest DNS name, without the trailing dot */
#define LABEL_MAX 63
#define CN_MAX 64            /* ub-common-name: longer CNs do not encode */
#define CA_LIFE (30L * 86400)
#define LEAF_LIFE (7L * 86400)
/* Re-mint a cached leaf a day before it expires, so a connection made just
 * before the refresh still has a day of validity. */
#define LEAF_REFRESH (LEAF_LIFE - 86400)
#define BACKDATE 3600 /* tolerate clocks (ours or the sandbox's) a bit behind */

/* ALPN wire format: length-prefixed protocol names. */
static const unsigned char alpn_http11[] = "\x08http/1.1";

struct gate_tls {
	SSL_CTX *ctx;
};

struct gate_leaf {
	char *host; /* normalised (see host_parse) */
	X509 *cert;
	time_t made;
	unsigned long long used; /* LRU tick */
};

struct gate_ca {
	EVP_PKEY *key; /* signs leaves only, never used in a handshake */
	X509 *cert;
	char *pem;
	/* One key for all of this CA's leaves: they all live in this process
	 * anyway, and a key per host would only cost time. */
	EVP_PKEY *leaf_key;
	SSL_CTX *srv;
	struct gate_leaf leaves[GATE_CA_CACHE];
	size_t nleaves;
	unsigned long long tick;
};

/* A host as the gateway got it, in the form used for SNI, verification,
 * certificates and the cache key. */
struct gate_host {
	char name[HOST_MAX + 1]; /* lower case, no trailing dot; IPs canonical */
	size_t iplen;            /* 4 or 16 for an IP literal, else 0 */
	unsigned char ip[16];
};

/* Fill e from the first entry of OpenSSL's error queue (the root cause;
 * later entries are the callers' generic wrappers) and empty the queue, so
 * stale entries cannot be mistaken for the next operation's failure. */
__attribute__((format(printf, 2, 3))) static int tls_err(struct moat_err *e, const char *fmt, ...)
{
	char what[512];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(what, sizeof what, fmt, ap);
	va_end(ap);
	if (n < 0)
		what[0] = '\0';
	unsigned long code = ERR_get_error();
	ERR_clear_error();
	if (code && ERR_SYSTEM_ERROR(code))
		return moat_err_set(e, MOAT_E_SYSTEM, ERR_GET_REASON(code), "%s", what);
	const char *why = code ? ERR_reason_error_string(code) : NULL;
	return moat_err_set(e, MOAT_E_SYSTEM, 0, "%s: %s", what, why ? why : "OpenSSL error");
}

static bool is_alnum(unsigned char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

/* Accept a DNS name (letters, digits, '-', '_'; labels 1..63; one trailing
 * dot ignored), an IPv4 literal, or an IPv6 literal with or without
 * brackets. Anything else is refused rather than put into a certificate. */
static int host_parse(const char *host, struct gate_host *h, struct moat_err *e)
{
	char shown[MOAT_SHOWN_CAP];
	char buf[HOST_MAX + 3];
	memset(h, 0, sizeof *h);
	if (!host || !*host)
		return moat_err_set(e, MOAT_E_USAGE, 0, "TLS host name is empty");
	size_t len = strnlen(host, sizeof buf);
	if (len >= sizeof buf)
		return moat_err_set(e, MOAT_E_USAGE, 0, "TLS host name \"%s\" is too long",
				    moat_show(shown, host, len));
	memcpy(buf, host, len + 1);

	char *p = buf;
	bool bracket = p[0] == '[';
	if (bracket) {
		if (len < 3 || p[len - 1] != ']')
			goto bad;
		p[len - 1] = '\0';
		p++;
	}
	if (inet_pton(AF_INET6, p, h->ip) == 1) {
		h->iplen = 16;
	} else if (!bracket && inet_pton(AF_INET, p, h->ip) == 1) {
		h->iplen = 4;
	} else if (bracket) {
		goto bad;
	}
	if (h->iplen) {
		/* canonical text, so "::1" and "0::1" share a cache entry */
		if (!inet_ntop(h->iplen == 16 ? AF_INET6 : AF_INET, h->ip, h->name, sizeof h->name))
			goto bad;
		return 0;
	}

	size_t n = strlen(p);
	if (n && p[n - 1] == '.')
		p[--n] = '\0';
	if (n == 0 || n > HOST_MAX)
		goto bad;
	size_t label = 0;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)p[i];
		if (c == '.') {
			if (label == 0)
				goto bad;
			label = 0;
		} else if (is_alnum(c) || c == '-' || c == '_') {
			if (++label > LABEL_MAX)
				goto bad;
		} else {
			goto bad;
		}
		h->name[i] = (c >= 'A' && c <= 'Z') ? (char)(c - 'A' + 'a') : (char)c;
	}
	if (label == 0)
		goto bad;
	h->name[n] = '\0';
	return 0;
bad:
	return moat_err_set(e, MOAT_E_USAGE, 0, "\"%s\" is not a valid TLS host name",
			    moat_show(shown, host, len));
}

static int rand_serial(X509 *x)
{
	unsigned char b[16];
	if (RAND_bytes(b, sizeof b) != 1)
		return -1;
	BIGNUM *bn = BN_bin2bn(b, sizeof b, NULL);
	if (!bn)
		return -1;
	/* serials must be positive; zero is vanishingly unlikely but illegal */
	int ok = (!BN_is_zero(bn) || BN_one(bn)) &&
		 BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(x)) != NULL;
	BN_free(bn);
	return ok ? 0 : -1;
}

/* The fields every certificate here shares. issuer NULL: self-signed. */
static X509 *cert_new(EVP_PKEY *pub, X509 *issuer, const char *cn, long life_s)
{
	X509 *x = X509_new();
	if (!x)
		return NULL;
	X509_NAME *subj = X509_get_subject_name(x);
	/* O=moat so the certificate is recognisable in any trust store view,
	 * and the subject is never empty (RFC 5280 4.1.2.6) */
	bool ok = X509_set_version(x, X509_VERSION_3) == 1 && rand_serial(x) == 0 &&
		  X509_gmtime_adj(X509_getm_notBefore(x), -BACKDATE) &&
		  X509_gmtime_adj(X509_getm_notAfter(x), life_s) &&
		  X509_set_pubkey(x, pub) == 1 &&
		  X509_NAME_add_entry_by_txt(subj, "O", MBSTRING_ASC,
					     (const unsigned char *)"moat", -1, -1, 0) == 1 &&
		  (!cn || X509_NAME_add_entry_by_txt(subj, "CN", MBSTRING_ASC,
						     (const unsigned char *)cn, -1, -1, 0) == 1) &&
		  X509_set_issuer_name(x, issuer ? X509_get_subject_name(issuer) : subj) == 1;
	if (!ok) {
		X509_free(x);
		return NULL;
	}
	return x;
}

/* Add one extension written in openssl.cnf syntax (constant strings only:
 * nothing from the sandbox goes through this parser). */
static int cert_ext(X509 *x, X509 *issuer, int nid, const char *value)
{
	X509V3_CTX ctx;
	X509V3_set_ctx(&ctx, issuer ? issuer : x, x, NULL, NULL, 0);
	X509_EXTENSION *ext = X509V3_EXT_nconf_nid(NULL, &ctx, nid, value);
	if (!ext)
		return -1;
	int ok = X509_add_ext(x, ext, -1);
	X509_EXTENSION_free(ext);
	return ok == 1 ? 0 : -1;
}

/* subjectAltName built directly rather than from "DNS:..." text, so no
 * host can inject extra names through the config syntax. */
static int cert_san(X509 *x, const struct gate_host *h)
{
	GENERAL_NAMES *gens = GENERAL_NAMES_new();
	GENERAL_NAME *gen = GENERAL_NAME_new();
	ASN1_STRING *s = h->iplen ? ASN1_OCTET_STRING_new() : ASN1_IA5STRING_new();
	int ok = 0;
	if (!gens || !gen || !s)
		goto out;
	if (h->iplen ? ASN1_OCTET_STRING_set(s, h->ip, (int)h->iplen) != 1
		     : ASN1_STRING_set(s, h->name, -1) != 1)
		goto out;
	GENERAL_NAME_set0_value(gen, h->iplen ? GEN_IPADD : GEN_DNS, s);
	s = NULL;
	if (!sk_GENERAL_NAME_push(gens, gen))
		goto out;
	gen = NULL;
	ok = X509_add1_ext_i2d(x, NID_subject_alt_name, gens, 0, X509V3_ADD_DEFAULT) == 1;
out:
	ASN1_STRING_free(s);
	GENERAL_NAME_free(gen);
	GENERAL_NAMES_free(gens);
	return ok ? 0 : -1;
}

static char *cert_pem(X509 *x)
{
	BIO *b = BIO_new(BIO_s_mem());
	char *out = NULL;
	char *data;
	if (b && PEM_write_bio_X509(b, x) == 1) {
		long n = BIO_get_mem_data(b, &data);
		if (n > 0 && (out = malloc((size_t)n + 1))) {
			memcpy(out, data, (size_t)n);
			out[n] = '\0';
		}
	}
	BIO_free(b);
	return out;
}

/* ---- upstream client ---- */

struct gate_tls *gate_tls_new(const char *upstream_ca, struct moat_err *e)
{
	struct gate_tls *t = calloc(1, sizeof *t);
	if (!t) {
		moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "upstream TLS context");
		return NULL;
	}
	t->ctx = SSL_CTX_new(TLS_client_method());
	if (!t->ctx) {
		tls_err(e, "creating the upstream TLS context");
		goto fail;
	}
	if (SSL_CTX_set_min_proto_version(t->ctx, TLS1_2_VERSION) != 1) {
		tls_err(e, "upstream TLS: setting TLS 1.2 as the minimum");
		goto fail;
	}
	if (upstream_ca) {
		if (SSL_CTX_load_verify_locations(t->ctx, upstream_ca, NULL) != 1) {
			tls_err(e, "loading upstream CA file %s", upstream_ca);
			goto fail;
		}
	} else if (SSL_CTX_set_default_verify_paths(t->ctx) != 1) {
		tls_err(e, "loading the system's trusted CAs");
		goto fail;
	}
	SSL_CTX_set_verify(t->ctx, SSL_VERIFY_PEER, NULL);
	/* we parse what flows through: h2 must not be negotiated upstream
	 * (note: this setter returns 0 on success) */
	if (SSL_CTX_set_alpn_protos(t->ctx, alpn_http11, sizeof alpn_http11 - 1) != 0) {
		tls_err(e, "upstream TLS: setting ALPN");
		goto fail;
	}
	return t;
fail:
	gate_tls_free(t);
	return NULL;
}

void gate_tls_free(struct gate_tls *t)
{
	if (!t)
		return;
	SSL_CTX_free(t->ctx);
	free(t);
}

SSL *gate_tls_client_ssl(struct gate_tls *t, const char *host, struct moat_err *e)
{
	struct gate_host h;
	if (host_parse(host, &h, e) < 0)
		return NULL;
	SSL *ssl = SSL_new(t->ctx);
	if (!ssl) {
		tls_err(e, "upstream TLS to %s", h.name);
		return NULL;
	}
	X509_VERIFY_PARAM *param = SSL_get0_param(ssl);
	if (h.iplen) {
		/* RFC 6066: SNI carries host names only, never addresses */
		if (X509_VERIFY_PARAM_set1_ip_asc(param, h.name) != 1) {
			tls_err(e, "upstream TLS to %s: setting the address to verify", h.name);
			goto fail;
		}
	} else {
		if (SSL_set_tlsext_host_name(ssl, h.name) != 1) {
			tls_err(e, "upstream TLS to %s: setting SNI", h.name);
			goto fail;
		}
		/* "*.example.com" matches, "f*.example.com" does not */
		X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
		if (X509_VERIFY_PARAM_set1_host(param, h.name, 0) != 1) {
			tls_err(e, "upstream TLS to %s: setting the name to verify", h.name);
			goto fail;
		}
	}
	SSL_set_verify(ssl, SSL_VERIFY_PEER, NULL);
	SSL_set_connect_state(ssl);
	return ssl;
fail:
	SSL_free(ssl);
	return NULL;
}

const char *gate_tls_verify_error(const SSL *ssl)
{
	return X509_verify_cert_error_string(SSL_get_verify_result(ssl));
}

/* ---- per-sandbox CA ---- */

/* Pick http/1.1 if the client offers it; otherwise no ALPN at all (rather
 * than a fatal alert), so the client falls back to HTTP/1.1 or, if it
 * insists on h2, fails in the gateway's request parser with a clear error. */
static int alpn_select(SSL *ssl, const unsigned char **out, unsigned char *outlen,
		       const unsigned char *in, unsigned int inlen, void *arg)
{
	unsigned int i = 0;
	while (i < inlen) {
		unsigned int n = in[i];
		if (n > inlen - i - 1)
			break; /* malformed list: OpenSSL checks, but do not trust it */
		if (n == sizeof alpn_http11 - 2 && memcmp(in + i + 1, alpn_http11 + 1, n) == 0) {
			*out = in + i + 1;
			*outlen = (unsigned char)n;
			return SSL_TLSEXT_ERR_OK;
		}
		i += 1 + n;
	}
	return SSL_TLSEXT_ERR_NOACK;
}

static SSL_CTX *server_ctx(struct moat_err *e)
{
	SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
	if (!ctx) {
		tls_err(e, "creating the sandbox-side TLS context");
		return NULL;
	}
	if (SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) != 1) {
		tls_err(e, "sandbox-side TLS: setting TLS 1.2 as the minimum");
		SSL_CTX_free(ctx);
		return NULL;
	}
	/* No resumption: sessions would be shared across all impersonated
	 * hosts, and a full handshake on loopback is cheap. No renegotiation:
	 * a client could make us burn CPU with it. */
	SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
	SSL_CTX_set_options(ctx, SSL_OP_NO_TICKET | SSL_OP_NO_RENEGOTIATION);
	if (SSL_CTX_set_num_tickets(ctx, 0) != 1) {
		tls_err(e, "sandbox-side TLS: disabling session tickets");
		SSL_CTX_free(ctx);
		return NULL;
	}
	SSL_CTX_set_alpn_select_cb(ctx, alpn_select, NULL);
	return ctx;
}

struct gate_ca *gate_ca_new(const char *name, struct moat_err *e)
{
	struct gate_ca *ca = calloc(1, sizeof *ca);
	if (!ca) {
		moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "sandbox CA");
		return NULL;
	}
	/* The name comes from the user: keep printable ASCII only, and cut
	 * the CN to the 64 characters X.509 allows. */
	char cn[CN_MAX + 1];
	int n = snprintf(cn, sizeof cn, "moat sandbox CA %s", name ? name : "");
	if (n < 0) {
		moat_err_set(e, MOAT_E_SYSTEM, 0, "sandbox CA: formatting its name");
		goto fail;
	}
	for (char *c = cn; *c; c++)
		if ((unsigned char)*c < 0x20 || (unsigned char)*c > 0x7e)
			*c = '?';

	ca->key = EVP_EC_gen("P-256");
	ca->leaf_key = EVP_EC_gen("P-256");
	if (!ca->key || !ca->leaf_key) {
		tls_err(e, "sandbox CA: generating an EC P-256 key");
		goto fail;
	}
	ca->cert = cert_new(ca->key, NULL, cn, CA_LIFE);
	if (!ca->cert || cert_ext(ca->cert, NULL, NID_basic_constraints, "critical,CA:TRUE,pathlen:0") ||
	    cert_ext(ca->cert, NULL, NID_key_usage, "critical,keyCertSign,cRLSign") ||
	    /* SKI: required of CAs by strict verifiers (Python 3.13's default) */
	    cert_ext(ca->cert, NULL, NID_subject_key_identifier, "hash") ||
	    X509_sign(ca->cert, ca->key, EVP_sha256()) <= 0) {
		tls_err(e, "sandbox CA: making its certificate");
		goto fail;
	}
	ca->pem = cert_pem(ca->cert);
	if (!ca->pem) {
		tls_err(e, "sandbox CA: writing its certificate as PEM");
		goto fail;
	}
	ca->srv = server_ctx(e);
	if (!ca->srv)
		goto fail;
	return ca;
fail:
	gate_ca_free(ca);
	return NULL;
}

const char *gate_ca_pem(const struct gate_ca *ca)
{
	return ca->pem;
}

size_t gate_ca_cached(const struct gate_ca *ca)
{
	return ca->nleaves;
}

void gate_ca_free(struct gate_ca *ca)
{
	if (!ca)
		return;
	for (size_t i = 0; i < ca->nleaves; i++) {
		free(ca->leaves[i].host);
		X509_free(ca->leaves[i].cert);
	}
	SSL_CTX_free(ca->srv);
	free(ca->pem);
	X509_free(ca->cert);
	EVP_PKEY_free(ca->leaf_key);
	EVP_PKEY_free(ca->key);
	free(ca);
}

static X509 *leaf_mint(struct gate_ca *ca, const struct gate_host *h, struct moat_err *e)
{
	/* a longer name cannot be a CN; the SAN is what clients check anyway */
	const char *cn = strlen(h->name) <= CN_MAX ? h->name : NULL;
	X509 *x = cert_new(ca->leaf_key, ca->cert, cn, LEAF_LIFE);
	if (!x || cert_ext(x, ca->cert, NID_basic_constraints, "critical,CA:FALSE") ||
	    cert_ext(x, ca->cert, NID_key_usage, "critical,digitalSignature") ||
	    cert_ext(x, ca->cert, NID_ext_key_usage, "serverAuth") ||
	    cert_ext(x, ca->cert, NID_subject_key_identifier, "hash") ||
	    cert_ext(x, ca->cert, NID_authority_key_identifier, "keyid:always") ||
	    cert_san(x, h) || X509_sign(x, ca->key, EVP_sha256()) <= 0) {
		tls_err(e, "certificate for %s", h->name);
		X509_free(x);
		return NULL;
	}
	return x;
}

/* The cached leaf for h (borrowed), minting one on a miss or when the
 * cached one is near expiry, and evicting the least recently used when the
 * cache is full. Evicting is safe while connections still use the leaf:
 * each SSL holds its own reference. */
static X509 *leaf_get(struct gate_ca *ca, const struct gate_host *h, struct moat_err *e)
{
	time_t now = time(NULL);
	struct gate_leaf *slot = NULL;
	for (size_t i = 0; i < ca->nleaves; i++) {
		if (strcmp(ca->leaves[i].host, h->name) == 0) {
			slot = &ca->leaves[i];
			break;
		}
	}
	/* a clock set back also counts as stale */
	if (slot && now >= slot->made && now - slot->made < LEAF_REFRESH) {
		slot->used = ++ca->tick;
		return slot->cert;
	}
	X509 *x = leaf_mint(ca, h, e);
	if (!x)
		return NULL;
	if (!slot) {
		char *key = strdup(h->name);
		if (!key) {
			X509_free(x);
			moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "certificate cache");
			return NULL;
		}
		if (ca->nleaves < GATE_CA_CACHE) {
			slot = &ca->leaves[ca->nleaves++];
		} else {
			slot = &ca->leaves[0];
			for (size_t i = 1; i < ca->nleaves; i++)
				if (ca->leaves[i].used < slot->used)
					slot = &ca->leaves[i];
			free(slot->host);
		}
		slot->host = key;
	}
	X509_free(slot->cert);
	slot->cert = x;
	slot->made = now;
	slot->used = ++ca->tick;
	return x;
}

SSL *gate_ca_server_ssl(struct gate_ca *ca, const char *host, struct moat_err *e)
{
	struct gate_host h;
	if (host_parse(host, &h, e) < 0)
		return NULL;
	X509 *leaf = leaf_get(ca, &h, e);
	if (!leaf)
		return NULL;
	SSL *ssl = SSL_new(ca->srv);
	if (!ssl) {
		tls_err(e, "sandbox-side TLS for %s", h.name);
		return NULL;
	}
	if (SSL_use_certificate(ssl, leaf) != 1 || SSL_use_PrivateKey(ssl, ca->leaf_key) != 1) {
		tls_err(e, "sandbox-side TLS for %s: installing the certificate", h.name);
		SSL_free(ssl);
		return NULL;
	}
	SSL_set_accept_state(ssl);
	return ssl;
}
