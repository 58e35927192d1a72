/* /v1's snapshot routes: see api_snap.h. The answers are snap.c's. */
#define _GNU_SOURCE
#include "api_snap.h"

#include "box.h"
#include "core.h"
#include "http.h"
#include "jfield.h"
#include "snap.h"
#include "snap_io.h"

#include <string.h>

static void fail(struct evhttp_request *req, const struct core_err *e)
{
	http_error(req, e->status ? e->status : 500, e->code[0] ? e->code : "internal", "%s",
		   e->msg);
}

static void answer(struct evhttp_request *req, int status, json_t *o, const struct core_err *e)
{
	if (o)
		http_json(req, status, o);
	else
		fail(req, e);
}

/* POST /v1/sandboxes/{id}/snapshots {name?} */
static void h_snapshot(struct evhttp_request *req, struct box *b)
{
	json_t *body = http_body_json(req, true);
	if (!body)
		return;
	static const char *const keys[] = {"name", NULL};
	struct core_err e = {0};
	json_t *name = json_object_get(body, "name");
	if (!jf_only_keys(&e, body, "body", keys))
		fail(req, &e);
	else if (name && !json_is_null(name) && !json_is_string(name))
		http_error(req, 400, "invalid_request", "name must be a string");
	else
		answer(req, 201, snap_create(b, json_string_value(name), &e), &e);
	json_decref(body);
}

/* POST /v1/sandboxes/{id}/restore {snapshot} */
static void h_restore(struct evhttp_request *req, struct box *b)
{
	json_t *body = http_body_json(req, false);
	if (!body)
		return;
	static const char *const keys[] = {"snapshot", NULL};
	struct core_err e = {0};
	json_t *sid = json_object_get(body, "snapshot");
	if (!jf_only_keys(&e, body, "body", keys))
		fail(req, &e);
	else if (!json_is_string(sid) || !json_string_length(sid))
		http_error(req, 400, "invalid_request", "snapshot must be a snapshot's id or name");
	else
		answer(req, 200, snap_restore(b, json_string_value(sid), &e), &e);
	json_decref(body);
}

/* POST /v1/sandboxes/{id}/fork {count} */
static void h_fork(struct evhttp_request *req, struct box *b)
{
	json_t *body = http_body_json(req, true);
	if (!body)
		return;
	static const char *const keys[] = {"count", NULL};
	struct core_err e = {0};
	json_t *c = json_object_get(body, "count");
	if (!jf_only_keys(&e, body, "body", keys))
		fail(req, &e);
	else if (c && (!json_is_integer(c) || json_integer_value(c) < 1 ||
		       json_integer_value(c) > 32))
		http_error(req, 400, "invalid_request", "count must be an integer from 1 to 32");
	else
		answer(req, 201, snap_fork(b, c ? (int)json_integer_value(c) : 1, &e), &e);
	json_decref(body);
}

bool api_snap_box_route(struct evhttp_request *req, struct box *b, const char *what, int n)
{
	enum evhttp_cmd_type m = evhttp_request_get_command(req);
	void (*h)(struct evhttp_request *, struct box *) =
		n != 4 ? NULL
		: !strcmp(what, "snapshots") ? h_snapshot
		: !strcmp(what, "restore") ? h_restore
		: !strcmp(what, "fork") ? h_fork : NULL;
	if (!h)
		return false;
	if (m != EVHTTP_REQ_POST)
		http_error(req, 405, "method_not_allowed", "use POST on /v1/sandboxes/%s/%s", box_id(b),
			   what);
	else
		h(req, b);
	return true;
}

void api_snap_route(struct evhttp_request *req, char **seg, int n)
{
	enum evhttp_cmd_type m = evhttp_request_get_command(req);
	struct core_err e = {0};
	if (n == 2) {
		if (m == EVHTTP_REQ_GET)
			http_json(req, 200, snap_list());
		else
			http_error(req, 405, "method_not_allowed", "use GET on /v1/snapshots");
		return;
	}
	if (n == 3 && !strcmp(seg[2], "import")) {
		if (m == EVHTTP_REQ_POST)
			snap_io_import(req);
		else
			http_error(req, 405, "method_not_allowed", "use POST on /v1/snapshots/import");
		return;
	}
	if (n == 4 && !strcmp(seg[3], "export")) {
		if (m == EVHTTP_REQ_GET)
			snap_io_export(req, seg[2]);
		else
			http_error(req, 405, "method_not_allowed",
				   "use GET on /v1/snapshots/%.64s/export", seg[2]);
		return;
	}
	if (n == 3 && m == EVHTTP_REQ_GET) {
		answer(req, 200, snap_get(seg[2], &e), &e);
	} else if (n == 3 && m == EVHTTP_REQ_DELETE) {
		if (snap_delete(seg[2], &e) < 0)
			fail(req, &e);
		else
			http_no_content(req);
	} else if (n == 3) {
		http_error(req, 405, "method_not_allowed", "use GET or DELETE on /v1/snapshots/%.64s",
			   seg[2]);
	} else {
		http_error(req, 404, "not_found", "no such route");
	}
}
