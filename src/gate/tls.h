/* TLS for the egress gateway (pure OpenSSL; the connection code wraps the
 * SSL objects returned here in bufferevent_openssl).
 *
 * Two sides of an intercepted HTTPS connection:
 *  - towards the sandbox, the gateway impersonates the real server with a
 *    leaf certificate minted for the requested host and signed by a CA that
 *    exists only for that sandbox (gate_ca); the sandbox trusts that CA
 *    through SSL_CERT_FILE and friends;
 *  - towards the real server, an ordinary TLS client with full certificate
 *    and host name verification (gate_tls).
 * Both sides offer only http/1.1 in ALPN, so the gateway can read requests.
 *
 * Not thread-safe: a gate_ca and its leaf cache belong to one event loop.
 * Errors are reported through struct moat_err; the OpenSSL error queue is
 * left empty on return so it cannot confuse later SSL_get_error() calls. */
#ifndef MOAT_GATE_TLS_H
#define MOAT_GATE_TLS_H

#include <moat/err.h>

#include <openssl/ssl.h>
#include <stddef.h>

struct gate_tls; /* process-wide: the upstream (client) SSL_CTX */
struct gate_ca;  /* one per sandbox */

/* Leaves kept per CA (least recently used is dropped first). */
#define GATE_CA_CACHE 256

/* upstream_ca: PEM file of trusted CAs for upstream connections, or NULL
 * for the system store. TLS 1.2+ only. */
struct gate_tls *gate_tls_new(const char *upstream_ca, struct moat_err *e);
void gate_tls_free(struct gate_tls *t);

/* A fresh CA: EC P-256 key, self-signed X.509 v3 certificate (CA:TRUE
 * critical with pathlen 0; keyUsage keyCertSign, cRLSign), CN
 * "moat sandbox CA <name>" (cut to fit 64 characters), random 128-bit
 * serial, valid from now-1h to now+30 days. The private key is never
 * written anywhere. */
struct gate_ca *gate_ca_new(const char *name, struct moat_err *e);
/* The CA certificate, PEM, NUL-terminated; lives as long as ca. */
const char *gate_ca_pem(const struct gate_ca *ca);
void gate_ca_free(struct gate_ca *ca);

/* A server-side SSL (accept state) for the sandbox's side of an intercepted
 * connection, presenting a leaf for host signed by ca: EC P-256,
 * subjectAltName DNS (or IP for an IP literal, "[v6]" accepted), EKU
 * serverAuth, valid now-1h..now+7d. Host names are compared case-
 * insensitively and without a trailing dot. Leaves are cached in ca (at
 * most GATE_CA_CACHE) and re-minted a day before they expire. ALPN: only
 * http/1.1 is ever selected (a client offering only other protocols gets
 * no ALPN). The caller owns the SSL. */
SSL *gate_ca_server_ssl(struct gate_ca *ca, const char *host, struct moat_err *e);

/* Number of leaves currently cached (for tests and stats). */
size_t gate_ca_cached(const struct gate_ca *ca);

/* A client-side SSL (connect state) to the real upstream: SNI = host
 * (not for IP literals), host name or IP verification, SSL_VERIFY_PEER,
 * ALPN http/1.1 only. The caller owns the SSL. */
SSL *gate_tls_client_ssl(struct gate_tls *t, const char *host, struct moat_err *e);

/* Why certificate verification failed on ssl (for logs), e.g.
 * "hostname mismatch"; "ok" when it did not. */
const char *gate_tls_verify_error(const SSL *ssl);

#endif
