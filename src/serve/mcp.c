/* The MCP door's transport (see mcp.h): Streamable HTTP (spec 2025-06-18)
 * at /mcp. One JSON-RPC message per POST: a request is answered 200 with
 * application/json (or, for an exec that reports progress to a client
 * accepting it, text/event-stream: notifications/progress, then the
 * answer); a notification or a response 202 without a body. initialize
 * mints the session (Mcp-Session-Id); every later message needs it (400
 * without, 404 unknown or ended); DELETE ends it; GET is 405 (no
 * server-initiated stream). Transport refusals carry a JSON-RPC error body
 * (id null unless the message was read). The protocol's methods are
 * answered here; tools/call goes to mcp_tools.c. */
#define _GNU_SOURCE
#include "mcp.h"

#include "box.h"
#include "http.h"
#include "jfield.h"
#include "mcp_int.h"
#include "mcp_msg.h"
#include "metrics.h"

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/keyvalq_struct.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

/* as `moat --version` (src/cli/main.c) */
#define MOAT_VERSION_STR "0.1.0"
#define SESSION_NOT_FOUND (-32001)

static const char instructions[] =
	"moat runs commands and file operations in isolated Linux sandboxes (the host hidden, "
	"no network unless asked). Call sandbox_create first and keep its id; every other tool "
	"takes it as \"id\". exec runs a shell command line in the sandbox (cwd /workspace by "
	"default) and returns its exit code, stdout and stderr; for a long or interactive "
	"command pass yield_ms and continue with write_stdin on the process_id it returns. "
	"read_file, write_file, list_files, apply_patch (Codex patch format, all or nothing) "
	"and view_image work on the sandbox's files; paths are absolute or relative to "
	"/workspace. Call sandbox_delete when the work is done.";

static struct mcp_config conf;

struct pend;

struct session {
	char id[MCP_SESSION_ID_LEN + 1];
	char version[16];
	time_t last;        /* monotonic seconds of its last message */
	struct pend *calls; /* tools/call in flight */
	struct session *next;
};

static struct session *sessions;
static unsigned nsessions;

/* A tools/call in flight: its HTTP request, until the tool answers, the
 * client leaves, or it is cancelled. */
struct pend {
	struct evhttp_request *req;
	struct session *s;
	json_t *id;           /* the request's id (own reference) */
	json_t *token;        /* _meta.progressToken (own reference), or NULL */
	struct mcp_call *call;
	struct http_wait wait; /* the client leaving while we wait */
	long long progress;   /* bytes of output reported */
	struct pend *next;    /* in s->calls */
};

static time_t now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec;
}

void mcp_init(const struct mcp_config *c)
{
	conf = *c;
	if (!conf.max_sessions)
		conf.max_sessions = MCP_MAX_SESSIONS;
	if (!conf.idle_s)
		conf.idle_s = MCP_IDLE_S;
}

bool mcp_claims(struct evhttp_request *req)
{
	const struct evhttp_uri *u = evhttp_request_get_evhttp_uri(req);
	const char *p = u ? evhttp_uri_get_path(u) : NULL;
	return p && !strcmp(p, "/mcp");
}

/* ---- answers ------------------------------------------------------------------- */

static void rpc(struct evhttp_request *req, int status, json_t *msg)
{
	http_json(req, status, msg ? msg : json_pack("{s:s}", "jsonrpc", "2.0"));
}

/* ---- sessions -------------------------------------------------------------------- */

static void pend_end(struct pend *p, int status, json_t *msg);
static void pend_detach(struct pend *p);
static void pend_free(struct pend *p);

static void session_free(struct session *s)
{
	/* what it still waits for is answered: the session is gone */
	while (s->calls)
		pend_end(s->calls, 404,
			 mcp_error(s->calls->id, SESSION_NOT_FOUND, "the MCP session was ended"));
	free(s);
}

static void session_unlink(struct session *s)
{
	for (struct session **pp = &sessions; *pp; pp = &(*pp)->next)
		if (*pp == s) {
			*pp = s->next;
			nsessions--;
			return;
		}
}

/* End the sessions idle for conf.idle_s (none with a call in flight). */
static void sweep(void)
{
	time_t t = now_s();
	for (struct session **pp = &sessions; *pp;) {
		struct session *s = *pp;
		if (!s->calls && t - s->last >= (time_t)conf.idle_s) {
			*pp = s->next;
			nsessions--;
			session_free(s);
		} else {
			pp = &s->next;
		}
	}
}

static struct session *session_find(const char *id)
{
	if (!mcp_session_id_ok(id))
		return NULL;
	for (struct session *s = sessions; s; s = s->next)
		if (!strcmp(s->id, id))
			return s;
	return NULL;
}

static struct session *session_new(const char *version)
{
	unsigned char r[MCP_SESSION_ID_LEN / 2];
	if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r)
		return NULL;
	struct session *s = calloc(1, sizeof *s);
	if (!s)
		return NULL;
	for (size_t i = 0; i < sizeof r; i++)
		snprintf(s->id + 2 * i, 3, "%02x", r[i]);
	snprintf(s->version, sizeof s->version, "%s", version);
	s->last = now_s();
	s->next = sessions;
	sessions = s;
	nsessions++;
	return s;
}

void mcp_shutdown(void)
{
	while (sessions) {
		struct session *s = sessions;
		sessions = s->next;
		nsessions--;
		/* the daemon stops: cancel, do not answer (evhttp goes next) */
		while (s->calls) {
			struct pend *p = s->calls;
			pend_detach(p);
			pend_free(p);
		}
		free(s);
	}
}

/* ---- calls in flight --------------------------------------------------------------- */

static void pend_unlink(struct pend *p)
{
	if (!p->s)
		return;
	for (struct pend **pp = &p->s->calls; *pp; pp = &(*pp)->next)
		if (*pp == p) {
			*pp = p->next;
			break;
		}
	p->s->last = now_s();
	p->s = NULL;
}

/* Detach from the connection before answering (its close must not free
 * us twice). */
static void pend_detach(struct pend *p)
{
	http_wait_stop(&p->wait);
	pend_unlink(p);
}

static void pend_free(struct pend *p)
{
	http_wait_stop(&p->wait);
	mcp_call_cancel(p->call);
	json_decref(p->id);
	json_decref(p->token);
	free(p);
}

static void sse_message(struct evhttp_request *req, json_t *msg)
{
	char *s = msg ? json_dumps(msg, JSON_COMPACT) : NULL;
	json_decref(msg);
	struct evbuffer *b = s ? evbuffer_new() : NULL;
	if (b) {
		evbuffer_add_printf(b, "event: message\ndata: %s\n\n", s);
		evhttp_send_reply_chunk(req, b);
		evbuffer_free(b);
	}
	free(s);
}

/* Answer p's request and free p: status and msg (stolen; NULL with 202:
 * no body). On a started SSE stream the message is its last event. */
static void pend_end(struct pend *p, int status, json_t *msg)
{
	struct evhttp_request *req = p->req;
	bool streaming = p->wait.streaming;
	pend_detach(p);
	pend_free(p); /* a call still running is cancelled */
	if (streaming) {
		if (msg)
			sse_message(req, msg);
		evhttp_send_reply_end(req);
	} else if (status == 202) {
		json_decref(msg);
		http_accepted(req);
	} else {
		rpc(req, status, msg);
	}
}

/* The client left (http_wait): cancel, answer nothing. */
static void on_client_gone(void *arg)
{
	struct pend *p = arg;
	pend_unlink(p);
	pend_free(p); /* cancels the call: an exec waiting for its exit is killed */
}

static struct pend *pend_new(struct evhttp_request *req, struct session *s, json_t *id)
{
	struct pend *p = calloc(1, sizeof *p);
	if (!p)
		return NULL;
	p->req = req;
	p->id = json_incref(id);
	p->s = s;
	p->next = s->calls;
	s->calls = p;
	http_wait_start(&p->wait, conf.base, req, on_client_gone, p);
	return p;
}

static void call_done(void *arg, json_t *result)
{
	struct pend *p = arg;
	p->call = NULL; /* it has freed itself */
	pend_end(p, 200, mcp_result(p->id, result));
}

/* exec's output as progress: each chunk one notifications/progress whose
 * progress is the bytes so far (it must grow) and message the text. */
static void call_output(void *arg, const char *out, size_t olen, const char *err, size_t elen)
{
	struct pend *p = arg;
	if (!p->token || (!olen && !elen))
		return;
	http_wait_stream(&p->wait, "text/event-stream");
	p->progress += (long long)(olen + elen);
	/* stdout then stderr of this chunk, as the result's text shows them */
	char *m = malloc(olen + elen + 1);
	if (!m)
		return;
	memcpy(m, out ? out : "", olen);
	memcpy(m + olen, err ? err : "", elen);
	json_t *text = jf_text(m, olen + elen);
	free(m);
	sse_message(p->req,
		    json_pack("{s:s,s:s,s:{s:O,s:I,s:o}}", "jsonrpc", "2.0", "method",
			      "notifications/progress", "params", "progressToken", p->token,
			      "progress", (json_int_t)p->progress, "message", text));
}

static size_t call_backlog(void *arg)
{
	struct pend *p = arg;
	return http_wait_backlog(&p->wait);
}

static const struct mcp_call_cbs call_cbs = {.done = call_done, .output = call_output,
					     .backlog = call_backlog};

/* ---- methods -------------------------------------------------------------------------- */

static bool accepts_sse(struct evhttp_request *req)
{
	const char *a = evhttp_find_header(evhttp_request_get_input_headers(req), "Accept");
	return a && strcasestr(a, "text/event-stream");
}

static void tools_call(struct evhttp_request *req, struct session *s, struct mcp_msg *m)
{
	json_t *name = json_object_get(m->params, "name");
	json_t *args = json_object_get(m->params, "arguments");
	const struct mcp_tool *t = mcp_tool_find(json_string_value(name));
	if (!json_is_string(name)) {
		rpc(req, 200, mcp_error(m->id, MCP_INVALID_PARAMS, "tools/call: \"name\" must be "
								   "the name of a tool"));
		return;
	}
	if (!t) {
		rpc(req, 200, mcp_error(m->id, MCP_INVALID_PARAMS,
					"tools/call: unknown tool \"%.64s\" (tools/list has them)",
					json_string_value(name)));
		return;
	}
	if (args && !json_is_null(args) && !json_is_object(args)) {
		rpc(req, 200, mcp_error(m->id, MCP_INVALID_PARAMS,
					"tools/call %s: \"arguments\" must be an object", t->name));
		return;
	}
	json_t *token = json_object_get(json_object_get(m->params, "_meta"), "progressToken");
	if (token && !json_is_string(token) && !json_is_integer(token))
		token = NULL;
	bool stream = token && t->op == MCP_OP_EXEC && accepts_sse(req);
	struct pend *p = pend_new(req, s, m->id);
	if (!p) {
		rpc(req, 200, mcp_error(m->id, MCP_INTERNAL_ERROR, "out of memory"));
		return;
	}
	p->token = stream ? json_incref(token) : NULL;
	json_t *now = NULL;
	p->call = mcp_tools_call(t, json_is_object(args) ? args : NULL, stream, &call_cbs, p, &now);
	if (!p->call)
		pend_end(p, 200, mcp_result(m->id, now ? now : mcp_tool_error("out of memory")));
}

static void cancelled(struct session *s, json_t *params)
{
	json_t *rid = json_object_get(params, "requestId");
	for (struct pend *p = s->calls; rid && p; p = p->next)
		if (json_equal(p->id, rid)) {
			/* spec: no answer to a cancelled request; its HTTP exchange
			 * still ends (202, no message), or the client's fetch hangs */
			pend_end(p, 202, NULL); /* cancels the call */
			return;
		}
}

static void initialize(struct evhttp_request *req, struct mcp_msg *m)
{
	json_t *v = json_object_get(m->params, "protocolVersion");
	if (!json_is_string(v)) {
		rpc(req, 200, mcp_error(m->id, MCP_INVALID_PARAMS,
					"initialize: \"protocolVersion\" must be a string"));
		return;
	}
	sweep();
	if (nsessions >= conf.max_sessions) {
		evhttp_add_header(evhttp_request_get_output_headers(req), "Retry-After", "60");
		rpc(req, 503, mcp_error(m->id, MCP_SERVER_ERROR,
					"too many MCP sessions (%u open): end one with DELETE /mcp, "
					"or wait for idle ones to expire (%u s)",
					conf.max_sessions, conf.idle_s));
		return;
	}
	const char *ver = mcp_version_pick(json_string_value(v));
	struct session *s = session_new(ver);
	if (!s) {
		rpc(req, 500, mcp_error(m->id, MCP_INTERNAL_ERROR, "cannot make a session"));
		return;
	}
	evhttp_add_header(evhttp_request_get_output_headers(req), "Mcp-Session-Id", s->id);
	json_t *r = json_pack("{s:s,s:{s:{s:b}},s:{s:s,s:s,s:s},s:s}", "protocolVersion", ver,
			      "capabilities", "tools", "listChanged", 0, "serverInfo", "name", "moat",
			      "title", "moat sandboxes", "version", MOAT_VERSION_STR,
			      "instructions", instructions);
	rpc(req, 200, mcp_result(m->id, r));
}

static void request(struct evhttp_request *req, struct session *s, struct mcp_msg *m)
{
	if (!strcmp(m->method, "ping"))
		rpc(req, 200, mcp_result(m->id, json_object()));
	else if (!strcmp(m->method, "tools/list"))
		rpc(req, 200, mcp_result(m->id, mcp_tools_json()));
	else if (!strcmp(m->method, "tools/call"))
		tools_call(req, s, m);
	else
		rpc(req, 200, mcp_error(m->id, MCP_METHOD_NOT_FOUND, "method not found: %.64s",
					m->method));
}

/* ---- the transport ------------------------------------------------------------------- */

/* The session a message names: NULL after answering 400/404. */
static struct session *need_session(struct evhttp_request *req, json_t *id)
{
	const char *sid = evhttp_find_header(evhttp_request_get_input_headers(req),
					     "Mcp-Session-Id");
	if (!sid) {
		rpc(req, 400, mcp_error(id, MCP_SERVER_ERROR,
					"missing Mcp-Session-Id header: send initialize first and "
					"pass the session id it answers"));
		return NULL;
	}
	sweep();
	struct session *s = session_find(sid);
	if (!s) {
		rpc(req, 404, mcp_error(id, SESSION_NOT_FOUND,
					"unknown or ended MCP session \"%.40s\": initialize again",
					sid));
		return NULL;
	}
	s->last = now_s();
	return s;
}

static void post(struct evhttp_request *req)
{
	size_t len;
	const char *body = http_body(req, &len);
	struct mcp_msg m;
	enum mcp_kind k = mcp_msg_parse(body, len, &m);
	if (k == MCP_INVALID && m.code != MCP_INVALID_PARAMS) {
		rpc(req, 400, mcp_error(m.id, m.code, "%s", m.err));
		goto out;
	}
	if (k == MCP_REQUEST && !strcmp(m.method, "initialize")) {
		initialize(req, &m);
		goto out;
	}
	struct session *s = need_session(req, m.id);
	if (!s)
		goto out;
	switch (k) {
	case MCP_INVALID: /* a request whose params are not an object */
		rpc(req, 200, mcp_error(m.id, m.code, "%s", m.err));
		break;
	case MCP_NOTIFICATION:
		/* notifications/initialized needs nothing; unknown ones are ignored */
		if (!strcmp(m.method, "notifications/cancelled"))
			cancelled(s, m.params);
		http_accepted(req);
		break;
	case MCP_RESPONSE: /* the door asks the client nothing: ignored */
		http_accepted(req);
		break;
	case MCP_REQUEST:
		request(req, s, &m);
		break;
	}
out:
	mcp_msg_free(&m);
}

static void end_session(struct evhttp_request *req)
{
	struct session *s = need_session(req, NULL);
	if (!s)
		return;
	session_unlink(s);
	session_free(s);
	http_no_content(req);
}

void mcp_route(struct evhttp_request *req)
{
	metrics_request();
	box_activity();
	struct evkeyvalq *in = evhttp_request_get_input_headers(req);
	/* (the Origin check the spec asks for, against DNS rebinding, is the
	 * HTTP layer's, for every door: browser.h) */
	enum evhttp_cmd_type cmd = evhttp_request_get_command(req);
	if (cmd != EVHTTP_REQ_POST && cmd != EVHTTP_REQ_DELETE) {
		/* GET would open a stream of server-initiated messages: none */
		evhttp_add_header(evhttp_request_get_output_headers(req), "Allow", "POST, DELETE");
		rpc(req, 405, mcp_error(NULL, MCP_SERVER_ERROR,
					"/mcp takes POST (messages) and DELETE (end the session)"));
		return;
	}
	const char *pv = evhttp_find_header(in, "MCP-Protocol-Version");
	if (pv && !mcp_version_known(pv)) {
		rpc(req, 400, mcp_error(NULL, MCP_SERVER_ERROR,
					"unsupported MCP-Protocol-Version %.40s (moat serves %s, %s, "
					"%s, %s)",
					pv, mcp_versions[0], mcp_versions[1], mcp_versions[2],
					mcp_versions[3]));
		return;
	}
	if (cmd == EVHTTP_REQ_DELETE)
		end_session(req);
	else
		post(req);
}
