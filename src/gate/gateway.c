/* The egress gateway: see gateway.h.
 *
 * One connection's life: accept on the sandbox's listener -> read the
 * request head (HTTP) or handshake (SOCKS5), with a deadline -> decide the
 * name (policy) -> resolve (pins, IP literals, else async DNS) -> decide
 * each address (special ones refused unless allowed) -> connect -> answer
 * the client -> (CONNECT: check the TLS SNI against the host; secrets:
 * intercept TLS) -> relay both ways with back-pressure -> log. */
#define _GNU_SOURCE
#include "gate/gateway.h"

#include "gate/addr.h"
#include "gate/conn.h"
#include "gate/http_head.h"
#include "gate/sni.h"
#include "gate/socks5.h"
#include "gate/tls.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/dns.h>
#include <event2/listener.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define RELAY_HIGH (1u << 20) /* bytes queued for a slow peer before we stop reading */

struct secret {
	char *placeholder, *value;
	char **hosts;
	size_t nhosts;
};

struct refusal {
	char *dest, *reason;
};

struct gate {
	struct event_base *base;
	struct evdns_base *dns;
	struct gate_tls *tls;
};

struct gate_box {
	struct gate *g;
	char *name;
	struct gate_policy *pol;
	struct gate_limits lim;
	FILE *log;
	struct evconnlistener *http, *socks;
	unsigned conns;
	uint64_t bytes;
	struct secret *secrets;
	size_t nsecrets;
	struct refusal *refused;
	size_t nrefused;
	struct gate_ca *ca;
	struct gate_conn *all; /* live connections, for free */
	const struct gate_policy *ceiling;
};

void gate_box_set_ceiling(struct gate_box *b, const struct gate_policy *ceiling)
{
	b->ceiling = ceiling;
}

const struct gate_policy *gate_ceiling(struct gate_box *b)
{
	return b->ceiling;
}

/* ---- helpers shared with conn.c ----------------------------------------- */

struct event_base *gate_base(struct gate_box *b)
{
	return b->g->base;
}

struct evdns_base *gate_dns(struct gate_box *b)
{
	return b->g->dns;
}

const struct gate_policy *gate_policy(struct gate_box *b)
{
	return b->pol;
}

const struct gate_limits *gate_limits(struct gate_box *b)
{
	return &b->lim;
}

struct gate_tls *gate_tls_of(struct gate_box *b)
{
	return b->g->tls;
}

struct gate_ca *gate_ca_of(struct gate_box *b)
{
	return b->ca;
}

bool gate_box_admit(struct gate_box *b)
{
	if (b->conns >= b->lim.max_conns)
		return false;
	b->conns++;
	return true;
}

void gate_box_release(struct gate_box *b)
{
	b->conns--;
}

bool gate_box_count(struct gate_box *b, size_t n)
{
	b->bytes += n;
	return !b->lim.max_bytes || b->bytes <= b->lim.max_bytes;
}

void gate_box_track(struct gate_box *b, struct gate_conn *c, bool add)
{
	gate_conn_link(&b->all, c, add);
}

static void json_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
		if (*p == '"' || *p == '\\')
			fprintf(f, "\\%c", *p);
		else if (*p < 0x20 || *p >= 0x7f)
			fprintf(f, "\\u%04x", *p);
		else
			fputc(*p, f);
	}
	fputc('"', f);
}

void gate_log(struct gate_box *b, const char *proto, const char *host, unsigned port,
	      const char *addr, bool allowed, const char *reason, uint64_t up, uint64_t down)
{
	if (!allowed) {
		char dest[300];
		snprintf(dest, sizeof dest, "%s:%u", host ? host : "?", port);
		bool seen = false;
		for (size_t i = 0; i < b->nrefused && !seen; i++)
			seen = !strcmp(b->refused[i].dest, dest);
		if (!seen && b->nrefused < 1000) {
			struct refusal *r = realloc(b->refused, (b->nrefused + 1) * sizeof *r);
			if (r) {
				b->refused = r;
				r[b->nrefused].dest = strdup(dest);
				r[b->nrefused].reason = strdup(reason ? reason : "refused");
				if (r[b->nrefused].dest && r[b->nrefused].reason)
					b->nrefused++;
			}
		}
	}
	if (!b->log)
		return;
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	struct tm tm;
	gmtime_r(&ts.tv_sec, &tm);
	char when[40];
	strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
	fprintf(b->log, "{\"time\":\"%s.%03ldZ\",\"sandbox\":", when, ts.tv_nsec / 1000000);
	json_str(b->log, b->name);
	fprintf(b->log, ",\"proto\":\"%s\",\"host\":", proto);
	json_str(b->log, host);
	fprintf(b->log, ",\"port\":%u,\"address\":", port);
	json_str(b->log, addr);
	fprintf(b->log, ",\"decision\":\"%s\",\"reason\":", allowed ? "allow" : "deny");
	json_str(b->log, reason);
	fprintf(b->log, ",\"bytes_up\":%llu,\"bytes_down\":%llu}\n", (unsigned long long)up,
		(unsigned long long)down);
	fflush(b->log);
}

/* Secrets for a host: the placeholder/value pairs that apply, and whether
 * a placeholder of a secret NOT for this host is present in buf. */
const char *gate_box_foreign_placeholder(struct gate_box *b, const char *host,
					 const char *buf, size_t len)
{
	for (size_t i = 0; i < b->nsecrets; i++) {
		const struct secret *s = &b->secrets[i];
		bool listed = false;
		for (size_t k = 0; k < s->nhosts && !listed; k++)
			listed = gate_name_equal(s->hosts[k], host);
		if (!listed && memmem(buf, len, s->placeholder, strlen(s->placeholder)))
			return s->placeholder;
	}
	return NULL;
}

bool gate_box_intercepts(struct gate_box *b, const char *host)
{
	for (size_t i = 0; i < b->nsecrets; i++)
		for (size_t k = 0; k < b->secrets[i].nhosts; k++)
			if (gate_name_equal(b->secrets[i].hosts[k], host))
				return true;
	return false;
}

/* Replace every placeholder meant for host in [buf, len) into out. */
int gate_box_inject(struct gate_box *b, const char *host, const char *buf, size_t len,
		    struct evbuffer *out)
{
	size_t i = 0;
	while (i < len) {
		const struct secret *hit = NULL;
		for (size_t k = 0; k < b->nsecrets && !hit; k++) {
			const struct secret *s = &b->secrets[k];
			size_t pl = strlen(s->placeholder);
			if (len - i >= pl && !memcmp(buf + i, s->placeholder, pl)) {
				bool listed = false;
				for (size_t h = 0; h < s->nhosts && !listed; h++)
					listed = gate_name_equal(s->hosts[h], host);
				if (listed)
					hit = s;
			}
		}
		if (hit) {
			if (evbuffer_add(out, hit->value, strlen(hit->value)) < 0)
				return -1;
			i += strlen(hit->placeholder);
		} else {
			const char *next = memchr(buf + i + 1, 'm', len - i - 1); /* placeholders start "moat" */
			size_t n = next ? (size_t)(next - (buf + i)) : len - i;
			if (evbuffer_add(out, buf + i, n) < 0)
				return -1;
			i += n;
		}
	}
	return 0;
}

/* ---- listeners ----------------------------------------------------------- */

static void on_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa,
		      int salen, void *arg, bool socks)
{
	struct gate_box *b = arg;
	if (!gate_box_admit(b)) {
		gate_log(b, socks ? "socks5" : "http", "", 0, "", false,
			 "too many connections", 0, 0);
		close(fd);
		return;
	}
	if (gate_conn_start(b, fd, socks) < 0) {
		gate_box_release(b);
		close(fd);
	}
}

static void on_accept_http(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa,
			   int salen, void *arg)
{
	on_accept(l, fd, sa, salen, arg, false);
}

static void on_accept_socks(struct evconnlistener *l, evutil_socket_t fd,
			    struct sockaddr *sa, int salen, void *arg)
{
	on_accept(l, fd, sa, salen, arg, true);
}

/* ---- lifecycle ----------------------------------------------------------- */

struct gate *gate_new(struct event_base *base, const char *upstream_ca, struct moat_err *e)
{
	struct gate *g = calloc(1, sizeof *g);
	if (!g) {
		moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "gateway");
		return NULL;
	}
	g->base = base;
	/* resolv.conf and /etc/hosts of the host: the gateway resolves, the
	 * sandbox never does */
	g->dns = evdns_base_new(base, EVDNS_BASE_INITIALIZE_NAMESERVERS |
					      EVDNS_BASE_DISABLE_WHEN_INACTIVE);
	if (!g->dns)
		g->dns = evdns_base_new(base, 0); /* no resolv.conf: pins and literals only */
	if (g->dns)
		evdns_base_load_hosts(g->dns, NULL);
	g->tls = gate_tls_new(upstream_ca, e);
	if (!g->dns || !g->tls) {
		if (!g->dns)
			moat_err_set(e, MOAT_E_SYSTEM, 0, "gateway: DNS resolver");
		gate_free(g);
		return NULL;
	}
	return g;
}

void gate_free(struct gate *g)
{
	if (!g)
		return;
	if (g->dns)
		evdns_base_free(g->dns, 0);
	gate_tls_free(g->tls);
	free(g);
}

struct gate_box *gate_box_new(struct gate *g, const char *name, struct gate_policy *pol,
			      const struct gate_limits *lim, FILE *log, struct moat_err *e)
{
	struct gate_box *b = calloc(1, sizeof *b);
	if (!b || !(b->name = strdup(name))) {
		free(b);
		moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "gateway");
		return NULL;
	}
	b->g = g;
	b->pol = pol;
	b->log = log;
	b->lim = lim ? *lim : (struct gate_limits){0};
	if (!b->lim.max_conns)
		b->lim.max_conns = 256;
	if (!b->lim.idle_s)
		b->lim.idle_s = 300;
	if (!b->lim.head_s)
		b->lim.head_s = 30;
	return b;
}

int gate_box_listen(struct gate_box *b, int http_fd, int socks_fd, struct moat_err *e)
{
	evutil_make_socket_nonblocking(http_fd);
	evutil_make_socket_nonblocking(socks_fd);
	b->http = evconnlistener_new(b->g->base, on_accept_http, b,
				     LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC, -1, http_fd);
	b->socks = evconnlistener_new(b->g->base, on_accept_socks, b,
				      LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC, -1, socks_fd);
	if (!b->http || !b->socks)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "gateway listeners");
	return 0;
}

int gate_box_secret(struct gate_box *b, const char *placeholder, const char *value,
		    char *const *hosts, struct moat_err *e)
{
	if (!b->ca) {
		b->ca = gate_ca_new(b->name, e);
		if (!b->ca)
			return -1;
	}
	struct secret *s = realloc(b->secrets, (b->nsecrets + 1) * sizeof *s);
	if (!s)
		return moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "secret");
	b->secrets = s;
	s = &b->secrets[b->nsecrets];
	memset(s, 0, sizeof *s);
	s->placeholder = strdup(placeholder);
	s->value = strdup(value);
	size_t n = 0;
	while (hosts && hosts[n])
		n++;
	s->hosts = calloc(n + 1, sizeof *s->hosts);
	for (size_t i = 0; s->hosts && i < n; i++)
		s->hosts[i] = strdup(hosts[i]);
	s->nhosts = n;
	b->nsecrets++;
	return 0;
}

const char *gate_box_ca_pem(struct gate_box *b)
{
	return b->ca ? gate_ca_pem(b->ca) : NULL;
}

void gate_box_refused(struct gate_box *b,
		      void (*fn)(void *arg, const char *dest, const char *reason), void *arg)
{
	for (size_t i = 0; i < b->nrefused; i++)
		fn(arg, b->refused[i].dest, b->refused[i].reason);
}

void gate_box_free(struct gate_box *b)
{
	if (!b)
		return;
	if (b->http)
		evconnlistener_free(b->http);
	if (b->socks)
		evconnlistener_free(b->socks);
	while (b->all)
		gate_conn_free(b->all);
	for (size_t i = 0; i < b->nsecrets; i++) {
		/* the real values do not linger in freed memory */
		explicit_bzero(b->secrets[i].value, strlen(b->secrets[i].value));
		free(b->secrets[i].value);
		free(b->secrets[i].placeholder);
		for (size_t k = 0; k < b->secrets[i].nhosts; k++)
			free(b->secrets[i].hosts[k]);
		free(b->secrets[i].hosts);
	}
	free(b->secrets);
	for (size_t i = 0; i < b->nrefused; i++) {
		free(b->refused[i].dest);
		free(b->refused[i].reason);
	}
	free(b->refused);
	gate_ca_free(b->ca);
	gate_policy_free(b->pol);
	free(b->pol);
	free(b->name);
	free(b);
}
