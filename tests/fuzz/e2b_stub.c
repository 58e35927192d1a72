/* TEMPORARY (branch e2b/cp): weak stand-ins for the operation core, the
 * box door-data calls and the envd door, so that the E2B control plane
 * links before core.c, box.c's additions and e2b_envd.c land. Every
 * symbol is weak: the real one wins at link time. DELETE THIS FILE AT
 * MERGE. */
#define _GNU_SOURCE
#include "serve/box.h"
#include "serve/core.h"
#include "serve/e2b_int.h"
#include "serve/http.h"

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define WEAK __attribute__((weak))

/* What the real box.c keeps per sandbox, here by id (in memory only). */
struct stub_rec {
	char id[64];
	json_t *door;
	int64_t created, end;
};
static struct stub_rec recs[256];

static struct stub_rec *rec_of(const struct box *b, bool make)
{
	const char *id = box_id(b);
	struct stub_rec *free_slot = NULL;
	for (size_t i = 0; i < sizeof recs / sizeof recs[0]; i++) {
		if (!strcmp(recs[i].id, id))
			return &recs[i];
		if (!recs[i].id[0] && !free_slot)
			free_slot = &recs[i];
	}
	if (!make || !free_slot)
		return NULL;
	snprintf(free_slot->id, sizeof free_slot->id, "%s", id);
	return free_slot;
}

struct stub_done {
	core_create_cb cb;
	void *arg;
	struct box *b;
	json_t *door;
	int64_t timeout;
};

static void stub_deliver(evutil_socket_t fd, short what, void *arg);

static void stub_created(void *arg, struct box *b, const struct moat_err *me)
{
	struct stub_done *d = arg;
	if (!b) {
		struct core_err e = {.status = 500, .code = "internal"};
		snprintf(e.msg, sizeof e.msg, "box_create: %s", me ? me->msg : "failed");
		if (d->cb)
			d->cb(d->arg, NULL, &e);
		json_decref(d->door);
		free(d);
		return;
	}
	d->b = b;
	stub_deliver(-1, 0, d);
}

static void stub_cancel(struct stub_done *d)
{
	d->cb = NULL;
}

static void stub_deliver(evutil_socket_t fd, short what, void *arg)
{
	struct stub_done *d = arg;
	struct stub_rec *r = rec_of(d->b, true);
	if (r) {
		json_decref(r->door);
		r->door = d->door;
		d->door = NULL;
		r->created = (int64_t)time(NULL);
		r->end = d->timeout ? r->created + d->timeout : 0;
	}
	json_decref(d->door);
	if (d->cb)
		d->cb(d->arg, d->b, NULL);
	else
		core_delete(d->b); /* nobody learnt its id */
	free(d);
}

static struct core_config stub_conf;

WEAK void core_init(const struct core_config *c)
{
	stub_conf = *c;
}

WEAK const struct core_config *core_config(void)
{
	return &stub_conf;
}

struct stub_done;
void core_delete(struct box *b);
static void stub_cancel(struct stub_done *d);

WEAK void core_op_cancel(struct core_op *op)
{
	stub_cancel((struct stub_done *)op);
}

/* A stand-in create: the /v1 body's image (host only), env, metadata and
 * timeout_s, through box_create; the door data kept here. */
WEAK struct core_op *core_create(json_t *body, const struct core_create_opts *o,
				 core_create_cb cb, void *arg, struct core_err *e)
{
	const char *img = json_string_value(json_object_get(body, "image"));
	if (json_object_get(body, "network") || (img && strcmp(img, "host"))) {
		*e = (struct core_err){.status = 501, .code = "internal"};
		strcpy(e->msg, "core_create: network and images need the operation core (core_stub.c)");
		return NULL;
	}
	json_t *env = json_pack("{s:s,s:s,s:s}", "PATH",
				"/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
				"HOME", "/home/sandbox", "LANG", "C.UTF-8");
	if (json_object_get(body, "env"))
		json_object_update(env, json_object_get(body, "env"));
	json_t *md = json_object_get(body, "metadata");
	struct box_spec s = {
		.env = env, .metadata = md ? md : json_object(),
		.timeout_s = json_integer_value(json_object_get(body, "timeout_s")),
		.idle_timeout_s = json_integer_value(json_object_get(body, "idle_timeout_s"))};
	struct moat_err me = {0};
	struct stub_done *d = calloc(1, sizeof *d);
	struct box *pending = NULL;
	struct box *b = d ? box_create_start(&s, stub_created, d, &pending, &me) : NULL;
	if (!md)
		json_decref(s.metadata);
	json_decref(env);
	if (!b && !pending) {
		free(d);
		*e = (struct core_err){.status = 500, .code = "internal"};
		snprintf(e->msg, sizeof e->msg, "box_create: %s", d ? me.msg : "out of memory");
		return NULL;
	}
	*d = (struct stub_done){cb, arg, b, json_deep_copy(o->door_data), s.timeout_s};
	if (b) {
		if (stub_conf.base)
			event_base_once(stub_conf.base, -1, EV_TIMEOUT, stub_deliver, d, NULL);
		else
			stub_deliver(-1, 0, d);
	}
	return (struct core_op *)d; /* not cancellable here */
}

WEAK void core_delete(struct box *b)
{
	struct stub_rec *r = rec_of(b, false);
	if (r) {
		json_decref(r->door);
		*r = (struct stub_rec){0};
	}
	box_delete(b);
}

WEAK const json_t *box_door(const struct box *b, const char *door)
{
	struct stub_rec *r = rec_of(b, false);
	return r ? r->door : NULL;
}

WEAK int box_set_door(struct box *b, const char *door, json_t *data)
{
	return -1;
}

WEAK int64_t box_created_at(const struct box *b)
{
	struct stub_rec *r = rec_of(b, false);
	return r ? r->created : 0;
}

WEAK int64_t box_end_at(const struct box *b)
{
	struct stub_rec *r = rec_of(b, false);
	return r ? r->end : 0;
}

/* (the stand-in records it; the reaper does not know: the real one must) */
WEAK int box_set_end(struct box *b, int64_t end_unix)
{
	struct stub_rec *r = rec_of(b, false);
	if (!r)
		return -1;
	r->end = end_unix;
	return 0;
}

WEAK bool box_users(const struct box *b)
{
	return false;
}

WEAK void box_limits(const struct box *b, uint64_t *memory, uint64_t *disk, uint64_t *cpu_milli)
{
	*memory = *disk = *cpu_milli = 0;
}

WEAK void box_usage(const struct box *b, int64_t *cpu_usec, int64_t *mem_bytes)
{
	*cpu_usec = *mem_bytes = -1;
}

WEAK void e2b_envd_route(struct evhttp_request *req, struct box *b, const char *id, int port,
			 const char *path)
{
	e2b_api_error(req, 501, "envd is not in this target (fuzz_envd has it)");
}

/* a signed URL without a sandbox: no stand-in sandbox signs anything */
WEAK int e2b_files_auth(struct evhttp_request *req, const char *tok, const char *op, char *msg,
			size_t mcap)
{
	snprintf(msg, mcap, "invalid signature");
	return 401;
}

/* the image store (images.c): no image here */
#include "../../src/serve/images.h"
WEAK int images_resolve(const char *name, struct images_resolved *out, struct core_err *e)
{
	memset(out, 0, sizeof *out);
	return 0;
}
WEAK void images_resolved_free(struct images_resolved *r)
{
}

/* the snapshots (snap.c): none here, and none can be made */
#include "../../src/serve/snap.h"
WEAK json_t *snap_create(struct box *b, const char *name, struct core_err *e)
{
	e->status = 507;
	snprintf(e->code, sizeof e->code, "insufficient_storage");
	snprintf(e->msg, sizeof e->msg, "no snapshot store under this fuzzer");
	return NULL;
}
WEAK json_t *snap_list(void)
{
	return json_pack("{s:[]}", "snapshots");
}
WEAK json_t *snap_get(const char *ref, struct core_err *e)
{
	e->status = 404;
	snprintf(e->code, sizeof e->code, "not_found");
	snprintf(e->msg, sizeof e->msg, "no snapshot %.64s", ref);
	return NULL;
}
WEAK int snap_delete(const char *ref, struct core_err *e)
{
	return snap_get(ref, e) ? 0 : -1;
}

/* metrics.c's sessions (not under this fuzzer) */
void session_metrics(FILE *f);
void session_metrics(FILE *f)
{
}
