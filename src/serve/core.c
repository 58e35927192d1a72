/* The operation core: see core.h. Requests to a sandbox's agent are built
 * here and its replies interpreted here (the agent is not trusted: every
 * length is checked), for every door. */
#define _GNU_SOURCE
#include "core.h"

#include "archive.h"
#include "box.h"
#include "clone.h"
#include "gate/addr.h"
#include "gate/policy.h"
#include "image.h"
#include "images.h"
#include "snap.h"
#include "jfield.h"
#include "enforce.h"
#include "job.h"
#include "manifest.h"
#include "metrics.h"
#include "../base/utf8.h"
#include "../base/util.h"
#include "../proto/entries.h"

#include <errno.h>
#include <event2/event.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define WORKSPACE "/workspace"
#define IMAGE_MAX (10u << 20)

static const struct core_config *cfg;

void core_init(const struct core_config *c)
{
	cfg = c;
}

const struct core_config *core_config(void)
{
	return cfg;
}

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int core_status_of(const char *code)
{
	static const struct {
		const char *c;
		int s;
	} t[] = {{"invalid_request", 400}, {"invalid_path", 400}, {"is_directory", 400},
		 {"unauthorized", 401},    {"forbidden", 403},    {"not_found", 404},
		 {"method_not_allowed", 405}, {"conflict", 409},  {"already_exists", 409},
		 {"paused", 409},          {"pause_unavailable", 422},
		 {"too_large", 413},       {"unsupported_media_type", 415},
		 {"patch_failed", 422},    {"limit_unavailable", 422}, {"limit_reached", 429},
		 {"budget_exceeded", 429}, {"unavailable", 503},
		 {"timeout", 504}};
	for (size_t i = 0; code && i < sizeof t / sizeof t[0]; i++)
		if (!strcmp(code, t[i].c))
			return t[i].s;
	return 500;
}

/* An agent's {"error":{"code","message"}} as a core error. */
static void agent_err(struct core_err *ce, json_t *err)
{
	const char *code = json_string_value(json_object_get(err, "code"));
	const char *msg = json_string_value(json_object_get(err, "message"));
	int st = core_status_of(code);
	cerr(ce, st, st == 500 ? "internal" : code, "%s", msg ? msg : "agent error");
}

static void stopped_err(struct core_err *ce, struct box *b)
{
	cerr(ce, 409, "conflict", "sandbox %s is not running", box_id(b));
}

/* ---- operations in flight ------------------------------------------------------ */

enum op_kind { OP_CREATE, OP_EXEC, OP_SIMPLE, OP_WATCH };
enum shape { SH_PLAIN, SH_READ, SH_IMAGE, SH_PACK };

struct cjob;

struct core_op {
	enum op_kind kind;
	struct box *b;
	char bid[32];             /* its id: a held stream finds out whether it is gone */
	void *arg;
	/* OP_SIMPLE */
	core_done_cb done;
	enum shape shape;
	/* OP_EXEC */
	struct core_exec_cbs cbs;
	bool stream, detached, started_cb;
	int64_t pid, yield_ms, t0;
	/* OP_WATCH */
	struct core_watch_cbs wcbs;
	int64_t watch_id;
	/* a stream whose client is behind: its next wait, sent once the
	 * door's backlog drained (no call to the agent meanwhile) */
	struct event *hold;
	json_t *held;
	/* OP_CREATE */
	core_create_cb ccb;
	struct cjob *cj;          /* waiting for the manifest's job (a git clone) */
	struct box *spawning;     /* the sandbox being set up */
	struct moat_buf entries;  /* the manifest, unpacked once it runs */
	bool users;
	bool control;             /* a session's sandbox: the control listener */
	char *door;
	json_t *door_data;
	struct event *defer;      /* a create answered at once: the answer waits for
				   * the loop (a door's callback never runs inside its call) */
	struct box *ready;
	struct moat_err ready_err;
};

/* A create waiting for its manifest (a git clone) in a forked job. */
#define MAX_MANIFEST_JOBS 4
static int njobs;
struct cjob {
	struct box_spec s; /* network and image owned */
	json_t *env, *body;
	struct job *job;   /* NULL once ended */
	char tmp[32];      /* the job's seed directory (the clones): the workspace to be */
	json_t *repos;     /* the repositories cloned into it (relative paths) */
};

static struct core_op *op_new(enum op_kind k, struct box *b, void *arg, struct core_err *e)
{
	struct core_op *op = calloc(1, sizeof *op);
	if (!op) {
		cerr(e, 500, "internal", "out of memory");
		return NULL;
	}
	op->kind = k;
	op->b = b;
	if (b)
		snprintf(op->bid, sizeof op->bid, "%s", box_id(b));
	op->arg = arg;
	op->t0 = now_ms();
	return op;
}

static void op_free(struct core_op *op)
{
	if (!op)
		return;
	if (op->spawning) /* its client left (or the daemon stops) mid-create */
		box_create_abort(op->spawning);
	moat_buf_free(&op->entries);
	if (op->cj) {
		njobs--;
		job_cancel(op->cj->job);
		if (op->cj->tmp[0])
			moat_rm_tree(op->cj->tmp);
		json_decref(op->cj->s.network);
		free(op->cj->s.image);
		free(op->cj->s.image_id);
		json_decref(op->cj->s.image_config);
		json_decref(op->cj->env);
		json_decref(op->cj->body);
		json_decref(op->cj->repos);
		free(op->cj);
	}
	free(op->door);
	json_decref(op->door_data);
	if (op->defer)
		event_free(op->defer);
	if (op->hold)
		event_free(op->hold);
	json_decref(op->held);
	if (op->ready) /* made, but nobody will learn of it */
		box_delete(op->ready);
	free(op);
}

static void on_reply(void *arg, json_t *reply, const char *data, size_t len);

/* Send req (stolen) to the agent for op. -1 (op untouched): not reachable. */
static int send_op(struct core_op *op, json_t *req, const void *data, size_t len)
{
	if (!req)
		return -1;
	int rc = box_call(op->b, req, data, len, on_reply, op);
	json_decref(req);
	return rc;
}

/* The first request of an op: on failure e says why and op is freed. */
static struct core_op *start(struct core_op *op, json_t *req, const void *data, size_t len,
			     struct core_err *e)
{
	if (!req) {
		cerr(e, 400, "invalid_request", "a parameter is not valid UTF-8");
		op_free(op);
		return NULL;
	}
	/* every operation on a sandbox's agent starts here: a paused one's
	 * agent is frozen, so each is refused at once, for every door (calls
	 * already in flight simply wait for the resume) */
	if (op->b && box_paused(op->b)) {
		cerr(e, 409, "paused", "sandbox %s is paused: resume it first", box_id(op->b));
		json_decref(req);
		op_free(op);
		return NULL;
	}
	if (send_op(op, req, data, len) < 0) {
		stopped_err(e, op->b);
		op_free(op);
		return NULL;
	}
	return op;
}

/* A later request of a running op: on failure its final callback runs. */
static void op_fail(struct core_op *op, const struct core_err *e);
static void again(struct core_op *op, json_t *req)
{
	if (send_op(op, req, NULL, 0) < 0) {
		struct core_err e;
		stopped_err(&e, op->b);
		op_fail(op, &e);
	}
}

/* ---- back-pressure: a stream waits for its client ------------------------------ */

#define HOLD_POLL_MS 20

static size_t op_backlog(struct core_op *op)
{
	if (op->kind == OP_EXEC && op->cbs.backlog)
		return op->cbs.backlog(op->arg);
	if (op->kind == OP_WATCH && op->wcbs.backlog)
		return op->wcbs.backlog(op->arg);
	return 0;
}

/* A held op has no call pending, so a delete of its sandbox meanwhile did
 * not tell it: look the sandbox up by id before touching op->b again. */
static bool held_box_gone(struct core_op *op)
{
	if (!op->held || box_find(op->bid) == op->b)
		return false;
	op->b = NULL;
	return true;
}

static void hold_arm(struct core_op *op)
{
	struct timeval tv = {0, HOLD_POLL_MS * 1000};
	if (evtimer_add(op->hold, &tv) < 0) { /* no timer: send it rather than stall */
		json_t *req = op->held;
		op->held = NULL;
		again(op, req);
	}
}

static void on_hold(evutil_socket_t fd, short what, void *arg)
{
	struct core_op *op = arg;
	if (held_box_gone(op)) {
		struct core_err e;
		cerr(&e, 409, "conflict", "sandbox %s stopped", op->bid);
		op_fail(op, &e);
		return;
	}
	if (op_backlog(op) >= CORE_BACKLOG_LOW) {
		hold_arm(op);
		return;
	}
	json_t *req = op->held;
	op->held = NULL;
	again(op, req);
}

/* The next wait of a stream (req stolen): held while the door's client has
 * more than CORE_BACKLOG_HIGH unread; the agent drops beyond max_output
 * meanwhile (truncated), so neither the sandbox nor the daemon grows. */
static void next_wait(struct core_op *op, json_t *req)
{
	if (!req || !cfg || !cfg->base || op_backlog(op) <= CORE_BACKLOG_HIGH) {
		again(op, req);
		return;
	}
	if (!op->hold && !(op->hold = evtimer_new(cfg->base, on_hold, op))) {
		again(op, req);
		return;
	}
	op->held = req;
	hold_arm(op);
}

static void op_fail(struct core_op *op, const struct core_err *e)
{
	switch (op->kind) {
	case OP_EXEC:
		op->cbs.failed(op->arg, e);
		break;
	case OP_WATCH:
		op->wcbs.failed(op->arg, e);
		break;
	case OP_SIMPLE:
		op->done(op->arg, NULL, NULL, 0, e);
		break;
	case OP_CREATE: {
		struct box *b = op->b;
		op->b = NULL;
		if (b)
			box_delete(b); /* a manifest that failed: nothing is left */
		op->ccb(op->arg, NULL, e);
		break;
	}
	}
	op_free(op);
}

void core_op_cancel(struct core_op *op)
{
	if (!op)
		return;
	held_box_gone(op); /* then there is nothing left to cancel or kill */
	if (op->b && op->kind == OP_EXEC && op->detached)
		box_detach(op->b, op); /* its wait would eat output a re-attach is owed */
	else if (op->b && op->kind != OP_EXEC)
		box_cancel(op->b, op);
	if (op->kind == OP_EXEC && !op->detached && op->b) {
		/* bound to its request: it ends with it, like a command whose
		 * terminal went away; the agent may have answered a wait already
		 * (crossing the cancel), so kill it by its id too */
		box_abort(op->b, op);
		if (op->pid > 0) {
			json_t *k = json_pack("{s:s,s:I,s:s,s:b}", "op", "signal", "process_id",
					      (json_int_t)op->pid, "signal", "KILL", "forget", 1);
			if (k)
				box_call(op->b, k, NULL, 0, NULL, NULL);
			json_decref(k);
		}
	} else if (op->kind == OP_WATCH && op->b && op->watch_id > 0) {
		json_t *u = json_pack("{s:s,s:I}", "op", "unwatch", "watch_id",
				      (json_int_t)op->watch_id);
		if (u)
			box_call(op->b, u, NULL, 0, NULL, NULL);
		json_decref(u);
	} else if (op->kind == OP_CREATE && op->b) {
		/* nobody will learn its id: a create ends with its request */
		box_delete(op->b);
		op->b = NULL;
	}
	op_free(op);
}

/* ---- processes ------------------------------------------------------------------ */

static void exec_reply(struct core_op *op, json_t *reply, const char *data, size_t len);

static json_t *wait_req(struct core_op *op)
{
	int64_t t = op->stream ? 0 : op->yield_ms >= 0 ? (op->yield_ms ? op->yield_ms : 1) : 0;
	return json_pack("{s:s,s:I,s:I,s:s}", "op", "wait", "process_id", (json_int_t)op->pid,
			 "timeout_ms", (json_int_t)t, "until", op->stream ? "output" : "exit");
}

static void exec_reply(struct core_op *op, json_t *reply, const char *data, size_t len)
{
	if (op->pid <= 0) {
		json_int_t pid = json_integer_value(json_object_get(reply, "process_id"));
		if (pid <= 0) {
			struct core_err e;
			cerr(&e, 500, "internal", "the agent did not say which process it started");
			op_fail(op, &e);
			return;
		}
		op->pid = pid;
	}
	if (!op->started_cb) {
		op->started_cb = true;
		if (op->cbs.started)
			op->cbs.started(op->arg, op->pid);
	}
	if (!json_object_get(reply, "running")) {
		/* an agent that only started it: wait in a second message */
		again(op, wait_req(op));
		return;
	}
	size_t ol = (size_t)json_integer_value(json_object_get(reply, "stdout_len"));
	size_t el = (size_t)json_integer_value(json_object_get(reply, "stderr_len"));
	if (ol > len || el > len - ol) /* the agent is not trusted */
		ol = el = 0;
	if ((ol || el) && op->cbs.output)
		op->cbs.output(op->arg, data, ol, data + ol, el);
	if (json_is_true(json_object_get(reply, "running"))) {
		if (op->stream) {
			next_wait(op, wait_req(op));
			return;
		}
		struct core_exit y = {.pid = op->pid,
				      .truncated = json_is_true(json_object_get(reply, "truncated"))};
		op->cbs.yielded(op->arg, &y);
		op_free(op);
		return;
	}
	struct core_exit x = {
		.pid = op->pid,
		.exit_code = (int)json_integer_value(json_object_get(reply, "exit_code")),
		.signal = (int)json_integer_value(json_object_get(reply, "signal")),
		.timed_out = json_is_true(json_object_get(reply, "timed_out")),
		.truncated = json_is_true(json_object_get(reply, "truncated")),
		.duration_ms = json_integer_value(json_object_get(reply, "duration_ms")),
	};
	metrics_exec_done(now_ms() - op->t0);
	op->cbs.ended(op->arg, &x);
	op_free(op);
}

static const char *user_home(const char *user)
{
	return user && !strcmp(user, "root") ? "/root" : "/home/user";
}

/* A user other than the sandbox's default, checked here once for every
 * door (the agent checks again). */
static bool user_ok(struct box *b, const char *user, struct core_err *e)
{
	if (!user || !strcmp(user, "user") || (box_users(b) && !strcmp(user, "root")))
		return true;
	if (!strcmp(user, "root"))
		cerr(e, 403, "forbidden", "this sandbox has no root user");
	else
		cerr(e, 400, "invalid_request", "no user %.64s in this sandbox (root or user)", user);
	return false;
}

/* An image sandbox's command when an exec names none: Entrypoint + Cmd
 * (docker run's rule); NULL when the image has neither. New ref. */
static json_t *image_argv(const struct box *b)
{
	const json_t *ic = box_image_config(b);
	json_t *ep = json_object_get(ic, "entrypoint"), *cmd = json_object_get(ic, "cmd");
	json_t *a = json_array();
	if (json_is_array(ep))
		json_array_extend(a, ep);
	if (json_is_array(cmd))
		json_array_extend(a, cmd);
	if (!json_array_size(a)) {
		json_decref(a);
		return NULL;
	}
	return a;
}

struct core_op *core_exec(struct box *b, const struct core_exec_req *req0,
			  const struct core_exec_cbs *cbs, void *arg, struct core_err *e)
{
	struct core_exec_req rr = *req0;
	const struct core_exec_req *r = &rr;
	json_auto_t *img_argv = NULL;
	if (!rr.argv) { /* none given: the image's */
		img_argv = image_argv(b);
		if (!img_argv) {
			cerr(e, 400, "invalid_request",
			     "cmd is required (this sandbox's image has no Entrypoint or Cmd)");
			return NULL;
		}
		rr.argv = img_argv;
	}
	if (!json_is_array(r->argv) || !json_array_size(r->argv)) {
		cerr(e, 400, "invalid_request", "cmd must be a non-empty array of strings");
		return NULL;
	}
	size_t i;
	json_t *v;
	json_array_foreach(r->argv, i, v) if (!json_is_string(v) ||
					       strlen(json_string_value(v)) != json_string_length(v))
	{
		cerr(e, 400, "invalid_request", "cmd[%zu] must be a string without NUL", i);
		return NULL;
	}
	if (!user_ok(b, r->user, e) || (r->env && !jf_string_map(e, r->env, "env", true)))
		return NULL;
	const char *cwd = r->cwd && *r->cwd ? r->cwd : NULL;
	const char *base = box_users(b) ? user_home(r->user) : WORKSPACE;
	char cwdbuf[4200];
	const char *iwd = json_string_value(json_object_get(box_image_config(b), "workdir"));
	if (!cwd && iwd && !box_users(b)) {
		cwd = iwd; /* the image's WorkingDir (kept only when it exists in it) */
	} else if (!cwd) {
		cwd = base;
	} else if (cwd[0] != '/') {
		snprintf(cwdbuf, sizeof cwdbuf, "%s/%s", base, cwd);
		cwd = cwdbuf;
	}
	struct core_op *op = op_new(OP_EXEC, b, arg, e);
	if (!op)
		return NULL;
	op->cbs = *cbs;
	op->stream = r->stream;
	op->yield_ms = r->stream ? -1 : r->yield_ms;
	op->detached = r->detached;
	json_t *extra = r->env ? json_deep_copy(r->env) : json_object();
	if (box_users(b)) {
		/* who runs it: the user's own HOME and USER under the request's */
		const char *u = r->user ? r->user : "user";
		json_t *id = json_pack("{s:s,s:s,s:s}", "HOME", user_home(u), "USER", u, "LOGNAME", u);
		json_object_update_missing(extra, id);
		json_decref(id);
	}
	json_t *env = box_env(b, extra);
	json_decref(extra);
	bool cap_total = op->yield_ms < 0 && !op->detached;
	json_t *req = json_pack("{s:s,s:O,s:o,s:s,s:b,s:b,s:I,s:I,s:I,s:I,s:b}", "op", "exec",
				"argv", r->argv, "env", env, "cwd", cwd, "tty", r->tty,
				"close_stdin", r->stdin_mode == CORE_STDIN_CLOSED, "timeout_ms",
				(json_int_t)r->timeout_ms, "max_output_bytes",
				(json_int_t)r->max_output, "cols", (json_int_t)r->cols, "rows",
				(json_int_t)r->rows, "cap_total", cap_total);
	if (req && r->stdin_mode == CORE_STDIN_NULL)
		json_object_set_new(req, "stdin", json_string("null"));
	if (req && r->user)
		json_object_set_new(req, "user", json_string(r->user));
	if (req && r->tag)
		json_object_set_new(req, "tag", json_string(r->tag));
	/* exec and wait in one message: one round trip less per command; a
	 * stream waits in a second one, so that its start is told at once */
	if (req && !op->stream)
		json_object_set_new(req, "wait", json_pack("{s:I,s:s}", "timeout_ms",
							   (json_int_t)(op->stream ? 0 : op->yield_ms >= 0 ? (op->yield_ms ? op->yield_ms : 1) : 0),
							   "until", op->stream ? "output" : "exit"));
	metrics_bytes(0, r->stdin_len);
	op = start(op, req, r->stdin_data, r->stdin_len, e);
	if (op)
		metrics_exec_started();
	return op;
}

struct core_op *core_attach(struct box *b, int64_t pid, bool stream, int64_t yield_ms,
			    const struct core_exec_cbs *cbs, void *arg, struct core_err *e)
{
	if (pid <= 0) {
		cerr(e, 404, "not_found", "no process %lld", (long long)pid);
		return NULL;
	}
	struct core_op *op = op_new(OP_EXEC, b, arg, e);
	if (!op)
		return NULL;
	op->cbs = *cbs;
	op->stream = stream;
	op->yield_ms = stream ? -1 : yield_ms;
	op->detached = true;
	op->pid = pid;
	op->started_cb = true; /* it started long ago */
	return start(op, wait_req(op), NULL, 0, e);
}

/* ---- simple operations ------------------------------------------------------------ */

static struct core_op *simple(struct box *b, json_t *req, const void *data, size_t len,
			      enum shape sh, core_done_cb cb, void *arg, struct core_err *e)
{
	struct core_op *op = op_new(OP_SIMPLE, b, arg, e);
	if (!op) {
		json_decref(req);
		return NULL;
	}
	op->done = cb;
	op->shape = sh;
	return start(op, req, data, len, e);
}

static void simple_reply(struct core_op *op, json_t *reply, const char *data, size_t len)
{
	struct core_err e = {0};
	switch (op->shape) {
	case SH_PLAIN:
		json_object_del(reply, "id");
		op->done(op->arg, reply, data, len, NULL);
		break;
	case SH_READ:
		metrics_bytes(len, 0);
		op->done(op->arg, reply, data, len, NULL);
		break;
	case SH_IMAGE: {
		const char *mime;
		uint32_t w, h;
		if (moat_image_sniff(data, len, &mime, &w, &h) < 0) {
			cerr(&e, 415, "unsupported_media_type", "not a PNG, JPEG, GIF or WebP image");
			op->done(op->arg, NULL, NULL, 0, &e);
			break;
		}
		char *b64 = moat_base64(data, len);
		json_t *o = b64 ? json_pack("{s:s,s:I,s:I,s:s%}", "mime", mime, "width", (json_int_t)w,
					    "height", (json_int_t)h, "data", b64, strlen(b64))
				: NULL;
		free(b64);
		if (!o) {
			cerr(&e, 500, "internal", "out of memory");
			op->done(op->arg, NULL, NULL, 0, &e);
		} else {
			op->done(op->arg, o, NULL, 0, NULL);
		}
		json_decref(o);
		break;
	}
	case SH_PACK: {
		struct moat_buf tar = {0};
		struct moat_err me = {0};
		if (moat_entries_to_archive(data, len, &tar, &me) < 0) {
			cerr(&e, 500, "internal", "archive: %s", me.msg);
			op->done(op->arg, NULL, NULL, 0, &e);
		} else {
			metrics_bytes(tar.len, 0);
			op->done(op->arg, reply, tar.p, tar.len, NULL);
		}
		moat_buf_free(&tar);
		break;
	}
	}
	op_free(op);
}

static bool pid_ok(int64_t pid, struct core_err *e)
{
	if (pid > 0 && pid <= 2000000000)
		return true;
	cerr(e, 404, "not_found", "no process %lld", (long long)pid);
	return false;
}

struct core_op *core_stdin(struct box *b, int64_t pid, const void *data, size_t len, bool close,
			   core_done_cb cb, void *arg, struct core_err *e)
{
	if (!pid_ok(pid, e))
		return NULL;
	metrics_bytes(0, len);
	return simple(b,
		      json_pack("{s:s,s:I,s:b}", "op", "stdin", "process_id", (json_int_t)pid,
				"close", close),
		      data, len, SH_PLAIN, cb, arg, e);
}

struct core_op *core_signal(struct box *b, int64_t pid, const char *sig, core_done_cb cb,
			    void *arg, struct core_err *e)
{
	if (!pid_ok(pid, e))
		return NULL;
	if (sig && !strncmp(sig, "SIG", 3))
		sig += 3;
	return simple(b,
		      json_pack("{s:s,s:I,s:s}", "op", "signal", "process_id", (json_int_t)pid,
				"signal", sig && *sig ? sig : "KILL"),
		      NULL, 0, SH_PLAIN, cb, arg, e);
}

struct core_op *core_resize(struct box *b, int64_t pid, unsigned cols, unsigned rows,
			    core_done_cb cb, void *arg, struct core_err *e)
{
	if (!pid_ok(pid, e))
		return NULL;
	if (!cols || !rows || cols > 9999 || rows > 9999) {
		cerr(e, 400, "invalid_request", "a terminal size is 1 to 9999 columns and rows");
		return NULL;
	}
	return simple(b,
		      json_pack("{s:s,s:I,s:I,s:I}", "op", "resize", "process_id", (json_int_t)pid,
				"cols", (json_int_t)cols, "rows", (json_int_t)rows),
		      NULL, 0, SH_PLAIN, cb, arg, e);
}

struct core_op *core_ps(struct box *b, core_done_cb cb, void *arg, struct core_err *e)
{
	return simple(b, json_pack("{s:s}", "op", "ps"), NULL, 0, SH_PLAIN, cb, arg, e);
}

/* ---- files ------------------------------------------------------------------------ */

/* A path of a request: non-empty, no NUL (a C string cut short would name
 * another file), UTF-8 (the agent's request is JSON). */
static bool path_ok(const char *path, const char *what, struct core_err *e)
{
	if (!path || !*path) {
		cerr(e, 400, "invalid_path", "%s: a path is required", what);
		return false;
	}
	json_t *s = json_string(path);
	if (!s) {
		cerr(e, 400, "invalid_path", "%s: a path must be UTF-8", what);
		return false;
	}
	json_decref(s);
	return true;
}

/* The request of a file op on path, as user. */
static json_t *fs_req(struct box *b, const char *op, const char *path, const char *user,
		      struct core_err *e)
{
	if (!path_ok(path, op, e) || !user_ok(b, user, e))
		return NULL;
	json_t *r = json_pack("{s:s,s:s}", "op", op, "path", path);
	if (r && user)
		json_object_set_new(r, "user", json_string(user));
	if (!r)
		cerr(e, 500, "internal", "out of memory");
	return r;
}

#define FS_START(req_, data_, len_, shape_)                                                   \
	do {                                                                                   \
		json_t *r_ = (req_);                                                           \
		if (!r_)                                                                       \
			return NULL;                                                           \
		return simple(b, r_, data_, len_, shape_, cb, arg, e);                          \
	} while (0)

struct core_op *core_read(struct box *b, const char *path, const char *user, uint64_t max,
			  core_done_cb cb, void *arg, struct core_err *e)
{
	json_t *r = fs_req(b, "read", path, user, e);
	if (r)
		json_object_set_new(r, "max", json_integer((json_int_t)(max ? max : cfg->max_file)));
	FS_START(r, NULL, 0, SH_READ);
}

struct core_op *core_write(struct box *b, const char *path, const void *data, size_t len,
			   const struct core_write_opts *o, core_done_cb cb, void *arg,
			   struct core_err *e)
{
	if (len > cfg->max_file) {
		cerr(e, 413, "too_large", "file over %llu bytes", (unsigned long long)cfg->max_file);
		return NULL;
	}
	if (o && o->metadata && !jf_string_map(e, o->metadata, "metadata", false))
		return NULL;
	json_t *r = fs_req(b, "write", path, o ? o->user : NULL, e);
	if (r && o && o->metadata && json_object_size(o->metadata))
		json_object_set(r, "metadata", o->metadata);
	if (r && o && o->no_parents)
		json_object_set_new(r, "parents", json_false());
	if (r)
		metrics_bytes(0, len);
	FS_START(r, data, len, SH_PLAIN);
}

struct core_op *core_remove(struct box *b, const char *path, const char *user, bool recursive,
			    core_done_cb cb, void *arg, struct core_err *e)
{
	json_t *r = fs_req(b, "delete", path, user, e);
	if (r)
		json_object_set_new(r, "recursive", json_boolean(recursive));
	FS_START(r, NULL, 0, SH_PLAIN);
}

struct core_op *core_mkdir(struct box *b, const char *path, const char *user, bool parents,
			   bool exist_ok, core_done_cb cb, void *arg, struct core_err *e)
{
	json_t *r = fs_req(b, "mkdir", path, user, e);
	/* the defaults unsaid: a file in the way is then a conflict (409), as
	 * /v1 always answered; with either flag it is invalid_path */
	if (r && !parents)
		json_object_set_new(r, "parents", json_false());
	if (r && !exist_ok)
		json_object_set_new(r, "exist_ok", json_false());
	FS_START(r, NULL, 0, SH_PLAIN);
}

struct core_op *core_list(struct box *b, const char *path, const char *user, int depth,
			  core_done_cb cb, void *arg, struct core_err *e)
{
	if (depth < 1 || depth > 64) {
		cerr(e, 400, "invalid_request", "depth must be 1 to 64");
		return NULL;
	}
	json_t *r = fs_req(b, "list", path, user, e);
	if (r)
		json_object_set_new(r, "depth", json_integer(depth));
	FS_START(r, NULL, 0, SH_PLAIN);
}

struct core_op *core_stat(struct box *b, const char *path, const char *user, core_done_cb cb,
			  void *arg, struct core_err *e)
{
	FS_START(fs_req(b, "stat", path, user, e), NULL, 0, SH_PLAIN);
}

struct core_op *core_move(struct box *b, const char *src, const char *dst, const char *user,
			  core_done_cb cb, void *arg, struct core_err *e)
{
	if (!path_ok(dst, "destination", e))
		return NULL;
	json_t *r = fs_req(b, "rename", src, user, e);
	if (r) {
		json_object_del(r, "path");
		json_object_set_new(r, "src", json_string(src));
		json_object_set_new(r, "dst", json_string(dst));
	}
	FS_START(r, NULL, 0, SH_PLAIN);
}

struct core_op *core_patch(struct box *b, const char *patch, size_t len, core_done_cb cb,
			   void *arg, struct core_err *e)
{
	if (!patch || !len) {
		cerr(e, 400, "invalid_request", "patch must be a non-empty string");
		return NULL;
	}
	return simple(b, json_pack("{s:s}", "op", "patch"), patch, len, SH_PLAIN, cb, arg, e);
}

struct core_op *core_pack(struct box *b, core_done_cb cb, void *arg, struct core_err *e)
{
	return simple(b, json_pack("{s:s,s:s}", "op", "pack", "path", WORKSPACE), NULL, 0, SH_PACK,
		      cb, arg, e);
}

struct core_op *core_unpack(struct box *b, const void *tar, size_t len, core_done_cb cb,
			    void *arg, struct core_err *e)
{
	struct moat_archive_limits lim = {.max_total = cfg->max_archive, .max_entries = 100000};
	struct moat_buf entries = {0};
	struct moat_err me = {0};
	if (moat_archive_to_entries(tar, len, &lim, &entries, &me) < 0) {
		bool big = me.errnum == EFBIG;
		cerr(e, big ? 413 : 400, big ? "too_large" : "invalid_request", "archive: %s", me.msg);
		moat_buf_free(&entries);
		return NULL;
	}
	metrics_bytes(0, len);
	struct core_op *op = simple(b,
				    json_pack("{s:s,s:s,s:b}", "op", "unpack", "path", WORKSPACE,
					      "replace", 1),
				    entries.p, entries.len, SH_PLAIN, cb, arg, e);
	moat_buf_free(&entries);
	return op;
}

struct core_op *core_image(struct box *b, const char *path, core_done_cb cb, void *arg,
			   struct core_err *e)
{
	json_t *r = fs_req(b, "read", path, NULL, e);
	if (r)
		json_object_set_new(r, "max", json_integer(IMAGE_MAX));
	FS_START(r, NULL, 0, SH_IMAGE);
}

/* ---- watches ---------------------------------------------------------------------- */

static json_t *watch_req(struct box *b, const char *path, const char *user, bool recursive,
			 bool include_entry, struct core_err *e)
{
	json_t *r = fs_req(b, "watch", path, user, e);
	if (r) {
		json_object_set_new(r, "recursive", json_boolean(recursive));
		json_object_set_new(r, "include_entry", json_boolean(include_entry));
	}
	return r;
}

struct core_op *core_watch(struct box *b, const char *path, const char *user, bool recursive,
			   bool include_entry, const struct core_watch_cbs *cbs, void *arg,
			   struct core_err *e)
{
	json_t *r = watch_req(b, path, user, recursive, include_entry, e);
	if (!r)
		return NULL;
	struct core_op *op = op_new(OP_WATCH, b, arg, e);
	if (!op) {
		json_decref(r);
		return NULL;
	}
	op->wcbs = *cbs;
	return start(op, r, NULL, 0, e);
}

static void watch_reply(struct core_op *op, json_t *reply)
{
	if (op->watch_id <= 0) {
		op->watch_id = json_integer_value(json_object_get(reply, "watch_id"));
		if (op->watch_id <= 0) {
			struct core_err e;
			cerr(&e, 500, "internal", "the agent did not say which watch it made");
			op_fail(op, &e);
			return;
		}
		if (op->wcbs.started)
			op->wcbs.started(op->arg);
	} else {
		json_t *evs = json_object_get(reply, "events");
		size_t i;
		json_t *ev;
		json_array_foreach(evs, i, ev) if (json_is_object(ev)) op->wcbs.event(op->arg, ev);
		if (json_is_true(json_object_get(reply, "ended"))) {
			struct core_err e;
			cerr(&e, 404, "not_found", "the watched directory was removed");
			op->watch_id = 0;
			op_fail(op, &e);
			return;
		}
	}
	next_wait(op, json_pack("{s:s,s:I,s:I}", "op", "watch_wait", "watch_id",
				(json_int_t)op->watch_id, "timeout_ms", (json_int_t)0));
}

struct core_op *core_watch_create(struct box *b, const char *path, const char *user,
				  bool recursive, bool include_entry, core_done_cb cb, void *arg,
				  struct core_err *e)
{
	FS_START(watch_req(b, path, user, recursive, include_entry, e), NULL, 0, SH_PLAIN);
}

struct core_op *core_watch_events(struct box *b, int64_t watch_id, core_done_cb cb, void *arg,
				  struct core_err *e)
{
	return simple(b,
		      json_pack("{s:s,s:I,s:I,s:b}", "op", "watch_wait", "watch_id",
				(json_int_t)watch_id, "timeout_ms", (json_int_t)0, "poll", 1),
		      NULL, 0, SH_PLAIN, cb, arg, e);
}

struct core_op *core_watch_remove(struct box *b, int64_t watch_id, core_done_cb cb, void *arg,
				  struct core_err *e)
{
	return simple(b,
		      json_pack("{s:s,s:I}", "op", "unwatch", "watch_id", (json_int_t)watch_id),
		      NULL, 0, SH_PLAIN, cb, arg, e);
}

/* ---- sandboxes: validation --------------------------------------------------------- */


static bool parse_size_field(struct core_err *ce, json_t *v, const char *what,
			     uint64_t *out)
{
	if (!v || json_is_null(v))
		return true;
	struct moat_err e = {0};
	if (json_is_integer(v) && json_integer_value(v) > 0) {
		*out = (uint64_t)json_integer_value(v);
		return true;
	}
	if (json_is_string(v) && moat_parse_size(json_string_value(v), out, &e) == 0)
		return true;
	cerr(ce, 400, "invalid_request", "%s: expected a size like \"512M\" or bytes%s%s",
		   what, e.msg[0] ? ": " : "", e.msg);
	return false;
}

/* "quotas": {"inotify_instances": 4, ...}: each may lower, never raise,
 * the operator's ceiling (moat serve --quota). */
static bool parse_quotas(struct core_err *ce, json_t *q, struct box_spec *s)
{
	if (!q || json_is_null(q))
		return true;
	if (!json_is_object(q)) {
		cerr(ce, 400, "invalid_request", "limits.quotas must be an object");
		return false;
	}
	const char *k;
	json_t *v;
	json_object_foreach(q, k, v) {
		int i = moat_quota_find(k);
		if (i < 0) {
			cerr(ce, 400, "invalid_request", "limits.quotas.%.64s: unknown quota", k);
			return false;
		}
		struct moat_err e = {0};
		if (!json_is_integer(v) || moat_quota_check(i, json_integer_value(v), &e) < 0) {
			cerr(ce, 400, "invalid_request",
				   "limits.quotas.%s: must be an integer from 0 to %lld", k,
				   (long long)moat_quota_info[i].max);
			return false;
		}
		if (json_integer_value(v) > cfg->quotas[i]) {
			cerr(ce, 400, "invalid_request",
				   "limits.quotas.%s: at most %lld (the operator's limit)", k,
				   (long long)cfg->quotas[i]);
			return false;
		}
		s->quotas[i] = json_integer_value(v);
		s->quota_set |= 1u << i;
	}
	return true;
}

static bool parse_limits(struct core_err *ce, json_t *l, struct box_spec *s)
{
	if (!l || json_is_null(l))
		return true;
	static const char *const keys[] = {"memory", "pids", "cpus", "disk", "quotas", NULL};
	if (!json_is_object(l)) {
		cerr(ce, 400, "invalid_request", "limits must be an object");
		return false;
	}
	if (!jf_only_keys(ce, l, "limits", keys))
		return false;
	if (!parse_size_field(ce, json_object_get(l, "memory"), "limits.memory", &s->memory) ||
	    !parse_size_field(ce, json_object_get(l, "disk"), "limits.disk", &s->disk))
		return false;
	if (s->memory && s->memory < (16u << 20)) {
		cerr(ce, 400, "invalid_request", "limits.memory: at least 16M");
		return false;
	}
	int64_t pids = 0;
	if (!jf_int(ce, l, "pids", 1 << 22, &pids))
		return false;
	s->pids = (uint64_t)pids;
	json_t *c = json_object_get(l, "cpus");
	if (c && !json_is_null(c)) {
		double v = json_number_value(c);
		if (!json_is_number(c) || v <= 0 || v > 1024) {
			cerr(ce, 400, "invalid_request", "limits.cpus must be a number > 0");
			return false;
		}
		s->cpu_milli = (uint64_t)(v * 1000 + 0.5);
	}
	return parse_quotas(ce, json_object_get(l, "quotas"), s);
}

/* "network": {"allow", "deny", "resolve", "secrets": [{"env", "hosts"}]}.
 * Patterns are checked here (400 naming the entry); an allowlist needs the
 * operator's --net-allow (every connection must pass both); a pinned
 * special address (loopback, private...) needs an IP rule of the operator;
 * a secret must be in the daemon's store. On success env gets the proxy
 * variables, the placeholders and the CA variables, and *out the network
 * object with "placeholders". */
static bool parse_network(struct core_err *ce, json_t *n, json_t *env, json_t **out)
{
	*out = NULL;
	if (!n || json_is_null(n))
		return true;
	static const char *const keys[] = {"allow", "deny", "resolve", "secrets", NULL};
	if (!json_is_object(n)) {
		cerr(ce, 400, "invalid_request", "network must be an object");
		return false;
	}
	if (!jf_only_keys(ce, n, "network", keys))
		return false;
	struct gate_policy tmp;
	gate_policy_init(&tmp);
	struct moat_err e = {0};
	bool ok = true;
	const char *const *lk = gate_list_keys;
	for (int k = 0; k < GATE_LISTS && ok; k++) {
		json_t *a = json_object_get(n, lk[k]);
		if (a && !json_is_array(a)) {
			cerr(ce, 400, "invalid_request", "network.%s must be an array of strings", lk[k]);
			ok = false;
			break;
		}
		size_t i;
		json_t *v;
		json_array_foreach(a, i, v)
		{
			const char *s = json_string_value(v);
			int rc = !s ? moat_err_set(&e, MOAT_E_USAGE, 0, "must be a string")
				    : gate_policy_add(&tmp, (enum gate_list)k, s, &e);
			if (rc < 0) {
				cerr(ce, 400, "invalid_request", "network.%s[%zu]: %s", lk[k], i, e.msg);
				ok = false;
				break;
			}
		}
	}
	json_t *secrets = json_object_get(n, "secrets");
	if (ok && secrets && !json_is_array(secrets)) {
		cerr(ce, 400, "invalid_request", "network.secrets must be an array");
		ok = false;
	}
	if (ok && (tmp.n_allow || json_array_size(secrets)) && !cfg->net_ceiling) {
		cerr(ce, 403, "forbidden",
			   "network: this daemon gives sandboxes no network (start it with --net-allow)");
		ok = false;
	}
	/* a pin to a special address would reach the host's own services */
	for (size_t i = 0; ok && i < tmp.n_pins; i++)
		for (size_t k = 0; ok && k < tmp.pins[i].n; k++) {
			const struct sockaddr *sa = (const struct sockaddr *)&tmp.pins[i].addr[k];
			char why[GATE_WHY_CAP];
			if (gate_addr_special(sa) &&
			    gate_check_addr(cfg->net_ceiling, "", tmp.pins[i].port ? tmp.pins[i].port : 1,
					    sa, why) != GATE_ALLOW) {
				char a[GATE_ADDR_FMT_CAP];
				cerr(ce, 403, "forbidden",
					   "network.resolve: %s pins %s, a %s address the operator's "
					   "--net-allow does not cover", tmp.pins[i].host,
					   gate_addr_format(sa, false, a), gate_addr_special_kind(sa));
				ok = false;
			}
		}
	gate_policy_free(&tmp);
	if (!ok)
		return false;
	json_t *ph = json_object();
	size_t i;
	json_t *s;
	json_array_foreach(secrets, i, s)
	{
		const char *name = json_string_value(json_object_get(s, "env"));
		json_t *hosts = json_object_get(s, "hosts");
		size_t k;
		json_t *h;
		bool good = json_is_object(s) && json_object_size(s) == 2 && name && *name &&
			    !strchr(name, '=') && json_is_array(hosts) && json_array_size(hosts);
		json_array_foreach(hosts, k, h) good = good && json_is_string(h) && json_string_length(h);
		if (!good) {
			cerr(ce, 400, "invalid_request",
				   "network.secrets[%zu] must be {\"env\": NAME, \"hosts\": [HOST, ...]}", i);
			json_decref(ph);
			return false;
		}
		if (!json_object_get(cfg->secrets, name)) {
			cerr(ce, 403, "forbidden",
				   "network.secrets[%zu]: %s is not in the daemon's secret store", i, name);
			json_decref(ph);
			return false;
		}
		unsigned char r[16];
		char p[64] = "moat_secret_";
		if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r) {
			cerr(ce, 500, "internal", "no randomness for a placeholder");
			json_decref(ph);
			return false;
		}
		for (int b = 0; b < 16; b++)
			snprintf(p + 12 + 2 * b, 3, "%02x", r[b]);
		json_object_set_new(ph, name, json_string(p));
		json_object_set_new(env, name, json_string(p));
	}
	for (size_t k = 0; gate_proxy_env[k][0]; k++)
		json_object_set_new(env, gate_proxy_env[k][0], json_string(gate_proxy_env[k][1]));
	if (json_object_size(ph)) {
		/* written into the sandbox by the daemon once it runs */
		for (size_t k = 0; gate_bundle_env[k]; k++)
			json_object_set_new(env, gate_bundle_env[k], json_string("/tmp/.moat/bundle.pem"));
		json_object_set_new(env, "NODE_EXTRA_CA_CERTS", json_string("/tmp/.moat/ca.pem"));
	}
	*out = json_deep_copy(n);
	json_object_set_new(*out, "placeholders", ph);
	return true;
}

static void manifest_error(struct core_err *ce, const struct moat_err *e)
{
	int st = e->errnum == EACCES ? 403 : e->errnum == EFBIG ? 413 : 400;
	cerr(ce, st, st == 403 ? "forbidden" : st == 413 ? "too_large" : "invalid_request",
		   "%s", e->msg);
}
/* ---- sandboxes: create ------------------------------------------------------------ */

static void create_done(struct core_op *op, struct box *b, const struct moat_err *e);

static void on_box_created(void *arg, struct box *b, const struct moat_err *e)
{
	struct core_op *op = arg;
	op->spawning = NULL;
	create_done(op, b, e);
}

static void on_deferred(evutil_socket_t fd, short what, void *arg)
{
	struct core_op *op = arg;
	struct box *b = op->ready;
	op->ready = NULL;
	create_done(op, b, &op->ready_err);
}

/* Start the sandbox of a validated create body; entries (the manifest's)
 * are unpacked into it before the answer. The spec stays the caller's.
 * -1: refused at once (ce says why, op untouched, no callback). */
static int create_finish(struct core_op *op, struct box_spec *s, json_t *env, json_t *body,
			 const struct moat_buf *entries, struct core_err *ce)
{
	s->env = env;
	s->users = op->users;
	s->control = op->control;
	s->door = op->door;
	s->door_data = op->door_data;
	if (entries->len && !(op->entries.p = malloc(entries->len))) {
		cerr(ce, 500, "internal", "out of memory");
		return -1;
	}
	if (entries->len)
		memcpy(op->entries.p, entries->p, entries->len);
	op->entries.len = entries->len;
	struct timeval now = {0, 0};
	op->defer = event_new(cfg->base, -1, 0, on_deferred, op);
	if (!op->defer) {
		cerr(ce, 500, "internal", "out of memory");
		return -1;
	}
	s->metadata = json_object_get(body, "metadata");
	if (!s->metadata || json_is_null(s->metadata))
		s->metadata = json_object();
	else
		json_incref(s->metadata);
	/* the child sets itself up while the loop serves other requests */
	struct moat_err e = {0};
	struct box *pending = NULL;
	struct box *b = box_create_start(s, on_box_created, op, &pending, &e);
	json_decref(s->metadata);
	s->metadata = NULL;
	if (pending) {
		op->spawning = pending;
		return 0;
	}
	/* from the pool, or refused: answered from the loop (a door's
	 * callback never runs inside its call) */
	op->ready = b;
	op->ready_err = e;
	if (event_add(op->defer, &now) < 0) {
		op->ready = NULL;
		if (b)
			box_delete(b);
		cerr(ce, 500, "internal", "cannot schedule the answer");
		return -1;
	}
	return 0;
}

/* The sandbox of op runs (b), or could not be made (e): answer, or unpack
 * the manifest first. */
static void create_done(struct core_op *op, struct box *b, const struct moat_err *e)
{
	if (!b) {
		struct core_err ce;
		if (e->errnum == EAGAIN)
			cerr(&ce, 429, "limit_reached", "%s", e->msg);
		else
			cerr(&ce, 500, "internal", "cannot start the sandbox: %s", e->msg);
		op_fail(op, &ce);
		return;
	}
	metrics_created();
	op->b = b;
	if (!op->entries.len) {
		op->b = NULL;
		op->ccb(op->arg, b, NULL);
		op_free(op);
		return;
	}
	struct moat_buf ent = op->entries;
	op->entries = (struct moat_buf){0};
	if (send_op(op, json_pack("{s:s,s:s,s:b}", "op", "unpack", "path", WORKSPACE, "replace", 0),
		    ent.p, ent.len) < 0) {
		struct core_err ce;
		stopped_err(&ce, b);
		op_fail(op, &ce);
	}
	moat_buf_free(&ent);
}

static void create_reply(struct core_op *op, json_t *reply)
{
	(void)reply;
	struct box *b = op->b;
	op->b = NULL;
	op->ccb(op->arg, b, NULL);
	op_free(op);
}

/* In the job's child: the manifest's git_repo entries, collected while it
 * is validated and cloned once all of it is. */
static int collect_git(void *arg, const char *where, const char *rel, const char *repo,
		       const char *src, const char *ref, struct moat_err *e)
{
	json_t *o = json_pack("{s:s,s:s,s:s,s:s?,s:s?}", "where", where, "rel", rel, "repo", repo,
			      "src", src, "ref", ref);
	if (!o || json_array_append_new(arg, o) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "%s", where);
	return 0;
}
/* In the job's child: build the manifest and clone its repositories into
 * the seed directory; write {"ok","errnum","msg","env","repos"} (its
 * length first, 4 bytes) and then the entry stream. */
static int manifest_job(int fd, void *arg)
{
	struct cjob *cj = arg;
	struct moat_buf entries = {0};
	struct moat_err e = {0};
	json_t *gits = json_array(), *repos = json_array();
	manifest_set_git(collect_git, gits);
	int rc = manifest_build(json_object_get(cj->body, "manifest"), cfg->host_paths, &entries,
				cj->env, &e);
	/* the clone's sandbox gets what the sandbox will: its limits, else the
	 * operator's defaults, and every quota (nproc bounds its processes).
	 * As root, where cgroups are the daemon's to set, fixed bounds for a
	 * clone besides; unprivileged without delegation a cgroup limit
	 * would refuse every clone (docs/SECURITY.md). */
	bool root = geteuid() == 0;
	struct clone_ctx cc = {
		.network = cj->s.network,
		.ceiling = cfg->net_allow,
		.memory = cj->s.memory ?: cfg->default_memory ?: root ? CLONE_MEMORY : 0,
		.pids = cj->s.pids ?: cfg->default_pids ?: root ? CLONE_PIDS : 0,
		.cpu_milli = cj->s.cpu_milli ?: cfg->default_cpu_milli,
	};
	for (int q = 0; q < MOAT_QUOTAS; q++)
		cc.quotas[q] = cj->s.quota_set & (1u << q) ? cj->s.quotas[q] : cfg->quotas[q];
	size_t i;
	json_t *g;
	json_array_foreach(gits, i, g)
	{
		if (rc < 0)
			break;
		const char *rel = json_string_value(json_object_get(g, "rel"));
		rc = clone_run(&cc, cj->tmp, json_string_value(json_object_get(g, "where")), rel,
			       json_string_value(json_object_get(g, "repo")),
			       json_string_value(json_object_get(g, "src")),
			       json_string_value(json_object_get(g, "ref")), &e);
		json_array_append_new(repos, json_string(rel));
	}
	json_decref(gits);
	moat_utf8_clean(e.msg); /* quotes a client's path or URL, cut at a byte count */
	json_t *res = rc < 0 ? json_pack("{s:b,s:i,s:s}", "ok", 0, "errnum", e.errnum, "msg", e.msg)
			     : json_pack("{s:b,s:O,s:o}", "ok", 1, "env", cj->env, "repos", repos);
	if (rc < 0)
		json_decref(repos);
	char *js = res ? json_dumps(res, JSON_COMPACT) : NULL;
	uint32_t n = js ? (uint32_t)strlen(js) : 0;
	int w = js && moat_write_all(fd, &n, sizeof n) == 0 && moat_write_all(fd, js, n) == 0 &&
			(rc < 0 || moat_write_all(fd, entries.p, entries.len) == 0)
		    ? 0
		    : -1;
	return w;
}

static void on_manifest_job(void *arg, int status, const char *out, size_t len)
{
	struct core_op *op = arg;
	struct cjob *cj = op->cj;
	cj->job = NULL; /* ended: nothing left to cancel */
	uint32_t n = 0;
	json_t *res = NULL;
	if (status == 0 && len >= sizeof n) {
		memcpy(&n, out, sizeof n);
		if (n <= len - sizeof n)
			res = json_loadb(out + sizeof n, n, 0, NULL);
	}
	json_t *env = json_object_get(res, "env");
	struct core_err ce;
	if (!res || (json_is_true(json_object_get(res, "ok")) && !json_is_object(env))) {
		cerr(&ce, 500, "internal", "the manifest's job failed (status %d)", status);
		op_fail(op, &ce);
	} else if (!json_is_true(json_object_get(res, "ok"))) {
		struct moat_err e = {.errnum = (int)json_integer_value(json_object_get(res, "errnum"))};
		snprintf(e.msg, sizeof e.msg, "%s", json_string_value(json_object_get(res, "msg")) ?: "?");
		manifest_error(&ce, &e);
		op_fail(op, &ce);
	} else {
		struct moat_buf entries = {.p = (char *)out + sizeof n + n,
					   .len = len - sizeof n - n};
		/* the clones are in the seed: it becomes the workspace */
		cj->repos = json_incref(json_object_get(res, "repos"));
		cj->s.seed = cj->tmp;
		cj->s.repos = cj->repos;
		if (create_finish(op, &cj->s, env, cj->body, &entries, &ce) < 0)
			op_fail(op, &ce);
	}
	json_decref(res);
}

const char *core_template(const char *name)
{
	size_t n = strlen(name);
	for (size_t i = 0; cfg->templates && cfg->templates[i]; i++)
		if (!strncmp(cfg->templates[i], name, n) && cfg->templates[i][n] == '=')
			return cfg->templates[i] + n + 1;
	return NULL;
}

/* "image": "host", a template's name (--template), or a root filesystem
 * directory under an --allow-host-path directory. */
/* An image of the store: its id, and the defaults it gives (Env, User,
 * WorkingDir when it exists in one of its layers, Entrypoint, Cmd). */
static bool store_image(struct core_err *ce, const char *name, struct box_spec *s, int *found)
{
	struct images_resolved r;
	*found = images_resolve(name, &r, ce);
	if (*found <= 0)
		return *found == 0;
	json_t *c = r.config;
	json_t *ic = json_object();
	static const char *const keep[] = {"env", "user", "entrypoint", "cmd"};
	for (size_t i = 0; i < sizeof keep / sizeof keep[0]; i++) {
		json_t *v = json_object_get(c, keep[i]);
		if (v && !json_is_null(v))
			json_object_set(ic, keep[i], v);
	}
	const char *wd = json_string_value(json_object_get(c, "workdir"));
	for (size_t i = 0; wd && wd[0] == '/' && !strstr(wd, "..") && i < r.layers.n; i++) {
		char p[PATH_MAX + 4200];
		struct stat st;
		snprintf(p, sizeof p, "%s%s", r.layers.v[i], wd);
		if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode)) {
			json_object_set_new(ic, "workdir", json_string(wd));
			break;
		}
	}
	s->image = strdup(r.name);
	s->image_id = strdup(r.id);
	s->image_config = ic;
	images_resolved_free(&r);
	if (!s->image || !s->image_id) {
		cerr(ce, 500, "internal", "out of memory");
		return false;
	}
	return true;
}

static bool parse_image(struct core_err *ce, json_t *img, struct box_spec *s)
{
	char **out = &s->image;
	*out = NULL;
	if (!img || json_is_null(img) ||
	    (json_is_string(img) && !strcmp(json_string_value(img), "host")))
		return true;
	const char *ip = json_string_value(img);
	const char *tpl = ip && ip[0] != '/' ? core_template(ip) : NULL;
	if (tpl) {
		if (!(*out = strdup(tpl))) {
			cerr(ce, 500, "internal", "out of memory");
			return false;
		}
		return true;
	}
	if (ip && ip[0] != '/') {
		int found = 0;
		if (!store_image(ce, ip, s, &found))
			return false;
		if (found)
			return true;
	}
	if (!ip || ip[0] != '/') {
		cerr(ce, ip ? 404 : 400, ip ? "not_found" : "invalid_request",
		     "image must be \"host\", an image of the store (moat image ls), a template the "
		     "operator registered (--template) or the absolute path of a root filesystem "
		     "directory%s%.200s",
		     ip ? "; no image or template " : "", ip ? ip : "");
		return false;
	}
	char *real = realpath(ip, NULL);
	struct stat st;
	bool allowed = false;
	if (!real || stat(real, &st) < 0 || !S_ISDIR(st.st_mode)) {
		free(real);
		/* outside every allowed directory, a missing path or a file gets
		 * the answer of a directory there: the client (a model through
		 * the MCP door) must not learn what the host has */
		for (size_t i = 0; !strstr(ip, "/..") && cfg->host_paths && cfg->host_paths[i];
		     i++)
			allowed = allowed || moat_path_within(ip, cfg->host_paths[i]);
		if (allowed)
			cerr(ce, 400, "invalid_request", "image %.200s: not a directory", ip);
		else
			cerr(ce, 403, "forbidden",
			     "image %.200s is not under an --allow-host-path directory", ip);
		return false;
	}
	for (size_t i = 0; cfg->host_paths && cfg->host_paths[i] && !allowed; i++)
		allowed = moat_path_within(real, cfg->host_paths[i]);
	if (!allowed) {
		free(real);
		cerr(ce, 403, "forbidden", "image %.200s is not under an --allow-host-path directory",
		     ip);
		return false;
	}
	*out = real;
	return true;
}

/* A create from a snapshot: its sandbox's image (a root filesystem path
 * resolved then, or the host). */
static bool snap_image(struct core_err *ce, json_t *spec, struct box_spec *s)
{
	const char *img = json_string_value(json_object_get(spec, "image"));
	const char *iid = json_string_value(json_object_get(spec, "image_id"));
	char **out = &s->image;
	*out = NULL;
	if (iid) { /* an image of the store: the same layers, whatever tags do */
		int found = 0;
		if (!store_image(ce, iid, s, &found))
			return false;
		if (!found)
			cerr(ce, 409, "conflict", "the snapshot's image %.80s is no longer in the store",
			     iid);
		return found;
	}
	if (img && strcmp(img, "host") && !(*out = strdup(img))) {
		cerr(ce, 500, "internal", "out of memory");
		return false;
	}
	return true;
}

/* on_timeout: "delete" (the default) or "pause" (at timeout_s the sandbox
 * is paused, not deleted: E2B's autoPause); refused where pause is not. */
static bool parse_on_timeout(struct core_err *ce, json_t *v, struct box_spec *s)
{
	if (!v || json_is_null(v))
		return true;
	const char *t = json_string_value(v);
	if (!t || (strcmp(t, "delete") && strcmp(t, "pause"))) {
		cerr(ce, 400, "invalid_request", "on_timeout must be \"delete\" or \"pause\"");
		return false;
	}
	s->on_timeout_pause = !strcmp(t, "pause");
	const char *why = box_pause_unavailable();
	if (s->on_timeout_pause && why) {
		cerr(ce, 422, "pause_unavailable", "on_timeout \"pause\": %s", why);
		return false;
	}
	return true;
}

struct core_op *core_create(json_t *body, const struct core_create_opts *o, core_create_cb cb,
			    void *arg, struct core_err *ce)
{
	static const char *const keys[] = {"manifest", "image",	 "env",	     "limits",
					   "timeout_s", "idle_timeout_s", "metadata", "network",
					   "on_timeout", NULL};
	struct box_spec s = {.idle_timeout_s = 1200};
	char *snapfs = NULL;     /* "image": a snapshot: a clone of it, moved in */
	json_t *snapspec = NULL; /* and its sandbox's spec: the defaults */
	int from = 0;
	struct moat_buf entries = {0};
	json_t *env = NULL;
	struct core_op *op = NULL, *ret = NULL;
	if (!json_is_object(body)) {
		cerr(ce, 400, "invalid_request", "the body must be a JSON object");
		return NULL;
	}
	json_t *img = json_object_get(body, "image");
	if (!jf_only_keys(ce, body, "body", keys) ||
	    (json_is_string(img) &&
	     (from = snap_for_create(json_string_value(img), &snapfs, &snapspec, ce)) < 0) ||
	    (from ? !snap_image(ce, snapspec, &s) : !parse_image(ce, img, &s)) ||
	    !jf_string_map(ce, json_object_get(body, "env"), "env", true) ||
	    !jf_string_map(ce, json_object_get(body, "metadata"), "metadata", false) ||
	    !parse_limits(ce, json_object_get(body, "limits") ?: json_object_get(snapspec, "limits"),
			  &s) ||
	    !jf_int(ce, body, "timeout_s", 10LL * 365 * 86400, &s.timeout_s) ||
	    !jf_int(ce, body, "idle_timeout_s", 10LL * 365 * 86400, &s.idle_timeout_s) ||
	    !parse_on_timeout(ce, json_object_get(body, "on_timeout"), &s))
		goto out;
	/* a limit this daemon cannot enforce: refused before anything is made */
	s.degraded = cfg->degraded;
	if (!limits_check_create(ce, &s, cfg->allow_degraded))
		goto out;
	bool users = o && o->users;
	env = json_object();
	json_object_set_new(env, "PATH", json_string("/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"));
	json_object_set_new(env, "HOME", json_string(users ? "/home/user" : "/home/sandbox"));
	json_object_set_new(env, "LANG", json_string("C.UTF-8"));
	json_object_set_new(env, "TERM", json_string("xterm-256color"));
	json_object_set_new(env, "MOAT_SANDBOX", json_string("1"));
	json_t *ienv = json_object_get(s.image_config, "env");
	size_t ii;
	json_t *iv;
	json_array_foreach(ienv, ii, iv) { /* the image's Env, under the create's */
		const char *kv = json_string_value(iv), *eq = kv ? strchr(kv, '=') : NULL;
		if (eq && eq > kv) {
			char k[256];
			snprintf(k, sizeof k, "%.*s", (int)(eq - kv) < 255 ? (int)(eq - kv) : 255, kv);
			json_object_set_new(env, k, json_string(eq + 1));
		}
	}
	if (from) /* the snapshot's sandbox's environment, then the create's */
		json_object_update(env, json_object_get(snapspec, "env"));
	if (json_object_get(body, "env"))
		json_object_update(env, json_object_get(body, "env"));
	s.fs_from = snapfs;
	if (from && s.disk) {
		cerr(ce, 400, "invalid_request",
		     "limits.disk: a sandbox made from a snapshot keeps its workspace on disk");
		goto out;
	}
	if (!parse_network(ce, json_object_get(body, "network"), env, &s.network))
		goto out;
	json_t *m = json_object_get(body, "manifest");
	if (m && json_is_object(m)) {
		/* what a clone may fetch, refused before anything starts */
		struct moat_err e = {0};
		if (clone_check(m, s.network, cfg->net_ceiling, s.disk != 0, &e) < 0) {
			manifest_error(ce, &e);
			goto out;
		}
	}
	op = op_new(OP_CREATE, NULL, arg, ce);
	if (!op)
		goto out;
	op->ccb = cb;
	op->users = users;
	op->control = o && o->control;
	if (o && o->door) {
		op->door = strdup(o->door);
		op->door_data = o->door_data ? json_deep_copy(o->door_data) : json_object();
		if (!op->door || !op->door_data) {
			cerr(ce, 500, "internal", "out of memory");
			goto out;
		}
	}
	if (from && m && !json_is_null(m) && manifest_is_slow(m)) {
		cerr(ce, 400, "invalid_request",
		     "manifest: a git_repo entry cannot go into a sandbox made from a snapshot");
		goto out;
	}
	if (m && !json_is_null(m) && manifest_is_slow(m)) {
		/* a clone may take minutes: off the event loop, a few at a time,
		 * and not for a create that would be refused anyway */
		if (box_at_limit() || njobs >= MAX_MANIFEST_JOBS) {
			cerr(ce, 429, "limit_reached",
			     box_at_limit() ? "at the limit of sandboxes"
					    : "too many manifests being cloned at once (%d)",
			     MAX_MANIFEST_JOBS);
			goto out;
		}
		struct cjob *cj = calloc(1, sizeof *cj);
		if (!cj) {
			cerr(ce, 500, "internal", "out of memory");
			goto out;
		}
		op->cj = cj;
		njobs++;
		struct moat_err se = {0};
		if (clone_seed_dir(cj->tmp, sizeof cj->tmp, &se) < 0) {
			cerr(ce, 500, "internal", "%s", se.msg);
			goto out;
		}
		cj->s = s;
		cj->env = env;
		cj->body = json_incref(body);
		s.network = NULL;
		s.image = NULL;
		s.image_id = NULL;
		s.image_config = NULL;
		env = NULL;
		cj->job = job_start(cfg->base, manifest_job, cj, on_manifest_job, op);
		if (!cj->job) {
			cerr(ce, 500, "internal", "cannot start the manifest's job: %s",
			     strerror(errno));
			goto out;
		}
		ret = op;
		op = NULL;
		goto out;
	}
	if (m && !json_is_null(m)) {
		struct moat_err e = {0};
		if (manifest_build(m, cfg->host_paths, &entries, env, &e) < 0) {
			manifest_error(ce, &e);
			goto out;
		}
	}
	/* from here on the answer comes through cb */
	if (create_finish(op, &s, env, body, &entries, ce) == 0) {
		ret = op;
		op = NULL;
	}
out:
	op_free(op);
	snap_drop_fs(snapfs); /* moved in by the create, or of no use */
	free(snapfs);
	json_decref(snapspec);
	json_decref(s.network);
	free(s.image);
	free(s.image_id);
	json_decref(s.image_config);
	json_decref(env);
	moat_buf_free(&entries);
	return ret;
}

void core_delete(struct box *b)
{
	box_delete(b);
	metrics_deleted();
}

/* ---- replies ---------------------------------------------------------------------- */

static void on_reply(void *arg, json_t *reply, const char *data, size_t len)
{
	struct core_op *op = arg;
	if (!data) /* a reply without data: data + offset stays defined */
		data = "";
	struct core_err e = {0};
	if (!reply) {
		cerr(&e, 409, "conflict", "sandbox %s stopped", box_id(op->b));
		op_fail(op, &e);
		return;
	}
	json_t *err = json_object_get(reply, "error");
	if (err) {
		agent_err(&e, err);
		if (op->kind == OP_CREATE) {
			/* a manifest entry: a protected name is 403, as for an archive */
			bool fb = !strcmp(e.code, "forbidden");
			char msg[sizeof e.msg];
			snprintf(msg, sizeof msg, "%s", e.msg);
			cerr(&e, fb ? 403 : !strcmp(e.code, "too_large") ? 413 : 400,
			     fb ? "forbidden" : "invalid_request", "manifest: %s", msg);
		}
		op_fail(op, &e);
		return;
	}
	switch (op->kind) {
	case OP_EXEC:
		exec_reply(op, reply, data, len);
		return;
	case OP_SIMPLE:
		simple_reply(op, reply, data, len);
		return;
	case OP_WATCH:
		watch_reply(op, reply);
		return;
	case OP_CREATE:
		create_reply(op, reply);
		return;
	}
}
