/* The agent's event loop: accept the daemon's connections on fd 3, read
 * frames, dispatch them, write replies; SIGCHLD through a signalfd.
 * See agent.h. */
#define _GNU_SOURCE
#include "agent.h"
#include "users.h"

#include "../base/fdpass.h"
#include "../base/utf8.h"
#include "../proto/frame.h"

#include <moat/jail.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define LISTEN_FD 3
#define MAX_CONNS 8
#define MAX_POLL 1024

struct agent_conn {
	int fd;
	char *rbuf;
	size_t rlen, rcap;
	char *wbuf;
	size_t wlen, wcap, woff;
};

static struct agent_conn conns[MAX_CONNS];
/* The listening sockets the host serves (from fd 4: the gateway's two
 * when the sandbox has an egress gateway, the control plane's when it
 * has a session), told apart by their ports: kept so that a restarted
 * daemon can have them again. */
static int gate_fds[2] = {-1, -1};
static int control_fd = -1;

/* The local port of a listening TCP socket, or -1. */
static int listener_port(int fd)
{
	int v = 0;
	socklen_t l = sizeof v;
	if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &v, &l) < 0 || !v)
		return -1;
	struct sockaddr_in sa;
	socklen_t sl = sizeof sa;
	if (getsockname(fd, (struct sockaddr *)&sa, &sl) < 0 || sa.sin_family != AF_INET)
		return -1;
	return ntohs(sa.sin_port);
}

/* Answer "netfds" with the sockets attached (SCM_RIGHTS: the gateway's
 * two, then the control listener, as the reply's flags say), in one
 * blocking sendmsg on a connection used for nothing else. */
static void send_netfds(struct agent_conn *c, json_int_t id)
{
	bool gate = gate_fds[0] >= 0 && gate_fds[1] >= 0;
	bool have = gate || control_fd >= 0;
	int fds[3];
	size_t n = 0;
	if (gate) {
		fds[n++] = gate_fds[0];
		fds[n++] = gate_fds[1];
	}
	if (control_fd >= 0)
		fds[n++] = control_fd;
	json_t *o = have ? json_pack("{s:I,s:b,s:b,s:b}", "id", id, "ok", 1, "gate", gate,
				     "control", control_fd >= 0)
			 : json_pack("{s:I,s:{s:s,s:s}}", "id", id, "error", "code", "not_found",
				     "message", "this sandbox has no listening sockets");
	char *js = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	if (!js)
		return;
	size_t jl = strlen(js);
	unsigned char h[MOAT_FRAME_HDR];
	moat_frame_hdr(h, (uint32_t)jl, 0);
	struct iovec iov[2] = {{.iov_base = h, .iov_len = sizeof h}, {.iov_base = js, .iov_len = jl}};
	int fl = fcntl(c->fd, F_GETFL);
	fcntl(c->fd, F_SETFL, fl & ~O_NONBLOCK);
	ssize_t sent = moat_send_fds(c->fd, iov, 2, fds, n);
	(void)sent;
	fcntl(c->fd, F_SETFL, fl);
	free(js);
}

int64_t agent_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

bool agent_conn_alive(const struct agent_conn *c)
{
	return c && c->fd >= 0;
}

static void conn_close(struct agent_conn *c)
{
	if (c->fd < 0)
		return;
	close(c->fd);
	c->fd = -1;
	free(c->rbuf);
	free(c->wbuf);
	c->rbuf = c->wbuf = NULL;
	c->rlen = c->rcap = c->wlen = c->wcap = c->woff = 0;
	proc_conn_gone(c);
	watch_conn_gone(c);
}

static int wbuf_add(struct agent_conn *c, const void *p, size_t n)
{
	if (c->wlen + n > c->wcap) {
		size_t cap = c->wcap ? c->wcap : 65536;
		while (cap < c->wlen + n)
			cap *= 2;
		char *nb = realloc(c->wbuf, cap);
		if (!nb)
			return -1;
		c->wbuf = nb;
		c->wcap = cap;
	}
	memcpy(c->wbuf + c->wlen, p, n);
	c->wlen += n;
	return 0;
}

static bool corked; /* agent_hold: replies wait in the buffer */

static void conn_flush(struct agent_conn *c)
{
	if (corked)
		return;
	while (c->fd >= 0 && c->woff < c->wlen) {
		ssize_t n = send(c->fd, c->wbuf + c->woff, c->wlen - c->woff, MSG_NOSIGNAL);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno != EAGAIN)
				conn_close(c);
			return;
		}
		c->woff += (size_t)n;
	}
	if (c->fd >= 0 && c->woff == c->wlen) {
		c->woff = c->wlen = 0;
		if (c->wcap > (1u << 20)) { /* give a big reply's memory back */
			free(c->wbuf);
			c->wbuf = NULL;
			c->wcap = 0;
		}
	}
}

void agent_reply(const struct agent_req *r, json_t *obj, const void *data, size_t len)
{
	struct agent_conn *c = r->conn;
	if (!agent_conn_alive(c)) {
		json_decref(obj);
		return;
	}
	json_object_set_new(obj, "id", json_integer(r->id));
	char *js = json_dumps(obj, JSON_COMPACT);
	json_decref(obj);
	size_t jl = js ? strlen(js) : 0;
	if (!js || jl > MOAT_FRAME_JSON_MAX || len > MOAT_FRAME_DATA_MAX) {
		free(js);
		struct agent_req copy = *r;
		if (js)
			agent_fail(&copy, "too_large", "reply too large");
		else
			conn_close(c);
		return;
	}
	unsigned char h[MOAT_FRAME_HDR];
	moat_frame_hdr(h, (uint32_t)jl, (uint32_t)len);
	if (wbuf_add(c, h, sizeof h) < 0 || wbuf_add(c, js, jl) < 0 ||
	    (len && wbuf_add(c, data, len) < 0))
		conn_close(c);
	free(js);
	conn_flush(c);
}

void agent_hold(const struct agent_req *r, bool hold)
{
	corked = hold;
	if (!hold && agent_conn_alive(r->conn))
		conn_flush(r->conn);
}

void agent_fail(const struct agent_req *r, const char *code, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	/* a path cut inside a character is no JSON string: without this the
	 * reply could not be made and the daemon's connection was closed */
	moat_utf8_clean(msg);
	agent_reply(r, json_pack("{s:{s:s,s:s}}", "error", "code", code, "message", msg),
		    NULL, 0);
}

const char *agent_errno_code(int err)
{
	switch (err) {
	case ENOENT:
	case ENOTDIR:
		return "not_found";
	case EISDIR:
		return "is_directory";
	case EACCES:
	case EPERM:
	case EROFS:
	case EBUSY:
		return "forbidden";
	case ENOSPC:
	case EDQUOT:
	case EFBIG:
		return "too_large";
	case ENAMETOOLONG:
	case ELOOP:
	case EINVAL:
		return "invalid_path";
	case ENOTEMPTY:
	case EEXIST:
		return "conflict";
	default:
		return "internal";
	}
}

bool agent_users_mode(void)
{
	return agent_users_on();
}

bool agent_user_ok(const struct agent_req *r, json_t *req)
{
	json_t *v = json_object_get(req, "user");
	const char *u = json_string_value(v);
	if (!v || (u && !strcmp(u, "user")))
		return true;
	if (u && !strcmp(u, "root")) {
		if (agent_users_mode())
			return true;
		agent_fail(r, "forbidden", "this sandbox has no root user");
		return false;
	}
	agent_fail(r, "invalid_request", "user must be \"root\" or \"user\"");
	return false;
}

/* The ops that act as a user of the sandbox ("user" in the request). */
static bool acts_as_user(const char *op)
{
	static const char *const ops[] = {"exec", "read",   "write", "delete", "mkdir",
					  "list", "stat",   "rename", "watch", "patch",
					  "pack", "unpack"};
	for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
		if (!strcmp(op, ops[i]))
			return true;
	return false;
}

/* f->msg stays the caller's. */
static void dispatch(struct agent_conn *c, const struct moat_frame *f)
{
	json_t *req = f->msg;
	json_int_t id = f->id;
	const char *data = f->data;
	size_t dl = f->data_len;
	struct agent_req r = {.conn = c, .id = id};
	const char *op = json_string_value(json_object_get(req, "op"));
	if (!req || !op) {
		agent_fail(&r, "invalid_request", "malformed request");
		return;
	}
	if (acts_as_user(op) && !agent_user_ok(&r, req))
		return;
	entry_new_request();
	if (!strcmp(op, "exec")) {
		proc_exec(&r, req, data, dl);
		return;
	}
	/* users mode: a file operation is the request's user's */
	agent_fs_as(req);
	if (!strcmp(op, "wait"))
		proc_wait(&r, req);
	else if (!strcmp(op, "stdin"))
		proc_stdin(&r, req, data, dl);
	else if (!strcmp(op, "signal"))
		proc_signal(&r, req);
	else if (!strcmp(op, "cancel")) {
		watch_cancel(c, json_integer_value(json_object_get(req, "call")));
		proc_cancel(&r, req);
	} else if (!strcmp(op, "resize"))
		proc_resize(&r, req);
	else if (!strcmp(op, "rename"))
		fs_rename(&r, req);
	else if (!strcmp(op, "watch"))
		watch_start(&r, req);
	else if (!strcmp(op, "watch_wait"))
		watch_wait(&r, req);
	else if (!strcmp(op, "unwatch"))
		watch_stop(&r, req);
	else if (!strcmp(op, "ps"))
		proc_list(&r);
	else if (!strcmp(op, "read"))
		fs_read(&r, req);
	else if (!strcmp(op, "write"))
		fs_write(&r, req, data, dl);
	else if (!strcmp(op, "delete"))
		fs_delete(&r, req);
	else if (!strcmp(op, "mkdir"))
		fs_mkdir(&r, req);
	else if (!strcmp(op, "list"))
		fs_list(&r, req);
	else if (!strcmp(op, "stat"))
		fs_stat(&r, req);
	else if (!strcmp(op, "patch"))
		fs_patch(&r, req, data, dl);
	else if (!strcmp(op, "pack"))
		fs_pack(&r, req);
	else if (!strcmp(op, "unpack"))
		fs_unpack(&r, req, data, dl);
	else if (!strcmp(op, "netfds"))
		send_netfds(c, id);
	else if (!strcmp(op, "ping"))
		agent_reply(&r, json_pack("{s:b,s:I}", "ok", 1, "running",
					  (json_int_t)proc_running()), NULL, 0);
	else
		agent_fail(&r, "invalid_request", "unknown op %.64s", op);
	agent_fs_self();
}

static void conn_read(struct agent_conn *c)
{
	for (;;) {
		if (c->rcap - c->rlen < 65536) {
			size_t cap = c->rcap ? c->rcap * 2 : 131072;
			char *nb = realloc(c->rbuf, cap);
			if (!nb) {
				conn_close(c);
				return;
			}
			c->rbuf = nb;
			c->rcap = cap;
		}
		ssize_t n = recv(c->fd, c->rbuf + c->rlen, c->rcap - c->rlen, 0);
		if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) {
			conn_close(c);
			return;
		}
		if (n < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		c->rlen += (size_t)n;
	}
	size_t off = 0;
	while (c->fd >= 0) {
		struct moat_frame f;
		int st = moat_frame_next(c->rbuf + off, c->rlen - off, &f);
		if (st < 0) {
			conn_close(c);
			return;
		}
		if (st == 0)
			break;
		off += f.size;
		dispatch(c, &f);
		json_decref(f.msg);
	}
	if (c->fd >= 0 && off) {
		memmove(c->rbuf, c->rbuf + off, c->rlen - off);
		c->rlen -= off;
		if (c->rlen == 0 && c->rcap > (1u << 20)) {
			free(c->rbuf);
			c->rbuf = NULL;
			c->rcap = 0;
		}
	}
}

int main(void)
{
	/* Same uid as the sandbox's processes: without this they could
	 * ptrace us or read our memory through /proc. */
	prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
	sigset_t all;
	sigfillset(&all);
	sigprocmask(SIG_BLOCK, &all, NULL);
	sigset_t chld;
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	int sfd = signalfd(-1, &chld, SFD_NONBLOCK | SFD_CLOEXEC);
	if (sfd < 0)
		return 125;
	if (fcntl(LISTEN_FD, F_SETFD, FD_CLOEXEC) < 0 ||
	    fcntl(LISTEN_FD, F_SETFL, O_NONBLOCK) < 0)
		return 125;
	for (int i = 0; i < MAX_CONNS; i++)
		conns[i].fd = -1;
	for (int fd = 4; fd < 7; fd++) {
		int port = listener_port(fd);
		int *slot = port == 3128 ? &gate_fds[0] : port == 1080 ? &gate_fds[1]
			  : port == MOAT_CONTROL_PORT ? &control_fd : NULL;
		if (slot && *slot < 0) {
			*slot = fd;
			fcntl(fd, F_SETFD, FD_CLOEXEC);
		}
	}
	/* users mode is the engine's to say, once, before any request */
	(void)agent_users_on();
	fs_init();
	/* jansson seeds its hash tables from /dev/urandom on first use: do it
	 * now, before any request waits for it (a pool's sandbox starts long
	 * before its first request) */
	json_object_seed(0);
	static struct pollfd pfd[MAX_POLL];
	for (;;) {
		size_t n = 0;
		pfd[n++] = (struct pollfd){.fd = LISTEN_FD, .events = POLLIN};
		pfd[n++] = (struct pollfd){.fd = sfd, .events = POLLIN};
		for (int i = 0; i < MAX_CONNS; i++)
			pfd[n++] = (struct pollfd){
				.fd = conns[i].fd,
				.events = POLLIN | (conns[i].wlen > conns[i].woff ? POLLOUT : 0)};
		size_t wbase = n;
		n += watch_pollfds(pfd + n, MAX_POLL - n);
		size_t base = n;
		n += proc_pollfds(pfd + n, MAX_POLL - n);
		int pt = proc_next_timeout(), wt = watch_next_timeout();
		int r = poll(pfd, n, pt < 0 ? wt : wt < 0 ? pt : pt < wt ? pt : wt);
		if (r < 0 && errno != EINTR)
			return 125;
		if (r > 0 && (pfd[0].revents & POLLIN)) {
			int fd = accept4(LISTEN_FD, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
			if (fd >= 0) {
				int slot = -1;
				for (int i = 0; i < MAX_CONNS && slot < 0; i++)
					if (conns[i].fd < 0)
						slot = i;
				if (slot < 0) /* the oldest yields to a restarted daemon */
					conn_close(&conns[slot = 0]);
				conns[slot].fd = fd;
			}
		}
		if (r > 0 && (pfd[1].revents & POLLIN)) {
			struct signalfd_siginfo si;
			while (read(sfd, &si, sizeof si) == (ssize_t)sizeof si)
				;
			proc_reap();
		}
		for (int i = 0; r > 0 && i < MAX_CONNS; i++) {
			short ev = pfd[2 + i].revents;
			if (conns[i].fd < 0 || pfd[2 + i].fd != conns[i].fd)
				continue;
			if (ev & POLLOUT)
				conn_flush(&conns[i]);
			if (conns[i].fd >= 0 && (ev & (POLLIN | POLLHUP | POLLERR)))
				conn_read(&conns[i]);
		}
		if (r > 0) {
			watch_events(pfd + wbase, base - wbase);
			proc_events(pfd + base, n - base);
		}
		proc_timers();
		watch_timers();
	}
}
