/* E2B's envd data plane for one sandbox (docs/e2b.md; the wire is in
 * e2b-protocol.md §3), onto the operation core (core.h); nothing here
 * speaks to an agent. This file: routing, auth (X-Access-Token; /files may
 * be signed instead), the Basic user of RPCs, the life of a request that
 * waits for the core (struct envd_call, client-gone detection as api.c
 * does it), Connect answers and stream framing. The services are in
 * e2b_envd_proc.c (process.Process) and e2b_envd_fs.c
 * (filesystem.Filesystem, /files).
 *
 * Streams (Start, Connect, WatchDir) answer 200 application/connect+json
 * once the request is a well-formed Connect stream, and every error after
 * that goes in the end-stream frame, as envd (connect-go) does: a non-200
 * stream is mapped from its status alone by the clients, which loses the
 * code. */
#define _GNU_SOURCE
#include "e2b_int.h"
#include "e2b_envd_int.h"

#include "box.h"
#include "connect.h"
#include "core.h"
#include "http.h"
#include "../base/utf8.h"
#include "../proto/entries.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define KEEPALIVE_DEFAULT_S 90

/* ---- small helpers -------------------------------------------------------- */

const char *envd_hdr(struct evhttp_request *req, const char *name)
{
	return evhttp_find_header(evhttp_request_get_input_headers(req), name);
}

static const char *home_of(const char *user)
{
	return !strcmp(user, "root") ? "/root" : "/home/user";
}

/* Lexically clean an absolute path: no "//", ".", ".."; "/" stays. */
int envd_path_clean(const char *in, char *out, size_t cap)
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
int envd_resolve(const char *user, const char *in, char *out, size_t cap, char *msg,
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
	if (envd_path_clean(tmp, out, cap) < 0) {
		snprintf(msg, mcap, "path is too long (over %d bytes)", PATH_CAP - 1);
		return -1;
	}
	return 0;
}

bool envd_user_known(const char *u)
{
	return !strcmp(u, "user") || !strcmp(u, "root");
}

const char *envd_base_name(const char *path)
{
	const char *s = strrchr(path, '/');
	return s && s[1] ? s + 1 : path;
}

const char *envd_jstr(const json_t *o, const char *k)
{
	return json_string_value(json_object_get(o, k));
}

int64_t envd_jint(const json_t *o, const char *k)
{
	json_t *v = json_object_get(o, k);
	return json_is_integer(v) ? (int64_t)json_integer_value(v) : 0;
}
/* ---- a request in flight ----------------------------------------------------- */

void envd_call_free(struct envd_call *c)
{
	http_wait_stop(&c->wait);
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
void envd_call_detach(struct envd_call *c)
{
	http_wait_stop(&c->wait);
}

static void cancel_op(struct envd_call *c)
{
	if (c->op)
		core_op_cancel(c->op); /* a detached exec keeps running */
	c->op = NULL;
}

/* The client went away (http_wait): no answer, the core forgets the op. */
static void on_client_gone(void *arg)
{
	struct envd_call *c = arg;
	cancel_op(c);
	envd_call_free(c);
}

struct envd_call *envd_call_new(struct evhttp_request *req, struct box *b, enum envd_kind k)
{
	struct envd_call *c = calloc(1, sizeof *c);
	if (!c)
		return NULL;
	c->req = req;
	c->b = b;
	c->kind = k;
	snprintf(c->user, sizeof c->user, "user");
	const struct core_config *cf = core_config();
	http_wait_start(&c->wait, cf ? cf->base : NULL, req, on_client_gone, c);
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

static void stream_begin(struct envd_call *c)
{
	http_wait_stream(&c->wait, "application/connect+json");
}

static void stream_put(struct envd_call *c, struct moat_buf *m)
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

size_t envd_backlog(void *arg)
{
	struct envd_call *c = arg;
	return http_wait_backlog(&c->wait);
}

/* One data envelope of msg (stolen); the silence restarts. */
void envd_stream_send(struct envd_call *c, json_t *msg)
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
void envd_stream_end(struct envd_call *c, enum connect_code code, const char *msg)
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
	envd_call_detach(c);
	envd_call_free(c);
	evhttp_send_reply_end(req);
}

void envd_ok(struct envd_call *c, json_t *msg)
{
	envd_call_detach(c);
	http_json(c->req, 200, msg ? msg : json_object());
	envd_call_free(c);
}

void envd_fail(struct envd_call *c, enum connect_code code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
void envd_fail(struct envd_call *c, enum connect_code code, const char *fmt, ...)
{
	char msg[600];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	if (c->stream) {
		envd_stream_end(c, code, msg);
		return;
	}
	cancel_op(c);
	envd_call_detach(c);
	connect_reply(c->req, code, msg);
	envd_call_free(c);
}

/* REST (/files) errors: {"code":status,"message"}. */
void envd_rest_fail(struct envd_call *c, int status, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
void envd_rest_fail(struct envd_call *c, int status, const char *fmt, ...)
{
	char msg[600];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	moat_utf8_clean(msg);
	cancel_op(c);
	envd_call_detach(c);
	e2b_envd_error(c->req, status, "%s", msg);
	envd_call_free(c);
}

enum connect_code envd_code_of(const struct core_err *e)
{
	return connect_code_from_moat(e->code, e->status);
}

/* ---- timers ------------------------------------------------------------- */

static void on_keepalive(evutil_socket_t fd, short what, void *arg)
{
	struct envd_call *c = arg;
	if (c->kind == K_WATCH)
		envd_stream_send(c, json_pack("{s:{}}", "keepalive"));
	else
		envd_stream_send(c, json_pack("{s:{s:{}}}", "event", "keepalive"));
}

static void on_deadline(evutil_socket_t fd, short what, void *arg)
{
	envd_stream_end(arg, CONNECT_DEADLINE_EXCEEDED, ENVD_DEADLINE_MSG);
}

/* Keepalive-Ping-Interval (seconds, default 90) once the first frame is out. */
void envd_keepalive_start(struct envd_call *c)
{
	const struct core_config *cf = core_config();
	if (c->keepalive || !cf || !cf->base)
		return;
	const char *h = envd_hdr(c->req, "Keepalive-Ping-Interval");
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

void envd_deadline_start(struct envd_call *c, int64_t ms)
{
	const struct core_config *cf = core_config();
	if (ms <= 0 || !cf || !cf->base)
		return;
	struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
	c->deadline = evtimer_new(cf->base, on_deadline, c);
	if (c->deadline)
		event_add(c->deadline, &tv);
}
/* ---- request fields ------------------------------------------------------ */

/* An optional string field: 0 (absent: *out NULL), 1, -1 after answering. */
int envd_opt_str(struct envd_call *c, const json_t *o, const char *camel, const char *snake,
		   const char **out)
{
	json_t *v = pj_get(o, camel, snake);
	*out = NULL;
	if (!v)
		return 0;
	if (!json_is_string(v)) {
		envd_fail(c, CONNECT_INVALID_ARGUMENT, "%s: expected a string", camel);
		return -1;
	}
	*out = json_string_value(v);
	return 1;
}

int envd_opt_bool(struct envd_call *c, const json_t *o, const char *camel, const char *snake,
		    bool *out)
{
	json_t *v = pj_get(o, camel, snake);
	if (!v)
		return 0;
	if (pj_bool(v, out) < 0) {
		envd_fail(c, CONNECT_INVALID_ARGUMENT, "%s: expected a boolean", camel);
		return -1;
	}
	return 1;
}

int envd_opt_u32(struct envd_call *c, const json_t *o, const char *camel, const char *snake,
		   uint32_t *out)
{
	json_t *v = pj_get(o, camel, snake);
	if (!v)
		return 0;
	if (pj_uint32(v, out) < 0) {
		envd_fail(c, CONNECT_INVALID_ARGUMENT, "%s: expected an unsigned 32-bit integer", camel);
		return -1;
	}
	return 1;
}

/* A path field resolved for the call's user into c->path; -1 answered. */
int envd_path_field(struct envd_call *c, const json_t *o, const char *camel, const char *snake,
		      char *out)
{
	const char *p;
	if (envd_opt_str(c, o, camel, snake, &p) < 0)
		return -1;
	char msg[600];
	if (envd_resolve(c->user, p, out, PATH_CAP, msg, sizeof msg) < 0) {
		envd_fail(c, CONNECT_INVALID_ARGUMENT, "%s", msg);
		return -1;
	}
	return 0;
}

/* ---- Connect routing --------------------------------------------------------- */

struct method {
	const char *path;
	enum envd_kind kind;
	bool stream;
	void (*fn)(struct envd_call *c, json_t *msg);
};

static const struct method methods[] = {
	{"/process.Process/Start", K_START, true, envd_p_start},
	{"/process.Process/Connect", K_CONNECT, true, envd_p_connect},
	{"/process.Process/List", K_PLIST, false, envd_p_list},
	{"/process.Process/SendInput", K_INPUT, false, envd_p_input},
	{"/process.Process/SendSignal", K_SIGNAL, false, envd_p_signal},
	{"/process.Process/CloseStdin", K_CLOSE, false, envd_p_close},
	{"/process.Process/Update", K_UPDATE, false, envd_p_update},
	{"/process.Process/StreamInput", K_STREAMIN, false, NULL},
	{"/filesystem.Filesystem/Stat", K_STAT, false, envd_f_stat},
	{"/filesystem.Filesystem/MakeDir", K_MKDIR, false, envd_f_mkdir},
	{"/filesystem.Filesystem/Move", K_MOVE, false, envd_f_move},
	{"/filesystem.Filesystem/ListDir", K_LIST, false, envd_f_list},
	{"/filesystem.Filesystem/Remove", K_REMOVE, false, envd_f_remove},
	{"/filesystem.Filesystem/WatchDir", K_WATCH, true, envd_f_watch},
	{"/filesystem.Filesystem/CreateWatcher", K_WCREATE, false, envd_f_wcreate},
	{"/filesystem.Filesystem/GetWatcherEvents", K_WEVENTS, false, envd_f_wevents},
	{"/filesystem.Filesystem/RemoveWatcher", K_WREMOVE, false, envd_f_wremove},
};

/* The Basic user of an RPC (not a credential: it selects the user). */
static int rpc_user(struct evhttp_request *req, char *user, size_t cap, char *msg, size_t mcap)
{
	snprintf(user, cap, "user");
	const char *h = envd_hdr(req, "Authorization");
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
	if (envd_user_known(dec)) {
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
	const char *ct = envd_hdr(req, "Content-Type");
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
	struct envd_call *c = envd_call_new(req, b, m->kind);
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
/* The sandbox's environment as envd's GET /envs gives it: {"K":"V"}
 * (box_env is an array of "K=V", or an object). Stolen. */
static json_t *envs_object(json_t *env)
{
	if (json_is_object(env))
		return env;
	json_t *o = json_object();
	size_t i;
	json_t *v;
	json_array_foreach(env, i, v) {
		const char *s = json_string_value(v);
		const char *eq = s ? strchr(s, '=') : NULL;
		if (!eq || eq == s)
			continue;
		char *k = strndup(s, (size_t)(eq - s));
		if (k && o)
			json_object_set_new(o, k, json_string(eq + 1));
		free(k);
	}
	json_decref(env);
	return o ? o : json_object();
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
		envd_files(req, b); /* the header token or a signature */
		return;
	}
	const char *tok = e2b_access_token(b);
	const char *got = envd_hdr(req, "X-Access-Token");
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
		http_json(req, 200, envs_object(box_env(b, NULL)));
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
