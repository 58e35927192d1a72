/* E2B's snapshot calls (docs/e2b.md) onto the daemon's snapshots
 * (snap.h): Sandbox.createSnapshot (POST /sandboxes/{id}/snapshots),
 * Sandbox.listSnapshots (GET /snapshots), Sandbox.deleteSnapshot
 * (DELETE /templates/{id}) and a create whose templateID names a
 * snapshot. The snapshots are the daemon's own: no logic of them here,
 * only the translation of names, shapes and errors. */
#define _GNU_SOURCE
#include "e2b_int.h"

#include "core.h"
#include "http.h"
#include "snap.h"

#include <event2/keyvalq_struct.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SNAP_LIST_DEFAULT 100
#define SNAP_LIST_MAX 100

/* E2B's SnapshotInfo: {snapshotID, names}. The id is moat's snapshot id,
 * which Sandbox.create() takes back as its templateID. */
static json_t *snapshot_info(const json_t *s)
{
	const char *id = json_string_value(json_object_get(s, "id"));
	const char *name = json_string_value(json_object_get(s, "name"));
	json_t *names = json_array();
	if (name)
		json_array_append_new(names, json_string(name));
	return json_pack("{s:s,s:o}", "snapshotID", id ? id : "", "names", names);
}

static void snap_error(struct evhttp_request *req, const struct core_err *e)
{
	int s = e->status >= 400 && e->status <= 599 ? e->status : 500;
	e2b_api_error(req, s, "%s", e->msg[0] ? e->msg : e->code);
}

void e2b_snap_create(struct evhttp_request *req, struct box *b, json_t *body)
{
	json_t *nv = json_object_get(body, "name");
	if (nv && !json_is_null(nv) && (!json_is_string(nv) || !json_string_length(nv))) {
		e2b_api_error(req, 400, "name must be a non-empty string");
		return;
	}
	struct core_err e = {0};
	/* a taken name is 409 here, where E2B adds a build to that template:
	 * moat's names are unique and a snapshot is never replaced */
	json_auto_t *s = snap_create(b, json_string_value(nv), &e);
	if (!s) {
		snap_error(req, &e);
		return;
	}
	http_json(req, 201, snapshot_info(s));
}

static const char *query_value(struct evkeyvalq *kv, const char *key)
{
	for (struct evkeyval *h = kv->tqh_first; h; h = h->next.tqe_next)
		if (!strcmp(h->key, key))
			return h->value;
	return NULL;
}

/* GET /snapshots?sandboxID&name&limit&nextToken: snap_list's order; the token
 * is the id of the last snapshot of the page before. */
static void h_list(struct evhttp_request *req)
{
	const struct evhttp_uri *u = evhttp_request_get_evhttp_uri(req);
	const char *q = u ? evhttp_uri_get_query(u) : NULL;
	struct evkeyvalq kv;
	kv.tqh_first = NULL;
	kv.tqh_last = &kv.tqh_first;
	if (q && evhttp_parse_query_str(q, &kv) < 0) {
		e2b_api_error(req, 400, "malformed query string");
		return;
	}
	const char *sbx = query_value(&kv, "sandboxID"), *name = query_value(&kv, "name");
	const char *lim = query_value(&kv, "limit"), *next = query_value(&kv, "nextToken");
	long limit = SNAP_LIST_DEFAULT;
	if (lim) {
		char *end;
		limit = strtol(lim, &end, 10);
		if (!*lim || *end || limit < 1 || limit > SNAP_LIST_MAX) {
			evhttp_clear_headers(&kv);
			e2b_api_error(req, 400, "limit must be from 1 to %d", SNAP_LIST_MAX);
			return;
		}
	}
	json_auto_t *all = snap_list();
	json_t *a = json_object_get(all, "snapshots");
	size_t i = 0, n = json_array_size(a);
	if (next && *next) {
		while (i < n && strcmp(json_string_value(json_object_get(json_array_get(a, i), "id")) ?: "",
				       next))
			i++;
		if (i == n) {
			e2b_api_error(req, 400, "nextToken %.64s: no such snapshot (deleted since?)",
				      next);
			evhttp_clear_headers(&kv);
			return;
		}
		i++;
	}
	json_t *out = json_array();
	const char *last = NULL;
	bool more = false;
	for (; i < n; i++) {
		const json_t *s = json_array_get(a, i);
		const char *id = json_string_value(json_object_get(s, "id"));
		const char *nm = json_string_value(json_object_get(s, "name"));
		const char *of = json_string_value(json_object_get(s, "sandbox_id"));
		if ((sbx && (!of || strcmp(of, sbx))) ||
		    (name && (!id || strcmp(id, name)) && (!nm || strcmp(nm, name))))
			continue;
		if (json_array_size(out) == (size_t)limit) {
			more = true;
			break;
		}
		json_array_append_new(out, snapshot_info(s));
		last = id;
	}
	if (more && last)
		evhttp_add_header(evhttp_request_get_output_headers(req), "X-Next-Token", last);
	evhttp_clear_headers(&kv);
	http_json(req, 200, out);
}

/* DELETE /templates/{id}: the SDK's deleteSnapshot (404: false). Only
 * snapshots are deleted here; an image or an operator's template is not
 * a snapshot (404 naming it). */
static void h_delete(struct evhttp_request *req, const char *id)
{
	struct core_err e = {0};
	if (snap_delete(id, &e) < 0) {
		if (e.status == 404)
			e2b_api_error(req, 404, "snapshot '%.64s' not found (only snapshots are "
				      "deleted through /templates)", id);
		else
			snap_error(req, &e);
		return;
	}
	http_no_content(req);
}

bool e2b_snap_route(struct evhttp_request *req, char **seg, int n)
{
	enum evhttp_cmd_type m = evhttp_request_get_command(req);
	if (n == 1 && !strcmp(seg[0], "snapshots")) {
		if (m == EVHTTP_REQ_GET || m == EVHTTP_REQ_HEAD)
			h_list(req);
		else
			e2b_api_error(req, 405, "method not allowed on /snapshots");
		return true;
	}
	if (n == 2 && !strcmp(seg[0], "templates")) {
		if (m == EVHTTP_REQ_DELETE)
			h_delete(req, seg[1]);
		else
			e2b_api_error(req, 501, "templates are not built through moat's E2B door: "
				      "`moat image pull` or import an image (docs/e2b.md)");
		return true;
	}
	return false;
}

int e2b_snap_template(const char *tpl, char *image, size_t cap, bool *host)
{
	struct core_err e = {0};
	json_auto_t *s = snap_get(tpl, &e);
	if (!s)
		return e.status == 404 ? 0 : -1;
	const char *id = json_string_value(json_object_get(s, "id"));
	const char *img = json_string_value(json_object_get(s, "image"));
	if (!id || (size_t)snprintf(image, cap, "snapshot:%s", id) >= cap)
		return -1;
	*host = !img || !strcmp(img, "host");
	return 1;
}
