/* libFuzzer target: the E2B door's front and control plane (e2b.c,
 * e2b_api.c, with http.c's replies): envd routing by E2b-Sandbox-Id /
 * E2b-Sandbox-Port or Host, the API key, the routes, create bodies, list
 * queries (metadata filter, nextToken, state, limit). box.c is replaced
 * by stand-ins: sandboxes "b1" and "b2" of the door (an access token and a
 * template) and "v1" without door data; the core by core_stub.c (its
 * create answers from the stand-in pool at once).
 *
 * Input: byte 0 = method (bits 0-2) | the daemon has a token (bit 3);
 * then lines up to "\n": the request target, E2b-Sandbox-Id, E2b-Sandbox-Port,
 * Host, X-API-KEY (an empty line: no such header); the rest is the body.
 *
 * Checks: every request claimed is answered exactly once; every error of
 * the control plane is {"code": status, "message": text}; a 502 names the
 * sandbox; a 201 is a Sandbox with every key. */
#define _GNU_SOURCE
#include "serve/box.h"
#include "serve/core.h"
#include "serve/e2b.h"
#include "serve/e2b_int.h"
#include "serve/http.h"

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/http_struct.h>
#include <event2/keyvalq_struct.h>
#include <stdbool.h>
#include <stdint.h>
#include "serve/life.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* ---- stand-in sandboxes ------------------------------------------------------ */

struct box {
	const char *id;
	bool door, exists, paused;
	json_t *md;
};
static struct box boxes[3] = {{"b1", true, true, NULL}, {"b2", true, true, NULL},
			      {"v1", false, true, NULL}};
static json_t *door_data;

struct box *box_create_start(struct box_spec *spec, box_create_cb cb, void *arg,
			     struct box **pending, struct moat_err *e)
{
	*pending = NULL;
	boxes[1].exists = true;
	return &boxes[1];
}

struct box *box_find(const char *id)
{
	for (size_t i = 0; i < 3; i++)
		if (boxes[i].exists && !strcmp(boxes[i].id, id))
			return &boxes[i];
	return NULL;
}

void box_delete(struct box *b)
{
	b->exists = false;
}

void box_each(void (*fn)(struct box *b, void *arg), void *arg)
{
	for (size_t i = 0; i < 3; i++)
		if (boxes[i].exists)
			fn(&boxes[i], arg);
}

const char *box_id(const struct box *b) { return b->id; }
bool box_running(const struct box *b) { return b->exists; }
bool box_paused(const struct box *b) { return b->paused; }
/* the core's pause and resume (life.c) as toggles, with its 409s */
int core_pause(struct box *b, bool release, struct core_err *e)
{
	if (b->paused) {
		*e = (struct core_err){.status = 409, .code = "conflict"};
		return -1;
	}
	b->paused = true;
	return 0;
}
int core_resume(struct box *b, struct core_err *e)
{
	if (!b->paused) {
		*e = (struct core_err){.status = 409, .code = "conflict"};
		return -1;
	}
	b->paused = false;
	return 0;
}
const json_t *box_metadata(const struct box *b) { return b->md; }
void box_activity(void) {}
void box_touch(struct box *b) {}
const json_t *box_door(const struct box *b, const char *door)
{
	return b->door && !strcmp(door, "e2b") ? door_data : NULL;
}
int64_t box_created_at(const struct box *b) { return b == &boxes[0] ? 1000 : 1000 + (b->id[1]); }
int64_t box_end_at(const struct box *b) { return 5000; }
int box_set_end(struct box *b, int64_t end_unix) { return 0; }
void box_limits(const struct box *b, uint64_t *m, uint64_t *d, uint64_t *c)
{
	*m = 1 << 30;
	*d = 0;
	*c = 1500;
}
void box_usage(const struct box *b, int64_t *cpu, int64_t *mem)
{
	*cpu = 12345;
	*mem = 1 << 20;
}
void e2b_envd_route(struct evhttp_request *req, struct box *b, const char *id, int port,
		    const char *path)
{
	if (!b || !e2b_access_token(b) || port != E2B_ENVD_PORT)
		abort();
	http_no_content(req);
}

/* ---- replies ------------------------------------------------------------------- */

void evhttp_connection_set_closecb(struct evhttp_connection *evcon,
				   void (*cb)(struct evhttp_connection *, void *), void *arg)
{
	if (evcon)
		abort();
}

static struct evhttp_request *live;

void evhttp_send_reply(struct evhttp_request *req, int code, const char *reason,
		       struct evbuffer *databuf)
{
	if (req != live || code < 200 || code > 599 || !reason)
		abort();
	size_t n = databuf ? evbuffer_get_length(databuf) : 0;
	const char *s = n ? (const char *)evbuffer_pullup(databuf, -1) : "";
	if (getenv("FUZZ_E2B_SHOW"))
		fprintf(stderr, "%d %.*s\n", code, (int)(n < 300 ? n : 300), s);
	json_t *j = n ? json_loadb(s, n, 0, NULL) : NULL;
	if (code == 204 && n)
		abort();
	if (code >= 400) {
		/* E2B's shapes: {"code","message"}, a 502 also names the sandbox */
		if (json_integer_value(json_object_get(j, "code")) != code ||
		    !json_is_string(json_object_get(j, "message")))
			abort();
		if (code == 502 && !json_is_string(json_object_get(j, "sandboxId")))
			abort();
	}
	if (code == 201) {
		static const char *const keys[] = {"templateID", "sandboxID", "clientID",
						   "envdVersion", "envdAccessToken", NULL};
		for (size_t i = 0; keys[i]; i++)
			if (!json_is_string(json_object_get(j, keys[i])))
				abort();
	}
	json_decref(j);
	live = NULL;
	evhttp_request_free(req);
}

/* ---- driver ----------------------------------------------------------------- */

static struct event_base *base;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	base = event_base_new();
	static char *const templates[] = {"py=/nonexistent/rootfs", NULL};
	static char *const allow[] = {"*.example.com", NULL};
	/* no event base: the stand-in core answers inside core_create */
	struct core_config c = {.templates = templates, .net_allow = allow, .max_file = 1 << 20};
	core_init(&c);
	door_data = json_pack("{s:s,s:s,s:s}", "token", "0123456789abcdef0123456789abcdef",
			      "template", "base", "alias", "base");
	boxes[0].md = json_pack("{s:s,s:s}", "a", "1", "odd key", "x&y=z");
	return 0;
}

static const uint8_t *line(const uint8_t *p, const uint8_t *end, char **out)
{
	const uint8_t *q = memchr(p, '\n', (size_t)(end - p));
	if (!q)
		q = end;
	*out = (q > p) ? strndup((const char *)p, (size_t)(q - p)) : NULL;
	return q < end ? q + 1 : end;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const enum evhttp_cmd_type methods[8] = {
		EVHTTP_REQ_GET, EVHTTP_REQ_POST, EVHTTP_REQ_DELETE, EVHTTP_REQ_PUT,
		EVHTTP_REQ_HEAD, EVHTTP_REQ_PATCH, EVHTTP_REQ_OPTIONS, EVHTTP_REQ_POST};
	if (size < 2)
		return 0;
	const uint8_t *end = data + size, *p = data + 1;
	char *uri = NULL, *hv[4] = {0};
	p = line(p, end, &uri);
	for (int i = 0; i < 4; i++)
		p = line(p, end, &hv[i]);
	struct evhttp_uri *u = uri ? evhttp_uri_parse_with_flags(uri, EVHTTP_URI_NONCONFORMANT) : NULL;
	if (!u || memchr(uri, 0, strlen(uri) + 1) != uri + strlen(uri)) {
		if (u)
			evhttp_uri_free(u);
		free(uri);
		for (int i = 0; i < 4; i++)
			free(hv[i]);
		return 0;
	}
	struct evhttp_request *req = evhttp_request_new(NULL, NULL);
	req->kind = EVHTTP_REQUEST;
	req->type = methods[data[0] & 7];
	req->uri = uri;
	req->uri_elems = u;
	static const char *const names[] = {"E2b-Sandbox-Id", "E2b-Sandbox-Port", "Host",
					    "X-API-KEY"};
	for (int i = 0; i < 4; i++) {
		if (hv[i])
			evhttp_add_header(req->input_headers, names[i], hv[i]);
		free(hv[i]);
	}
	evbuffer_add(req->input_buffer, p, (size_t)(end - p));
	(void)(data[0] & 8); /* the token lives in http.c: none here (any key passes) */
	for (size_t i = 0; i < 3; i++)
		boxes[i].exists = true;
	live = req;
	if (e2b_claims(req)) {
		e2b_route(req);
		if (live)
			abort(); /* never answered */
	} else {
		live = NULL;
		evhttp_request_free(req);
	}
	return 0;
}
