/* libFuzzer target: the API (src/serve/api.c and http.c), everything a
 * client's request goes through after libevent parsed it: the router,
 * query strings, JSON bodies and their validation, manifests, archives;
 * and the daemon's handling of what a (hostile) agent answers: exec and
 * wait results, SSE output, listings, images, entry streams. The request
 * is a real evhttp_request; box.c and job.c are replaced by a stand-in
 * sandbox "b" whose agent answers with replies taken from the input, in
 * the order the daemon asked. No sandbox, process or clone is made: the
 * job path fails at its scratch directory (mkdtemp is overridden), and a
 * clone would find neither a directory nor git.
 *
 * Input: byte 0 = method (bits 0-2) | Accept: text/event-stream (bit 3) |
 * the create fails (bit 4) | at the sandbox limit (bit 5) | the daemon has
 * a --net-allow ceiling and a secret TOKEN (bit 6); then the request
 * target up to "\n"; the body up to "\x1e"; then the agent's replies, each
 * a JSON text and its data split at "\x1f", separated by "\x1e".
 *
 * Checks: every request is answered exactly once (a reply, or a stream
 * that ends), never after it was freed; every error answer has the API's
 * one shape {"error":{"code","message"}} with a code that fits its status;
 * every SSE event is "event: NAME\ndata: JSON\n\n"; every call to the
 * agent is a JSON object with an "op" within the frame limits. */
#define _GNU_SOURCE
#include "serve/api.h"
#include "serve/api_snap.h"
#include "serve/http.h"
#include "serve/images.h"
#include "serve/snap.h"
#include "serve/session.h"
#include "serve/box.h"
#include "serve/core.h"
#include "serve/e2b.h"
#include "serve/job.h"
#include "serve/manifest.h"
#include "gate/policy.h"
#include "proto/frame.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/http_struct.h>
#include <event2/keyvalq_struct.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* ---- the stand-in sandbox (box.h) ---------------------------------------- */

struct box {
	bool exists, running, paused;
};
static struct box the_box;
static bool create_fails, at_limit;

#define MAX_CALLS 64
struct fcall {
	box_reply_cb cb;
	void *arg;
};
static struct fcall calls[MAX_CALLS];
static size_t ncalls;

/* Answers at once, as a create from the pool does (*pending stays NULL). */
struct box *box_create_start(struct box_spec *spec, box_create_cb cb, void *arg,
			     struct box **pending, struct moat_err *e)
{
	*pending = NULL;
	if (!json_is_object(spec->env) || !json_is_object(spec->metadata))
		abort();
	if (create_fails) {
		moat_err_set(e, MOAT_E_USAGE, EAGAIN, "at the limit of 1 sandboxes");
		return NULL;
	}
	the_box.exists = the_box.running = true;
	the_box.paused = false;
	return &the_box;
}

void box_create_abort(struct box *pending)
{
	abort(); /* never pending */
}

struct box *box_find(const char *id)
{
	return the_box.exists && !strcmp(id, "b") ? &the_box : NULL;
}

/* As box.c: a deleted sandbox fails the calls still waiting, at once. */
void box_delete(struct box *b)
{
	b->exists = b->running = false;
	while (ncalls) {
		struct fcall c = calls[0];
		memmove(calls, calls + 1, --ncalls * sizeof *calls);
		if (c.cb)
			c.cb(c.arg, NULL, NULL, 0);
	}
}

void box_each(void (*fn)(struct box *b, void *arg), void *arg)
{
	if (the_box.exists)
		fn(&the_box, arg);
}

size_t box_count(void)
{
	return the_box.exists;
}

bool box_at_limit(void)
{
	return at_limit;
}

const char *box_id(const struct box *b)
{
	return "b";
}

const char *box_dir(const struct box *b)
{
	return "/nonexistent/moat-fuzz/sandboxes/b";
}

bool box_running(const struct box *b)
{
	return b->running;
}

/* As box.c: pause and resume toggle, the core then refuses agent calls. */
bool box_paused(const struct box *b)
{
	return b->paused;
}

int box_pause(struct box *b, struct moat_err *e)
{
	if (b->paused)
		return moat_err_set(e, MOAT_E_USAGE, EALREADY, "already paused");
	b->paused = true;
	return 0;
}

/* A hibernation here is a pause (no process to stop in this fuzzer). */
int box_hibernate(struct box *b, struct moat_err *e)
{
	return box_pause(b, e);
}

bool box_hibernated(const struct box *b)
{
	(void)b;
	return false;
}

int box_resume(struct box *b, struct moat_err *e)
{
	if (!b->paused)
		return moat_err_set(e, MOAT_E_USAGE, EALREADY, "not paused");
	b->paused = false;
	return 0;
}

/* The snapshot door and its store are not under this fuzzer (they need
 * the data directory): its routes answer 404, a create naming a snapshot
 * finds none. The image door is fuzzed against an empty store below. */
void api_snap_route(struct evhttp_request *req, char **seg, int n)
{
	http_error(req, 404, "not_found", "no such route");
}

bool api_snap_box_route(struct evhttp_request *req, struct box *b, const char *what, int n)
{
	return false;
}

/* Sessions have their own store and sandboxes: not under this fuzzer
 * (their bodies are checked by session.c's own parser). */
void session_route(struct evhttp_request *req, char **seg, int n)
{
	http_error(req, 404, "not_found", "no such route");
}

void session_metrics(FILE *f)
{
}

int snap_for_create(const char *image, char **fs, json_t **spec, struct core_err *e)
{
	*fs = NULL;
	*spec = NULL;
	return 0;
}

void snap_drop_fs(const char *fs)
{
}

const char *box_pause_unavailable(void)
{
	return NULL;
}

json_t *box_json(const struct box *b)
{
	return json_pack("{s:s,s:s,s:{s:s}}", "id", "b", "state", b->running ? "running" : "stopped",
			 "metadata", "k", "v");
}

const json_t *box_metadata(const struct box *b)
{
	static json_t *m;
	if (!m)
		m = json_pack("{s:s}", "k", "v");
	return m;
}

json_t *box_env(const struct box *b, json_t *extra)
{
	json_t *a = json_array();
	const char *k;
	json_t *v;
	json_object_foreach(extra, k, v)
	{
		char *s;
		if (asprintf(&s, "%s=%s", k, json_string_value(v)) < 0)
			abort();
		json_array_append_new(a, json_string(s));
		free(s);
	}
	return a;
}

/* the E2B door has its own target (fuzz_e2b, fuzz_envd): not here */
bool e2b_claims(struct evhttp_request *req)
{
	return false;
}

void e2b_route(struct evhttp_request *req)
{
	abort();
}

void e2b_refuse(struct evhttp_request *req, int status, const char *msg)
{
	abort();
}

uint64_t e2b_body_limit(struct evhttp_request *req, uint64_t dflt)
{
	return dflt;
}

bool box_users(const struct box *b)
{
	return false;
}

const json_t *box_door(const struct box *b, const char *door)
{
	return NULL;
}

void box_activity(void)
{
}

void box_touch(struct box *b)
{
}

int box_call(struct box *b, json_t *req, const void *data, size_t len, box_reply_cb cb,
	     void *arg)
{
	if (!b->running)
		return -1;
	/* what the daemon writes into a frame */
	if (!json_is_object(req) || !json_is_string(json_object_get(req, "op")))
		abort();
	char *js = json_dumps(req, JSON_COMPACT);
	if (!js || strlen(js) > MOAT_FRAME_JSON_MAX || len > MOAT_FRAME_DATA_MAX ||
	    (len && !data))
		abort();
	free(js);
	if (ncalls == MAX_CALLS)
		return -1;
	calls[ncalls++] = (struct fcall){cb, arg};
	return 0;
}

void box_cancel(struct box *b, void *arg)
{
	for (size_t i = 0; i < ncalls; i++)
		if (calls[i].arg == arg) {
			calls[i].cb = NULL;
			calls[i].arg = NULL;
		}
}

void box_detach(struct box *b, void *arg)
{
	box_cancel(b, arg);
}

void box_abort(struct box *b, void *arg)
{
	box_cancel(b, arg);
}

/* ---- the stand-in job (job.h): never forks -------------------------------- */

struct job *job_start(struct event_base *base, int (*fn)(int fd, void *arg), void *fnarg,
		      job_done_cb done, void *arg)
{
	errno = EAGAIN;
	return NULL;
}

void job_cancel(struct job *j)
{
}

void job_cancel_all(void)
{
}

/* No seed directory for clones (src/serve/clone.c) in the fuzzer's cwd. */
int mkdir(const char *path, mode_t mode)
{
	if (!strcmp(path, "clones")) {
		errno = EROFS;
		return -1;
	}
	return (int)syscall(SYS_mkdir, path, mode);
}

/* No scratch directories on the host (h_create's job, git clones). */
char *mkdtemp(char *tmpl)
{
	errno = EROFS;
	return NULL;
}

/* ---- the request's side of libevent --------------------------------------- */

/* The request has no connection: nothing to watch or free. */
void evhttp_connection_set_closecb(struct evhttp_connection *evcon,
				   void (*cb)(struct evhttp_connection *, void *), void *arg)
{
	if (evcon)
		abort();
}

struct bufferevent *evhttp_connection_get_bufferevent(struct evhttp_connection *evcon)
{
	abort();
}

void evhttp_connection_free(struct evhttp_connection *evcon)
{
	abort();
}

static struct evhttp_request *live; /* the request, until answered */
static bool streaming;

static void check_error_body(int code, const char *s, size_t n)
{
	json_t *j = json_loadb(s, n, 0, NULL);
	json_t *err = json_object_get(j, "error");
	const char *c = json_string_value(json_object_get(err, "code"));
	if (!c || !json_is_string(json_object_get(err, "message")) || json_object_size(j) != 1)
		abort();
	static const struct {
		const char *c;
		int s;
	} t[] = {{"invalid_request", 400}, {"invalid_path", 400}, {"is_directory", 400},
		 {"unauthorized", 401}, {"forbidden", 403}, {"not_found", 404},
		 {"method_not_allowed", 405}, {"conflict", 409}, {"too_large", 413},
		 {"unsupported_media_type", 415}, {"patch_failed", 422},
		 {"limit_reached", 429}, {"internal", 500}};
	bool fits = false;
	for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
		fits |= !strcmp(c, t[i].c) && t[i].s == code;
	if (!fits)
		abort();
	json_decref(j);
}

static void answered(struct evhttp_request *req)
{
	if (req != live)
		abort(); /* twice, or a request that is not ours */
	live = NULL;
	streaming = false;
	evhttp_request_free(req); /* what libevent does for a request without a connection */
}

void evhttp_send_reply(struct evhttp_request *req, int code, const char *reason,
		       struct evbuffer *databuf)
{
	if (req != live || streaming || code < 200 || code > 599 || !reason)
		abort();
	size_t n = databuf ? evbuffer_get_length(databuf) : 0;
	const char *s = n ? (const char *)evbuffer_pullup(databuf, -1) : "";
	if (getenv("FUZZ_API_SHOW")) /* for checking seeds: what was answered */
		fprintf(stderr, "%d %.*s\n", code, (int)(n < 300 ? n : 300), s);
	if (code >= 400)
		check_error_body(code, s, n);
	else if (code == 204 && n)
		abort();
	answered(req);
}

void evhttp_send_reply_start(struct evhttp_request *req, int code, const char *reason)
{
	if (req != live || streaming || code != 200)
		abort();
	if (getenv("FUZZ_API_SHOW"))
		fprintf(stderr, "%d (stream)\n", code);
	streaming = true;
}

void evhttp_send_reply_chunk(struct evhttp_request *req, struct evbuffer *databuf)
{
	if (req != live || !streaming)
		abort();
	size_t n = evbuffer_get_length(databuf);
	char *s = (char *)evbuffer_pullup(databuf, -1);
	static const char *const names[] = {"stdout", "stderr", "exit", "error", NULL};
	const char *p = s;
	if (n < 7 || memcmp(p, "event: ", 7))
		abort();
	p += 7;
	size_t k = 0;
	while (names[k] && !(strncmp(p, names[k], strlen(names[k])) == 0 &&
			     p[strlen(names[k])] == '\n'))
		k++;
	if (!names[k])
		abort();
	p += strlen(names[k]) + 1;
	if (strncmp(p, "data: ", 6) || n < 2 || s[n - 1] != '\n' || s[n - 2] != '\n')
		abort();
	p += 6;
	json_t *j = json_loadb(p, (size_t)(s + n - 2 - p), 0, NULL);
	if (!json_is_object(j))
		abort();
	json_decref(j);
}

void evhttp_send_reply_end(struct evhttp_request *req)
{
	if (req != live)
		abort();
	answered(req);
}

/* ---- driver --------------------------------------------------------------- */

static struct event_base *base;
static struct api_config conf;
static struct gate_policy ceiling;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	/* belt and braces: nothing of the host is to be run */
	setenv("PATH", "/nonexistent/moat-fuzz", 1);
	base = event_base_new();
	gate_policy_init(&ceiling);
	struct moat_err e = {0};
	if (!base || gate_policy_add_allow(&ceiling, "*.example.com", &e) < 0 ||
	    gate_policy_add_allow(&ceiling, "10.0.0.0/8", &e) < 0)
		abort();
	conf = (struct api_config){.base = base, .host_paths = NULL, .max_file = 1u << 20,
				   .max_archive = 4u << 20,
				   .secrets = json_pack("{s:s}", "TOKEN", "s3cret")};
	api_init(&conf);
	return 0;
}

static const enum evhttp_cmd_type methods[] = {
	EVHTTP_REQ_GET, EVHTTP_REQ_POST,    EVHTTP_REQ_PUT,   EVHTTP_REQ_DELETE,
	EVHTTP_REQ_HEAD, EVHTTP_REQ_PATCH, EVHTTP_REQ_OPTIONS, EVHTTP_REQ_GET};

static const uint8_t *field(const uint8_t *p, const uint8_t *end, uint8_t sep)
{
	const uint8_t *q = memchr(p, sep, (size_t)(end - p));
	return q ? q : end;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 2)
		return 0;
	const uint8_t *end = data + size, *p = data + 1;
	const uint8_t *uend = field(p, end, '\n');
	char *uri = strndup((const char *)p, (size_t)(uend - p));
	/* libevent refuses what it cannot parse before any route sees it */
	struct evhttp_uri *u = evhttp_uri_parse_with_flags(uri, EVHTTP_URI_NONCONFORMANT);
	if (!u || strlen(uri) != (size_t)(uend - p)) {
		if (u)
			evhttp_uri_free(u);
		free(uri);
		return 0;
	}
	struct evhttp_request *req = evhttp_request_new(NULL, NULL);
	req->kind = EVHTTP_REQUEST;
	req->type = methods[data[0] & 7];
	req->uri = uri;
	req->uri_elems = u;
	if (data[0] & 8)
		evhttp_add_header(req->input_headers, "Accept", "text/event-stream");
	p = uend < end ? uend + 1 : end;
	const uint8_t *bend = field(p, end, 0x1e);
	evbuffer_add(req->input_buffer, p, (size_t)(bend - p));
	p = bend < end ? bend + 1 : end;

	create_fails = data[0] & 16;
	at_limit = data[0] & 32;
	conf.net_ceiling = (data[0] & 64) ? &ceiling : NULL;
	the_box.exists = the_box.running = true;
	ncalls = 0;
	live = req;
	streaming = false;

	api_init(&conf);
	struct core_config cc = {.base = base, .max_file = conf.max_file,
				 .max_archive = conf.max_archive, .net_ceiling = conf.net_ceiling,
				 .secrets = conf.secrets, .quotas = conf.quotas};
	core_init(&cc);
	api_route(req);
	event_base_loop(base, EVLOOP_NONBLOCK); /* answers the core defers */
	/* the agent answers, in order; when the input has no more replies it
	 * goes away (box.c then fails every call left) */
	for (int turns = 0; ncalls && turns < 256; turns++) {
		struct fcall c = calls[0];
		memmove(calls, calls + 1, --ncalls * sizeof *calls);
		if (p >= end) {
			if (c.cb)
				c.cb(c.arg, NULL, NULL, 0);
			continue;
		}
		const uint8_t *rend = field(p, end, 0x1e);
		const uint8_t *jend = field(p, rend, 0x1f);
		json_t *reply = json_loadb((const char *)p, (size_t)(jend - p), 0, NULL);
		size_t dl = jend < rend ? (size_t)(rend - jend - 1) : 0;
		/* an exact heap copy of the data, as box.c hands it over */
		char *d = dl ? malloc(dl) : NULL;
		if (dl)
			memcpy(d, jend + 1, dl);
		p = rend < end ? rend + 1 : end;
		if (c.cb)
			c.cb(c.arg, json_is_object(reply) ? reply : NULL, json_is_object(reply) ? d : NULL,
			     json_is_object(reply) ? dl : 0);
		json_decref(reply);
		free(d);
		event_base_loop(base, EVLOOP_NONBLOCK);
	}
	box_delete(&the_box); /* whatever is still waiting fails */
	event_base_loop(base, EVLOOP_NONBLOCK);
	if (live)
		abort(); /* never answered */
	return 0;
}

/* ---- the image store (images.c): an empty one; api_images.c is fuzzed ---- */
#include "../../src/serve/images.h"
int images_resolve(const char *name, struct images_resolved *out, struct core_err *e)
{
	memset(out, 0, sizeof *out);
	return 0;
}
void images_resolved_free(struct images_resolved *r)
{
}
json_t *images_list(void)
{
	return json_pack("{s:[]}", "images");
}
json_t *images_inspect(const char *name, struct core_err *e)
{
	cerr(e, 404, "not_found", "no image %.300s", name);
	return NULL;
}
int images_remove(const char *name, struct core_err *e)
{
	cerr(e, 404, "not_found", "no image %.300s", name);
	return -1;
}
struct images_wait *images_pull(const char *ref, bool insecure, const struct images_cbs *cbs,
				void *arg, struct core_err *e)
{
	cerr(e, 403, "forbidden", "no registry here");
	return NULL;
}
struct images_wait *images_import(struct evbuffer *body, const char *name,
				  const struct images_cbs *cbs, void *arg, struct core_err *e)
{
	cerr(e, 400, "invalid_request", "no store here");
	return NULL;
}
void images_wait_cancel(struct images_wait *w)
{
}
const json_t *box_image_config(const struct box *b)
{
	return NULL;
}
