/* splice(2) relay: see relay.h. */
#define _GNU_SOURCE
#include "gate/relay.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define PIPE_CAP (1u << 20)
#define PEEK_MAX 32768

struct dir {
	struct gate_relay *r;
	bool a_to_b;
	int from, to;
	int p[2];
	size_t inpipe, cap;
	char *pre;
	size_t prelen, preoff;
	bool eof, shut, checked, reading;
	struct event *rev, *wev;
};

struct gate_relay {
	int a, b;
	struct dir d[2];
	struct event *idle;
	unsigned idle_s;
	time_t last;
	struct gate_relay_cb cb;
};

static time_t now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec;
}

static void finish(struct gate_relay *r, const char *why)
{
	struct gate_relay_cb cb = r->cb;
	gate_relay_free(r);
	if (cb.done)
		cb.done(cb.arg, why);
}

static void stop_reading(struct dir *d)
{
	if (d->reading) {
		event_del(d->rev);
		d->reading = false;
	}
}

static void start_reading(struct dir *d)
{
	if (!d->reading && !d->eof) {
		event_add(d->rev, NULL);
		d->reading = true;
	}
}

/* Write what is queued for d->to; returns false when r was freed. */
static bool flush(struct dir *d)
{
	struct gate_relay *r = d->r;
	while (d->preoff < d->prelen) {
		ssize_t n = send(d->to, d->pre + d->preoff, d->prelen - d->preoff,
				 MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN) {
			event_add(d->wev, NULL);
			return true;
		}
		if (n < 0) {
			finish(r, "connection reset");
			return false;
		}
		d->preoff += (size_t)n;
	}
	while (d->inpipe) {
		ssize_t n = splice(d->p[0], NULL, d->to, NULL, d->inpipe,
				   SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN) {
			event_add(d->wev, NULL);
			return true;
		}
		if (n <= 0) {
			finish(r, "connection reset");
			return false;
		}
		d->inpipe -= (size_t)n;
	}
	event_del(d->wev);
	if (!d->eof) {
		start_reading(d);
		return true;
	}
	if (!d->shut) {
		/* pass the half-close on: the other side may still answer */
		shutdown(d->to, SHUT_WR);
		d->shut = true;
	}
	if (r->d[0].shut && r->d[1].shut) {
		finish(r, "closed");
		return false;
	}
	return true;
}

static void on_write(evutil_socket_t fd, short what, void *arg)
{
	flush(arg);
}

static void on_read(evutil_socket_t fd, short what, void *arg)
{
	struct dir *d = arg;
	struct gate_relay *r = d->r;
	r->last = now_s();
	if (!d->checked && r->cb.first) {
		char buf[PEEK_MAX];
		ssize_t n = recv(d->from, buf, sizeof buf, MSG_PEEK | MSG_DONTWAIT);
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			return;
		if (n > 0) {
			int v = r->cb.first(r->cb.arg, buf, (size_t)n);
			if (v < 0) {
				finish(r, "refused");
				return;
			}
			if (v == 0 && n < PEEK_MAX)
				return; /* wait for more of the hello */
		}
		d->checked = true;
	}
	for (int rounds = 0; rounds < 16; rounds++) {
		if (d->inpipe >= d->cap) {
			stop_reading(d); /* the other side is slow: wait for it */
			break;
		}
		ssize_t n = splice(d->from, NULL, d->p[1], NULL, d->cap - d->inpipe,
				   SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			break;
		if (n < 0) {
			finish(r, "connection reset");
			return;
		}
		if (n == 0) {
			d->eof = true;
			stop_reading(d);
			break;
		}
		d->inpipe += (size_t)n;
		if (r->cb.count && !r->cb.count(r->cb.arg, d->a_to_b, (size_t)n)) {
			finish(r, "byte limit");
			return;
		}
	}
	flush(d);
}

static void on_idle(evutil_socket_t fd, short what, void *arg)
{
	struct gate_relay *r = arg;
	if (now_s() - r->last >= (time_t)r->idle_s) {
		finish(r, "idle timeout");
		return;
	}
	struct timeval tv = {r->idle_s, 0};
	event_add(r->idle, &tv);
}

static int dir_init(struct gate_relay *r, struct event_base *base, int i, int from, int to,
		    const void *pre, size_t prelen)
{
	struct dir *d = &r->d[i];
	d->r = r;
	d->a_to_b = i == 0;
	d->from = from;
	d->to = to;
	if (pipe2(d->p, O_CLOEXEC | O_NONBLOCK) < 0)
		return -1;
	int sz = fcntl(d->p[1], F_SETPIPE_SZ, PIPE_CAP);
	d->cap = sz > 0 ? (size_t)sz : 65536;
	if (prelen) {
		d->pre = malloc(prelen);
		if (!d->pre)
			return -1;
		memcpy(d->pre, pre, prelen);
		d->prelen = prelen;
	}
	d->checked = i == 1;
	d->rev = event_new(base, from, EV_READ | EV_PERSIST, on_read, d);
	d->wev = event_new(base, to, EV_WRITE | EV_PERSIST, on_write, d);
	return d->rev && d->wev ? 0 : -1;
}

struct gate_relay *gate_relay_new(struct event_base *base, int a, int b, const void *to_b,
				  size_t to_b_len, const void *to_a, size_t to_a_len,
				  unsigned idle_s, const struct gate_relay_cb *cb)
{
	struct gate_relay *r = calloc(1, sizeof *r);
	if (!r) {
		close(a);
		close(b);
		return NULL;
	}
	r->a = a;
	r->b = b;
	r->cb = *cb;
	r->idle_s = idle_s ? idle_s : 300;
	r->last = now_s();
	for (int i = 0; i < 2; i++)
		r->d[i].p[0] = r->d[i].p[1] = -1;
	if (dir_init(r, base, 0, a, b, to_b, to_b_len) < 0 ||
	    dir_init(r, base, 1, b, a, to_a, to_a_len) < 0 ||
	    !(r->idle = event_new(base, -1, 0, on_idle, r))) {
		gate_relay_free(r);
		return NULL;
	}
	struct timeval tv = {r->idle_s, 0};
	event_add(r->idle, &tv);
	for (int i = 0; i < 2; i++) {
		start_reading(&r->d[i]);
		if (r->d[i].prelen)
			event_add(r->d[i].wev, NULL);
	}
	return r;
}

void gate_relay_free(struct gate_relay *r)
{
	if (!r)
		return;
	for (int i = 0; i < 2; i++) {
		struct dir *d = &r->d[i];
		if (d->rev)
			event_free(d->rev);
		if (d->wev)
			event_free(d->wev);
		for (int k = 0; k < 2; k++)
			if (d->p[k] >= 0)
				close(d->p[k]);
		free(d->pre);
	}
	if (r->idle)
		event_free(r->idle);
	close(r->a);
	close(r->b);
	free(r);
}
