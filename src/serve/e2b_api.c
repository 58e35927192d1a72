/* E2B's control plane (docs/e2b.md) onto the operation core: create,
 * connect (resumes), kill, info, list, timeout, metrics, pause. A create is translated into
 * a /v1 create body for core_create; the door keeps its access token and
 * template with the sandbox (box_door "e2b"). Only the door's sandboxes
 * exist here: a /v1 sandbox has no envd token and is not listed, found,
 * connected to or killed through this door. */
#define _GNU_SOURCE
#include "images.h"
#include "e2b_int.h"

#include "box.h"
#include "core.h"
#include "http.h"
#include "life.h"
#include "metrics.h"
#include "../base/utf8.h"

#include <errno.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/keyvalq_struct.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_TIMEOUT_S 300 /* the SDKs' default (the spec's 15 is not what they send) */
#define MAX_TIMEOUT_S 2147483647LL /* int32, as the spec types it */
#define LIST_DEFAULT 100
#define LIST_MAX 100
#define ALL_TRAFFIC "0.0.0.0/0" /* E2B's ALL_TRAFFIC */

/* ---- small helpers ------------------------------------------------------------- */

static void rfc3339(int64_t t, char out[32])
{
	time_t tt = (time_t)t;
	struct tm tm;
	if (!gmtime_r(&tt, &tm) || !strftime(out, 32, "%Y-%m-%dT%H:%M:%SZ", &tm))
		snprintf(out, 32, "1970-01-01T00:00:00Z");
}

static void not_found(struct evhttp_request *req, const char *id)
{
	/* the JS SDK reads the 404 from this body's "code" */
	e2b_api_error(req, 404, "sandbox %.64s not found", id);
}

static void not_allowed(struct evhttp_request *req, const char *path)
{
	e2b_api_error(req, 405, "method not allowed on %.200s", path);
}

/* A sandbox of this door: door data with an access token. running: and
 * not stopped (E2B has no such state; a stopped one can only be killed). */
static struct box *door_box(const char *id, bool running)
{
	struct box *b = box_find(id);
	if (!b || !e2b_access_token(b) || (running && !box_running(b)))
		return NULL;
	return b;
}

static const char *door_alias(const struct box *b)
{
	const json_t *d = box_door(b, "e2b");
	const char *a = d ? json_string_value(json_object_get(d, "alias")) : NULL;
	return a ? a : e2b_template(b);
}

static int64_t cpu_count(const struct box *b)
{
	uint64_t mem, disk, cpu;
	box_limits(b, &mem, &disk, &cpu);
	if (cpu)
		return (int64_t)((cpu + 999) / 1000);
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	return n > 0 ? n : 1;
}

static int64_t host_memory(void)
{
	long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
	return pages > 0 && size > 0 ? (int64_t)pages * size : 0;
}

static int64_t memory_bytes(const struct box *b)
{
	uint64_t mem, disk, cpu;
	box_limits(b, &mem, &disk, &cpu);
	return mem ? (int64_t)mem : host_memory();
}

static int64_t disk_bytes(const struct box *b)
{
	uint64_t mem, disk, cpu;
	box_limits(b, &mem, &disk, &cpu);
	return (int64_t)disk;
}

/* E2B sandboxes always have a deadline; one without (0) is shown far away */
static int64_t end_at(const struct box *b)
{
	int64_t e = box_end_at(b);
	return e > 0 ? e : box_created_at(b) + 10LL * 365 * 86400;
}

/* The Sandbox object of create and connect. */
static json_t *sandbox_obj(const struct box *b)
{
	return json_pack("{s:s,s:s,s:s,s:s,s:s,s:n,s:s}", "templateID", e2b_template(b),
			 "sandboxID", box_id(b), "clientID", E2B_CLIENT_ID, "envdVersion",
			 E2B_ENVD_VERSION, "envdAccessToken", e2b_access_token(b), "domain",
			 "alias", door_alias(b));
}

/* SandboxDetail (detail) or ListedSandbox: every key the Python SDK's
 * from_dict requires, and the optional ones it reads. */
static json_t *detail_obj(const struct box *b, bool detail)
{
	char started[32], ends[32];
	rfc3339(box_created_at(b), started);
	rfc3339(end_at(b), ends);
	const json_t *md = box_metadata(b);
	json_t *o = json_pack("{s:s,s:s,s:s,s:s,s:s,s:s,s:I,s:I,s:I,s:s,s:s,s:o}", "templateID",
			      e2b_template(b), "alias", door_alias(b), "sandboxID", box_id(b),
			      "clientID", E2B_CLIENT_ID, "startedAt", started, "endAt", ends,
			      "cpuCount", (json_int_t)cpu_count(b), "memoryMB",
			      (json_int_t)(memory_bytes(b) >> 20), "diskSizeMB",
			      (json_int_t)(disk_bytes(b) >> 20), "state",
			      box_paused(b) ? "paused" : "running", "envdVersion",
			      E2B_ENVD_VERSION, "metadata",
			      md ? json_deep_copy(md) : json_object());
	if (o && detail) {
		json_object_set_new(o, "envdAccessToken", json_string(e2b_access_token(b)));
		json_object_set_new(o, "domain", json_null());
		const json_t *d = box_door(b, "e2b");
		json_t *aia = d ? json_object_get(d, "allowInternetAccess") : NULL;
		if (aia)
			json_object_set(o, "allowInternetAccess", aia);
		json_object_set_new(o, "lifecycle",
				    json_pack("{s:b,s:s}", "autoResume", 0, "onTimeout",
					      d && json_is_true(json_object_get(d, "autoPause"))
						      ? "pause" : "kill"));
	}
	return o;
}

/* The body as a JSON object, E2B's errors (http_body_json answers in
 * /v1's shape); NULL after answering. Empty: {} when empty_ok. */
static json_t *body_json(struct evhttp_request *req, bool empty_ok)
{
	size_t len;
	const char *p = http_body(req, &len);
	if (len > HTTP_MAX_JSON_BODY) {
		e2b_api_error(req, 413, "JSON body over %u MiB", HTTP_MAX_JSON_BODY >> 20);
		return NULL;
	}
	if (!len && empty_ok)
		return json_object();
	json_error_t je;
	json_t *j = json_loadb(p, len, JSON_REJECT_DUPLICATES, &je);
	if (!json_is_object(j)) {
		json_decref(j);
		e2b_api_error(req, 400, "the body must be a JSON object%s%s", j ? "" : ": ",
			      j ? "" : je.text);
		return NULL;
	}
	return j;
}

/* An integer field in seconds: absent keeps *out; else 0..max. */
static bool get_seconds(struct evhttp_request *req, json_t *body, const char *key, int64_t max,
			int64_t *out)
{
	json_t *v = json_object_get(body, key);
	if (!v || json_is_null(v))
		return true;
	if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > max) {
		e2b_api_error(req, 400, "%s must be an integer number of seconds from 0 to %lld",
			      key, (long long)max);
		return false;
	}
	*out = json_integer_value(v);
	return true;
}

static bool string_map(struct evhttp_request *req, json_t *v, const char *key)
{
	if (!v || json_is_null(v))
		return true;
	const char *k;
	json_t *x;
	if (json_is_object(v)) {
		bool ok = true;
		json_object_foreach(v, k, x)
			ok = ok && json_is_string(x);
		if (ok)
			return true;
	}
	e2b_api_error(req, 400, "%s must be an object of strings", key);
	return false;
}

/* ---- create ------------------------------------------------------------------- */

static bool all_traffic(const char *s)
{
	return !strcmp(s, ALL_TRAFFIC) || !strcmp(s, "::/0");
}

static void add_operator_patterns(json_t *allow)
{
	const struct core_config *c = core_config();
	for (size_t i = 0; c && c->net_allow && c->net_allow[i]; i++)
		json_array_append_new(allow, json_string(c->net_allow[i]));
}

static bool string_array(struct evhttp_request *req, json_t *a, const char *key)
{
	if (!a || json_is_null(a))
		return true;
	size_t i;
	json_t *v;
	bool ok = json_is_array(a);
	json_array_foreach(a, i, v)
		ok = ok && json_is_string(v);
	if (!ok)
		e2b_api_error(req, 400, "%s must be an array of strings", key);
	return ok;
}

/* E2B's egress (allow_internet_access, network.allowOut/denyOut) as moat's
 * network object ({"allow","deny"} through the egress gateway, bounded by
 * the operator's --net-allow). E2B allows everything unless denyOut (or
 * allow_internet_access false) blocks it, allowOut winning over denyOut;
 * moat's "everything" is what the operator allows, and a sandbox of a
 * daemon without --net-allow has no network. *out NULL: no network. */
static bool egress(struct evhttp_request *req, json_t *body, json_t **out)
{
	*out = NULL;
	json_t *aia = json_object_get(body, "allow_internet_access");
	if (aia && !json_is_null(aia) && !json_is_boolean(aia)) {
		e2b_api_error(req, 400, "allow_internet_access must be a boolean");
		return false;
	}
	json_t *net = json_object_get(body, "network");
	if (net && !json_is_null(net) && !json_is_object(net)) {
		e2b_api_error(req, 400, "network must be an object");
		return false;
	}
	json_t *allow_out = net ? json_object_get(net, "allowOut") : NULL;
	json_t *deny_out = net ? json_object_get(net, "denyOut") : NULL;
	if (!string_array(req, allow_out, "network.allowOut") ||
	    !string_array(req, deny_out, "network.denyOut"))
		return false;
	json_t *rules = net ? json_object_get(net, "rules") : NULL;
	if (rules && !json_is_null(rules) && (!json_is_object(rules) || json_object_size(rules))) {
		e2b_api_error(req, 400, "network.rules (header transforms) is not supported by moat; "
			      "moat's network.secrets (/v1) injects credentials instead");
		return false;
	}
	json_t *proxy = net ? json_object_get(net, "egressProxy") : NULL;
	if (proxy && !json_is_null(proxy)) {
		e2b_api_error(req, 400, "network.egressProxy is not supported by moat");
		return false;
	}
	bool blocked = aia && json_is_false(aia);
	size_t i;
	json_t *v;
	json_array_foreach(deny_out, i, v)
		blocked = blocked || all_traffic(json_string_value(v));
	json_auto_t *allow = json_array();
	json_auto_t *deny = json_array();
	bool operator_added = false;
	if (!blocked) {
		add_operator_patterns(allow);
		operator_added = true;
	}
	json_array_foreach(allow_out, i, v) {
		const char *s = json_string_value(v);
		if (!all_traffic(s))
			json_array_append(allow, v);
		else if (!operator_added) {
			add_operator_patterns(allow);
			operator_added = true;
		}
	}
	json_array_foreach(deny_out, i, v)
		if (!all_traffic(json_string_value(v)))
			json_array_append(deny, v);
	if (json_array_size(allow))
		*out = json_pack("{s:O,s:O}", "allow", allow, "deny", deny);
	return true;
}

/* Options of E2B that moat does not have: refused by name rather than
 * silently dropped (the caller would rely on them). */
static bool refuse_unsupported(struct evhttp_request *req, json_t *body)
{
	json_t *v = json_object_get(body, "autoPause");
	if (v && !json_is_null(v) && !json_is_boolean(v)) {
		e2b_api_error(req, 400, "autoPause must be a boolean");
		return false;
	}
	if (json_is_true(v) && json_is_false(json_object_get(body, "autoPauseMemory"))) {
		e2b_api_error(req, 400, "autoPauseMemory false (a filesystem-only pause at the "
			      "timeout) is not supported by moat yet; omit it to keep memory");
		return false;
	}
	v = json_object_get(body, "autoResume");
	if (v && json_is_true(json_object_get(v, "enabled"))) {
		e2b_api_error(req, 400, "autoResume (resume on traffic) is not supported by moat; "
			      "Sandbox.connect() resumes a paused sandbox");
		return false;
	}
	v = json_object_get(body, "mcp");
	if (v && !json_is_null(v) && (!json_is_object(v) || json_object_size(v))) {
		e2b_api_error(req, 400, "mcp is not supported by moat");
		return false;
	}
	v = json_object_get(body, "volumeMounts");
	if (v && !json_is_null(v) && (!json_is_array(v) || json_array_size(v))) {
		e2b_api_error(req, 400, "volumeMounts are not supported by moat");
		return false;
	}
	v = json_object_get(body, "iam");
	json_t *tokens = v ? json_object_get(v, "tokens") : NULL;
	if (tokens && json_object_size(tokens)) {
		e2b_api_error(req, 400, "iam (workload identity) is not supported by moat");
		return false;
	}
	return true;
}

/* templateID -> image: the operator's --template NAME=DIR, else "base" is
 * the host's system ("host"; users mode gives it a copy-on-write root),
 * else an image of the store by name or digest (images.h).
 * NULL: no such template. */
static const char *operator_template(const char *name)
{
	const struct core_config *c = core_config();
	size_t n = strlen(name);
	for (size_t i = 0; c && c->templates && c->templates[i]; i++)
		if (!strncmp(c->templates[i], name, n) && c->templates[i][n] == '=')
			return c->templates[i] + n + 1;
	return NULL;
}

static const char *template_image(const char *name)
{
	const char *op = operator_template(name);
	if (op)
		return op;
	if (!strcmp(name, "base"))
		return "host";
	/* an image of the store (moat image pull): the core resolves it again */
	struct images_resolved r;
	struct core_err e = {0};
	int found = images_resolve(name, &r, &e);
	if (found > 0)
		images_resolved_free(&r);
	return found > 0 ? name : NULL;
}

static void random_hex(char *out, size_t bytes)
{
	unsigned char r[64];
	if (bytes > sizeof r)
		bytes = sizeof r;
	size_t got = 0;
	while (got < bytes) {
		ssize_t n = getrandom(r + got, bytes - got, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			abort(); /* no randomness: no token worth issuing */
		got += (size_t)n;
	}
	for (size_t i = 0; i < bytes; i++)
		sprintf(out + 2 * i, "%02x", r[i]);
}

/* A request waiting for the core: the client may leave first. */
struct waiting {
	struct evhttp_request *req;
	struct core_op *op;
	struct event *hangup;
	bool in_call, answered; /* the callback ran inside core_create */
};

static void wait_detach(struct waiting *w)
{
	struct evhttp_connection *c = evhttp_request_get_connection(w->req);
	if (c)
		http_set_closecb(c, NULL, NULL);
	if (w->hangup)
		event_free(w->hangup);
	w->hangup = NULL;
}

static void on_client_gone(struct evhttp_connection *c, void *arg)
{
	struct waiting *w = arg;
	/* the create is undone: nobody learnt its id */
	if (w->op)
		core_op_cancel(w->op);
	struct evhttp_request *req = w->req;
	bool detached = !evhttp_request_get_connection(req);
	if (w->hangup)
		event_free(w->hangup);
	free(w);
	if (detached)
		evhttp_send_reply(req, 500, "Client gone", NULL);
}

/* evhttp does not read a connection whose request is being answered:
 * watch for the peer's close (EV_CLOSED) and free the connection, which
 * runs on_client_gone */
static void on_hangup(evutil_socket_t fd, short what, void *arg)
{
	struct waiting *w = arg;
	struct evhttp_connection *c = evhttp_request_get_connection(w->req);
	if (c)
		evhttp_connection_free(c);
}

static struct waiting *wait_new(struct evhttp_request *req)
{
	struct waiting *w = calloc(1, sizeof *w);
	if (!w)
		return NULL;
	w->req = req;
	struct evhttp_connection *c = evhttp_request_get_connection(req);
	http_set_closecb(c, on_client_gone, w);
	struct bufferevent *bev = c ? evhttp_connection_get_bufferevent(c) : NULL;
	const struct core_config *cc = core_config();
	if (bev && cc && cc->base) {
		w->hangup = event_new(cc->base, bufferevent_getfd(bev), EV_CLOSED, on_hangup, w);
		if (w->hangup && event_add(w->hangup, NULL) < 0) {
			event_free(w->hangup);
			w->hangup = NULL;
		}
	}
	return w;
}

/* A core error in E2B's shape (its status kept: 400, 403, 404, 409, 429). */
static void core_error(struct evhttp_request *req, const struct core_err *e)
{
	int s = e->status >= 400 && e->status <= 599 ? e->status : 500;
	e2b_api_error(req, s, "%s", e->msg[0] ? e->msg : e->code);
}

static void on_created(void *arg, struct box *b, const struct core_err *e)
{
	struct waiting *w = arg;
	wait_detach(w);
	w->op = NULL;
	if (b) {
		metrics_created();
		/* exactly 201: the Python SDK parses nothing else */
		http_json(w->req, 201, sandbox_obj(b));
	} else {
		core_error(w->req, e);
	}
	if (w->in_call)
		w->answered = true;
	else
		free(w);
}

static void h_create(struct evhttp_request *req)
{
	json_auto_t *body = body_json(req, false);
	if (!body)
		return;
	json_t *tv = json_object_get(body, "templateID");
	if (tv && !json_is_null(tv) && !json_is_string(tv)) {
		e2b_api_error(req, 400, "templateID must be a string");
		return;
	}
	const char *tpl = json_string_value(tv);
	if (!tpl || !*tpl)
		tpl = "base";
	int64_t timeout = DEFAULT_TIMEOUT_S;
	if (!get_seconds(req, body, "timeout", MAX_TIMEOUT_S, &timeout) ||
	    !string_map(req, json_object_get(body, "metadata"), "metadata") ||
	    !string_map(req, json_object_get(body, "envVars"), "envVars") ||
	    !refuse_unsupported(req, body))
		return;
	if (timeout == 0)
		timeout = DEFAULT_TIMEOUT_S;
	/* a snapshot (Sandbox.createSnapshot's snapshotId, or its name), after
	 * the operator's templates and "base", before the store's images (the
	 * core looks a snapshot up first too) */
	char snapimg[96];
	bool snap_host = false;
	int snap = strcmp(tpl, "base") && !operator_template(tpl)
			   ? e2b_snap_template(tpl, snapimg, sizeof snapimg, &snap_host)
			   : 0;
	if (snap < 0) {
		e2b_api_error(req, 500, "cannot look up template '%.100s' among the snapshots", tpl);
		return;
	}
	const char *image = snap ? snapimg : template_image(tpl);
	if (!image) {
		/* what E2B answers */
		e2b_api_error(req, 404, "template '%.100s' not found", tpl);
		return;
	}
	json_t *net = NULL;
	if (!egress(req, body, &net))
		return;
	/* E2B's timeout is a deadline; at the create it equals a lifetime
	 * (setTimeout and connect move it with box_set_end). No idle
	 * reaping: E2B has none. */
	/* a template is the core's by its name (the operator's --template,
	 * no --allow-host-path needed); users mode is the host's view only,
	 * so a template's sandbox has its one user (docs/e2b.md) */
	bool host = snap ? snap_host : !strcmp(image, "host");
	json_auto_t *v1 = json_pack("{s:s,s:I,s:I}", "image",
				    snap ? snapimg : host ? "host" : tpl, "timeout_s",
				    (json_int_t)timeout, "idle_timeout_s", (json_int_t)0);
	bool auto_pause = json_is_true(json_object_get(body, "autoPause"));
	if (auto_pause) /* paused, not killed, at its end */
		json_object_set_new(v1, "on_timeout", json_string("pause"));
	json_t *env = json_object_get(body, "envVars");
	if (json_object_size(env))
		json_object_set(v1, "env", env);
	json_t *md = json_object_get(body, "metadata");
	if (json_object_size(md))
		json_object_set(v1, "metadata", md);
	if (net)
		json_object_set_new(v1, "network", net);
	/* always an access token: envd's requests skip the API key, so a
	 * sandbox without one would be open to anyone who can reach the
	 * daemon (E2B's "secure": false is not honoured) */
	char token[33];
	random_hex(token, 16);
	json_auto_t *door = json_pack("{s:s,s:s,s:s}", "token", token, "template", tpl, "alias", tpl);
	json_t *aia = json_object_get(body, "allow_internet_access");
	if (json_is_boolean(aia))
		json_object_set(door, "allowInternetAccess", aia);
	if (auto_pause)
		json_object_set_new(door, "autoPause", json_true());
	struct waiting *w = wait_new(req);
	if (!w) {
		e2b_api_error(req, 500, "out of memory");
		return;
	}
	struct core_create_opts o = {.users = host, .door = "e2b", .door_data = door};
	struct core_err e = {0};
	w->in_call = true;
	w->op = core_create(v1, &o, on_created, w, &e);
	w->in_call = false;
	if (w->answered) {
		free(w);
		return;
	}
	if (!w->op) {
		wait_detach(w);
		free(w);
		core_error(req, &e);
	}
}

/* ---- one sandbox ------------------------------------------------------------------ */

static void h_connect(struct evhttp_request *req, const char *id)
{
	json_auto_t *body = body_json(req, true);
	if (!body)
		return;
	struct box *b = door_box(id, true);
	if (!b) {
		not_found(req, id);
		return;
	}
	int64_t timeout = -1;
	if (!get_seconds(req, body, "timeout", MAX_TIMEOUT_S, &timeout))
		return;
	json_t *mem = json_object_get(body, "memory");
	if (mem && !json_is_null(mem) && !json_is_boolean(mem)) {
		e2b_api_error(req, 400, "memory must be a boolean");
		return;
	}
	bool resumed = box_paused(b);
	if (resumed) {
		/* a paused sandbox is resumed (E2B's connect), and its deadline
		 * is the timeout from now (300 s when none is given) */
		if (json_is_false(mem)) {
			e2b_api_error(req, 400, "memory false (onResume \"reboot\") is not "
				      "supported by moat: a paused sandbox resumes its processes");
			return;
		}
		struct core_err e = {0};
		if (core_resume(b, &e) < 0) {
			core_error(req, &e);
			return;
		}
		if (timeout < 0)
			timeout = DEFAULT_TIMEOUT_S;
		if (box_set_end(b, (int64_t)time(NULL) + timeout) < 0) {
			e2b_api_error(req, 500, "cannot move the deadline of sandbox %s", id);
			return;
		}
		http_json(req, 201, sandbox_obj(b)); /* 201: resumed */
		return;
	}
	/* connect only extends the deadline (E2B: "TTL is only extended") */
	int64_t want = (int64_t)time(NULL) + timeout;
	if (timeout >= 0 && box_end_at(b) > 0 && want > box_end_at(b) && box_set_end(b, want) < 0) {
		e2b_api_error(req, 500, "cannot move the deadline of sandbox %s", id);
		return;
	}
	http_json(req, 200, sandbox_obj(b)); /* 200: it was running */
}

/* pause {"memory"?: bool}: 204; 409 when paused already (the JS SDK
 * returns false on the body's code 409). memory false (a filesystem-only
 * pause) would be moat's release. */
static void h_pause(struct evhttp_request *req, struct box *b)
{
	json_auto_t *body = body_json(req, true);
	if (!body)
		return;
	json_t *mem = json_object_get(body, "memory");
	if (mem && !json_is_null(mem) && !json_is_boolean(mem)) {
		e2b_api_error(req, 400, "memory must be a boolean");
		return;
	}
	struct core_err e = {0};
	if (core_pause(b, json_is_false(mem), &e) < 0) {
		core_error(req, &e);
		return;
	}
	http_no_content(req);
}

/* The older resume {"timeout"?}: 201 Sandbox, 409 when it runs. */
static void h_resume(struct evhttp_request *req, struct box *b)
{
	json_auto_t *body = body_json(req, true);
	if (!body)
		return;
	int64_t timeout = DEFAULT_TIMEOUT_S;
	if (!get_seconds(req, body, "timeout", MAX_TIMEOUT_S, &timeout))
		return;
	struct core_err e = {0};
	if (core_resume(b, &e) < 0) {
		core_error(req, &e);
		return;
	}
	if (box_set_end(b, (int64_t)time(NULL) + timeout) < 0) {
		e2b_api_error(req, 500, "cannot move the deadline of sandbox %s", box_id(b));
		return;
	}
	http_json(req, 201, sandbox_obj(b));
}

static void h_timeout(struct evhttp_request *req, const char *id)
{
	json_auto_t *body = body_json(req, true);
	if (!body)
		return;
	struct box *b = door_box(id, true);
	if (!b) {
		not_found(req, id);
		return;
	}
	int64_t timeout = -1;
	if (!get_seconds(req, body, "timeout", MAX_TIMEOUT_S, &timeout))
		return;
	if (timeout < 0) {
		e2b_api_error(req, 400, "timeout is required (seconds from now)");
		return;
	}
	/* from now, shorter or longer */
	if (box_set_end(b, (int64_t)time(NULL) + timeout) < 0) {
		e2b_api_error(req, 500, "cannot move the deadline of sandbox %s", id);
		return;
	}
	http_no_content(req);
}

/* The old keep-alive: {duration} more seconds from now, never shorter. */
static void h_refresh(struct evhttp_request *req, const char *id)
{
	json_auto_t *body = body_json(req, true);
	if (!body)
		return;
	struct box *b = door_box(id, true);
	if (!b) {
		not_found(req, id);
		return;
	}
	int64_t d = DEFAULT_TIMEOUT_S;
	if (!get_seconds(req, body, "duration", 3600, &d))
		return;
	int64_t want = (int64_t)time(NULL) + d;
	if (box_end_at(b) > 0 && want > box_end_at(b) && box_set_end(b, want) < 0) {
		e2b_api_error(req, 500, "cannot move the deadline of sandbox %s", id);
		return;
	}
	http_no_content(req);
}

static json_t *metric_obj(const struct box *b)
{
	int64_t cpu_usec = -1, mem = -1, now = (int64_t)time(NULL);
	box_usage(b, &cpu_usec, &mem);
	int64_t cpus = cpu_count(b), up = now - box_created_at(b);
	/* one sample: cpu use averaged since the start */
	double pct = 0;
	if (cpu_usec > 0 && up > 0)
		pct = 100.0 * (double)cpu_usec / ((double)up * 1e6 * (double)cpus);
	if (pct > 100)
		pct = 100;
	char ts[32];
	rfc3339(now, ts);
	return json_pack("{s:s,s:I,s:I,s:f,s:I,s:I,s:I,s:I,s:I}", "timestamp", ts, "timestampUnix",
			 (json_int_t)now, "cpuCount", (json_int_t)cpus, "cpuUsedPct", pct, "memUsed",
			 (json_int_t)(mem > 0 ? mem : 0), "memTotal", (json_int_t)memory_bytes(b),
			 "memCache", (json_int_t)0, "diskUsed", (json_int_t)0, "diskTotal",
			 (json_int_t)disk_bytes(b));
}

static void h_sandbox(struct evhttp_request *req, enum evhttp_cmd_type m, const char *id,
		      const char *what, const char *path)
{
	if (!what) {
		if (m == EVHTTP_REQ_GET) {
			struct box *b = door_box(id, true);
			b ? http_json(req, 200, detail_obj(b, true)) : not_found(req, id);
		} else if (m == EVHTTP_REQ_DELETE) {
			/* a stopped one too: killing is how it goes away */
			struct box *b = door_box(id, false);
			if (!b) {
				not_found(req, id);
				return;
			}
			core_delete(b);
			metrics_deleted();
			http_no_content(req);
		} else {
			not_allowed(req, path);
		}
		return;
	}
	static const struct {
		const char *what;
		enum evhttp_cmd_type m;
	} routes[] = {{"connect", EVHTTP_REQ_POST},   {"timeout", EVHTTP_REQ_POST},
		      {"refreshes", EVHTTP_REQ_POST}, {"pause", EVHTTP_REQ_POST},
		      {"resume", EVHTTP_REQ_POST},    {"snapshots", EVHTTP_REQ_POST},
		      {"fork", EVHTTP_REQ_POST},
		      {"network", EVHTTP_REQ_PUT},    {"metrics", EVHTTP_REQ_GET},
		      {"logs", EVHTTP_REQ_GET}};
	size_t r = 0, nr = sizeof routes / sizeof routes[0];
	while (r < nr && strcmp(routes[r].what, what))
		r++;
	if (r == nr) {
		e2b_api_error(req, 404, "no such route: %.200s", path);
		return;
	}
	if (m != routes[r].m && !(m == EVHTTP_REQ_HEAD && routes[r].m == EVHTTP_REQ_GET)) {
		not_allowed(req, path);
		return;
	}
	if (!strcmp(what, "connect")) {
		h_connect(req, id);
		return;
	}
	if (!strcmp(what, "timeout")) {
		h_timeout(req, id);
		return;
	}
	if (!strcmp(what, "refreshes")) {
		h_refresh(req, id);
		return;
	}
	struct box *b = door_box(id, true);
	if (!b) {
		not_found(req, id);
		return;
	}
	if (!strcmp(what, "metrics")) {
		json_t *a = json_array();
		json_array_append_new(a, metric_obj(b));
		http_json(req, 200, a);
	} else if (!strcmp(what, "logs")) {
		http_json(req, 200, json_pack("{s:[],s:[]}", "logs", "logEntries"));
	} else if (!strcmp(what, "pause")) {
		h_pause(req, b);
	} else if (!strcmp(what, "snapshots")) {
		json_auto_t *body = body_json(req, true);
		if (body)
			e2b_snap_create(req, b, body);
	} else if (!strcmp(what, "fork")) {
		/* moat's fork (POST /v1/sandboxes/{id}/fork) copies the filesystem
		 * only, and its sandboxes are not this door's (no envd token) */
		e2b_api_error(req, 501, "fork is not supported by moat's E2B door (its fork "
			      "copies no processes): createSnapshot, then Sandbox.create(snapshotId)");
	} else if (!strcmp(what, "resume")) {
		h_resume(req, b);
	} else if (!strcmp(what, "network")) {
		e2b_api_error(req, 501, "changing the network of a running sandbox is not "
			      "supported by moat");
	} else {
		e2b_api_error(req, 404, "no such route: %.200s", path);
	}
}

/* ---- lists ------------------------------------------------------------------------- */

struct item {
	int64_t created;
	struct box *b;
};

struct collect {
	struct item *v;
	size_t n, cap;
	bool oom;
	bool running, paused; /* the states asked for */
};

static void collect_one(struct box *b, void *arg)
{
	struct collect *c = arg;
	if (!e2b_access_token(b) || !box_running(b) || !(box_paused(b) ? c->paused : c->running))
		return;
	if (c->n == c->cap) {
		size_t cap = c->cap ? 2 * c->cap : 64;
		struct item *v = realloc(c->v, cap * sizeof *v);
		if (!v) {
			c->oom = true;
			return;
		}
		c->v = v;
		c->cap = cap;
	}
	c->v[c->n++] = (struct item){box_created_at(b), b};
}

static int cmp_pos(int64_t ca, const char *ia, int64_t cb, const char *ib)
{
	if (ca != cb)
		return ca < cb ? -1 : 1;
	return strcmp(ia, ib);
}

static int by_age(const void *a, const void *b)
{
	const struct item *x = a, *y = b;
	return cmp_pos(x->created, box_id(x->b), y->created, box_id(y->b));
}

/* Percent-decoding in place ('+' is a space when plus); false if malformed. */
static bool unescape(char *s, bool plus)
{
	char *o = s;
	for (char *p = s; *p; p++) {
		if (*p == '+' && plus) {
			*o++ = ' ';
		} else if (*p == '%') {
			int hi, lo;
			char h[3] = {p[1], p[1] ? p[2] : 0, 0};
			if (!h[0] || !h[1] || sscanf(h, "%1x", &hi) != 1 || sscanf(h + 1, "%1x", &lo) != 1)
				return false;
			*o++ = (char)(hi * 16 + lo);
			p += 2;
		} else {
			*o++ = *p;
		}
	}
	*o = '\0';
	return true;
}

/* The SDKs' metadata filter: "k1=v1&k2=v2", each key and value URL-encoded
 * once more before the whole is (a query value, decoded by now). */
static json_t *metadata_filter(const char *q)
{
	json_t *o = json_object();
	char *dup = strdup(q);
	char *save = NULL;
	for (char *pair = dup ? strtok_r(dup, "&", &save) : NULL; pair;
	     pair = strtok_r(NULL, "&", &save)) {
		char *eq = strchr(pair, '=');
		if (eq)
			*eq = '\0';
		char none[1] = ""; /* "k" alone: an empty value (unescape writes) */
		char *k = pair, *v = eq ? eq + 1 : none;
		if (!unescape(k, true) || !unescape(v, true) || !unescape(k, false) ||
		    !unescape(v, false) || !*k) {
			json_decref(o);
			o = NULL;
			break;
		}
		json_t *s = json_string(v);
		if (!s) { /* not UTF-8: matches nothing */
			json_object_set_new(o, k, json_string("\x01"));
			continue;
		}
		json_object_set_new(o, k, s);
	}
	free(dup);
	return o;
}

static bool metadata_match(const struct box *b, const json_t *want)
{
	const json_t *md = box_metadata(b);
	const char *k;
	json_t *v;
	json_object_foreach((json_t *)want, k, v) {
		json_t *have = md ? json_object_get(md, k) : NULL;
		if (!have || !json_equal(have, v))
			return false;
	}
	return true;
}

/* nextToken: the position after which the next page starts, as hex of
 * "<created>.<id>" (opaque to the SDKs, which only hand it back). */
static char *token_encode(int64_t created, const char *id)
{
	char raw[96];
	int n = snprintf(raw, sizeof raw, "%lld.%s", (long long)created, id);
	char *t = malloc(2 * (size_t)n + 1);
	if (t)
		for (int i = 0; i < n; i++)
			sprintf(t + 2 * i, "%02x", (unsigned char)raw[i]);
	return t;
}

static bool token_decode(const char *t, int64_t *created, char *id, size_t idcap)
{
	char raw[96];
	size_t n = strlen(t);
	if (n % 2 || n / 2 >= sizeof raw)
		return false;
	for (size_t i = 0; i < n / 2; i++) {
		unsigned x;
		if (sscanf(t + 2 * i, "%2x", &x) != 1)
			return false;
		raw[i] = (char)x;
	}
	raw[n / 2] = '\0';
	char *dot = strchr(raw, '.');
	char *end;
	if (!dot)
		return false;
	*dot = '\0';
	long long c = strtoll(raw, &end, 10);
	if (*end || !dot[1] || strlen(dot + 1) >= idcap)
		return false;
	*created = c;
	snprintf(id, idcap, "%s", dot + 1);
	return true;
}

static void h_list(struct evhttp_request *req, bool v2)
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
	json_auto_t *want = NULL;
	bool any_state = false, want_running = false, want_paused = false, desc = false;
	long limit = v2 ? LIST_DEFAULT : -1;
	const char *next = NULL, *tpl = NULL;
	int64_t after = -1;
	char bad[160] = "";
	for (struct evkeyval *h = kv.tqh_first; h && !bad[0]; h = h->next.tqe_next) {
		if (!strcmp(h->key, "metadata")) {
			json_decref(want);
			want = metadata_filter(h->value);
			if (!want)
				snprintf(bad, sizeof bad, "metadata: expected key=value pairs "
					 "joined by &, each URL-encoded");
		} else if (!strcmp(h->key, "state") && v2) {
			/* "running,paused" (explode false) or repeated */
			any_state = true;
			char *dup = strdup(h->value), *save = NULL;
			for (char *s = dup ? strtok_r(dup, ",", &save) : NULL; s;
			     s = strtok_r(NULL, ",", &save)) {
				if (!strcmp(s, "running"))
					want_running = true;
				else if (!strcmp(s, "paused"))
					want_paused = true;
				else
					snprintf(bad, sizeof bad, "state: %.40s is not running or paused", s);
			}
			free(dup);
		} else if (!strcmp(h->key, "limit") && v2) {
			char *end;
			limit = strtol(h->value, &end, 10);
			if (*end || limit < 1 || limit > LIST_MAX)
				snprintf(bad, sizeof bad, "limit must be from 1 to %d", LIST_MAX);
		} else if (!strcmp(h->key, "nextToken") && v2) {
			next = h->value;
		} else if (!strcmp(h->key, "template") && v2) {
			tpl = h->value;
		} else if (!strcmp(h->key, "order") && v2) {
			if (!strcmp(h->value, "desc") || !strcmp(h->value, "DESC"))
				desc = true;
			else if (strcmp(h->value, "asc") && strcmp(h->value, "ASC"))
				snprintf(bad, sizeof bad, "order must be asc or desc");
		} else if (!strcmp(h->key, "startedAfter") && v2) {
			struct tm tm = {0};
			char *end = strptime(h->value, "%Y-%m-%dT%H:%M:%S", &tm);
			if (!end)
				snprintf(bad, sizeof bad, "startedAfter: expected an RFC 3339 time");
			else
				after = (int64_t)timegm(&tm);
		}
	}
	int64_t tok_created = 0;
	char tok_id[72] = "";
	if (!bad[0] && next && *next && !token_decode(next, &tok_created, tok_id, sizeof tok_id))
		snprintf(bad, sizeof bad, "nextToken: not a token of this list");
	bool have_token = next && *next;
	if (bad[0]) {
		evhttp_clear_headers(&kv);
		e2b_api_error(req, 400, "%s", bad);
		return;
	}
	/* v1's list shows running ones only (its spec: GET /sandboxes lists
	 * running sandboxes); v2's both, or the states asked for */
	struct collect c = {.running = !any_state || want_running,
			    .paused = v2 && (!any_state || want_paused)};
	box_each(collect_one, &c);
	if (c.oom) {
		free(c.v);
		evhttp_clear_headers(&kv);
		e2b_api_error(req, 500, "out of memory");
		return;
	}
	if (c.n)
		qsort(c.v, c.n, sizeof *c.v, by_age);
	json_t *out = json_array();
	char *more = NULL;
	size_t taken = 0;
	const struct item *last = NULL;
	for (size_t k = 0; k < c.n; k++) {
		const struct item *it = &c.v[desc ? c.n - 1 - k : k];
		const char *id = box_id(it->b);
		if (have_token) {
			int d = cmp_pos(it->created, id, tok_created, tok_id);
			if (desc ? d >= 0 : d <= 0)
				continue;
		}
		if ((want && !metadata_match(it->b, want)) ||
		    (tpl && strcmp(e2b_template(it->b), tpl)) || (after >= 0 && it->created <= after))
			continue;
		if (limit > 0 && taken == (size_t)limit) {
			/* one more exists: the next page starts after the last one */
			more = token_encode(last->created, box_id(last->b));
			break;
		}
		json_array_append_new(out, detail_obj(it->b, false));
		last = it;
		taken++;
	}
	free(c.v);
	evhttp_clear_headers(&kv);
	if (more) {
		evhttp_add_header(evhttp_request_get_output_headers(req), "X-Next-Token", more);
		free(more);
	}
	http_json(req, 200, out);
}

/* GET /sandboxes/metrics?sandbox_ids=a,b: {"sandboxes":{id: metric}} */
static void h_metrics_many(struct evhttp_request *req)
{
	char *ids = http_query(req, "sandbox_ids");
	json_t *m = json_object();
	char *save = NULL;
	for (char *s = ids ? strtok_r(ids, ",", &save) : NULL; s; s = strtok_r(NULL, ",", &save)) {
		struct box *b = door_box(s, true);
		if (b)
			json_object_set_new(m, box_id(b), metric_obj(b));
	}
	free(ids);
	http_json(req, 200, json_pack("{s:o}", "sandboxes", m));
}

/* ---- routing ------------------------------------------------------------------------- */

void e2b_api_route(struct evhttp_request *req, const char *path)
{
	enum evhttp_cmd_type m = evhttp_request_get_command(req);
	if (!strcmp(path, "/health")) {
		m == EVHTTP_REQ_GET || m == EVHTTP_REQ_HEAD ? http_no_content(req)
							    : not_allowed(req, path);
		return;
	}
	char buf[512];
	if (strlen(path) >= sizeof buf) {
		e2b_api_error(req, 404, "no such route");
		return;
	}
	snprintf(buf, sizeof buf, "%s", path);
	char *seg[6], *save = NULL;
	int n = 0;
	for (char *s = strtok_r(buf, "/", &save); s; s = strtok_r(NULL, "/", &save)) {
		if (n == 6) {
			e2b_api_error(req, 404, "no such route: %.200s", path);
			return;
		}
		seg[n++] = s;
	}
	bool v2 = n > 0 && !strcmp(seg[0], "v2");
	char **s = v2 ? seg + 1 : seg;
	int k = v2 ? n - 1 : n;
	if (!v2 && e2b_snap_route(req, s, k))
		return;
	if (k < 1 || strcmp(s[0], "sandboxes")) {
		e2b_api_error(req, 404, "no such route: %.200s", path);
		return;
	}
	if (k == 1) {
		if (m == EVHTTP_REQ_POST)
			h_create(req);
		else if (m == EVHTTP_REQ_GET)
			h_list(req, v2);
		else
			not_allowed(req, path);
		return;
	}
	if (k == 2 && !v2 && !strcmp(s[1], "metrics")) {
		m == EVHTTP_REQ_GET ? h_metrics_many(req) : not_allowed(req, path);
		return;
	}
	/* under /v2 only connect and logs exist per sandbox */
	if (k > 3 || (v2 && (k != 3 || (strcmp(s[2], "connect") && strcmp(s[2], "logs"))))) {
		e2b_api_error(req, 404, "no such route: %.200s", path);
		return;
	}
	h_sandbox(req, m, s[1], k == 3 ? s[2] : NULL, path);
}
