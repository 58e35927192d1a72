/* One proxied connection: see conn.h and the flow in gateway.c. */
#define _GNU_SOURCE
#include "gate/conn.h"

#include "gate/addr.h"
#include "gate/http_head.h"
#include "gate/policy.h"
#include "gate/relay.h"
#include "gate/sni.h"
#include "gate/socks5.h"
#include "gate/tls.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/dns.h>
#include <event2/util.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define HEAD_MAX (64u << 10)
#define RELAY_HIGH (1u << 20)

enum kind { K_FORWARD, K_CONNECT, K_SOCKS };
enum state { S_HEAD, S_RESOLVE, S_CONNECT, S_TLSHEAD, S_RELAY, S_DONE };

struct gate_conn {
	struct gate_box *b;
	struct gate_conn *next, *prev;
	bool socks;
	enum kind kind;
	enum state st;
	struct bufferevent *cli, *up;
	char host[256];
	unsigned port;
	char addr[GATE_ADDR_FMT_CAP];
	struct evbuffer *pending; /* the request head to send upstream once connected */
	struct evdns_getaddrinfo_request *dns;
	struct evutil_addrinfo *ai;
	bool ai_ours; /* ai built here (literal/pin), not by evdns */
	bool s5_greeted;          /* SOCKS5: method chosen, request next */
	struct gate_http_head hh;
	bool intercept;
	bool connected;
	uint64_t bytes_up, bytes_down;
	const char *refusal; /* why, when refused */
	struct gate_relay *relay; /* the spliced phase of a plain connection */
	bool sni_check;           /* CONNECT/SOCKS tunnels: look at the hello */
	bool want_intercept;      /* a tunnel to a host a secret is for */
	uint64_t body_left;       /* intercepted: request body bytes still to pass */
};

bool gate_name_equal(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	if (la && a[la - 1] == '.')
		la--;
	if (lb && b[lb - 1] == '.')
		lb--;
	return la == lb && strncasecmp(a, b, la) == 0;
}

void gate_conn_link(struct gate_conn **head, struct gate_conn *c, bool add)
{
	if (add) {
		c->prev = NULL;
		c->next = *head;
		if (*head)
			(*head)->prev = c;
		*head = c;
		return;
	}
	if (c->prev)
		c->prev->next = c->next;
	else if (*head == c)
		*head = c->next;
	if (c->next)
		c->next->prev = c->prev;
	c->next = c->prev = NULL;
}

static const char *proto(const struct gate_conn *c)
{
	return c->kind == K_SOCKS ? "socks5" : c->kind == K_CONNECT ? "connect" : "http";
}

void gate_conn_free(struct gate_conn *c)
{
	if (c->connected)
		gate_log(c->b, proto(c), c->host, c->port, c->addr, true,
			 c->intercept ? "allowed (secrets injected)" : "allowed", c->bytes_up,
			 c->bytes_down);
	gate_box_track(c->b, c, false);
	gate_box_release(c->b);
	if (c->dns)
		evdns_getaddrinfo_cancel(c->dns); /* its callback frees nothing of ours */
	gate_relay_free(c->relay);
	if (c->ai) {
		if (c->ai_ours)
			free(c->ai);
		else
			evutil_freeaddrinfo(c->ai);
	}
	if (c->cli)
		bufferevent_free(c->cli);
	if (c->up)
		bufferevent_free(c->up);
	if (c->pending)
		evbuffer_free(c->pending);
	free(c);
}

/* ---- answers to the client --------------------------------------------- */

static void finish_after_flush(struct bufferevent *bev, void *arg)
{
	struct gate_conn *c = arg;
	if (evbuffer_get_length(bufferevent_get_output(bev)) == 0)
		gate_conn_free(c);
}

/* Tell the client no (HTTP status or SOCKS reply), log it, close. */
static void refuse(struct gate_conn *c, int http_status, int socks_rep, const char *why)
{
	c->st = S_DONE;
	if (c->host[0] || http_status == 403)
		gate_log(c->b, proto(c), c->host, c->port, c->addr, false, why, 0, 0);
	if (c->up) {
		bufferevent_free(c->up);
		c->up = NULL;
	}
	c->connected = false;
	if (c->kind == K_SOCKS || c->socks) {
		uint8_t rep[GATE_SOCKS5_REPLY_MAX];
		size_t n = gate_socks5_reply(rep, (uint8_t)socks_rep, NULL);
		bufferevent_write(c->cli, rep, n);
	} else {
		const char *text = http_status == 403   ? "Forbidden"
				   : http_status == 408 ? "Request Timeout"
				   : http_status == 400 ? "Bad Request"
				   : http_status == 431 ? "Request Header Fields Too Large"
				   : http_status == 504 ? "Gateway Timeout"
							: "Bad Gateway";
		char body[512];
		int bl = snprintf(body, sizeof body, "moat gateway: %s%s%s:%u refused: %s\n",
				  c->host[0] ? "" : "", c->host[0] && strchr(c->host, ':') ? "[" : "",
				  c->host[0] ? c->host : "?", c->port, why);
		if (bl < 0 || bl >= (int)sizeof body)
			bl = (int)strlen(body);
		evbuffer_add_printf(bufferevent_get_output(c->cli),
				    "HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\n"
				    "Content-Length: %d\r\nConnection: close\r\n"
				    "X-Moat-Refused: %s\r\n\r\n%s",
				    http_status, text, bl, why, body);
	}
	bufferevent_disable(c->cli, EV_READ);
	bufferevent_setcb(c->cli, NULL, finish_after_flush, NULL, c);
	bufferevent_enable(c->cli, EV_WRITE);
}

/* ---- relay ---------------------------------------------------------------- */

static void relay_read(struct bufferevent *from, void *arg);

static void relay_drained(struct bufferevent *to, void *arg)
{
	struct gate_conn *c = arg;
	struct bufferevent *from = to == c->up ? c->cli : c->up;
	if (c->st == S_DONE) {
		/* one side ended: close once the other has everything */
		if (evbuffer_get_length(bufferevent_get_output(to)) == 0)
			gate_conn_free(c);
		return;
	}
	if (from)
		bufferevent_enable(from, EV_READ);
}

static void relay_read(struct bufferevent *from, void *arg)
{
	struct gate_conn *c = arg;
	struct bufferevent *to = from == c->cli ? c->up : c->cli;
	struct evbuffer *in = bufferevent_get_input(from);
	size_t n = evbuffer_get_length(in);
	if (!gate_box_count(c->b, n)) {
		gate_log(c->b, proto(c), c->host, c->port, c->addr, false,
			 "the sandbox's byte limit is reached", c->bytes_up, c->bytes_down);
		c->connected = false;
		gate_conn_free(c);
		return;
	}
	if (from == c->cli && c->intercept && c->body_left != UINT64_MAX) {
		/* past the request's body only a pipelined request could come,
		 * which would skip injection and checks: drop it (the server
		 * closes after its answer; the client asks again) */
		size_t pass = n < c->body_left ? n : (size_t)c->body_left;
		c->body_left -= pass;
		c->bytes_up += pass;
		evbuffer_remove_buffer(in, bufferevent_get_output(to), pass);
		evbuffer_drain(in, evbuffer_get_length(in));
		return;
	}
	if (from == c->cli)
		c->bytes_up += n;
	else
		c->bytes_down += n;
	evbuffer_add_buffer(bufferevent_get_output(to), in);
	/* back-pressure: a slow reader stops the fast writer, not the gateway */
	if (evbuffer_get_length(bufferevent_get_output(to)) >= RELAY_HIGH)
		bufferevent_disable(from, EV_READ);
}

static void relay_event(struct bufferevent *bev, short what, void *arg)
{
	struct gate_conn *c = arg;
	if (!(what & (BEV_EVENT_EOF | BEV_EVENT_ERROR | BEV_EVENT_TIMEOUT)))
		return;
	/* the other side gets what is queued for it, then both close */
	struct bufferevent *other = bev == c->cli ? c->up : c->cli;
	c->st = S_DONE;
	if (other && evbuffer_get_length(bufferevent_get_output(other)) &&
	    !(what & BEV_EVENT_TIMEOUT)) {
		bufferevent_disable(bev, EV_READ | EV_WRITE);
		bufferevent_setcb(other, NULL, relay_drained, relay_event, c);
		bufferevent_disable(other, EV_READ);
		bufferevent_enable(other, EV_WRITE);
		return;
	}
	gate_conn_free(c);
}

static bool on_count(void *arg, bool up, size_t n)
{
	struct gate_conn *c = arg;
	if (up)
		c->bytes_up += n;
	else
		c->bytes_down += n;
	if (gate_box_count(c->b, n))
		return true;
	gate_log(c->b, proto(c), c->host, c->port, c->addr, false,
		 "the sandbox's byte limit is reached", c->bytes_up, c->bytes_down);
	c->connected = false;
	return false;
}

/* A tunnel's first bytes, if TLS, must name the host that was allowed
 * (no domain fronting through an allowed name). */
static int on_first(void *arg, const void *buf, size_t len)
{
	struct gate_conn *c = arg;
	char sni[GATE_SNI_HOST_CAP];
	enum gate_sni_status r = gate_sni_parse(buf, len, sni, NULL);
	if (r == GATE_SNI_NEED_MORE)
		return 0;
	struct sockaddr_storage ss;
	if (r == GATE_SNI_FOUND && !gate_addr_parse(c->host, &ss) && !gate_name_equal(sni, c->host)) {
		char why[400];
		snprintf(why, sizeof why, "TLS server name %s does not match %s", sni, c->host);
		gate_log(c->b, proto(c), c->host, c->port, c->addr, false, why, 0, 0);
		c->connected = false;
		return -1;
	}
	return 1;
}

static void on_relay_done(void *arg, const char *why)
{
	struct gate_conn *c = arg;
	c->relay = NULL; /* it freed itself and closed the sockets */
	gate_conn_free(c);
}

/* Plain connections (not intercepted) are spliced: hand the sockets and
 * whatever is still queued in the bufferevents to the relay. */
static bool splice_relay(struct gate_conn *c)
{
	/* The bufferevents may outlive this callback a moment (libevent
	 * holds them while it runs): they must not read or write the sockets
	 * meanwhile, or bytes would be lost or sent twice. */
	bufferevent_disable(c->cli, EV_READ | EV_WRITE);
	bufferevent_disable(c->up, EV_READ | EV_WRITE);
	bufferevent_setcb(c->cli, NULL, NULL, NULL, NULL);
	bufferevent_setcb(c->up, NULL, NULL, NULL, NULL);
	struct evbuffer *to_up = evbuffer_new(), *to_cli = evbuffer_new();
	int a = dup(bufferevent_getfd(c->cli)), b = dup(bufferevent_getfd(c->up));
	if (!to_up || !to_cli || a < 0 || b < 0) {
		if (to_up)
			evbuffer_free(to_up);
		if (to_cli)
			evbuffer_free(to_cli);
		if (a >= 0)
			close(a);
		if (b >= 0)
			close(b);
		return false;
	}
	/* (a bufferevent's output cannot be drained from outside: it is
	 * frozen at the start; copy it, the bufferevent goes anyway) */
	struct evbuffer *srcs[4] = {bufferevent_get_output(c->up), bufferevent_get_input(c->cli),
				    bufferevent_get_output(c->cli), bufferevent_get_input(c->up)};
	for (int i = 0; i < 4; i++) {
		size_t n = evbuffer_get_length(srcs[i]);
		if (n && evbuffer_add(i < 2 ? to_up : to_cli, evbuffer_pullup(srcs[i], -1), n) < 0) {
			evbuffer_free(to_up);
			evbuffer_free(to_cli);
			close(a);
			close(b);
			return false;
		}
	}
	bufferevent_free(c->cli);
	bufferevent_free(c->up);
	c->cli = c->up = NULL;
	size_t ul = evbuffer_get_length(to_up), cl = evbuffer_get_length(to_cli);
	bool check = c->sni_check;
	if (check && ul) { /* (tunnels have no queued request head: ul is early data) */
		/* the hello came with the CONNECT request: check it here, and
		 * refuse one that is split around it */
		int v = on_first(c, evbuffer_pullup(to_up, -1), ul);
		if (v <= 0) {
			if (v == 0)
				gate_log(c->b, proto(c), c->host, c->port, c->addr, false,
					 "a TLS hello split across the tunnel request", 0, 0);
			evbuffer_free(to_up);
			evbuffer_free(to_cli);
			close(a);
			close(b);
			c->connected = false;
			gate_conn_free(c);
			return true;
		}
		check = false;
	}
	struct gate_relay_cb cb = {.count = on_count, .first = check ? on_first : NULL,
				   .done = on_relay_done, .arg = c};
	c->relay = gate_relay_new(gate_base(c->b), a, b, evbuffer_pullup(to_up, -1), ul,
				  evbuffer_pullup(to_cli, -1), cl, gate_limits(c->b)->idle_s, &cb);
	evbuffer_free(to_up);
	evbuffer_free(to_cli);
	if (!c->relay) {
		gate_conn_free(c);
		return true;
	}
	return true;
}

static void start_relay(struct gate_conn *c)
{
	c->st = S_RELAY;
	if (!c->intercept && splice_relay(c))
		return;
	bufferevent_setwatermark(c->cli, EV_READ, 0, 0);
	const struct gate_limits *lim = gate_limits(c->b);
	struct timeval idle = {lim->idle_s, 0};
	bufferevent_setcb(c->cli, relay_read, relay_drained, relay_event, c);
	bufferevent_setcb(c->up, relay_read, relay_drained, relay_event, c);
	bufferevent_setwatermark(c->cli, EV_WRITE, RELAY_HIGH / 2, 0);
	bufferevent_setwatermark(c->up, EV_WRITE, RELAY_HIGH / 2, 0);
	bufferevent_set_timeouts(c->cli, &idle, NULL);
	bufferevent_set_timeouts(c->up, &idle, NULL);
	bufferevent_enable(c->cli, EV_READ | EV_WRITE);
	bufferevent_enable(c->up, EV_READ | EV_WRITE);
	/* what the client sent already (early data after the head) */
	if (evbuffer_get_length(bufferevent_get_input(c->cli)))
		relay_read(c->cli, c);
}

/* ---- after connecting ----------------------------------------------------- */

static void on_cli_head(struct bufferevent *bev, void *arg);
static void on_peek(struct bufferevent *bev, void *arg);
static void up_event(struct bufferevent *bev, short what, void *arg);

static void head_event(struct bufferevent *bev, short what, void *arg)
{
	struct gate_conn *c = arg;
	if (what & BEV_EVENT_TIMEOUT && c->st == S_HEAD) {
		refuse(c, 408, 1, "no complete request in time");
		return;
	}
	if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR | BEV_EVENT_TIMEOUT)) {
		c->connected = c->connected && c->st == S_RELAY;
		gate_conn_free(c);
	}
}

static void tunnel_ready(struct gate_conn *c)
{
	/* the client may speak now */
	if (c->kind == K_SOCKS) {
		uint8_t rep[GATE_SOCKS5_REPLY_MAX];
		size_t n = gate_socks5_reply(rep, GATE_SOCKS5_OK, NULL);
		bufferevent_write(c->cli, rep, n);
	} else {
		static const char ok[] = "HTTP/1.1 200 Connection established\r\n\r\n";
		bufferevent_write(c->cli, ok, sizeof ok - 1);
	}
	if (c->want_intercept) {
		/* a secret is meant for this host: see what the client speaks */
		bufferevent_setcb(c->cli, on_peek, NULL, head_event, c);
		bufferevent_enable(c->cli, EV_READ | EV_WRITE);
		return;
	}
	c->sni_check = true;
	start_relay(c);
}

/* TLS both ways: to the sandbox with a leaf for host from its CA, to the
 * upstream with verification; the decrypted request heads are checked,
 * injected and forwarded one per connection. */
static void intercept(struct gate_conn *c)
{
	struct moat_err e = {0};
	struct event_base *base = gate_base(c->b);
	/* the client side's filter drives its bufferevent, which must read */
	bufferevent_enable(c->cli, EV_READ | EV_WRITE);
	/* upstream: TLS on the connected socket itself */
	SSL *cs = gate_tls_client_ssl(gate_tls_of(c->b), c->host, &e);
	int ufd = cs ? dup(bufferevent_getfd(c->up)) : -1;
	struct bufferevent *up = ufd >= 0 ? bufferevent_openssl_socket_new(
						    base, ufd, cs, BUFFEREVENT_SSL_CONNECTING,
						    BEV_OPT_CLOSE_ON_FREE)
					  : NULL;
	if (up) {
		bufferevent_free(c->up); /* closes the original descriptor only */
		c->up = NULL;
	}
	if (!up) {
		if (ufd >= 0)
			close(ufd);
		if (cs)
			SSL_free(cs);
		gate_log(c->b, proto(c), c->host, c->port, c->addr, false, e.msg[0] ? e.msg : "cannot intercept TLS", 0, 0);
		c->connected = false;
		gate_conn_free(c);
		return;
	}
	c->up = up;
	bufferevent_setcb(c->up, NULL, NULL, up_event, c);
	bufferevent_enable(c->up, EV_READ | EV_WRITE);
	SSL *ss = gate_ca_server_ssl(gate_ca_of(c->b), c->host, &e);
	struct bufferevent *tls = ss ? bufferevent_openssl_filter_new(base, c->cli, ss,
								      BUFFEREVENT_SSL_ACCEPTING,
								      BEV_OPT_CLOSE_ON_FREE)
				     : NULL;
	if (!tls) {
		if (ss)
			SSL_free(ss);
		gate_log(c->b, proto(c), c->host, c->port, c->addr, false, "cannot intercept TLS", 0, 0);
		c->connected = false;
		gate_conn_free(c);
		return;
	}
	struct bufferevent *raw = c->cli;
	c->cli = tls;
	c->intercept = true;
	c->st = S_TLSHEAD;
	gate_http_head_init(&c->hh);
	bufferevent_setcb(c->cli, on_cli_head, NULL, head_event, c);
	bufferevent_enable(c->cli, EV_READ | EV_WRITE);
	/* the ClientHello is already buffered: have the filter take it */
	if (evbuffer_get_length(bufferevent_get_input(raw)))
		bufferevent_trigger(raw, EV_READ, BEV_TRIG_IGNORE_WATERMARKS);
}

static void on_peek(struct bufferevent *bev, void *arg)
{
	struct gate_conn *c = arg;
	struct evbuffer *in = bufferevent_get_input(bev);
	unsigned char first;
	if (evbuffer_copyout(in, &first, 1) != 1)
		return;
	if (first == 0x16) { /* a TLS handshake record */
		intercept(c);
		return;
	}
	/* not TLS: nothing to inject into, relay it as it is */
	c->sni_check = false;
	start_relay(c);
}

static void up_event(struct bufferevent *bev, short what, void *arg)
{
	struct gate_conn *c = arg;
	if (what & BEV_EVENT_CONNECTED) {
		if (c->st != S_CONNECT)
			return; /* the upstream TLS handshake of an interception */
		c->connected = true;
		int one = 1; /* small writes go out at once (no 40 ms Nagle stall) */
		setsockopt(bufferevent_getfd(c->up), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
		if (c->kind == K_FORWARD) {
			c->bytes_up += evbuffer_get_length(c->pending);
			bufferevent_write_buffer(c->up, c->pending);
			start_relay(c);
		} else {
			bufferevent_disable(c->up, EV_READ); /* until the tunnel is set up */
			tunnel_ready(c);
		}
		return;
	}
	if (what & (BEV_EVENT_ERROR | BEV_EVENT_EOF | BEV_EVENT_TIMEOUT)) {
		char why[160];
		unsigned long ssl_err = bufferevent_get_openssl_error(bev);
		if (ssl_err)
			snprintf(why, sizeof why, "upstream TLS: %s",
				 ERR_reason_error_string(ssl_err) ? ERR_reason_error_string(ssl_err)
								  : "failed");
		else
			snprintf(why, sizeof why, "cannot connect to %s: %s", c->addr,
				 (what & BEV_EVENT_TIMEOUT) ? "timed out"
							    : strerror(EVUTIL_SOCKET_ERROR()));
		if (c->st == S_CONNECT) {
			refuse(c, 502, 5, why);
		} else if (ssl_err) {
			/* an intercepted upstream that failed verification: the
			 * sandbox's TLS to us is cut, and the log says why */
			gate_log(c->b, proto(c), c->host, c->port, c->addr, false, why, c->bytes_up,
				 c->bytes_down);
			c->connected = false;
			gate_conn_free(c);
		} else {
			relay_event(bev, what, c);
		}
	}
}

static void connect_up(struct gate_conn *c, const struct sockaddr *sa, socklen_t len)
{
	c->st = S_CONNECT;
	struct event_base *base = gate_base(c->b);
	c->want_intercept = c->kind != K_FORWARD && gate_box_intercepts(c->b, c->host);
	c->up = bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE);
	if (!c->up) {
		refuse(c, 502, 1, "out of resources");
		return;
	}
	struct timeval ct = {30, 0};
	bufferevent_set_timeouts(c->up, &ct, &ct);
	bufferevent_setcb(c->up, NULL, NULL, up_event, c);
	if (bufferevent_socket_connect(c->up, (struct sockaddr *)sa, (int)len) < 0)
		refuse(c, 502, 5, "cannot connect");
}

/* The resolved addresses: connect to the first one the policy allows. */
static void try_addrs(struct gate_conn *c)
{
	char why[GATE_WHY_CAP] = "the name has no address";
	for (struct evutil_addrinfo *a = c->ai; a; a = a->ai_next) {
		if (a->ai_family != AF_INET && a->ai_family != AF_INET6)
			continue;
		gate_addr_format(a->ai_addr, false, c->addr);
		if (gate_check_addr(gate_policy(c->b), c->host, (uint16_t)c->port, a->ai_addr, why) ==
		    GATE_ALLOW) {
			connect_up(c, a->ai_addr, (socklen_t)a->ai_addrlen);
			return;
		}
	}
	refuse(c, 403, 2, why);
}

static void on_resolved(int err, struct evutil_addrinfo *ai, void *arg)
{
	struct gate_conn *c = arg;
	if (err == EVUTIL_EAI_CANCEL)
		return; /* the connection is being freed */
	c->dns = NULL;
	if (err) {
		char why[160];
		snprintf(why, sizeof why, "cannot resolve: %s", evutil_gai_strerror(err));
		refuse(c, 502, 4, why);
		return;
	}
	c->ai = ai;
	try_addrs(c);
}

/* Addresses of our own making (an IP literal, or pins): one block. */
static int own_ai(struct gate_conn *c, const struct sockaddr_storage *ss, size_t n)
{
	struct evutil_addrinfo *ai = calloc(n, sizeof *ai + sizeof *ss);
	if (!ai)
		return -1;
	struct sockaddr_storage *copy = (struct sockaddr_storage *)(ai + n);
	for (size_t i = 0; i < n; i++) {
		copy[i] = ss[i];
		ai[i].ai_family = ss[i].ss_family;
		ai[i].ai_addr = (struct sockaddr *)&copy[i];
		ai[i].ai_addrlen = ss[i].ss_family == AF_INET6 ? sizeof(struct sockaddr_in6)
							       : sizeof(struct sockaddr_in);
		if (ss[i].ss_family == AF_INET6)
			((struct sockaddr_in6 *)&copy[i])->sin6_port = htons((uint16_t)c->port);
		else
			((struct sockaddr_in *)&copy[i])->sin_port = htons((uint16_t)c->port);
		ai[i].ai_next = i + 1 < n ? &ai[i + 1] : NULL;
	}
	c->ai = ai;
	c->ai_ours = true;
	return 0;
}

static void decide(struct gate_conn *c)
{
	char why[GATE_WHY_CAP] = "";
	if (gate_check_name(gate_policy(c->b), c->host, (uint16_t)c->port, why) != GATE_ALLOW) {
		refuse(c, 403, 2, why[0] ? why : "not in the allowlist");
		return;
	}
	const struct gate_policy *ceil = gate_ceiling(c->b);
	if (ceil && gate_check_name(ceil, c->host, (uint16_t)c->port, why) != GATE_ALLOW) {
		char w2[GATE_WHY_CAP + 32];
		snprintf(w2, sizeof w2, "outside the operator's --net-allow (%s)", why);
		refuse(c, 403, 2, w2);
		return;
	}
	c->st = S_RESOLVE;
	struct sockaddr_storage ss[GATE_PIN_ADDRS];
	size_t n = gate_addr_parse(c->host, &ss[0]) ? 1 : 0;
	if (!n)
		n = gate_pin_lookup(gate_policy(c->b), c->host, (uint16_t)c->port, ss,
				    GATE_PIN_ADDRS);
	if (n) {
		if (own_ai(c, ss, n) < 0) {
			refuse(c, 502, 1, "out of memory");
			return;
		}
		try_addrs(c);
		return;
	}
	struct evutil_addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
	char port[8];
	snprintf(port, sizeof port, "%u", c->port);
	bufferevent_disable(c->cli, EV_READ);
	c->dns = evdns_getaddrinfo(gate_dns(c->b), c->host, port, &hints, on_resolved, c);
	/* NULL: answered at once (the callback ran) or failed (and said so) */
}

/* ---- the client's request ------------------------------------------------- */

/* An intercepted request (already in origin form): the same head without
 * connection headers plus "Connection: close", placeholders injected. */
static int rewrite_origin(struct gate_conn *c, const struct gate_http_head *h, const char *buf,
			  struct evbuffer *out)
{
	struct evbuffer *tmp = evbuffer_new();
	if (!tmp)
		return -1;
	evbuffer_add_printf(tmp, "%.*s %.*s HTTP/1.1\r\n", (int)h->method.len, buf + h->method.off,
			    (int)h->target.len, buf + h->target.off);
	for (size_t i = 0; i < h->n_fields; i++) {
		const char *name = buf + h->field[i].name.off, *value = buf + h->field[i].value.off;
		size_t nl = h->field[i].name.len, vl = h->field[i].value.len;
		if ((nl == 10 && !strncasecmp(name, "connection", 10)) ||
		    (nl == 10 && !strncasecmp(name, "keep-alive", 10)))
			continue;
		evbuffer_add_printf(tmp, "%.*s: %.*s\r\n", (int)nl, name, (int)vl, value);
	}
	evbuffer_add_printf(tmp, "Connection: close\r\n\r\n");
	size_t n = evbuffer_get_length(tmp);
	int rc = gate_box_inject(c->b, c->host, (const char *)evbuffer_pullup(tmp, -1), n, out);
	evbuffer_free(tmp);
	return rc;
}

/* Rebuild a forwarded request: origin-form target, no proxy headers, one
 * request per connection (a second one could name another host). */
static int rewrite_head(struct gate_conn *c, const struct gate_http_head *h, const char *buf,
			const struct gate_http_dest *d, struct evbuffer *out)
{
	struct evbuffer *tmp = evbuffer_new();
	if (!tmp)
		return -1;
	evbuffer_add_printf(tmp, "%.*s %.*s%.*s HTTP/1.1\r\n", (int)h->method.len,
			    buf + h->method.off, (int)d->path_len, d->path, (int)d->query_len,
			    d->query);
	/* Host comes from the URI that was allowed, never from the client's
	 * header (which could name another site behind the same address) */
	bool v6 = strchr(c->host, ':') != NULL;
	if (c->port == 80)
		evbuffer_add_printf(tmp, "Host: %s%s%s\r\n", v6 ? "[" : "", c->host, v6 ? "]" : "");
	else
		evbuffer_add_printf(tmp, "Host: %s%s%s:%u\r\n", v6 ? "[" : "", c->host, v6 ? "]" : "",
				    c->port);
	for (size_t i = 0; i < h->n_fields; i++) {
		const char *name = buf + h->field[i].name.off, *value = buf + h->field[i].value.off;
		size_t nl = h->field[i].name.len, vl = h->field[i].value.len;
		static const char *const drop[] = {"proxy-connection", "proxy-authorization",
						   "connection", "keep-alive", "host", NULL};
		bool skip = false;
		for (size_t k = 0; drop[k] && !skip; k++)
			skip = nl == strlen(drop[k]) && !strncasecmp(name, drop[k], nl);
		if (skip)
			continue;
		evbuffer_add_printf(tmp, "%.*s: %.*s\r\n", (int)nl, name, (int)vl, value);
	}
	evbuffer_add_printf(tmp, "Connection: close\r\n\r\n");
	size_t n = evbuffer_get_length(tmp);
	const char *flat = (const char *)evbuffer_pullup(tmp, -1);
	int rc = gate_box_inject(c->b, c->host, flat, n, out);
	evbuffer_free(tmp);
	return rc;
}

static void on_cli_head(struct bufferevent *bev, void *arg)
{
	struct gate_conn *c = arg;
	struct evbuffer *in = bufferevent_get_input(bev);
	size_t len = evbuffer_get_length(in);
	const char *buf = (const char *)evbuffer_pullup(in, len < HEAD_MAX ? -1 : (ev_ssize_t)HEAD_MAX);
	const char *err = NULL;
	enum gate_http_status r = gate_http_head_parse(&c->hh, buf, len < HEAD_MAX ? len : HEAD_MAX);
	if (r == GATE_HTTP_NEED_MORE) {
		if (len >= HEAD_MAX)
			refuse(c, 431, 1, "request head too large");
		return;
	}
	if (r != GATE_HTTP_DONE) {
		refuse(c, 400, 1, c->hh.error ? c->hh.error : "malformed request");
		return;
	}
	const struct gate_http_head *h = &c->hh;
	/* a placeholder going to a host it is not for: an exfiltration attempt */
	const char *ph = gate_box_foreign_placeholder(c->b, c->st == S_TLSHEAD ? c->host : "",
						      buf, h->head_len);
	if (c->st == S_TLSHEAD) {
		if (ph) {
			refuse(c, 403, 2, "exfiltration attempt: a secret's placeholder sent to a host it is not for");
			return;
		}
		/* inside an intercepted tunnel: one request per connection (so
		 * that every request's head is seen and injected), inject,
		 * forward, then pass exactly its body */
		struct evbuffer *out = bufferevent_get_output(c->up);
		c->bytes_up += h->head_len;
		if (rewrite_origin(c, h, buf, out) < 0) {
			refuse(c, 502, 1, "out of memory");
			return;
		}
		c->body_left = h->chunked ? UINT64_MAX : h->has_length ? h->content_length : 0;
		evbuffer_drain(in, h->head_len);
		bufferevent_enable(c->up, EV_READ);
		start_relay(c);
		return;
	}
	struct gate_http_dest d;
	const char *target = buf + h->target.off;
	if (h->method.len == 7 && !memcmp(buf + h->method.off, "CONNECT", 7)) {
		c->kind = K_CONNECT;
		if (gate_http_parse_authority(target, h->target.len, &d, &err) < 0) {
			refuse(c, 400, 1, err ? err : "bad CONNECT target");
			return;
		}
	} else {
		c->kind = K_FORWARD;
		if (gate_http_parse_uri(target, h->target.len, &d, &err) < 0) {
			refuse(c, 400, 1, err ? err : "expected an absolute http:// URI");
			return;
		}
	}
	snprintf(c->host, sizeof c->host, "%s", d.host);
	c->port = d.port;
	if (c->kind == K_FORWARD) {
		ph = gate_box_foreign_placeholder(c->b, c->host, buf, h->head_len);
		if (ph) {
			refuse(c, 403, 2, "exfiltration attempt: a secret's placeholder sent to a host it is not for");
			return;
		}
		c->pending = evbuffer_new();
		if (!c->pending || rewrite_head(c, h, buf, &d, c->pending) < 0) {
			refuse(c, 502, 1, "out of memory");
			return;
		}
	}
	evbuffer_drain(in, h->head_len);
	bufferevent_set_timeouts(c->cli, NULL, NULL);
	decide(c);
}

static void on_socks(struct bufferevent *bev, void *arg)
{
	struct gate_conn *c = arg;
	struct evbuffer *in = bufferevent_get_input(bev);
	size_t len = evbuffer_get_length(in);
	if (len > 1024) { /* both messages fit in 262 bytes each */
		gate_conn_free(c);
		return;
	}
	const uint8_t *buf = evbuffer_pullup(in, -1);
	size_t used = 0;
	const char *err = NULL;
	if (!c->s5_greeted) {
		uint8_t method;
		enum gate_socks5_status r = gate_socks5_parse_greeting(buf, len, &used, &method, &err);
		if (r == GATE_SOCKS5_NEED_MORE)
			return;
		if (r == GATE_SOCKS5_ERROR) {
			gate_log(c->b, "socks5", "", 0, "", false, err ? err : "not SOCKS5", 0, 0);
			gate_conn_free(c);
			return;
		}
		uint8_t mr[2];
		bufferevent_write(c->cli, mr, gate_socks5_method_reply(mr, method));
		evbuffer_drain(in, used);
		if (method == GATE_SOCKS5_NO_METHOD) {
			c->st = S_DONE;
			bufferevent_disable(c->cli, EV_READ);
			bufferevent_setcb(c->cli, NULL, finish_after_flush, NULL, c);
			bufferevent_enable(c->cli, EV_WRITE);
			return;
		}
		c->s5_greeted = true;
		len = evbuffer_get_length(in);
		buf = evbuffer_pullup(in, -1);
		if (!len)
			return;
	}
	struct gate_socks5_request req;
	enum gate_socks5_status r = gate_socks5_parse_request(buf, len, &used, &req);
	if (r == GATE_SOCKS5_NEED_MORE)
		return;
	if (r == GATE_SOCKS5_ERROR) {
		c->kind = K_SOCKS;
		refuse(c, 400, req.rep, req.err ? req.err : "bad SOCKS5 request");
		return;
	}
	evbuffer_drain(in, used);
	c->kind = K_SOCKS;
	snprintf(c->host, sizeof c->host, "%s", req.host);
	c->port = req.port;
	bufferevent_set_timeouts(c->cli, NULL, NULL);
	decide(c);
}

int gate_conn_start(struct gate_box *b, int fd, bool socks)
{
	struct gate_conn *c = calloc(1, sizeof *c);
	if (!c)
		return -1;
	c->b = b;
	c->socks = socks;
	c->kind = socks ? K_SOCKS : K_FORWARD;
	evutil_make_socket_nonblocking(fd);
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	c->cli = bufferevent_socket_new(gate_base(b), fd, BEV_OPT_CLOSE_ON_FREE);
	if (!c->cli) {
		free(c);
		return -1;
	}
	gate_box_track(b, c, true);
	gate_http_head_init(&c->hh);
	struct timeval hs = {gate_limits(b)->head_s, 0};
	bufferevent_set_timeouts(c->cli, &hs, NULL);
	bufferevent_setwatermark(c->cli, EV_READ, 0, HEAD_MAX + 1);
	bufferevent_setcb(c->cli, socks ? on_socks : on_cli_head, NULL, head_event, c);
	bufferevent_enable(c->cli, EV_READ | EV_WRITE);
	return 0;
}
