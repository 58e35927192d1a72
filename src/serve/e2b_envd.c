/* E2B's envd data plane for one sandbox (docs/e2b.md; the wire is in
 * e2b-protocol.md §3): the Connect-RPC services process.Process and
 * filesystem.Filesystem (JSON codec), GET/POST /files, GET /health and
 * GET /envs, onto the operation core (core.h). Nothing here speaks to an
 * agent. A request that waits for the core keeps a struct call until its
 * answer went out or its client left.
 *
 * Streams (Start, Connect, WatchDir) answer 200 application/connect+json
 * once the request is a well-formed Connect stream, and every error after
 * that goes in the end-stream frame, as envd (connect-go) does: a non-200
 * stream is mapped from its status alone by the clients, which loses the
 * code. */
#define _GNU_SOURCE
#include "e2b_int.h"

#include "box.h"
#include "connect.h"
#include "core.h"
#include "http.h"
#include "multipart.h"
#include "../base/utf8.h"
#include "../proto/entries.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <inttypes.h>
#include <openssl/evp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define PATH_CAP 4096
#define MAX_PARTS 1000
#define KEEPALIVE_DEFAULT_S 90
#define DATA_FRAME_MAX (64u << 10) /* output bytes per data event */
#define DEADLINE_MSG "context deadline exceeded"

/* ---- small helpers -------------------------------------------------------- */

static const char *hdr(struct evhttp_request *req, const char *name)
{
	return evhttp_find_header(evhttp_request_get_input_headers(req), name);
}

static const char *home_of(const char *user)
{
	return !strcmp(user, "root") ? "/root" : "/home/user";
}

/* Lexically clean an absolute path: no "//", ".", ".."; "/" stays. */
static int path_clean(const char *in, char *out, size_t cap)
{
	size_t o = 0;
	if (cap < 2)
		return -1;
	out[o++] = '/';
	const char *p = in;
	while (*p) {
		while (*p == '/')
			p++;
		if (!*p)
			break;
		const char *s = p;
		while (*p && *p != '/')
			p++;
		size_t n = (size_t)(p - s);
		if (n == 1 && s[0] == '.')
			continue;
		if (n == 2 && s[0] == '.' && s[1] == '.') {
			if (o > 1) {
				o--; /* the '/' after the last component */
				while (o > 1 && out[o - 1] != '/')
					o--;
			}
			continue;
		}
		if (o + n + 1 >= cap)
			return -1;
		memcpy(out + o, s, n);
		o += n;
		out[o++] = '/';
	}
	if (o > 1)
		o--; /* no trailing '/' */
	out[o] = '\0';
	return 0;
}

/* envd's ExpandAndResolve: "" is the home, "~" and "~/x" are under it,
 * relative paths are taken from it; "~other" is refused. */
static int resolve(const char *user, const char *in, char *out, size_t cap, char *msg,
		   size_t mcap)
{
	char tmp[PATH_CAP * 2];
	const char *home = home_of(user);
	if (!in)
		in = "";
	if (strlen(in) >= PATH_CAP) {
		snprintf(msg, mcap, "path is too long (over %d bytes)", PATH_CAP - 1);
		return -1;
	}
	if (in[0] == '~') {
		if (in[1] && in[1] != '/') {
			snprintf(msg, mcap,
				 "failed to expand path '%s' for user '%s': cannot expand "
				 "user-specific home dir",
				 in, user);
			return -1;
		}
		snprintf(tmp, sizeof tmp, "%s/%s", home, in + 1);
	} else if (in[0] == '/') {
		snprintf(tmp, sizeof tmp, "%s", in);
	} else {
		snprintf(tmp, sizeof tmp, "%s/%s", home, in);
	}
	if (path_clean(tmp, out, cap) < 0) {
		snprintf(msg, mcap, "path is too long (over %d bytes)", PATH_CAP - 1);
		return -1;
	}
	return 0;
}

static bool user_known(const char *u)
{
	return !strcmp(u, "user") || !strcmp(u, "root");
}

static const char *base_name(const char *path)
{
	const char *s = strrchr(path, '/');
	return s && s[1] ? s + 1 : path;
}

/* Go's os.FileMode.String() for a type letter (0: regular) and mode bits. */
static void go_perm(char out[16], char type, unsigned mode)
{
	char *p = out;
	if (type)
		*p++ = type;
	if (mode & 04000)
		*p++ = 'u';
	if (mode & 02000)
		*p++ = 'g';
	if (mode & 01000)
		*p++ = 't';
	if (p == out)
		*p++ = '-';
	static const char rwx[] = "rwxrwxrwx";
	for (int i = 0; i < 9; i++)
		*p++ = (mode & (1u << (8 - i))) ? rwx[i] : '-';
	*p = '\0';
}

/* Go's syscall.Signal.String() (what envd's "signal: ..." status says). */
static const char *go_signal(int sig)
{
	static const char *const names[] = {
		NULL, "hangup", "interrupt", "quit", "illegal instruction",
		"trace/breakpoint trap", "aborted", "bus error", "floating point exception",
		"killed", "user defined signal 1", "segmentation fault", "user defined signal 2",
		"broken pipe", "alarm clock", "terminated", "stack fault", "child exited",
		"continued", "stopped (signal)", "stopped", "stopped (tty input)",
		"stopped (tty output)", "urgent I/O condition", "CPU time limit exceeded",
		"file size limit exceeded", "virtual timer expired", "profiling timer expired",
		"window changed", "I/O possible", "power failure", "bad system call"};
	if (sig > 0 && (size_t)sig < sizeof names / sizeof names[0])
		return names[sig];
	return NULL;
}

static const char *jstr(const json_t *o, const char *k)
{
	return json_string_value(json_object_get(o, k));
}

static int64_t jint(const json_t *o, const char *k)
{
	json_t *v = json_object_get(o, k);
	return json_is_integer(v) ? (int64_t)json_integer_value(v) : 0;
}

/* ---- proto messages ---------------------------------------------------- */

static const char *const file_types[] = {"FILE_TYPE_UNSPECIFIED", "FILE_TYPE_FILE",
					 "FILE_TYPE_DIRECTORY", "FILE_TYPE_SYMLINK"};

static int file_type_of(const char *t)
{
	if (!t)
		return 0;
	if (!strcmp(t, "file"))
		return 1;
	if (!strcmp(t, "dir"))
		return 2;
	if (!strcmp(t, "symlink"))
		return 3;
	return 0;
}

/* A core entry as envd's EntryInfo. Symlinks report their target's type
 * when the core tells it ("target_type"), and symlinkTarget absolute. */
static json_t *entry_info(const json_t *en)
{
	if (!json_is_object(en))
		return json_object();
	const char *name = jstr(en, "name"), *path = jstr(en, "path"), *type = jstr(en, "type");
	const char *target = jstr(en, "symlink_target");
	if (!target)
		target = jstr(en, "target");
	int ft = file_type_of(type);
	char tc = 0;
	if (ft == 2)
		tc = 'd';
	else if (ft == 3)
		tc = 'L';
	else if (ft == 0)
		tc = '?';
	if (ft == 3) {
		int tt = file_type_of(jstr(en, "target_type"));
		if (tt == 1 || tt == 2)
			ft = tt;
	}
	unsigned mode = (unsigned)jint(en, "mode");
	char perm[16];
	go_perm(perm, tc, mode);
	json_t *o = json_object();
	if (!o)
		return NULL;
	json_object_set_new(o, "name", json_string(name ? name : (path ? base_name(path) : "")));
	json_object_set_new(o, "type", json_string(file_types[ft]));
	json_object_set_new(o, "path", json_string(path ? path : ""));
	json_object_set_new(o, "size", pj_int64_json(jint(en, "size")));
	json_object_set_new(o, "mode", json_integer(mode & 0777));
	json_object_set_new(o, "permissions", json_string(perm));
	const char *owner = jstr(en, "owner"), *group = jstr(en, "group");
	char num[24];
	if (owner) {
		json_object_set_new(o, "owner", json_string(owner));
	} else {
		snprintf(num, sizeof num, "%" PRId64, jint(en, "uid"));
		json_object_set_new(o, "owner", json_string(num));
	}
	if (group) {
		json_object_set_new(o, "group", json_string(group));
	} else {
		snprintf(num, sizeof num, "%" PRId64, jint(en, "gid"));
		json_object_set_new(o, "group", json_string(num));
	}
	json_object_set_new(o, "modifiedTime",
			    pj_timestamp(jint(en, "mtime"), jint(en, "mtime_ns")));
	if (target) {
		char joined[PATH_CAP * 2], clean[PATH_CAP];
		if (target[0] == '/' || !path) {
			snprintf(joined, sizeof joined, "%s", target);
		} else {
			const char *slash = strrchr(path, '/');
			int dl = slash ? (int)(slash - path) : 0;
			snprintf(joined, sizeof joined, "%.*s/%s", dl, path, target);
		}
		if (joined[0] == '/' && path_clean(joined, clean, sizeof clean) == 0)
			json_object_set_new(o, "symlinkTarget", json_string(clean));
		else
			json_object_set_new(o, "symlinkTarget", json_string(target));
	}
	json_t *md = json_object_get(en, "metadata");
	if (json_is_object(md) && json_object_size(md))
		json_object_set(o, "metadata", md);
	return o;
}

static const char *event_type(const char *t)
{
	static const struct {
		const char *core, *envd;
	} m[] = {{"create", "EVENT_TYPE_CREATE"}, {"write", "EVENT_TYPE_WRITE"},
		 {"remove", "EVENT_TYPE_REMOVE"}, {"rename", "EVENT_TYPE_RENAME"},
		 {"chmod", "EVENT_TYPE_CHMOD"}};
	for (size_t i = 0; t && i < sizeof m / sizeof m[0]; i++)
		if (!strcmp(t, m[i].core))
			return m[i].envd;
	return NULL;
}

/* A core watch event as a FilesystemEvent, or NULL (overflow, unknown). */
static json_t *fs_event(const json_t *ev)
{
	const char *t = event_type(jstr(ev, "type"));
	const char *name = jstr(ev, "name");
	if (!t || !name)
		return NULL;
	json_t *o = json_pack("{s:s,s:s}", "name", name, "type", t);
	json_t *en = json_object_get(ev, "entry");
	if (o && json_is_object(en))
		json_object_set_new(o, "entry", entry_info(en));
	return o;
}

/* ---- a request in flight ----------------------------------------------------- */

enum kind { K_START, K_CONNECT, K_WATCH, K_PLIST, K_INPUT, K_SIGNAL, K_CLOSE, K_UPDATE,
	    K_STREAMIN, K_STAT, K_MKDIR, K_MOVE, K_LIST, K_REMOVE, K_WCREATE, K_WEVENTS,
	    K_WREMOVE, K_FREAD, K_FWRITE };

struct upload {
	char path[PATH_CAP];
	const char *data; /* into the request body (alive until the reply) */
	size_t len;
};

struct call {
	struct evhttp_request *req;
	struct box *b;
	enum kind kind;
	bool stream;      /* a server stream (Start, Connect, WatchDir) */
	bool started;     /* its 200 and headers went out */
	bool first_sent;  /* its first event (start) went out */
	bool by_ps;       /* waiting for core_ps to resolve the selector */
	bool tty;         /* the process has a pty: output is "pty" */
	struct core_op *op;
	struct event *hangup, *keepalive, *deadline;
	struct timeval ka;
	char user[8];
	char path[PATH_CAP];
	json_t *msg;      /* the request message, kept for what the core borrows */
	json_t *argv;
	int64_t pid;
	const char *tag;  /* into msg */
	unsigned cols, rows;
	char *data;       /* SendInput bytes */
	size_t len;
	const char *sig;
	struct mp_parts parts;
	struct upload *up;
	size_t nup, next;
	json_t *meta;     /* X-Metadata-* of an upload */
	json_t *out;      /* the upload's answer */
};

static void call_free(struct call *c)
{
	if (c->hangup)
		event_free(c->hangup);
	if (c->keepalive)
		event_free(c->keepalive);
	if (c->deadline)
		event_free(c->deadline);
	json_decref(c->msg);
	json_decref(c->argv);
	json_decref(c->meta);
	json_decref(c->out);
	free(c->data);
	free(c->up);
	mp_free(&c->parts);
	free(c);
}

/* Detach from the connection before answering (its close must not free
 * the call a second time). */
static void call_detach(struct call *c)
{
	struct evhttp_connection *conn = evhttp_request_get_connection(c->req);
	if (conn)
		http_set_closecb(conn, NULL, NULL);
	if (c->hangup) {
		event_free(c->hangup);
		c->hangup = NULL;
	}
}

static void cancel_op(struct call *c)
{
	if (c->op)
		core_op_cancel(c->op); /* a detached exec keeps running */
	c->op = NULL;
}

/* The client went away (as api.c's on_client_gone): no answer, the core
 * forgets the op. */
static void on_client_gone(struct evhttp_connection *conn, void *arg)
{
	struct call *c = arg;
	cancel_op(c);
	struct evhttp_request *req = c->req;
	bool detached = !evhttp_request_get_connection(req);
	bool started = c->started;
	call_free(c);
	if (detached && started)
		evhttp_send_reply_end(req);
	else if (detached)
		evhttp_send_reply(req, 500, "Client gone", NULL);
}

/* evhttp does not read a connection whose request is being answered: see
 * the peer's close ourselves (EV_CLOSED), as api.c's on_hangup. */
static void on_hangup(evutil_socket_t fd, short what, void *arg)
{
	struct call *c = arg;
	if (c->started) {
		struct evhttp_request *req = c->req;
		cancel_op(c);
		call_detach(c);
		call_free(c);
		evhttp_send_reply_end(req);
		return;
	}
	struct evhttp_connection *conn = evhttp_request_get_connection(c->req);
	if (conn)
		evhttp_connection_free(conn);
}

static struct call *call_new(struct evhttp_request *req, struct box *b, enum kind k)
{
	struct call *c = calloc(1, sizeof *c);
	if (!c)
		return NULL;
	c->req = req;
	c->b = b;
	c->kind = k;
	snprintf(c->user, sizeof c->user, "user");
	struct evhttp_connection *conn = evhttp_request_get_connection(req);
	http_set_closecb(conn, on_client_gone, c);
	struct bufferevent *bev = conn ? evhttp_connection_get_bufferevent(conn) : NULL;
	const struct core_config *cf = core_config();
	if (bev && cf && cf->base) {
		c->hangup = event_new(cf->base, bufferevent_getfd(bev), EV_CLOSED, on_hangup, c);
		if (c->hangup && event_add(c->hangup, NULL) < 0) {
			event_free(c->hangup);
			c->hangup = NULL;
		}
	}
	return c;
}

/* ---- answers ------------------------------------------------------------ */

static void connect_reply(struct evhttp_request *req, enum connect_code code, const char *msg)
{
	char m[600];
	snprintf(m, sizeof m, "%s", msg ? msg : connect_code_name(code));
	moat_utf8_clean(m);
	int status = connect_code_http(code);
	json_t *j = connect_error_json(code, m);
	if (!j)
		j = json_pack("{s:s,s:s}", "code", connect_code_name(code), "message", "error");
	http_json(req, status ? status : 500, j);
}

/* A whole stream that is only its end-stream frame (no call yet). */
static void stream_error_now(struct evhttp_request *req, enum connect_code code,
			     const char *msg)
{
	char m[600];
	snprintf(m, sizeof m, "%s", msg ? msg : "");
	moat_utf8_clean(m);
	struct moat_buf mb = {0};
	struct evbuffer *eb = evbuffer_new();
	struct evkeyvalq *h = evhttp_request_get_output_headers(req);
	evhttp_add_header(h, "Content-Type", "application/connect+json");
	evhttp_add_header(h, "Cache-Control", "no-store");
	if (eb && connect_end_stream(&mb, code, m) == 0)
		evbuffer_add(eb, mb.p, mb.len);
	evhttp_send_reply(req, 200, "OK", eb);
	if (eb)
		evbuffer_free(eb);
	moat_buf_free(&mb);
}

static void stream_begin(struct call *c)
{
	if (c->started)
		return;
	struct evkeyvalq *h = evhttp_request_get_output_headers(c->req);
	evhttp_add_header(h, "Content-Type", "application/connect+json");
	evhttp_add_header(h, "Cache-Control", "no-store");
	evhttp_send_reply_start(c->req, 200, "OK");
	c->started = true;
}

static void stream_put(struct call *c, struct moat_buf *m)
{
	stream_begin(c);
	struct evbuffer *eb = evbuffer_new();
	if (eb) {
		evbuffer_add(eb, m->p, m->len);
		evhttp_send_reply_chunk(c->req, eb);
		evbuffer_free(eb);
	}
	moat_buf_free(m);
}

/* One data envelope of msg (stolen); the silence restarts. */
static void stream_send(struct call *c, json_t *msg)
{
	struct moat_buf m = {0};
	if (!msg)
		return;
	if (connect_env_json(&m, msg) < 0) {
		moat_buf_free(&m);
		return;
	}
	stream_put(c, &m);
	if (c->keepalive)
		event_add(c->keepalive, &c->ka);
}

/* The end-stream frame (code OK: {}), the end of the body, the call freed. */
static void stream_end(struct call *c, enum connect_code code, const char *msg)
{
	char m[600];
	snprintf(m, sizeof m, "%s", msg ? msg : "");
	moat_utf8_clean(m);
	struct moat_buf mb = {0};
	if (connect_end_stream(&mb, code, code == CONNECT_OK ? NULL : m) == 0)
		stream_put(c, &mb);
	else
		stream_begin(c);
	moat_buf_free(&mb);
	struct evhttp_request *req = c->req;
	cancel_op(c);
	call_detach(c);
	call_free(c);
	evhttp_send_reply_end(req);
}

static void unary_ok(struct call *c, json_t *msg)
{
	call_detach(c);
	http_json(c->req, 200, msg ? msg : json_object());
	call_free(c);
}

static void fail(struct call *c, enum connect_code code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void fail(struct call *c, enum connect_code code, const char *fmt, ...)
{
	char msg[600];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	if (c->stream) {
		stream_end(c, code, msg);
		return;
	}
	cancel_op(c);
	call_detach(c);
	connect_reply(c->req, code, msg);
	call_free(c);
}

/* REST (/files) errors: {"code":status,"message"}. */
static void rest_fail(struct call *c, int status, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void rest_fail(struct call *c, int status, const char *fmt, ...)
{
	char msg[600];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	moat_utf8_clean(msg);
	cancel_op(c);
	call_detach(c);
	e2b_envd_error(c->req, status, "%s", msg);
	call_free(c);
}

static enum connect_code code_of(const struct core_err *e)
{
	return connect_code_from_moat(e->code, e->status);
}

/* envd answers a process that could not start with invalid_argument (a
 * missing cwd, a missing binary). */
static enum connect_code start_code(const struct core_err *e)
{
	if (e->status == 403)
		return CONNECT_PERMISSION_DENIED;
	if (e->status == 429)
		return CONNECT_RESOURCE_EXHAUSTED;
	if (e->status >= 400 && e->status < 500 && e->status != 401)
		return CONNECT_INVALID_ARGUMENT;
	return code_of(e);
}

static bool no_space(const struct core_err *e)
{
	return !strcmp(e->code, "no_space") || strcasestr(e->msg, "no space") ||
	       strstr(e->msg, "ENOSPC") || strcasestr(e->msg, "disk full");
}

/* ---- timers ------------------------------------------------------------- */

static void on_keepalive(evutil_socket_t fd, short what, void *arg)
{
	struct call *c = arg;
	if (c->kind == K_WATCH)
		stream_send(c, json_pack("{s:{}}", "keepalive"));
	else
		stream_send(c, json_pack("{s:{s:{}}}", "event", "keepalive"));
}

static void on_deadline(evutil_socket_t fd, short what, void *arg)
{
	stream_end(arg, CONNECT_DEADLINE_EXCEEDED, DEADLINE_MSG);
}

/* Keepalive-Ping-Interval (seconds, default 90) once the first frame is out. */
static void keepalive_start(struct call *c)
{
	const struct core_config *cf = core_config();
	if (c->keepalive || !cf || !cf->base)
		return;
	const char *h = hdr(c->req, "Keepalive-Ping-Interval");
	long s = KEEPALIVE_DEFAULT_S;
	if (h) {
		char *end;
		errno = 0;
		long v = strtol(h, &end, 10);
		if (!errno && end != h && !*end && v > 0)
			s = v > 86400 ? 86400 : v;
	}
	c->ka.tv_sec = s;
	c->ka.tv_usec = 0;
	c->keepalive = evtimer_new(cf->base, on_keepalive, c);
	if (c->keepalive)
		event_add(c->keepalive, &c->ka);
}

static void deadline_start(struct call *c, int64_t ms)
{
	const struct core_config *cf = core_config();
	if (ms <= 0 || !cf || !cf->base)
		return;
	struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
	c->deadline = evtimer_new(cf->base, on_deadline, c);
	if (c->deadline)
		event_add(c->deadline, &tv);
}

/* ---- process events ------------------------------------------------------ */

static void send_start(struct call *c, int64_t pid)
{
	if (c->first_sent)
		return;
	c->first_sent = true;
	stream_send(c, json_pack("{s:{s:{s:I}}}", "event", "start", "pid", (json_int_t)pid));
	keepalive_start(c);
}

static void send_data(struct call *c, const char *field, const char *p, size_t n)
{
	while (n) {
		size_t k = n > DATA_FRAME_MAX ? DATA_FRAME_MAX : n;
		json_t *d = json_object();
		if (d)
			json_object_set_new(d, field, pj_bytes_json(p, k));
		stream_send(c, json_pack("{s:{s:o}}", "event", "data", d));
		p += k;
		n -= k;
	}
}

static void on_started(void *arg, int64_t pid)
{
	struct call *c = arg;
	c->pid = pid;
	send_start(c, pid);
}

static void on_output(void *arg, const char *out, size_t olen, const char *err, size_t elen)
{
	struct call *c = arg;
	send_start(c, c->pid);
	if (olen)
		send_data(c, c->tty ? "pty" : "stdout", out, olen);
	if (elen)
		send_data(c, "stderr", err, elen);
}

/* The end event as envd's Go ProcessState gives it: a signal is exitCode
 * -1, exited false, "signal: killed"; an exit "exit status N" (error set
 * unless N is 0). */
static void on_ended(void *arg, const struct core_exit *x)
{
	struct call *c = arg;
	c->op = NULL;
	send_start(c, x->pid);
	if (x->timed_out) {
		stream_end(c, CONNECT_DEADLINE_EXCEEDED, DEADLINE_MSG);
		return;
	}
	char status[64];
	int code = x->exit_code;
	bool exited = true;
	if (x->signal > 0) {
		const char *n = go_signal(x->signal);
		if (n)
			snprintf(status, sizeof status, "signal: %s", n);
		else
			snprintf(status, sizeof status, "signal: signal %d", x->signal);
		code = -1;
		exited = false;
	} else {
		snprintf(status, sizeof status, "exit status %d", code);
	}
	json_t *end = json_pack("{s:i,s:b,s:s}", "exitCode", code, "exited", exited, "status",
				status);
	if (end && (x->signal > 0 || code != 0))
		json_object_set_new(end, "error", json_string(status));
	stream_send(c, json_pack("{s:{s:o}}", "event", "end", end));
	stream_end(c, CONNECT_OK, NULL);
}

static void on_failed(void *arg, const struct core_err *e)
{
	struct call *c = arg;
	c->op = NULL;
	stream_end(c, c->first_sent ? code_of(e) : start_code(e), e->msg);
}

static const struct core_exec_cbs exec_cbs = {
	.started = on_started, .output = on_output, .ended = on_ended, .failed = on_failed};

/* ---- request fields ------------------------------------------------------ */

/* An optional string field: 0 (absent: *out NULL), 1, -1 after answering. */
static int opt_str(struct call *c, const json_t *o, const char *camel, const char *snake,
		   const char **out)
{
	json_t *v = pj_get(o, camel, snake);
	*out = NULL;
	if (!v)
		return 0;
	if (!json_is_string(v)) {
		fail(c, CONNECT_INVALID_ARGUMENT, "%s: expected a string", camel);
		return -1;
	}
	*out = json_string_value(v);
	return 1;
}

static int opt_bool(struct call *c, const json_t *o, const char *camel, const char *snake,
		    bool *out)
{
	json_t *v = pj_get(o, camel, snake);
	if (!v)
		return 0;
	if (pj_bool(v, out) < 0) {
		fail(c, CONNECT_INVALID_ARGUMENT, "%s: expected a boolean", camel);
		return -1;
	}
	return 1;
}

static int opt_u32(struct call *c, const json_t *o, const char *camel, const char *snake,
		   uint32_t *out)
{
	json_t *v = pj_get(o, camel, snake);
	if (!v)
		return 0;
	if (pj_uint32(v, out) < 0) {
		fail(c, CONNECT_INVALID_ARGUMENT, "%s: expected an unsigned 32-bit integer", camel);
		return -1;
	}
	return 1;
}

/* A path field resolved for the call's user into c->path; -1 answered. */
static int path_field(struct call *c, const json_t *o, const char *camel, const char *snake,
		      char *out)
{
	const char *p;
	if (opt_str(c, o, camel, snake, &p) < 0)
		return -1;
	char msg[600];
	if (resolve(c->user, p, out, PATH_CAP, msg, sizeof msg) < 0) {
		fail(c, CONNECT_INVALID_ARGUMENT, "%s", msg);
		return -1;
	}
	return 0;
}

/* ProcessSelector {pid} | {tag}: c->pid, or c->tag to look up. */
static int selector(struct call *c, const json_t *msg)
{
	json_t *sel = pj_get(msg, "process", "process");
	if (!json_is_object(sel)) {
		fail(c, CONNECT_INVALID_ARGUMENT, "process: a selector {pid} or {tag} is required");
		return -1;
	}
	uint32_t pid;
	int r = opt_u32(c, sel, "pid", "pid", &pid);
	if (r < 0)
		return -1;
	if (r) {
		c->pid = pid;
		return 0;
	}
	if (opt_str(c, sel, "tag", "tag", &c->tag) < 0)
		return -1;
	if (!c->tag) {
		fail(c, CONNECT_INVALID_ARGUMENT, "process: a selector {pid} or {tag} is required");
		return -1;
	}
	return 0;
}

/* ---- process.Process --------------------------------------------------------- */

static void on_done(void *arg, json_t *result, const char *data, size_t len,
		    const struct core_err *e);
static void proceed(struct call *c);

/* Look the selector up in core_ps (tags; Connect also learns the tty). */
static void by_ps(struct call *c)
{
	struct core_err e = {0};
	c->by_ps = true;
	c->op = core_ps(c->b, on_done, c, &e);
	if (!c->op)
		fail(c, code_of(&e), "%s", e.msg);
}

static void select_then(struct call *c)
{
	if (c->tag || c->kind == K_CONNECT)
		by_ps(c);
	else
		proceed(c);
}

static void ps_found(struct call *c, json_t *result)
{
	json_t *ps = json_object_get(result, "processes");
	size_t i;
	json_t *p;
	json_array_foreach(ps, i, p) {
		if (json_is_false(json_object_get(p, "running")))
			continue;
		const char *tag = jstr(p, "tag");
		int64_t pid = jint(p, "process_id");
		if (c->tag ? (tag && !strcmp(tag, c->tag)) : pid == c->pid) {
			c->pid = pid;
			c->tty = json_is_true(json_object_get(p, "tty"));
			proceed(c);
			return;
		}
	}
	if (c->tag)
		fail(c, CONNECT_NOT_FOUND, "process with tag %s not found", c->tag);
	else
		fail(c, CONNECT_NOT_FOUND, "process with pid %" PRId64 " not found", c->pid);
}

static void proceed(struct call *c)
{
	struct core_err e = {0};
	switch (c->kind) {
	case K_CONNECT:
		c->op = core_attach(c->b, c->pid, true, -1, &exec_cbs, c, &e);
		if (c->op)
			send_start(c, c->pid);
		break;
	case K_INPUT:
		c->op = core_stdin(c->b, c->pid, c->data ? c->data : "", c->len, false, on_done, c,
				   &e);
		break;
	case K_CLOSE:
		c->op = core_stdin(c->b, c->pid, NULL, 0, true, on_done, c, &e);
		break;
	case K_SIGNAL:
		c->op = core_signal(c->b, c->pid, c->sig, on_done, c, &e);
		break;
	case K_UPDATE:
		c->op = core_resize(c->b, c->pid, c->cols, c->rows, on_done, c, &e);
		break;
	default:
		fail(c, CONNECT_INTERNAL, "unexpected call");
		return;
	}
	if (!c->op) {
		if (!strcmp(e.code, "not_found"))
			fail(c, CONNECT_NOT_FOUND, "process with pid %" PRId64 " not found", c->pid);
		else
			fail(c, code_of(&e), "%s", e.msg);
	}
}

static int timeout_header(struct call *c, int64_t *ms)
{
	if (connect_timeout_ms(hdr(c->req, "Connect-Timeout-Ms"), ms) < 0) {
		fail(c, CONNECT_INVALID_ARGUMENT, "Connect-Timeout-Ms: expected 1 to 10 digits");
		return -1;
	}
	return 0;
}

static void p_start(struct call *c, json_t *msg)
{
	json_t *proc = pj_get(msg, "process", "process");
	if (!json_is_object(proc)) {
		fail(c, CONNECT_INVALID_ARGUMENT, "process: required");
		return;
	}
	const char *cmd, *cwd, *tag;
	if (opt_str(c, proc, "cmd", "cmd", &cmd) < 0 || opt_str(c, proc, "cwd", "cwd", &cwd) < 0 ||
	    opt_str(c, msg, "tag", "tag", &tag) < 0)
		return;
	if (!cmd || !*cmd) {
		fail(c, CONNECT_INVALID_ARGUMENT, "process.cmd: required");
		return;
	}
	c->argv = json_array();
	if (!c->argv || json_array_append_new(c->argv, json_string(cmd)) < 0) {
		fail(c, CONNECT_INTERNAL, "out of memory");
		return;
	}
	json_t *args = pj_get(proc, "args", "args");
	size_t i;
	json_t *a;
	if (args && !json_is_array(args)) {
		fail(c, CONNECT_INVALID_ARGUMENT, "process.args: expected an array of strings");
		return;
	}
	json_array_foreach(args, i, a) {
		if (!json_is_string(a)) {
			fail(c, CONNECT_INVALID_ARGUMENT, "process.args[%zu]: expected a string", i);
			return;
		}
		json_array_append(c->argv, a);
	}
	json_t *envs = pj_get(proc, "envs", "envs");
	if (envs) {
		const char *k;
		json_t *v;
		if (!json_is_object(envs)) {
			fail(c, CONNECT_INVALID_ARGUMENT, "process.envs: expected an object of strings");
			return;
		}
		json_object_foreach(envs, k, v) {
			if (!json_is_string(v)) {
				fail(c, CONNECT_INVALID_ARGUMENT, "process.envs.%s: expected a string", k);
				return;
			}
		}
	}
	char msgbuf[600];
	if (resolve(c->user, cwd, c->path, sizeof c->path, msgbuf, sizeof msgbuf) < 0) {
		fail(c, CONNECT_INVALID_ARGUMENT, "%s", msgbuf);
		return;
	}
	bool use_stdin = true;
	if (opt_bool(c, msg, "stdin", "stdin", &use_stdin) < 0)
		return;
	uint32_t cols = 0, rows = 0;
	json_t *pty = pj_get(msg, "pty", "pty");
	if (pty) {
		json_t *size = pj_get(pty, "size", "size");
		if (!json_is_object(pty) || (size && !json_is_object(size))) {
			fail(c, CONNECT_INVALID_ARGUMENT, "pty: expected {size:{cols,rows}}");
			return;
		}
		if (size && (opt_u32(c, size, "cols", "cols", &cols) < 0 ||
			     opt_u32(c, size, "rows", "rows", &rows) < 0))
			return;
		c->tty = true;
	}
	int64_t timeout = 0;
	if (timeout_header(c, &timeout) < 0)
		return;
	struct core_exec_req r = {
		.argv = c->argv,
		.env = envs,
		.cwd = c->path,
		.user = c->user,
		.tty = c->tty,
		.cols = cols > 65535 ? 65535 : cols,
		.rows = rows > 65535 ? 65535 : rows,
		.stdin_mode = (use_stdin || c->tty) ? CORE_STDIN_PIPE : CORE_STDIN_NULL,
		.timeout_ms = timeout,
		.tag = tag,
		.stream = true,
		.yield_ms = -1,
		.detached = true, /* a client leaving does not kill it (envd) */
	};
	struct core_err e = {0};
	c->op = core_exec(c->b, &r, &exec_cbs, c, &e);
	if (!c->op) {
		fail(c, start_code(&e), "%s", e.msg);
		return;
	}
	/* the core kills it at the deadline and says timed_out; this only
	 * ends a stream whose end never came */
	if (timeout > 0)
		deadline_start(c, timeout + 5000);
}

static void p_connect(struct call *c, json_t *msg)
{
	int64_t timeout = 0;
	if (selector(c, msg) < 0 || timeout_header(c, &timeout) < 0)
		return;
	deadline_start(c, timeout); /* bounds the stream, not the process */
	select_then(c);
}

static void p_list(struct call *c, json_t *msg)
{
	struct core_err e = {0};
	c->op = core_ps(c->b, on_done, c, &e);
	if (!c->op)
		fail(c, code_of(&e), "%s", e.msg);
}

static void p_input(struct call *c, json_t *msg)
{
	if (selector(c, msg) < 0)
		return;
	json_t *in = pj_get(msg, "input", "input");
	if (in && !json_is_object(in)) {
		fail(c, CONNECT_INVALID_ARGUMENT, "input: expected {stdin} or {pty}");
		return;
	}
	json_t *v = pj_get(in, "stdin", "stdin");
	const char *field = "stdin";
	if (!v) {
		v = pj_get(in, "pty", "pty");
		field = "pty";
	}
	if (v) {
		c->data = pj_bytes(v, &c->len);
		if (!c->data) {
			fail(c, CONNECT_INVALID_ARGUMENT, "input.%s: invalid base64", field);
			return;
		}
	}
	select_then(c);
}

static void p_signal(struct call *c, json_t *msg)
{
	static const char *const names[16] = {[0] = "SIGNAL_UNSPECIFIED", [9] = "SIGNAL_SIGKILL",
					      [15] = "SIGNAL_SIGTERM"};
	if (selector(c, msg) < 0)
		return;
	json_t *v = pj_get(msg, "signal", "signal");
	int sig = 0;
	if (v && pj_enum(v, names, 16, &sig) < 0) {
		fail(c, CONNECT_INVALID_ARGUMENT, "signal: unknown value");
		return;
	}
	if (sig == 9)
		c->sig = "KILL";
	else if (sig == 15)
		c->sig = "TERM";
	else {
		fail(c, CONNECT_INVALID_ARGUMENT, "signal: SIGNAL_SIGKILL or SIGNAL_SIGTERM required");
		return;
	}
	select_then(c);
}

static void p_close(struct call *c, json_t *msg)
{
	if (selector(c, msg) < 0)
		return;
	select_then(c);
}

static void p_update(struct call *c, json_t *msg)
{
	if (selector(c, msg) < 0)
		return;
	json_t *pty = pj_get(msg, "pty", "pty");
	if (!pty) { /* nothing to change */
		unary_ok(c, json_object());
		return;
	}
	json_t *size = json_is_object(pty) ? pj_get(pty, "size", "size") : NULL;
	uint32_t cols = 0, rows = 0;
	if (!json_is_object(size)) {
		fail(c, CONNECT_INVALID_ARGUMENT, "pty.size: required");
		return;
	}
	if (opt_u32(c, size, "cols", "cols", &cols) < 0 ||
	    opt_u32(c, size, "rows", "rows", &rows) < 0)
		return;
	if (!cols || !rows || cols > 65535 || rows > 65535) {
		fail(c, CONNECT_INVALID_ARGUMENT, "pty.size: cols and rows must be 1..65535");
		return;
	}
	c->cols = cols;
	c->rows = rows;
	select_then(c);
}

static json_t *ps_json(json_t *result)
{
	json_t *out = json_array();
	json_t *ps = json_object_get(result, "processes");
	size_t i;
	json_t *p;
	json_array_foreach(ps, i, p) {
		if (json_is_false(json_object_get(p, "running")))
			continue;
		json_t *cmd = json_object_get(p, "cmd");
		json_t *cfg = json_object();
		json_t *args = json_array();
		size_t j;
		json_t *a;
		json_array_foreach(cmd, j, a) {
			if (j == 0)
				json_object_set(cfg, "cmd", a);
			else
				json_array_append(args, a);
		}
		json_object_set_new(cfg, "args", args);
		json_t *env = json_object_get(p, "env");
		json_t *envs = json_object();
		if (json_is_object(env)) {
			json_object_update(envs, env);
		} else if (json_is_array(env)) {
			json_array_foreach(env, j, a) {
				const char *s = json_string_value(a);
				const char *eq = s ? strchr(s, '=') : NULL;
				if (!eq)
					continue;
				char *k = strndup(s, (size_t)(eq - s));
				if (k)
					json_object_set_new(envs, k, json_string(eq + 1));
				free(k);
			}
		}
		json_object_set_new(cfg, "envs", envs);
		const char *cwd = jstr(p, "cwd");
		if (cwd)
			json_object_set_new(cfg, "cwd", json_string(cwd));
		json_t *o = json_pack("{s:o,s:I}", "config", cfg, "pid",
				      (json_int_t)jint(p, "process_id"));
		const char *tag = jstr(p, "tag");
		if (o && tag)
			json_object_set_new(o, "tag", json_string(tag));
		json_array_append_new(out, o);
	}
	return json_pack("{s:o}", "processes", out);
}

/* ---- filesystem.Filesystem ------------------------------------------------------ */

static void f_stat(struct call *c, json_t *msg)
{
	struct core_err e = {0};
	if (path_field(c, msg, "path", "path", c->path) < 0)
		return;
	c->op = core_stat(c->b, c->path, c->user, on_done, c, &e);
	if (!c->op)
		fail(c, code_of(&e), "%s", e.msg);
}

static void f_mkdir(struct call *c, json_t *msg)
{
	struct core_err e = {0};
	if (path_field(c, msg, "path", "path", c->path) < 0)
		return;
	c->op = core_mkdir(c->b, c->path, c->user, true, false, on_done, c, &e);
	if (!c->op)
		fail(c, code_of(&e), "%s", e.msg);
}

static void f_move(struct call *c, json_t *msg)
{
	struct core_err e = {0};
	char dst[PATH_CAP];
	if (path_field(c, msg, "source", "source", c->path) < 0 ||
	    path_field(c, msg, "destination", "destination", dst) < 0)
		return;
	c->op = core_move(c->b, c->path, dst, c->user, on_done, c, &e);
	if (!c->op)
		fail(c, code_of(&e), "%s", e.msg);
}

static void f_list(struct call *c, json_t *msg)
{
	struct core_err e = {0};
	uint32_t depth = 0;
	if (path_field(c, msg, "path", "path", c->path) < 0 ||
	    opt_u32(c, msg, "depth", "depth", &depth) < 0)
		return;
	if (depth == 0)
		depth = 1;
	if (depth > 64)
		depth = 64;
	c->op = core_list(c->b, c->path, c->user, (int)depth, on_done, c, &e);
	if (!c->op)
		fail(c, code_of(&e), "%s", e.msg);
}

static void f_remove(struct call *c, json_t *msg)
{
	struct core_err e = {0};
	if (path_field(c, msg, "path", "path", c->path) < 0)
		return;
	c->op = core_remove(c->b, c->path, c->user, true, on_done, c, &e);
	if (!c->op) {
		if (!strcmp(e.code, "not_found"))
			unary_ok(c, json_object());
		else
			fail(c, code_of(&e), "%s", e.msg);
	}
}

static int watch_opts(struct call *c, json_t *msg, bool *rec, bool *inc)
{
	*rec = *inc = false;
	if (path_field(c, msg, "path", "path", c->path) < 0 ||
	    opt_bool(c, msg, "recursive", "recursive", rec) < 0 ||
	    opt_bool(c, msg, "includeEntry", "include_entry", inc) < 0)
		return -1;
	return 0;
}

static void on_wstarted(void *arg)
{
	struct call *c = arg;
	if (c->first_sent)
		return;
	c->first_sent = true;
	stream_send(c, json_pack("{s:{}}", "start"));
	keepalive_start(c);
}

static void on_wevent(void *arg, json_t *ev)
{
	struct call *c = arg;
	on_wstarted(c);
	json_t *fe = fs_event(ev);
	if (fe)
		stream_send(c, json_pack("{s:o}", "filesystem", fe));
}

static void on_wfailed(void *arg, const struct core_err *e)
{
	struct call *c = arg;
	c->op = NULL;
	stream_end(c, code_of(e), e->msg);
}

static const struct core_watch_cbs watch_cbs = {
	.started = on_wstarted, .event = on_wevent, .failed = on_wfailed};

static void f_watch(struct call *c, json_t *msg)
{
	bool rec, inc;
	int64_t timeout = 0;
	if (watch_opts(c, msg, &rec, &inc) < 0 || timeout_header(c, &timeout) < 0)
		return;
	struct core_err e = {0};
	c->op = core_watch(c->b, c->path, c->user, rec, inc, &watch_cbs, c, &e);
	if (!c->op) {
		fail(c, code_of(&e), "%s", e.msg);
		return;
	}
	deadline_start(c, timeout);
}

static void f_wcreate(struct call *c, json_t *msg)
{
	bool rec, inc;
	if (watch_opts(c, msg, &rec, &inc) < 0)
		return;
	struct core_err e = {0};
	c->op = core_watch_create(c->b, c->path, c->user, rec, inc, on_done, c, &e);
	if (!c->op)
		fail(c, code_of(&e), "%s", e.msg);
}

/* watcherId: the core's watch id as a decimal string. */
static int watcher_id(struct call *c, json_t *msg, int64_t *id)
{
	const char *s;
	if (opt_str(c, msg, "watcherId", "watcher_id", &s) < 0)
		return -1;
	char *end;
	errno = 0;
	long long v = s ? strtoll(s, &end, 10) : 0;
	if (!s || !*s || errno || *end || v <= 0) {
		fail(c, CONNECT_NOT_FOUND, "watcher with id %s not found", s ? s : "''");
		return -1;
	}
	*id = v;
	return 0;
}

static void f_wevents(struct call *c, json_t *msg)
{
	int64_t id;
	if (watcher_id(c, msg, &id) < 0)
		return;
	struct core_err e = {0};
	c->op = core_watch_events(c->b, id, on_done, c, &e);
	if (!c->op)
		fail(c, code_of(&e), "%s", e.msg);
}

static void f_wremove(struct call *c, json_t *msg)
{
	int64_t id;
	if (watcher_id(c, msg, &id) < 0)
		return;
	struct core_err e = {0};
	c->op = core_watch_remove(c->b, id, on_done, c, &e);
	if (!c->op)
		fail(c, code_of(&e), "%s", e.msg);
}

static void files_done(struct call *c, json_t *result, const char *data, size_t len,
		       const struct core_err *e);

/* Every simple core answer of a call. */
static void on_done(void *arg, json_t *result, const char *data, size_t len,
		    const struct core_err *e)
{
	struct call *c = arg;
	c->op = NULL;
	if (c->kind == K_FREAD || c->kind == K_FWRITE) {
		files_done(c, result, data, len, e);
		return;
	}
	if (c->by_ps) {
		c->by_ps = false;
		if (e)
			fail(c, code_of(e), "%s", e->msg);
		else
			ps_found(c, result);
		return;
	}
	if (e) {
		bool proc = c->kind == K_INPUT || c->kind == K_CLOSE || c->kind == K_SIGNAL ||
			    c->kind == K_UPDATE;
		if (c->kind == K_REMOVE && !strcmp(e->code, "not_found"))
			unary_ok(c, json_object());
		else if (proc && !strcmp(e->code, "not_found"))
			fail(c, CONNECT_NOT_FOUND, "process with pid %" PRId64 " not found", c->pid);
		else if (c->kind == K_UPDATE && !strcmp(e->code, "conflict"))
			fail(c, CONNECT_FAILED_PRECONDITION, "%s", e->msg);
		else if ((c->kind == K_WEVENTS || c->kind == K_WREMOVE) &&
			 !strcmp(e->code, "not_found"))
			fail(c, CONNECT_NOT_FOUND, "%s", e->msg);
		else
			fail(c, code_of(e), "%s", e->msg);
		return;
	}
	json_t *ans = NULL;
	switch (c->kind) {
	case K_PLIST:
		ans = ps_json(result);
		break;
	case K_STAT:
	case K_MKDIR:
	case K_MOVE:
		ans = json_pack("{s:o}", "entry", entry_info(json_object_get(result, "entry")));
		break;
	case K_LIST: {
		json_t *arr = json_array();
		size_t i;
		json_t *en;
		json_array_foreach(json_object_get(result, "entries"), i, en) {
			const char *p = jstr(en, "path");
			if (p && !strcmp(p, c->path))
				continue; /* entries exclude the root */
			json_array_append_new(arr, entry_info(en));
		}
		ans = json_pack("{s:o}", "entries", arr);
		break;
	}
	case K_WCREATE: {
		char id[24];
		snprintf(id, sizeof id, "%" PRId64, jint(result, "watch_id"));
		ans = json_pack("{s:s}", "watcherId", id);
		break;
	}
	case K_WEVENTS: {
		json_t *arr = json_array();
		size_t i;
		json_t *ev;
		json_array_foreach(json_object_get(result, "events"), i, ev) {
			json_t *fe = fs_event(ev);
			if (fe)
				json_array_append_new(arr, fe);
		}
		ans = json_pack("{s:o}", "events", arr);
		break;
	}
	default:
		ans = json_object();
		break;
	}
	unary_ok(c, ans);
}

/* ---- Connect routing --------------------------------------------------------- */

struct method {
	const char *path;
	enum kind kind;
	bool stream;
	void (*fn)(struct call *c, json_t *msg);
};

static const struct method methods[] = {
	{"/process.Process/Start", K_START, true, p_start},
	{"/process.Process/Connect", K_CONNECT, true, p_connect},
	{"/process.Process/List", K_PLIST, false, p_list},
	{"/process.Process/SendInput", K_INPUT, false, p_input},
	{"/process.Process/SendSignal", K_SIGNAL, false, p_signal},
	{"/process.Process/CloseStdin", K_CLOSE, false, p_close},
	{"/process.Process/Update", K_UPDATE, false, p_update},
	{"/process.Process/StreamInput", K_STREAMIN, false, NULL},
	{"/filesystem.Filesystem/Stat", K_STAT, false, f_stat},
	{"/filesystem.Filesystem/MakeDir", K_MKDIR, false, f_mkdir},
	{"/filesystem.Filesystem/Move", K_MOVE, false, f_move},
	{"/filesystem.Filesystem/ListDir", K_LIST, false, f_list},
	{"/filesystem.Filesystem/Remove", K_REMOVE, false, f_remove},
	{"/filesystem.Filesystem/WatchDir", K_WATCH, true, f_watch},
	{"/filesystem.Filesystem/CreateWatcher", K_WCREATE, false, f_wcreate},
	{"/filesystem.Filesystem/GetWatcherEvents", K_WEVENTS, false, f_wevents},
	{"/filesystem.Filesystem/RemoveWatcher", K_WREMOVE, false, f_wremove},
};

/* The Basic user of an RPC (not a credential: it selects the user). */
static int rpc_user(struct evhttp_request *req, char *user, size_t cap, char *msg, size_t mcap)
{
	snprintf(user, cap, "user");
	const char *h = hdr(req, "Authorization");
	if (!h || strncasecmp(h, "Basic ", 6) != 0)
		return 0;
	const char *b64 = h + 6;
	while (*b64 == ' ')
		b64++;
	json_t *s = json_string(b64);
	size_t n = 0;
	char *dec = s ? pj_bytes(s, &n) : NULL;
	json_decref(s);
	char *colon = dec ? memchr(dec, ':', n) : NULL;
	if (!colon) { /* not basic auth as Go reads it: the default user */
		free(dec);
		return 0;
	}
	*colon = '\0';
	int rc = 0;
	if (user_known(dec)) {
		snprintf(user, cap, "%s", dec);
	} else {
		char name[128];
		snprintf(name, sizeof name, "%s", dec);
		moat_utf8_clean(name);
		snprintf(msg, mcap, "invalid username: '%s'", name);
		rc = -1;
	}
	free(dec);
	return rc;
}

static bool rpc_like(const char *path)
{
	/* /<package>.<Service>/<Method> */
	const char *slash = strchr(path + 1, '/');
	const char *dot = strchr(path + 1, '.');
	return slash && dot && dot < slash && slash[1];
}

static void rpc(struct evhttp_request *req, struct box *b, const struct method *m)
{
	if (evhttp_request_get_command(req) != EVHTTP_REQ_POST) {
		evhttp_add_header(evhttp_request_get_output_headers(req), "Allow", "POST");
		http_json(req, 405, connect_error_json(CONNECT_UNIMPLEMENTED, "method must be POST"));
		return;
	}
	if (!m->fn) {
		connect_reply(req, CONNECT_UNIMPLEMENTED, "StreamInput is not implemented");
		return;
	}
	const char *ct = hdr(req, "Content-Type");
	if (m->stream ? !connect_ct_stream(ct) : !connect_ct_unary(ct)) {
		char msg[300];
		const char *want = m->stream ? "application/connect+json" : "application/json";
		snprintf(msg, sizeof msg, "unsupported content type %s: expected %s",
			 ct ? ct : "(none)", want);
		evhttp_add_header(evhttp_request_get_output_headers(req), "Accept-Post", want);
		moat_utf8_clean(msg);
		http_json(req, 415, connect_error_json(CONNECT_UNKNOWN, msg));
		return;
	}
	size_t len;
	const char *body = http_body(req, &len);
	struct connect_err ce = {0};
	json_t *msg = m->stream ? connect_stream_request(body, len, &ce)
				: connect_unary_request(body, len, &ce);
	if (!msg) {
		if (m->stream)
			stream_error_now(req, ce.code, ce.msg);
		else
			connect_reply(req, ce.code, ce.msg);
		return;
	}
	char user[8], umsg[300];
	if (rpc_user(req, user, sizeof user, umsg, sizeof umsg) < 0) {
		json_decref(msg);
		if (m->stream)
			stream_error_now(req, CONNECT_UNAUTHENTICATED, umsg);
		else
			connect_reply(req, CONNECT_UNAUTHENTICATED, umsg);
		return;
	}
	struct call *c = call_new(req, b, m->kind);
	if (!c) {
		json_decref(msg);
		connect_reply(req, CONNECT_INTERNAL, "out of memory");
		return;
	}
	c->stream = m->stream;
	c->msg = msg;
	snprintf(c->user, sizeof c->user, "%s", user);
	m->fn(c, msg);
}

/* ---- /files ------------------------------------------------------------------ */

/* envd's validateSigning: the header token wins when given; else
 * signature = "v1_" + base64(sha256("path:op:user:token[:exp]")) without
 * padding, exp (unix seconds) not past. 0 ok; else the status to answer. */
static int files_auth(struct evhttp_request *req, const char *tok, const char *op, char *msg,
		      size_t mcap)
{
	if (!tok)
		return 0;
	const char *h = hdr(req, "X-Access-Token");
	if (h && *h) {
		if (e2b_equal(h, tok))
			return 0;
		snprintf(msg, mcap, "access token present in header but does not match");
		return 401;
	}
	char *sig = http_query(req, "signature");
	char *path = http_query(req, "path");
	char *user = http_query(req, "username");
	char *exp = http_query(req, "signature_expiration");
	int rc = 0;
	char *raw = NULL;
	long long e = 0;
	if (exp) {
		char *end;
		errno = 0;
		e = strtoll(exp, &end, 10);
		if (!*exp || errno || *end) {
			snprintf(msg, mcap, "signature_expiration: expected unix seconds");
			rc = 400;
			goto out;
		}
	}
	if (!sig) {
		snprintf(msg, mcap, "missing signature query parameter");
		rc = 401;
		goto out;
	}
	int n = exp ? asprintf(&raw, "%s:%s:%s:%s:%lld", path ? path : "", op, user ? user : "",
			       tok, e)
		    : asprintf(&raw, "%s:%s:%s:%s", path ? path : "", op, user ? user : "", tok);
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	char b64[4 * ((EVP_MAX_MD_SIZE + 2) / 3) + 1];
	char want[sizeof b64 + 4];
	if (n < 0 || !EVP_Digest(raw, (size_t)n, md, &mdlen, EVP_sha256(), NULL)) {
		raw = n < 0 ? NULL : raw;
		snprintf(msg, mcap, "invalid signature");
		rc = 401;
		goto out;
	}
	int bl = EVP_EncodeBlock((unsigned char *)b64, md, (int)mdlen);
	while (bl > 0 && b64[bl - 1] == '=')
		bl--;
	b64[bl > 0 ? bl : 0] = '\0';
	snprintf(want, sizeof want, "v1_%s", b64);
	if (!e2b_equal(want, sig)) {
		snprintf(msg, mcap, "invalid signature");
		rc = 401;
	} else if (exp && e < (long long)time(NULL)) {
		snprintf(msg, mcap, "signature is already expired");
		rc = 401;
	}
out:
	free(raw);
	free(sig);
	free(path);
	free(user);
	free(exp);
	return rc;
}

/* Content-Disposition: inline, the name quoted (controls dropped, " and \
 * escaped), and filename* for what is not ASCII. */
static void disposition(struct evhttp_request *req, const char *path)
{
	const char *name = base_name(path);
	char q[600], pct[1800];
	size_t o = 0, p = 0;
	bool ascii = true;
	for (const unsigned char *s = (const unsigned char *)name; *s && o + 3 < sizeof q; s++) {
		if (*s < 0x20 || *s == 0x7f)
			continue;
		if (*s >= 0x80) {
			ascii = false;
			q[o++] = '_';
			continue;
		}
		if (*s == '"' || *s == '\\')
			q[o++] = '\\';
		q[o++] = (char)*s;
	}
	q[o] = '\0';
	for (const unsigned char *s = (const unsigned char *)name; *s && p + 4 < sizeof pct; s++) {
		if ((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') ||
		    (*s >= '0' && *s <= '9') || strchr("-._~", *s))
			pct[p++] = (char)*s;
		else
			p += (size_t)snprintf(pct + p, sizeof pct - p, "%%%02X", *s);
	}
	pct[p] = '\0';
	char v[2600];
	if (ascii)
		snprintf(v, sizeof v, "inline; filename=\"%s\"", q);
	else
		snprintf(v, sizeof v, "inline; filename=\"%s\"; filename*=UTF-8''%s", q, pct);
	evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Disposition", v);
}

static int files_status(const struct core_err *e)
{
	if (no_space(e))
		return 507;
	if (!strcmp(e->code, "is_directory") || !strcmp(e->code, "invalid_path"))
		return 400;
	return e->status >= 400 && e->status <= 599 ? e->status : 500;
}

/* The next part of an upload, or the answer. */
static void write_next(struct call *c)
{
	if (c->next >= c->nup) {
		json_t *out = c->out;
		c->out = NULL;
		unary_ok(c, out);
		return;
	}
	struct upload *u = &c->up[c->next];
	struct core_write_opts o = {.user = c->user, .metadata = c->meta};
	struct core_err e = {0};
	c->op = core_write(c->b, u->path, u->data, u->len, &o, on_done, c, &e);
	if (!c->op)
		rest_fail(c, files_status(&e), "%s", e.msg);
}

static void files_done(struct call *c, json_t *result, const char *data, size_t len,
		       const struct core_err *e)
{
	if (e) {
		if (c->kind == K_FREAD && !strcmp(e->code, "not_found"))
			rest_fail(c, 404, "path '%s' does not exist", c->path);
		else if (c->kind == K_FREAD && !strcmp(e->code, "is_directory"))
			rest_fail(c, 400, "path '%s' is a directory", c->path);
		else
			rest_fail(c, files_status(e), "%s", e->msg);
		return;
	}
	if (c->kind == K_FREAD) {
		call_detach(c);
		disposition(c->req, c->path);
		http_raw(c->req, 200, "application/octet-stream", data ? data : "", data ? len : 0);
		call_free(c);
		return;
	}
	struct upload *u = &c->up[c->next++];
	json_t *o = json_pack("{s:s,s:s,s:s}", "path", u->path, "name", base_name(u->path), "type",
			      "file");
	if (o && c->meta && json_object_size(c->meta))
		json_object_set(o, "metadata", c->meta);
	json_array_append_new(c->out, o);
	write_next(c);
}

/* X-Metadata-<k>: <v> headers as an object (NULL: none). */
static json_t *upload_metadata(struct evhttp_request *req)
{
	json_t *o = NULL;
	struct evkeyvalq *h = evhttp_request_get_input_headers(req);
	for (struct evkeyval *kv = h->tqh_first; kv; kv = kv->next.tqe_next) {
		if (strncasecmp(kv->key, "X-Metadata-", 11) != 0 || !kv->key[11])
			continue;
		json_t *v = json_string(kv->value);
		if (!v)
			continue;
		if (!o)
			o = json_object();
		if (o)
			json_object_set_new(o, kv->key + 11, v);
		else
			json_decref(v);
	}
	return o;
}

/* Whether an upload part targets a path already in the list. */
static bool dup_path(const struct call *c, const char *p)
{
	for (size_t i = 0; i < c->nup; i++)
		if (!strcmp(c->up[i].path, p))
			return true;
	return false;
}

static void files_post(struct call *c, const char *qpath)
{
	const char *ct = hdr(c->req, "Content-Type");
	const char *ce = hdr(c->req, "Content-Encoding");
	uint64_t max = core_config() ? core_config()->max_file : 0;
	char msg[600];
	if (ce && *ce && strcasecmp(ce, "identity") != 0) {
		rest_fail(c, 400, "error decompressing request body: Content-Encoding %s is not "
				  "supported", ce);
		return;
	}
	size_t len;
	const char *body = http_body(c->req, &len);
	char mt[128] = "";
	if (ct)
		snprintf(mt, sizeof mt, "%.*s", (int)strcspn(ct, "; \t"), ct);
	if (!strcasecmp(mt, "application/octet-stream")) {
		if (!qpath) {
			rest_fail(c, 400, "path query parameter is required for raw body upload");
			return;
		}
		c->up = calloc(1, sizeof *c->up);
		if (!c->up) {
			rest_fail(c, 500, "out of memory");
			return;
		}
		if (resolve(c->user, qpath, c->up[0].path, PATH_CAP, msg, sizeof msg) < 0) {
			rest_fail(c, 400, "error resolving path: %s", msg);
			return;
		}
		c->up[0].data = body;
		c->up[0].len = len;
		c->nup = 1;
	} else if (!strncasecmp(mt, "multipart/", 10)) {
		char boundary[80];
		struct moat_err me = {0};
		if (mp_boundary(ct, boundary, sizeof boundary, &me) < 0 ||
		    mp_parse(body, len, boundary, MAX_PARTS, &c->parts, &me) < 0) {
			rest_fail(c, 400, "error parsing multipart form: %s", me.msg);
			return;
		}
		c->up = calloc(c->parts.n ? c->parts.n : 1, sizeof *c->up);
		if (!c->up) {
			rest_fail(c, 500, "out of memory");
			return;
		}
		/* all parts are checked before any is written */
		for (size_t i = 0; i < c->parts.n; i++) {
			const struct mp_part *pt = &c->parts.v[i];
			if (!pt->name || strcmp(pt->name, "file") != 0)
				continue; /* envd reads only "file" parts */
			const char *src = qpath ? qpath : pt->filename;
			if (!src || !*src) {
				rest_fail(c, 400, "part %zu: no filename (a path) and no path query", i);
				return;
			}
			struct upload *u = &c->up[c->nup];
			if (resolve(c->user, src, u->path, PATH_CAP, msg, sizeof msg) < 0) {
				rest_fail(c, 400, "error resolving path: %s", msg);
				return;
			}
			if (dup_path(c, u->path)) {
				rest_fail(c, 400,
					  "you cannot upload multiple files to the same path '%s' in "
					  "one upload request",
					  u->path);
				return;
			}
			u->data = pt->data;
			u->len = pt->len;
			c->nup++;
		}
	} else {
		rest_fail(c, 400,
			  "unsupported content type: %s, expected multipart/form-data or "
			  "application/octet-stream",
			  ct ? ct : "(none)");
		return;
	}
	for (size_t i = 0; i < c->nup; i++) {
		if (max && c->up[i].len > max) {
			rest_fail(c, 413, "%s: file over the limit of %" PRIu64 " bytes",
				  c->up[i].path, max);
			return;
		}
	}
	c->meta = upload_metadata(c->req);
	c->out = json_array();
	if (!c->out) {
		rest_fail(c, 500, "out of memory");
		return;
	}
	write_next(c);
}

static void files(struct evhttp_request *req, struct box *b)
{
	enum evhttp_cmd_type m = evhttp_request_get_command(req);
	if (m != EVHTTP_REQ_GET && m != EVHTTP_REQ_POST) {
		evhttp_add_header(evhttp_request_get_output_headers(req), "Allow", "GET, POST");
		e2b_envd_error(req, 405, "method not allowed on /files");
		return;
	}
	char msg[600];
	int st = files_auth(req, e2b_access_token(b), m == EVHTTP_REQ_GET ? "read" : "write", msg,
			    sizeof msg);
	if (st) {
		e2b_envd_error(req, st, "%s", msg);
		return;
	}
	struct call *c = call_new(req, b, m == EVHTTP_REQ_GET ? K_FREAD : K_FWRITE);
	if (!c) {
		e2b_envd_error(req, 500, "out of memory");
		return;
	}
	char *user = http_query(req, "username");
	char *qpath = http_query(req, "path");
	if (user && !user_known(user)) {
		char u[128];
		snprintf(u, sizeof u, "%s", user);
		free(user);
		free(qpath);
		rest_fail(c, 401, "error looking up user '%s': user: unknown user %s", u, u);
		return;
	}
	if (user)
		snprintf(c->user, sizeof c->user, "%s", user);
	free(user);
	if (m == EVHTTP_REQ_POST) {
		files_post(c, qpath);
		free(qpath);
		return;
	}
	if (resolve(c->user, qpath, c->path, sizeof c->path, msg, sizeof msg) < 0) {
		free(qpath);
		rest_fail(c, 400, "error expanding and resolving path: %s", msg);
		return;
	}
	free(qpath);
	struct core_err e = {0};
	const struct core_config *cf = core_config();
	c->op = core_read(b, c->path, c->user, cf ? cf->max_file : 0, on_done, c, &e);
	if (!c->op)
		files_done(c, NULL, NULL, 0, &e);
}

/* ---- the door --------------------------------------------------------------- */

void e2b_envd_route(struct evhttp_request *req, struct box *b, const char *id, int port,
		    const char *path)
{
	if (!b) {
		e2b_not_found_502(req, id);
		return;
	}
	if (port != E2B_ENVD_PORT) {
		e2b_api_error(req, 502, "The sandbox %s is running but port %d is not open", id,
			      port);
		return;
	}
	char p[512];
	snprintf(p, sizeof p, "%.*s", (int)strcspn(path ? path : "/", "?"), path ? path : "/");
	enum evhttp_cmd_type m = evhttp_request_get_command(req);
	if (!strcmp(p, "/health")) {
		if (m == EVHTTP_REQ_GET || m == EVHTTP_REQ_HEAD)
			http_no_content(req);
		else
			e2b_envd_error(req, 405, "method not allowed on /health");
		return;
	}
	if (!strcmp(p, "/files")) {
		files(req, b); /* the header token or a signature */
		return;
	}
	const char *tok = e2b_access_token(b);
	const char *got = hdr(req, "X-Access-Token");
	bool authed = !tok || (got && e2b_equal(got, tok));
	const struct method *meth = NULL;
	for (size_t i = 0; i < sizeof methods / sizeof methods[0]; i++)
		if (!strcmp(p, methods[i].path))
			meth = &methods[i];
	if (!authed) {
		static const char why[] = "unauthorized access, please provide a valid access token "
					  "or method signing if supported";
		if (meth || rpc_like(p))
			connect_reply(req, CONNECT_UNAUTHENTICATED, why);
		else
			e2b_envd_error(req, 401, "%s", why);
		return;
	}
	if (meth) {
		rpc(req, b, meth);
		return;
	}
	if (!strcmp(p, "/envs")) {
		if (m != EVHTTP_REQ_GET) {
			e2b_envd_error(req, 405, "method not allowed on /envs");
			return;
		}
		json_t *env = box_env(b, NULL);
		http_json(req, 200, env ? env : json_object());
		return;
	}
	if (rpc_like(p)) {
		char msg[600];
		snprintf(msg, sizeof msg, "%s is not implemented", p);
		connect_reply(req, CONNECT_UNIMPLEMENTED, msg);
		return;
	}
	char msg[600];
	snprintf(msg, sizeof msg, "%s", p);
	moat_utf8_clean(msg);
	e2b_envd_error(req, 404, "no such envd endpoint: %s", msg);
}
