/* See dnsd.h. One epoll descriptor holds the datagram socket, the TCP
 * listener and the open TCP connections (a few, each with a small
 * buffer: the oldest goes when a new one comes and all are taken). */
#define _GNU_SOURCE
#include "dnsd.h"

#include "dns.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define CONNS 8
#define SEEN 4096 /* names past MOAT_DNSD_NAMES: only a hash each, to count them */
#define TCP_QUERY_MAX 1024 /* a query is at most 12+255+4 bytes (plus EDNS) */

struct conn {
	int fd;
	uint64_t seq; /* age, for eviction */
	size_t have;
	uint8_t buf[2 + TCP_QUERY_MAX];
};

struct moat_dnsd {
	int ep, udp, tcp;
	struct conn conns[CONNS];
	uint64_t seq;
	char *names[MOAT_DNSD_NAMES];
	size_t nnames, more;
	uint64_t seen[SEEN];
	void (*on_name)(void *arg, const char *name);
	void *arg;
};

static void record(struct moat_dnsd *d, const char *name)
{
	if (!name[0])
		return;
	for (size_t i = 0; i < d->nnames; i++)
		if (!strcmp(d->names[i], name))
			return;
	if (d->nnames == MOAT_DNSD_NAMES || !(d->names[d->nnames] = strdup(name))) {
		uint64_t h = 14695981039346656037ULL; /* FNV-1a */
		for (const char *p = name; *p; p++)
			h = (h ^ (uint8_t)*p) * 1099511628211ULL;
		size_t n = d->more < SEEN ? d->more : SEEN;
		for (size_t i = 0; i < n; i++)
			if (d->seen[i] == h)
				return;
		if (d->more < SEEN)
			d->seen[d->more] = h;
		d->more++; /* past SEEN: every lookup counts */
		return;
	}
	d->nnames++;
	if (d->on_name)
		d->on_name(d->arg, name);
}

static int watch(struct moat_dnsd *d, int fd, uint64_t tag)
{
	struct epoll_event ev = {.events = EPOLLIN, .data.u64 = tag};
	return epoll_ctl(d->ep, EPOLL_CTL_ADD, fd, &ev);
}

struct moat_dnsd *moat_dnsd_new(int udp, int tcp, void (*on_name)(void *arg, const char *name),
				void *arg)
{
	struct moat_dnsd *d = calloc(1, sizeof *d);
	if (!d)
		goto fail;
	d->udp = udp;
	d->tcp = tcp;
	d->on_name = on_name;
	d->arg = arg;
	for (size_t i = 0; i < CONNS; i++)
		d->conns[i].fd = -1;
	d->ep = epoll_create1(EPOLL_CLOEXEC);
	int fds[2] = {udp, tcp};
	for (int i = 0; i < 2; i++)
		if (fds[i] >= 0 && (fcntl(fds[i], F_SETFL, O_NONBLOCK) < 0 ||
				    (d->ep >= 0 && watch(d, fds[i], (uint64_t)i) < 0)))
			goto fail_d;
	if (d->ep < 0)
		goto fail_d;
	return d;
fail_d:
	moat_dnsd_free(d);
	return NULL;
fail:
	if (udp >= 0)
		close(udp);
	if (tcp >= 0)
		close(tcp);
	return NULL;
}

int moat_dnsd_fd(const struct moat_dnsd *d)
{
	return d->ep;
}

static void conn_close(struct moat_dnsd *d, struct conn *c)
{
	if (c->fd < 0)
		return;
	epoll_ctl(d->ep, EPOLL_CTL_DEL, c->fd, NULL);
	close(c->fd);
	c->fd = -1;
}

static void serve_udp(struct moat_dnsd *d)
{
	/* a bounded batch per call: a flood cannot keep the caller here */
	for (int k = 0; k < 64; k++) {
		uint8_t q[TCP_QUERY_MAX], a[MOAT_DNS_ANSWER_MAX];
		struct sockaddr_storage from;
		socklen_t fl = sizeof from;
		ssize_t n = recvfrom(d->udp, q, sizeof q, MSG_DONTWAIT,
				     (struct sockaddr *)&from, &fl);
		if (n < 0)
			return;
		char name[MOAT_DNS_NAME_CAP];
		size_t al = moat_dns_answer(q, (size_t)n, a, name);
		record(d, name);
		if (al)
			sendto(d->udp, a, al, MSG_DONTWAIT | MSG_NOSIGNAL,
			       (struct sockaddr *)&from, fl);
	}
}

static void accept_tcp(struct moat_dnsd *d)
{
	for (int k = 0; k < CONNS; k++) {
		int fd = accept4(d->tcp, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0)
			return;
		struct conn *c = &d->conns[0];
		for (size_t i = 0; i < CONNS; i++) {
			if (d->conns[i].fd < 0) {
				c = &d->conns[i];
				break;
			}
			if (d->conns[i].seq < c->seq)
				c = &d->conns[i];
		}
		conn_close(d, c);
		c->fd = fd;
		c->seq = ++d->seq;
		c->have = 0;
		if (watch(d, fd, 2 + (uint64_t)(c - d->conns)) < 0)
			conn_close(d, c);
	}
}

static void serve_conn(struct moat_dnsd *d, struct conn *c)
{
	/* a bounded batch per call, as for UDP: a client that keeps writing
	 * must not keep the caller (serve's event loop) here; what is left
	 * stays in the socket, which is still readable for the next call */
	for (int k = 0; k < 4; k++) {
		ssize_t n = recv(c->fd, c->buf + c->have, sizeof c->buf - c->have, MSG_DONTWAIT);
		if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
			conn_close(d, c);
			return;
		}
		if (n < 0)
			return;
		c->have += (size_t)n;
		/* every complete query in the buffer (RFC 7766: several may come) */
		while (c->have >= 2) {
			size_t len = (size_t)c->buf[0] << 8 | c->buf[1];
			if (len > TCP_QUERY_MAX) {
				conn_close(d, c);
				return;
			}
			if (c->have < 2 + len)
				break;
			uint8_t a[2 + MOAT_DNS_ANSWER_MAX];
			char name[MOAT_DNS_NAME_CAP];
			size_t al = moat_dns_answer(c->buf + 2, len, a + 2, name);
			record(d, name);
			if (!al) {
				conn_close(d, c);
				return;
			}
			a[0] = (uint8_t)(al >> 8);
			a[1] = (uint8_t)al;
			/* tiny, on a fresh socket: it fits; if not, the client
			 * is not reading and loses its connection */
			if (send(c->fd, a, 2 + al, MSG_DONTWAIT | MSG_NOSIGNAL) != (ssize_t)(2 + al)) {
				conn_close(d, c);
				return;
			}
			memmove(c->buf, c->buf + 2 + len, c->have - 2 - len);
			c->have -= 2 + len;
		}
	}
}

void moat_dnsd_serve(struct moat_dnsd *d)
{
	struct epoll_event ev[CONNS + 2];
	int n = epoll_wait(d->ep, ev, CONNS + 2, 0);
	for (int i = 0; i < n; i++) {
		uint64_t t = ev[i].data.u64;
		if (t == 0)
			serve_udp(d);
		else if (t == 1)
			accept_tcp(d);
		else if (t - 2 < CONNS && d->conns[t - 2].fd >= 0)
			serve_conn(d, &d->conns[t - 2]);
	}
}

size_t moat_dnsd_names(const struct moat_dnsd *d, const char *const **names, size_t *more)
{
	*names = (const char *const *)d->names;
	*more = d->more;
	return d->nnames;
}

void moat_dnsd_free(struct moat_dnsd *d)
{
	if (!d)
		return;
	for (size_t i = 0; i < CONNS; i++)
		conn_close(d, &d->conns[i]);
	if (d->udp >= 0)
		close(d->udp);
	if (d->tcp >= 0)
		close(d->tcp);
	if (d->ep >= 0)
		close(d->ep);
	for (size_t i = 0; i < d->nnames; i++)
		free(d->names[i]);
	free(d);
}

void moat_dnsd_short(const char *name, char *out, size_t cap)
{
	size_t l = strlen(name);
	if (l < cap) {
		memcpy(out, name, l + 1);
		return;
	}
	if (cap < 4) {
		out[0] = '\0';
		return;
	}
	memcpy(out, name, cap - 4);
	memcpy(out + cap - 4, "...", 4);
}
