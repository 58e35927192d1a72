/* The E2B door's front (see e2b.h): which requests are the door's, where
 * each goes (envd of one sandbox, or the control plane), the control
 * plane's API key, and the answers every part of the door shares. */
#define _GNU_SOURCE
#include "e2b.h"
#include "e2b_int.h"

#include "box.h"
#include "core.h"
#include "http.h"
#include "metrics.h"
#include "../base/utf8.h"

#include <event2/keyvalq_struct.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ID_MAX 64 /* E2B's are 20; moat's are shorter */

/* ---- shared answers ---------------------------------------------------------- */

void e2b_api_error(struct evhttp_request *req, int status, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	moat_utf8_clean(msg); /* it may quote the client */
	http_json(req, status, json_pack("{s:i,s:s}", "code", status, "message", msg));
}

void e2b_not_found_502(struct evhttp_request *req, const char *id)
{
	/* E2B's proxy: the SDKs read 502 as "the sandbox is gone" */
	char clean[ID_MAX + 1];
	snprintf(clean, sizeof clean, "%s", id ? id : "");
	moat_utf8_clean(clean);
	http_json(req, 502, json_pack("{s:s,s:s,s:i}", "sandboxId", clean, "message",
				      "The sandbox was not found", "code", 502));
}

static void port_closed_502(struct evhttp_request *req, const char *id, int port)
{
	http_json(req, 502, json_pack("{s:s,s:s,s:i,s:i}", "sandboxId", id, "message",
				      "The sandbox is running but port is not open", "port", port,
				      "code", 502));
}

bool e2b_equal(const char *a, const char *b)
{
	/* constant time in the length of a (the secret): nothing tells how
	 * much of a guess was right */
	if (!a || !b)
		return false;
	size_t la = strlen(a), lb = strlen(b);
	unsigned char d = (unsigned char)(la != lb);
	for (size_t i = 0; i < la; i++)
		d |= (unsigned char)(a[i] ^ (i < lb ? b[i] : 0));
	return d == 0;
}

static const char *door_str(const struct box *b, const char *key)
{
	const json_t *d = b ? box_door(b, "e2b") : NULL;
	const char *s = d ? json_string_value(json_object_get(d, key)) : NULL;
	return s && *s ? s : NULL;
}

const char *e2b_access_token(const struct box *b)
{
	return door_str(b, "token");
}

const char *e2b_template(const struct box *b)
{
	const char *t = door_str(b, "template");
	return t ? t : "base";
}

/* ---- where a request goes ------------------------------------------------------ */

static bool valid_id(const char *s, size_t n)
{
	if (n == 0 || n > ID_MAX)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9')))
			return false;
	return true;
}

static int parse_port(const char *s, size_t n)
{
	if (n == 0 || n > 5)
		return -1;
	int p = 0;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		p = p * 10 + (s[i] - '0');
	}
	return p >= 1 && p <= 65535 ? p : -1;
}

enum target { T_NONE, T_ENVD, T_BAD_ID, T_BAD_PORT, T_BAD_SIG };

/* envd traffic: the E2b-Sandbox-Id header (with E2b-Sandbox-Port, default
 * envd's), else a Host "<port>-<id>.<anything>" (E2B's proxy splits at the
 * first '.', then at the first '-'). id gets at most ID_MAX chars. */
struct signed_ctx {
	struct evhttp_request *req;
	const char *op;
	char *id;
	bool found;
};

static void signed_one(struct box *b, void *arg)
{
	struct signed_ctx *c = arg;
	const char *tok = c->found ? NULL : e2b_access_token(b);
	char msg[128];
	if (tok && e2b_files_auth(c->req, tok, c->op, msg, sizeof msg) == 0) {
		snprintf(c->id, ID_MAX + 1, "%s", box_id(b));
		c->found = true;
	}
}

/* A signed URL (uploadUrl/downloadUrl) names no sandbox when the SDK
 * uses E2B_SANDBOX_URL: the sandbox is the one whose token signed it. */
static int signed_files(struct evhttp_request *req, char *id)
{
	const struct evhttp_uri *u = evhttp_request_get_evhttp_uri(req);
	const char *p = u ? evhttp_uri_get_path(u) : NULL;
	const char *q = u ? evhttp_uri_get_query(u) : NULL;
	enum evhttp_cmd_type m = evhttp_request_get_command(req);
	if (!p || strcmp(p, "/files") || !q || !strstr(q, "signature=") ||
	    (m != EVHTTP_REQ_GET && m != EVHTTP_REQ_POST))
		return 0;
	struct signed_ctx c = {req, m == EVHTTP_REQ_GET ? "read" : "write", id, false};
	box_each(signed_one, &c);
	return c.found ? 1 : -1; /* -1: signed, by no sandbox's token (or expired) */
}

static enum target envd_target(struct evhttp_request *req, char *id, int *port)
{
	struct evkeyvalq *h = evhttp_request_get_input_headers(req);
	const char *hid = evhttp_find_header(h, "E2b-Sandbox-Id");
	if (hid) {
		size_t n = strlen(hid);
		snprintf(id, ID_MAX + 1, "%s", hid);
		if (!valid_id(hid, n))
			return T_BAD_ID;
		const char *hp = evhttp_find_header(h, "E2b-Sandbox-Port");
		*port = hp ? parse_port(hp, strlen(hp)) : E2B_ENVD_PORT;
		return *port < 0 ? T_BAD_PORT : T_ENVD;
	}
	const char *host = evhttp_find_header(h, "Host");
	int sig = signed_files(req, id);
	if (sig) {
		*port = E2B_ENVD_PORT;
		return sig > 0 ? T_ENVD : T_BAD_SIG;
	}
	if (!host)
		return T_NONE;
	size_t label = strcspn(host, ".:");
	if (host[label] != '.')
		return T_NONE; /* "localhost:7070", "127.0.0.1" splits at "127" below */
	const char *dash = memchr(host, '-', label);
	if (!dash)
		return T_NONE;
	int p = parse_port(host, (size_t)(dash - host));
	size_t idlen = label - (size_t)(dash + 1 - host);
	if (p < 0 || !valid_id(dash + 1, idlen))
		return T_NONE; /* some other name with a dash: not ours */
	snprintf(id, ID_MAX + 1, "%.*s", (int)idlen, dash + 1);
	*port = p;
	return T_ENVD;
}

static const char *uri_path(struct evhttp_request *req)
{
	const struct evhttp_uri *u = evhttp_request_get_evhttp_uri(req);
	const char *p = u ? evhttp_uri_get_path(u) : NULL;
	return p ? p : "";
}

/* "/sandboxes", "/sandboxes/...", the same under /v2, /snapshots,
 * /templates/... and /health */
static bool control_path(const char *p)
{
	if (!strncmp(p, "/v2/", 4))
		p += 3;
	if (!strncmp(p, "/sandboxes", 10) && (p[10] == '\0' || p[10] == '/'))
		return true;
	/* the SDK's listSnapshots and deleteSnapshot (e2b_snap.c) */
	if (!strcmp(p, "/snapshots") || !strncmp(p, "/templates/", 11))
		return true;
	return !strcmp(p, "/health");
}

bool e2b_claims(struct evhttp_request *req)
{
	char id[ID_MAX + 1];
	int port;
	if (envd_target(req, id, &port) != T_NONE)
		return true;
	return control_path(uri_path(req));
}

/* The control plane's key: X-API-KEY (what the SDKs send) or a bearer
 * token, equal to the daemon's API token (none configured: a loopback
 * daemon without auth, as for /v1). */
static bool api_key_ok(struct evhttp_request *req)
{
	struct evkeyvalq *h = evhttp_request_get_input_headers(req);
	const char *k = evhttp_find_header(h, "X-API-KEY");
	if (k && http_token_equal(k))
		return true;
	const char *a = evhttp_find_header(h, "Authorization");
	if (a && !strncasecmp(a, "Bearer ", 7) && http_token_equal(a + 7))
		return true;
	return http_token_equal(NULL); /* true only when there is no token */
}

static void unauthorized(struct evhttp_request *req)
{
	e2b_api_error(req, 401, "missing or wrong API key (X-API-KEY: the daemon's API token)");
}

void e2b_refuse(struct evhttp_request *req, int status, const char *msg)
{
	char id[ID_MAX + 1];
	int port;
	/* the control plane tells its refusals to its callers only */
	if (envd_target(req, id, &port) == T_NONE && !api_key_ok(req)) {
		unauthorized(req);
		return;
	}
	e2b_api_error(req, status, "%s", msg);
}

void e2b_route(struct evhttp_request *req)
{
	metrics_request();
	box_activity();
	const char *path = uri_path(req);
	char id[ID_MAX + 1] = "";
	int port = 0;
	switch (envd_target(req, id, &port)) {
	case T_BAD_ID:
		/* no sandbox can have that id */
		e2b_not_found_502(req, id);
		return;
	case T_BAD_PORT:
		e2b_api_error(req, 400, "E2b-Sandbox-Port: expected a port number");
		return;
	case T_BAD_SIG:
		e2b_api_error(req, 401, "invalid or expired signature");
		return;
	case T_ENVD: {
		struct box *b = box_find(id);
		/* only the door's sandboxes have envd (and an access token) */
		if (!b || !box_running(b) || !e2b_access_token(b)) {
			e2b_not_found_502(req, id);
			return;
		}
		if (port != E2B_ENVD_PORT) {
			port_closed_502(req, id, port);
			return;
		}
		box_touch(b);
		e2b_envd_route(req, b, id, port, path);
		return;
	}
	case T_NONE:
		break;
	}
	if (!api_key_ok(req)) {
		unauthorized(req);
		return;
	}
	e2b_api_route(req, path);
}

uint64_t e2b_body_limit(struct evhttp_request *req, uint64_t dflt)
{
	char id[ID_MAX + 1];
	int port;
	if (envd_target(req, id, &port) == T_ENVD) {
		/* POST /files carries a file (multipart or raw) */
		const struct core_config *c = core_config();
		if (evhttp_request_get_command(req) == EVHTTP_REQ_POST &&
		    !strcmp(uri_path(req), "/files") && c && c->max_file)
			return c->max_file + (64u << 10); /* + multipart framing */
		return dflt;
	}
	return control_path(uri_path(req)) ? HTTP_MAX_JSON_BODY : dflt;
}
