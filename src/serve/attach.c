/* The attach door (WebSocket): see attach.h.
 *
 * libevent 2.1's evhttp has no WebSocket support, so the connection is
 * taken over after its request: the door writes the 101 answer itself onto
 * the connection's bufferevent and puts its own callbacks (and no
 * timeouts) on it, the request framer lets go of its input
 * (guard_release), and evhttp keeps only the ownership: the connection is
 * freed through evhttp_connection_free (which frees the request with it),
 * and evhttp's own free of it (the daemon stopping) reaches the door by
 * the close callback. A dup'd descriptor would not do: evhttp shuts the
 * socket down for writing when it frees the connection. */
#define _GNU_SOURCE
#include "attach.h"

#include "box.h"
#include "core.h"
#include "http.h"
#include "http_guard.h"
#include "jfield.h"
#include "../base/utf8.h"
#include "../proto/ws.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/keyvalq_struct.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* What a client's stdin writes in flight to the agent share with their
 * answers, which may come after the attach is gone. */
struct att_flow {
	struct att *a;         /* NULL once the attach is freed */
	size_t bytes;          /* stdin sent to the agent, not yet answered */
	unsigned ops;          /* answers still to come */
};

struct att {
	struct att *next;      /* the live attaches: one per process */
	char bid[32];
	struct box *b;         /* checked against bid before each use */
	int64_t pid;
	bool tty;
	struct evhttp_request *req;
	struct evhttp_connection *evcon; /* once upgraded */
	struct bufferevent *bev;
	struct http_wait wait; /* until upgraded */
	struct core_op *op;    /* core_ps, then core_attach */
	char accept[29];
	struct ws_reader rd;
	struct evbuffer *in;   /* the client's bytes not yet read as frames */
	bool sent_close, got_close, dead; /* dead: read nothing more */
	struct event *linger;  /* the client's close after ours */
	struct att_flow *flow;
	bool paused;           /* not reading the client: too much is waiting */
	struct event *keep;    /* pings, and the end of a client that answers nothing */
	bool heard;            /* a whole frame came since the last tick */
	int quiet;             /* ticks without either */
};

static void on_read(struct bufferevent *bev, void *arg);

static struct att *live;

static struct att *find_live(const char *bid, int64_t pid)
{
	for (struct att *a = live; a; a = a->next)
		if (a->pid == pid && !strcmp(a->bid, bid))
			return a;
	return NULL;
}

static void unlist(struct att *a)
{
	for (struct att **pp = &live; *pp; pp = &(*pp)->next)
		if (*pp == a) {
			*pp = a->next;
			return;
		}
}

/* Free a; with the connection too unless evhttp is freeing it. */
static void att_free(struct att *a, bool conn)
{
	unlist(a);
	core_op_cancel(a->op); /* a detached attach: the process keeps running */
	a->op = NULL;
	if (!a->evcon) {
		http_wait_stop(&a->wait);
	} else {
		http_set_closecb(a->evcon, NULL, NULL);
		if (conn)
			evhttp_connection_free(a->evcon); /* the request, the bufferevent, the socket */
	}
	if (a->linger)
		event_free(a->linger);
	if (a->keep)
		event_free(a->keep);
	if (a->flow) {
		a->flow->a = NULL;
		if (!a->flow->ops)
			free(a->flow);
	}
	ws_reader_free(&a->rd);
	if (a->in)
		evbuffer_free(a->in);
	free(a);
}

/* The sandbox, unless it was deleted meanwhile. */
static struct box *att_box(struct att *a)
{
	return box_find(a->bid) == a->b ? a->b : NULL;
}

/* ---- sending ------------------------------------------------------------------ */

static void send_frame(struct att *a, int op, const void *data, size_t len)
{
	if (a->sent_close)
		return;
	uint8_t head[WS_MAX_HEAD];
	size_t hl = ws_head(head, op, len, NULL);
	struct evbuffer *out = bufferevent_get_output(a->bev);
	if (evbuffer_add(out, head, hl) < 0 || (len && evbuffer_add(out, data, len) < 0))
		a->dead = true; /* out of memory: the close below cannot be sent either */
}

static void send_json(struct att *a, json_t *msg)
{
	char *s = msg ? json_dumps(msg, JSON_COMPACT) : NULL;
	json_decref(msg);
	if (s)
		send_frame(a, WS_TEXT, s, strlen(s));
	free(s);
}

static void send_error(struct att *a, const char *code, const char *msg)
{
	send_json(a, json_pack("{s:s,s:{s:s,s:s}}", "type", "error", "error", "code", code,
			       "message", msg));
}

static void send_close(struct att *a, uint16_t code, const char *reason)
{
	uint8_t p[125];
	size_t n = ws_close_payload(p, code, reason);
	send_frame(a, WS_CLOSE, p, n);
	a->sent_close = true;
}

/* Nothing more to say: the connection ends once the output is out. */
static void finish_when_sent(struct att *a)
{
	a->dead = true;
	bufferevent_disable(a->bev, EV_READ);
	if (!evbuffer_get_length(bufferevent_get_output(a->bev)))
		att_free(a, true);
}

static void on_linger(evutil_socket_t fd, short what, void *arg)
{
	finish_when_sent(arg); /* the client did not answer our close */
}

/* Our close after the process ended: wait a while for the client's. */
static void close_and_wait(struct att *a, uint16_t code, const char *reason)
{
	send_close(a, code, reason);
	if (a->got_close) {
		finish_when_sent(a);
		return;
	}
	struct timeval tv = {ATTACH_CLOSE_WAIT_S, 0};
	a->linger = evtimer_new(core_config()->base, on_linger, a);
	if (!a->linger || evtimer_add(a->linger, &tv) < 0)
		finish_when_sent(a);
}

/* ---- the core's side ------------------------------------------------------------ */

static void a_output(void *arg, const char *out, size_t olen, const char *err, size_t elen)
{
	struct att *a = arg;
	if (olen)
		send_frame(a, WS_BINARY, out, olen);
	if (elen) /* a process without a tty: its stderr, as /v1 carries it */
		send_json(a, json_pack("{s:s,s:o}", "type", "stderr", "data", jf_text(err, elen)));
}

static void a_ended(void *arg, const struct core_exit *x)
{
	struct att *a = arg;
	a->op = NULL;
	json_t *o = jf_exit(x, false);
	json_object_set_new(o, "truncated", json_boolean(x->truncated));
	json_t *m = json_pack("{s:s,s:I}", "type", "exit", "process_id", (json_int_t)x->pid);
	json_object_update(m, o);
	json_decref(o);
	send_json(a, m);
	close_and_wait(a, WS_CLOSE_NORMAL, "the process ended");
}

static void a_failed(void *arg, const struct core_err *e)
{
	struct att *a = arg;
	a->op = NULL;
	send_error(a, e->code, e->msg);
	close_and_wait(a, WS_CLOSE_INTERNAL, e->code);
}

static void a_yielded(void *arg, const struct core_exit *x)
{
	/* a stream does not yield; should the core say so, end as a failure */
	struct core_err e = {.status = 500, .code = "internal"};
	snprintf(e.msg, sizeof e.msg, "the attach stopped following process %lld",
		 (long long)x->pid);
	a_failed(arg, &e);
}

static size_t a_backlog(void *arg)
{
	struct att *a = arg;
	return evbuffer_get_length(bufferevent_get_output(a->bev));
}

static const struct core_exec_cbs att_cbs = {.output = a_output, .yielded = a_yielded,
					     .ended = a_ended, .failed = a_failed,
					     .backlog = a_backlog};

/* ---- the client's side ---------------------------------------------------------- */

static void ignore(void *arg, json_t *result, const char *data, size_t len,
		   const struct core_err *e)
{
	/* a write or resize the process did not take (it ended): its exit
	 * follows on the attach itself */
}

/* Reading the client stops while its stdin or our answers pile up (the
 * socket's own buffers then hold the client back); resume() reads on. */
static bool too_much(struct att *a)
{
	return a->flow->bytes > ATTACH_STDIN_HIGH ||
	       evbuffer_get_length(bufferevent_get_output(a->bev)) > ATTACH_OUT_HIGH;
}

static void resume(struct att *a)
{
	if (!a->paused || a->dead || too_much(a))
		return;
	a->paused = false;
	bufferevent_enable(a->bev, EV_READ);
	on_read(a->bev, a); /* what was left in a->in when it paused */
}

struct att_stdin {
	struct att_flow *f;
	size_t len;
};

static void stdin_done(void *arg, json_t *result, const char *data, size_t len,
		       const struct core_err *e)
{
	struct att_stdin *w = arg;
	struct att_flow *f = w->f;
	struct att *a = f->a;
	f->bytes -= w->len;
	f->ops--;
	free(w);
	if (!a) {
		if (!f->ops)
			free(f);
		return;
	}
	/* input refused (too much pending in the agent...) is said; a process
	 * that ended meanwhile is not: its exit follows on the attach */
	if (e && strcmp(e->code, "conflict") && strcmp(e->code, "not_found"))
		send_error(a, e->code, e->msg);
	resume(a);
}

static void send_stdin(struct att *a, struct box *b, const uint8_t *data, size_t len)
{
	struct core_err e = {0};
	struct att_stdin *w = malloc(sizeof *w);
	if (!w) {
		send_error(a, "internal", "out of memory");
		return;
	}
	*w = (struct att_stdin){.f = a->flow, .len = len};
	if (!core_stdin(b, a->pid, data, len, false, stdin_done, w, &e)) {
		free(w);
		send_error(a, e.code, e.msg);
		return;
	}
	a->flow->bytes += len;
	a->flow->ops++;
}

static void control(struct att *a, struct box *b, const uint8_t *data, size_t len)
{
	json_error_t je;
	json_t *m = json_loadb((const char *)data, len, JSON_REJECT_DUPLICATES, &je);
	const char *type = json_string_value(json_object_get(m, "type"));
	struct core_err e = {0};
	struct core_op *op = (struct core_op *)1; /* none started: no error */
	if (!json_is_object(m) || !type) {
		send_error(a, "invalid_request",
			   "a text message must be a JSON object with a \"type\" (resize, signal, eof)");
	} else if (!strcmp(type, "resize")) {
		json_t *c = json_object_get(m, "cols"), *r = json_object_get(m, "rows");
		json_int_t cv = json_integer_value(c), rv = json_integer_value(r);
		if (!json_is_integer(c) || !json_is_integer(r) || cv < 1 || cv > 9999 || rv < 1 ||
		    rv > 9999)
			send_error(a, "invalid_request", "resize: cols and rows must be 1 to 9999");
		else
			op = core_resize(b, a->pid, (unsigned)cv, (unsigned)rv, ignore, NULL, &e);
	} else if (!strcmp(type, "signal")) {
		const char *sig = json_string_value(json_object_get(m, "signal"));
		if (!sig || !*sig)
			send_error(a, "invalid_request", "signal: a signal name (INT, TERM...) is required");
		else
			op = core_signal(b, a->pid, sig, ignore, NULL, &e);
	} else if (!strcmp(type, "eof")) {
		op = core_stdin(b, a->pid, "", 0, true, ignore, NULL, &e);
	} else {
		char msg[160];
		snprintf(msg, sizeof msg, "unknown message type %.64s (resize, signal, eof)", type);
		moat_utf8_clean(msg);
		send_error(a, "invalid_request", msg);
	}
	if (!op)
		send_error(a, e.code, e.msg);
	json_decref(m);
}

static void on_message(struct att *a, const struct ws_event *ev)
{
	struct box *b = att_box(a);
	if (!b)
		return; /* deleted: the attach's own failure says so */
	if (ev->opcode == WS_BINARY) {
		if (ev->len)
			send_stdin(a, b, ev->data, ev->len);
	} else {
		control(a, b, ev->data, ev->len);
	}
}

static void on_read(struct bufferevent *bev, void *arg)
{
	struct att *a = arg;
	struct evbuffer *in = a->in;
	/* into the door's own buffer, behind what the request framer held */
	if (evbuffer_add_buffer(in, bufferevent_get_input(bev)) < 0) {
		send_close(a, WS_CLOSE_INTERNAL, "out of memory");
		finish_when_sent(a);
		return;
	}
	while (!a->dead) {
		if (too_much(a)) {
			/* the rest stays in a->in until resume() */
			a->paused = true;
			bufferevent_disable(bev, EV_READ);
			return;
		}
		size_t n = evbuffer_get_length(in);
		uint8_t *p = n ? evbuffer_pullup(in, -1) : NULL;
		if (!p)
			return;
		struct ws_event ev;
		size_t used = ws_read(&a->rd, p, n, &ev);
		if (ev.kind == WS_FAIL) {
			evbuffer_drain(in, n);
			send_close(a, ev.code, ev.reason);
			finish_when_sent(a);
			return;
		}
		if (ev.kind == WS_MESSAGE)
			on_message(a, &ev);
		else if (ev.kind == WS_CONTROL && ev.opcode == WS_PING)
			send_frame(a, WS_PONG, ev.data, ev.len);
		else if (ev.kind == WS_CONTROL && ev.opcode == WS_CLOSE) {
			/* the client detaches (or answers our close): the process stays */
			a->got_close = true;
			evbuffer_drain(in, evbuffer_get_length(in));
			uint16_t code = ev.code == WS_CLOSE_NO_STATUS ? WS_CLOSE_NORMAL : ev.code;
			unlist(a); /* a re-attach may come at once */
			core_op_cancel(a->op);
			a->op = NULL;
			if (!a->sent_close)
				send_close(a, code, "detached");
			finish_when_sent(a);
			return;
		}
		if (ev.kind == WS_NEED && !used)
			return;
		a->heard = true; /* a whole frame: the client is alive */
		evbuffer_drain(in, used);
	}
}

static void on_write(struct bufferevent *bev, void *arg)
{
	struct att *a = arg;
	if (a->dead && !evbuffer_get_length(bufferevent_get_output(bev))) {
		att_free(a, true);
		return;
	}
	resume(a); /* (output taken is no sign of life: the socket's buffers take it) */
}

/* Every ATTACH_PING_S: a ping; a client from which no whole frame came for
 * ATTACH_QUIET_TICKS of them (gone without a word, or stuck in the middle
 * of a frame) is let go, freeing the process's one attach; so is a closing
 * one that never drains. */
static void on_keep(evutil_socket_t fd, short what, void *arg)
{
	struct att *a = arg;
	a->quiet = a->heard ? 0 : a->quiet + 1;
	a->heard = false;
	if (a->quiet >= ATTACH_QUIET_TICKS) {
		att_free(a, true);
		return;
	}
	if (!a->dead)
		send_frame(a, WS_PING, NULL, 0);
}

static int ping_s(void)
{
	/* tests shorten it; the default suits a terminal left alone */
	const char *t = getenv("MOAT_TEST_ATTACH_PING_S");
	int v = t ? atoi(t) : 0;
	return v > 0 ? v : ATTACH_PING_S;
}

static void on_event(struct bufferevent *bev, short what, void *arg)
{
	/* the client went away (or the socket failed): the process stays */
	att_free(arg, true);
}

static void on_conn_closed(struct evhttp_connection *c, void *arg)
{
	att_free(arg, false); /* evhttp frees the connection itself */
}

/* ---- the handshake ------------------------------------------------------------ */

static void upgrade(struct att *a)
{
	http_wait_stop(&a->wait);
	a->evcon = evhttp_request_get_connection(a->req);
	a->bev = a->evcon ? evhttp_connection_get_bufferevent(a->evcon) : NULL;
	if (!a->bev) {
		a->evcon = NULL;
		att_free(a, false);
		return;
	}
	a->in = evbuffer_new();
	a->keep = event_new(core_config()->base, -1, EV_PERSIST, on_keep, a);
	/* what evhttp left in the input, then what the framer held: in order */
	if (!a->in || !a->keep || evbuffer_add_buffer(a->in, bufferevent_get_input(a->bev)) < 0 ||
	    guard_release(a->bev, a->in) < 0) {
		a->evcon = NULL; /* still evhttp's: answered as usual */
		http_error(a->req, 500, "internal", "out of memory");
		att_free(a, false);
		return;
	}
	http_set_closecb(a->evcon, on_conn_closed, a);
	bufferevent_setcb(a->bev, on_read, on_write, on_event, a);
	bufferevent_set_timeouts(a->bev, NULL, NULL); /* an idle terminal is no error */
	bufferevent_enable(a->bev, EV_READ | EV_WRITE);
	struct timeval tv = {ping_s(), 0};
	if (event_add(a->keep, &tv) < 0)
		a->dead = true; /* no way to tell a live client from a gone one: refused */
	evbuffer_add_printf(bufferevent_get_output(a->bev),
			    "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
			    "Connection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n",
			    a->accept);
	send_json(a, json_pack("{s:s,s:I,s:b}", "type", "attached", "process_id",
			       (json_int_t)a->pid, "tty", a->tty));
	struct core_err e = {0};
	struct box *b = att_box(a);
	a->op = b ? core_attach(b, a->pid, true, -1, &att_cbs, a, &e) : NULL;
	if (!a->op) {
		if (!b)
			snprintf(e.code, sizeof e.code, "conflict");
		send_error(a, e.code, b ? e.msg : "the sandbox was deleted");
		close_and_wait(a, WS_CLOSE_INTERNAL, e.code);
	}
	/* what the client sent after its request, if anything */
	if (evbuffer_get_length(a->in))
		on_read(a->bev, a);
}

static void on_ps(void *arg, json_t *result, const char *data, size_t len,
		  const struct core_err *e)
{
	struct att *a = arg;
	a->op = NULL;
	if (e) {
		http_wait_stop(&a->wait);
		http_error(a->req, e->status ? e->status : 500, e->code, "%s", e->msg);
		att_free(a, false);
		return;
	}
	size_t i;
	json_t *p;
	json_array_foreach(json_object_get(result, "processes"), i, p)
	{
		if (json_integer_value(json_object_get(p, "process_id")) == a->pid) {
			a->tty = json_is_true(json_object_get(p, "tty"));
			upgrade(a);
			return;
		}
	}
	http_wait_stop(&a->wait);
	http_error(a->req, 404, "not_found", "no process %lld in sandbox %s", (long long)a->pid,
		   a->bid);
	att_free(a, false);
}

static void on_gone(void *arg)
{
	att_free(arg, false); /* before the upgrade: http_wait ends the request */
}

/* Is tok one of the comma-separated tokens of v (case-insensitive)? */
static bool has_token(const char *v, const char *tok)
{
	size_t tl = strlen(tok);
	while (v && *v) {
		v += strspn(v, " \t,");
		size_t n = strcspn(v, ",");
		size_t m = n;
		while (m && (v[m - 1] == ' ' || v[m - 1] == '\t'))
			m--;
		if (m == tl && !strncasecmp(v, tok, tl))
			return true;
		v += n;
	}
	return false;
}

void attach_route(struct evhttp_request *req, struct box *b, const char *pids)
{
	if (evhttp_request_get_command(req) != EVHTTP_REQ_GET) {
		http_error(req, 405, "method_not_allowed", "attach is a GET with Upgrade: websocket");
		return;
	}
	char *end;
	long long pid = strtoll(pids, &end, 10);
	if (!*pids || *end || pid <= 0 || pid > 2000000000) {
		http_error(req, 404, "not_found", "no process %.32s", pids);
		return;
	}
	struct evkeyvalq *h = evhttp_request_get_input_headers(req);
	const char *upg = evhttp_find_header(h, "Upgrade");
	const char *ver = evhttp_find_header(h, "Sec-WebSocket-Version");
	char accept[29];
	if (!upg || !has_token(upg, "websocket") ||
	    !has_token(evhttp_find_header(h, "Connection"), "upgrade")) {
		http_error(req, 400, "invalid_request",
			   "attach is a WebSocket: the request needs Upgrade: websocket and "
			   "Connection: Upgrade");
		return;
	}
	if (!ver || strcmp(ver, "13")) {
		evhttp_add_header(evhttp_request_get_output_headers(req), "Sec-WebSocket-Version",
				  "13");
		http_error(req, 426, "invalid_request",
			   "Sec-WebSocket-Version %.16s: only version 13 (RFC 6455) is spoken",
			   ver ? ver : "(none)");
		return;
	}
	if (!ws_accept_key(evhttp_find_header(h, "Sec-WebSocket-Key"), accept)) {
		http_error(req, 400, "invalid_request",
			   "Sec-WebSocket-Key must be 16 bytes in base64 (RFC 6455)");
		return;
	}
	if (find_live(box_id(b), pid)) {
		http_error(req, 409, "conflict",
			   "process %lld already has an attach: one at a time (close it first)",
			   pid);
		return;
	}
	struct att *a = calloc(1, sizeof *a);
	if (!a) {
		http_error(req, 500, "internal", "out of memory");
		return;
	}
	snprintf(a->bid, sizeof a->bid, "%s", box_id(b));
	a->b = b;
	a->pid = pid;
	a->req = req;
	memcpy(a->accept, accept, sizeof accept);
	a->rd = (struct ws_reader){.server = true, .max_message = ATTACH_MAX_MESSAGE};
	a->flow = calloc(1, sizeof *a->flow);
	if (!a->flow) {
		free(a);
		http_error(req, 500, "internal", "out of memory");
		return;
	}
	a->flow->a = a;
	a->next = live;
	live = a;
	http_wait_start(&a->wait, core_config()->base, req, on_gone, a);
	/* the process must exist before the answer is 101: a wrong pid is a
	 * plain 404 */
	struct core_err e = {0};
	a->op = core_ps(b, on_ps, a, &e);
	if (!a->op) {
		http_wait_stop(&a->wait);
		http_error(req, e.status ? e.status : 500, e.code, "%s", e.msg);
		att_free(a, false);
	}
}
