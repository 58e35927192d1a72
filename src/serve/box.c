/* Sandboxes of the daemon: see box.h. */
#define _GNU_SOURCE
#include "box.h"
#include "images.h"

#include "store.h"
#include "../base/cleanup.h"
#include "../base/dnsd.h"
#include "../base/fdpass.h"
#include "../base/fsclone.h"
#include "../base/own.h"
#include "../base/util.h"
#include "../proto/frame.h"

#include "gate/gateway.h"
#include "gate/policy.h"

#include <moat/jail.h>
#include <moat/policy.h>

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <dirent.h>
#include <time.h>
#include <unistd.h>

#define SANDBOX_HOME "/home/sandbox"
#define USERS_HOME "/home/user"
#define WORKSPACE "/workspace"

struct call {
	json_int_t id;
	box_reply_cb cb;
	void *arg;
	struct call *next;
};

struct box {
	char id[24];
	char dir[64];        /* relative to the data dir: sandboxes/<id> */
	char fs[72];         /* <dir>/fs: its writable state (box_fs) */
	json_t *spec;        /* what the store keeps: env, metadata, image, limits, timeouts */
	int64_t created_at;  /* unix seconds */
	pid_t pid;
	uint64_t pid_start;
	struct moat_strv cgroups;
	int pidfd;
	struct event *pidev;
	bool child;          /* ours to reap (not after a restart) */
	bool running;
	struct bufferevent *bev;
	struct call *calls;
	json_int_t next_call;
	int64_t last_active; /* monotonic ms */
	bool idle_check;     /* a ping for idle reaping is out */
	bool deleted;        /* freed from the event loop, not from a callback */
	bool pooled;         /* pre-started, not handed out yet */
	struct gate_box *gbox; /* its egress gateway, if it has a network allowlist */
	FILE *netlog;        /* <dir>/net.log */
	struct moat_dnsd *dns; /* its resolver (no network, or the gateway's only) */
	struct event *dnsev;
	bool creating;       /* its row says "creating": the engine has not finished */
	bool paused;         /* frozen by its freezer (box_pause); its row says "paused" */
	bool gate_pending;   /* adopted while paused: its gateway is attached on resume */
	bool control_on;     /* control_ops->listen had its listener (closed is owed) */
	int64_t idle_used;   /* paused: how much of the idle timeout had run (ms) */
	struct spawning *sp; /* while being created off the event loop */
	bool respawning;     /* box_respawn: a failed spawn keeps the box */
	bool hibernated;     /* box_hibernate: stopped, fs/ kept, paused too; its row
			      * says "hibernated" until a respawn has finished */
};

/* A create in flight: what the engine needs until moat_jail_spawn_finish. */
struct spawning {
	struct moat_policy p;
	struct moat_strv env;
	char *argv[2];
	struct moat_launch l;
	int lfd;              /* the control socket's listener until the child has it */
	struct moat_jail *j;  /* started, not finished */
	bool detached;        /* pid 1 is ours (b->pid), the engine's no more */
	struct event *ev;     /* on the engine's error pipe */
	box_create_cb cb;
	void *cbarg;
	struct box *next;     /* in the list of creates in flight */
};

static struct event_base *evbase;
static struct box_config cfg;
static struct box **boxes;
static size_t nboxes, capboxes;
static struct event *reaper;
/* Pre-started sandboxes with the default settings: a create that asks for
 * nothing special takes one (no namespaces or mounts to build while the
 * client waits) and the pool is refilled a moment later. */
static struct box **pool;
static size_t npool;
static struct event *refill;
static struct box *spawns;      /* creates in flight */
static size_t nspawns, npool_spawns;
/* MOAT_TEST_CRASH_AT=<step>: SIGKILL ourselves at that step of a create
 * (tests/e2e/test_orphans.py; docs/ARCHITECTURE.md lists the steps). */
static const char *crash_at;
/* How fs/ directories are made (a btrfs subvolume, else a directory). */
static enum moat_fsclone fsclone = MOAT_FSCLONE_COPY;

void box_set_fsclone(int backend)
{
	fsclone = (enum moat_fsclone)backend;
}

static void crash_point(const char *step)
{
	if (crash_at && !strcmp(crash_at, step)) {
		fprintf(stderr, "moat serve: MOAT_TEST_CRASH_AT=%s: killing myself\n", step);
		raise(SIGKILL);
	}
}

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- registry ----------------------------------------------------------- */

static void reg_add(struct box *b)
{
	if (nboxes == capboxes) {
		size_t cap = capboxes ? capboxes * 2 : 64;
		struct box **nb = realloc(boxes, cap * sizeof *nb);
		if (!nb)
			abort();
		boxes = nb;
		capboxes = cap;
	}
	boxes[nboxes++] = b;
}

static void reg_del(struct box *b)
{
	for (size_t i = 0; i < nboxes; i++)
		if (boxes[i] == b) {
			boxes[i] = boxes[--nboxes];
			return;
		}
}

struct box *box_find(const char *id)
{
	for (size_t i = 0; i < nboxes; i++)
		if (!strcmp(boxes[i]->id, id))
			return boxes[i];
	return NULL;
}

void box_each(void (*fn)(struct box *b, void *arg), void *arg)
{
	for (size_t i = 0; i < nboxes; i++)
		fn(boxes[i], arg);
}

bool box_at_limit(void)
{
	return cfg.max_sandboxes && nboxes + (nspawns - npool_spawns) >= cfg.max_sandboxes;
}

size_t box_count(void)
{
	return nboxes;
}

const char *box_id(const struct box *b)
{
	return b->id;
}

const char *box_dir(const struct box *b)
{
	return b->dir;
}

bool box_paused(const struct box *b)
{
	return b->paused;
}

bool box_hibernated(const struct box *b)
{
	return b->hibernated;
}

const char *box_pause_unavailable(void)
{
	return cfg.freezer ? NULL : cfg.freezer_why ? cfg.freezer_why : "no freezer";
}

bool box_running(const struct box *b)
{
	/* not stopped: a hibernated one is paused to every door (its state
	 * is "paused", a resume starts it), though it has no process */
	return b->running || b->hibernated;
}

const char *box_fs(const struct box *b)
{
	return b->fs;
}

const json_t *box_spec_json(const struct box *b)
{
	return b->spec;
}

bool box_workspace_tmpfs(const struct box *b)
{
	return json_integer_value(json_object_get(json_object_get(b->spec, "limits"), "disk")) > 0;
}

const struct moat_strv *box_cgroups(const struct box *b)
{
	return &b->cgroups;
}

/* A sandbox's directory and everything in it, fs/ subvolume included. */
static int rm_box_dir(const char *dir)
{
	return moat_fsclone_remove(AT_FDCWD, dir);
}

const json_t *box_metadata(const struct box *b)
{
	return json_object_get(b->spec, "metadata");
}

const json_t *box_image_config(const struct box *b)
{
	return json_object_get(b->spec, "image_config");
}

void box_touch(struct box *b)
{
	b->last_active = now_ms();
}

json_t *box_json(const struct box *b)
{
	char when[32];
	time_t t = (time_t)b->created_at;
	struct tm tm;
	gmtime_r(&t, &tm);
	strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
	json_t *o = json_pack("{s:s,s:s,s:s,s:s}", "id", b->id, "state",
			      b->hibernated ? "paused" : !b->running ? "stopped"
			      : b->paused ? "paused" : "running",
			      "created_at", when, "workspace", WORKSPACE);
	if (b->paused) /* released: hibernated (no process, no memory) */
		json_object_set_new(o, "released", json_boolean(b->hibernated));
	const char *keys[] = {"image", "image_id", "image_config", "limits", "timeout_s",
			      "idle_timeout_s", "metadata", "network", "users", "degraded",
			      "on_timeout", "paused_at"};
	for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
		json_t *v = json_object_get(b->spec, keys[i]);
		if (v)
			json_object_set_new(o, keys[i], json_deep_copy(v));
	}
	json_object_del(json_object_get(o, "network"), "placeholders");
	return o;
}

static int save(struct box *b, struct moat_err *e);

const json_t *box_door(const struct box *b, const char *door)
{
	return json_object_get(json_object_get(b->spec, "door"), door);
}

int box_set_door(struct box *b, const char *door, json_t *data)
{
	json_t *d = json_object_get(b->spec, "door");
	if (!d) {
		d = json_object();
		if (!d || json_object_set_new(b->spec, "door", d) < 0)
			return -1;
	}
	struct moat_err e = {0};
	if (json_object_set(d, door, data) < 0 || save(b, &e) < 0)
		return -1;
	return 0;
}

int64_t box_created_at(const struct box *b)
{
	return b->created_at;
}

int64_t box_end_at(const struct box *b)
{
	int64_t end = json_integer_value(json_object_get(b->spec, "end_at"));
	int64_t life = json_integer_value(json_object_get(b->spec, "timeout_s"));
	return end > 0 ? end : life > 0 ? b->created_at + life : 0;
}

int box_set_end(struct box *b, int64_t end_unix)
{
	struct moat_err e = {0};
	if (json_object_set_new(b->spec, "end_at", json_integer(end_unix)) < 0 || save(b, &e) < 0)
		return -1;
	return 0;
}

/* ---- the control plane's listener ------------------------------------------ */

static const struct box_control_ops *control_ops;

void box_set_control_ops(const struct box_control_ops *ops)
{
	control_ops = ops;
}

bool box_control(const struct box *b)
{
	return json_is_true(json_object_get(b->spec, "control"));
}

/* The control plane takes the listener (or it is closed: nobody to serve it). */
static void control_listen(struct box *b, int fd)
{
	if (!control_ops || !control_ops->listen) {
		close(fd);
		return;
	}
	if (b->control_on && control_ops->closed)
		control_ops->closed(b);
	b->control_on = true;
	control_ops->listen(b, fd);
}

/* The sandbox stops or goes: its control door stops accepting. */
static void control_close(struct box *b)
{
	if (b->control_on && control_ops && control_ops->closed)
		control_ops->closed(b);
	b->control_on = false;
}

bool box_users(const struct box *b)
{
	return json_is_true(json_object_get(b->spec, "users"));
}

void box_limits(const struct box *b, uint64_t *memory, uint64_t *disk, uint64_t *cpu_milli)
{
	json_t *l = json_object_get(b->spec, "limits");
	*memory = (uint64_t)json_integer_value(json_object_get(l, "memory"));
	*disk = (uint64_t)json_integer_value(json_object_get(l, "disk"));
	json_t *c = json_object_get(l, "cpus");
	*cpu_milli = c ? (uint64_t)(json_number_value(c) * 1000 + 0.5) : 0;
	if (!*memory)
		*memory = cfg.default_memory;
	if (!*cpu_milli)
		*cpu_milli = cfg.default_cpu_milli;
}

/* One number from a cgroup file (v1 or v2), or -1. */
static int64_t cg_read(const char *dir, const char *file, const char *key)
{
	char path[PATH_MAX], line[256];
	snprintf(path, sizeof path, "%s/%s", dir, file);
	FILE *f = fopen(path, "re");
	if (!f)
		return -1;
	int64_t v = -1;
	size_t kl = key ? strlen(key) : 0;
	while (fgets(line, sizeof line, f)) {
		if (key && (strncmp(line, key, kl) || line[kl] != ' '))
			continue;
		v = strtoll(line + (key ? kl + 1 : 0), NULL, 10);
		break;
	}
	fclose(f);
	return v;
}

void box_usage(const struct box *b, int64_t *cpu_usec, int64_t *mem_bytes)
{
	*cpu_usec = *mem_bytes = -1;
	for (size_t i = 0; i < b->cgroups.n; i++) {
		const char *d = b->cgroups.v[i];
		int64_t v;
		if (*cpu_usec < 0 && (v = cg_read(d, "cpu.stat", "usage_usec")) >= 0)
			*cpu_usec = v;
		if (*cpu_usec < 0 && (v = cg_read(d, "cpuacct.usage", NULL)) >= 0)
			*cpu_usec = v / 1000; /* v1: nanoseconds */
		if (*mem_bytes < 0 && (v = cg_read(d, "memory.current", NULL)) >= 0)
			*mem_bytes = v;
		if (*mem_bytes < 0 && (v = cg_read(d, "memory.usage_in_bytes", NULL)) >= 0)
			*mem_bytes = v;
	}
}

json_t *box_env(const struct box *b, json_t *extra)
{
	json_t *env = json_deep_copy(json_object_get(b->spec, "env"));
	if (!env)
		env = json_object();
	if (extra)
		json_object_update(env, extra);
	json_t *a = json_array();
	const char *k;
	json_t *v;
	json_object_foreach(env, k, v)
	{
		char *s = moat_strdupf("%s=%s", k, json_string_value(v));
		json_array_append_new(a, json_string(s));
		free(s);
	}
	json_decref(env);
	return a;
}

/* ---- the agent channel -------------------------------------------------- */

static void fail_calls(struct box *b)
{
	struct call *c = b->calls;
	b->calls = NULL;
	while (c) {
		struct call *next = c->next;
		if (c->cb)
			c->cb(c->arg, NULL, NULL, 0);
		free(c);
		c = next;
	}
}

static void drop_conn(struct box *b)
{
	if (b->bev) {
		bufferevent_free(b->bev);
		b->bev = NULL;
	}
	fail_calls(b);
}

static void on_read(struct bufferevent *bev, void *arg)
{
	struct box *b = arg;
	struct evbuffer *in = bufferevent_get_input(bev);
	for (;;) {
		unsigned char h[MOAT_FRAME_HDR];
		struct moat_frame f;
		ev_ssize_t got = evbuffer_copyout(in, h, sizeof h);
		if (moat_frame_next(h, got > 0 ? (size_t)got : 0, &f) < 0) {
			drop_conn(b); /* the agent is not to be trusted: no resync */
			return;
		}
		if (evbuffer_get_length(in) < f.size)
			return;
		/* the whole frame, copied out: a callback may free the buffer */
		char *fr = malloc(f.size);
		if (!fr) {
			drop_conn(b);
			return;
		}
		if (evbuffer_remove(in, fr, f.size) != (ev_ssize_t)f.size ||
		    moat_frame_next(fr, f.size, &f) != 1) {
			free(fr);
			drop_conn(b);
			return;
		}
		struct call **pp = &b->calls, *c = NULL;
		for (; *pp; pp = &(*pp)->next)
			if ((*pp)->id == f.id) {
				c = *pp;
				*pp = c->next;
				break;
			}
		if (c && c->cb && f.msg)
			c->cb(c->arg, f.msg, f.data_len ? f.data : NULL, f.data_len);
		else if (c && c->cb)
			c->cb(c->arg, NULL, NULL, 0);
		free(c);
		free(fr);
		json_decref(f.msg);
		if (b->bev != bev) /* a callback deleted the sandbox or the link */
			return;
	}
}

static void on_event(struct bufferevent *bev, short what, void *arg)
{
	struct box *b = arg;
	if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR))
		drop_conn(b);
}

static int connect_agent(struct box *b)
{
	if (b->bev)
		return 0;
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	snprintf(sa.sun_path, sizeof sa.sun_path, "%s/ctl.sock", b->dir);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -1;
	if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
		close(fd);
		return -1;
	}
	b->bev = bufferevent_socket_new(evbase, fd, BEV_OPT_CLOSE_ON_FREE);
	if (!b->bev) {
		close(fd);
		return -1;
	}
	bufferevent_setcb(b->bev, on_read, NULL, on_event, b);
	bufferevent_enable(b->bev, EV_READ | EV_WRITE);
	return 0;
}

int box_call(struct box *b, json_t *req, const void *data, size_t len, box_reply_cb cb,
	     void *arg)
{
	if (!b->running || connect_agent(b) < 0)
		return -1;
	struct call *c = malloc(sizeof *c);
	if (!c)
		return -1;
	c->id = ++b->next_call;
	json_object_set_new(req, "id", json_integer(c->id));
	char *js = json_dumps(req, JSON_COMPACT);
	size_t jl = js ? strlen(js) : 0;
	if (!js || jl > MOAT_FRAME_JSON_MAX || len > MOAT_FRAME_DATA_MAX) {
		free(js);
		free(c);
		return -1;
	}
	unsigned char h[MOAT_FRAME_HDR];
	moat_frame_hdr(h, (uint32_t)jl, (uint32_t)len);
	struct evbuffer *out = bufferevent_get_output(b->bev);
	int rc = evbuffer_add(out, h, sizeof h) | evbuffer_add(out, js, jl) |
		 (len ? evbuffer_add(out, data, len) : 0);
	free(js);
	if (rc) {
		free(c);
		return -1;
	}
	c->cb = cb;
	c->arg = arg;
	c->next = b->calls;
	b->calls = c;
	return 0;
}

static void ignore_reply(void *arg, json_t *reply, const char *data, size_t len)
{
}

void box_cancel(struct box *b, void *arg)
{
	/* the call stays, so that its late reply is matched and dropped */
	for (struct call *c = b->calls; c; c = c->next)
		if (c->arg == arg) {
			c->cb = ignore_reply;
			c->arg = NULL;
		}
}

static void cancel_calls(struct box *b, void *arg, bool keep)
{
	json_int_t ids[16];
	size_t n = 0;
	for (struct call *c = b->calls; c; c = c->next)
		if (c->arg == arg && n < 16)
			ids[n++] = c->id;
	box_cancel(b, arg);
	for (size_t i = 0; i < n; i++) {
		json_t *op = json_pack("{s:s,s:I,s:b}", "op", "cancel", "call", ids[i], "keep", keep);
		box_call(b, op, NULL, 0, NULL, NULL);
		json_decref(op);
	}
}

void box_detach(struct box *b, void *arg)
{
	cancel_calls(b, arg, true);
}

void box_abort(struct box *b, void *arg)
{
	cancel_calls(b, arg, false);
}


/* ---- pid 1 -------------------------------------------------------------- */

static uint64_t start_time(pid_t pid)
{
	char path[64], buf[1024];
	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	char *p = strrchr(buf, ')'); /* the name may hold spaces and parens */
	if (!p)
		return 0;
	/* field 3 starts after ") "; start time is field 22 */
	int field = 2;
	for (; *p && field < 22; p++)
		if (*p == ' ')
			field++;
	return strtoull(p, NULL, 10);
}

static void mark_stopped(struct box *b)
{
	if (!b->running)
		return;
	b->running = false;
	b->paused = false;
	if (b->child) {
		while (waitpid(b->pid, NULL, WNOHANG) < 0 && errno == EINTR)
			;
		b->child = false;
	}
	if (b->pidev) {
		event_free(b->pidev);
		b->pidev = NULL;
	}
	store_set_state(b->id, "stopped");
	drop_conn(b);
}

static void on_pid_exit(evutil_socket_t fd, short what, void *arg)
{
	mark_stopped(arg);
}

static int watch_pid(struct box *b)
{
	b->pidfd = (int)syscall(SYS_pidfd_open, b->pid, 0);
	if (b->pidfd < 0)
		return -1;
	b->pidev = event_new(evbase, b->pidfd, EV_READ, on_pid_exit, b);
	if (!b->pidev || event_add(b->pidev, NULL) < 0)
		return -1;
	return 0;
}

/* ---- files -------------------------------------------------------------- */

/* ---- lifecycle ---------------------------------------------------------- */

static void box_free(struct box *b)
{
	if (b->dnsev)
		event_free(b->dnsev);
	moat_dnsd_free(b->dns);
	gate_box_free(b->gbox);
	if (b->netlog)
		fclose(b->netlog);
	drop_conn(b);
	if (b->pidev)
		event_free(b->pidev);
	if (b->pidfd >= 0)
		close(b->pidfd);
	json_decref(b->spec);
	moat_strv_free(&b->cgroups);
	free(b);
}

static void random_id(char *out, size_t len)
{
	static const char al[] = "abcdefghijklmnopqrstuvwxyz0123456789";
	unsigned char r[32];
	if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r)
		abort(); /* no entropy: nothing sensible to do */
	/* first character a letter: valid as a DNS label and a hostname */
	out[0] = al[r[0] % 26];
	for (size_t i = 1; i < len; i++)
		out[i] = al[r[i] % 36];
	out[len] = '\0';
}

_Static_assert(MOAT_QUOTAS <= 32, "box_spec.quota_set has a bit per quota");

/* The ceilings a sandbox gets: what it asked for, else the operator's. */
static int64_t quota_of(const struct box_spec *s, int i)
{
	return s->quota_set & (1u << i) ? s->quotas[i] : cfg.quotas[i];
}

static json_t *spec_json(const struct box_spec *s)
{
	json_t *lim = json_object();
	json_t *q = json_object();
	for (int i = 0; i < MOAT_QUOTAS; i++)
		json_object_set_new(q, moat_quota_info[i].name, json_integer(quota_of(s, i)));
	json_object_set_new(lim, "quotas", q);
	if (s->memory)
		json_object_set_new(lim, "memory", json_integer((json_int_t)s->memory));
	if (s->pids)
		json_object_set_new(lim, "pids", json_integer((json_int_t)s->pids));
	if (s->cpu_milli)
		json_object_set_new(lim, "cpus", json_real((double)s->cpu_milli / 1000));
	if (s->disk)
		json_object_set_new(lim, "disk", json_integer((json_int_t)s->disk));
	json_t *o = json_pack("{s:O,s:O,s:s,s:o,s:I,s:I}", "env", s->env, "metadata", s->metadata,
			      "image", s->image ? s->image : "host", "limits", lim, "timeout_s",
			      (json_int_t)s->timeout_s, "idle_timeout_s", (json_int_t)s->idle_timeout_s);
	if (s->network)
		json_object_set(o, "network", s->network);
	if (s->image_id) /* a restart or respawn uses these layers, whatever tags do */
		json_object_set_new(o, "image_id", json_string(s->image_id));
	if (s->image_config)
		json_object_set(o, "image_config", s->image_config);
	if (s->users)
		json_object_set_new(o, "users", json_true());
	if (s->degraded) { /* the limits not enforced (serve --allow-degraded) */
		static const char *const names[] = {"limits.memory", "limits.pids", "limits.cpus"};
		json_t *d = json_array();
		for (unsigned i = 0; i < 3; i++)
			if (s->degraded & (1u << i))
				json_array_append_new(d, json_string(names[i]));
		json_object_set_new(o, "degraded", d);
	}
	if (s->door && s->door_data)
		json_object_set_new(o, "door", json_pack("{s:O}", s->door, s->door_data));
	if (s->repos) /* protected again by a respawn */
		json_object_set(o, "repos", s->repos);
	if (s->on_timeout_pause) /* paused rather than deleted at its end */
		json_object_set_new(o, "on_timeout", json_string("pause"));
	if (s->control) /* a session's: its listener again after a respawn */
		json_object_set_new(o, "control", json_true());
	return o;
}

/* The spec a stored record describes (box_respawn); borrows from j. */
void box_spec_from_json(const json_t *j, struct box_spec *s)
{
	*s = (struct box_spec){0};
	json_t *lim = json_object_get(j, "limits");
	s->env = json_object_get(j, "env");
	s->metadata = json_object_get(j, "metadata");
	const char *img = json_string_value(json_object_get(j, "image"));
	s->image = img && strcmp(img, "host") ? (char *)img : NULL;
	/* an image of the store: the recorded layers, whatever tags do now */
	s->image_id = (char *)json_string_value(json_object_get(j, "image_id"));
	s->image_config = json_object_get(j, "image_config");
	s->memory = (uint64_t)json_integer_value(json_object_get(lim, "memory"));
	s->pids = (uint64_t)json_integer_value(json_object_get(lim, "pids"));
	json_t *c = json_object_get(lim, "cpus");
	s->cpu_milli = c ? (uint64_t)(json_number_value(c) * 1000 + 0.5) : 0;
	s->disk = (uint64_t)json_integer_value(json_object_get(lim, "disk"));
	json_t *q = json_object_get(lim, "quotas");
	for (int i = 0; i < MOAT_QUOTAS; i++) {
		json_t *v = json_object_get(q, moat_quota_info[i].name);
		if (v) {
			s->quota_set |= 1u << i;
			s->quotas[i] = json_integer_value(v);
		}
	}
	s->timeout_s = json_integer_value(json_object_get(j, "timeout_s"));
	s->idle_timeout_s = json_integer_value(json_object_get(j, "idle_timeout_s"));
	s->network = json_object_get(j, "network");
	s->users = json_is_true(json_object_get(j, "users"));
	s->repos = json_object_get(j, "repos");
	s->control = json_is_true(json_object_get(j, "control"));
}

/* ---- users mode's host id slots ------------------------------------------
 * A sandbox with users owns host ids MOAT_USERS_BAND + slot * 65536 ...
 * (src/jail/users.c); its spec records "idbase", so that a restarted
 * daemon, which adopts the sandboxes still alive, never hands a live
 * range out again. moat serve takes the lower half of the slots. */
static bool slot_used_by(const struct box *b, json_int_t base)
{
	json_t *v = b && b->spec ? json_object_get(b->spec, "idbase") : NULL;
	return v && json_integer_value(v) == base;
}

static int users_slot(void)
{
	for (int s = 0; s < MOAT_USERS_SLOTS / 2; s++) {
		json_int_t base = (json_int_t)MOAT_USERS_BAND + (json_int_t)s * 65536;
		bool used = false;
		for (size_t i = 0; i < nboxes && !used; i++)
			used = slot_used_by(boxes[i], base);
		for (size_t i = 0; i < npool && !used; i++)
			used = slot_used_by(pool[i], base);
		for (struct box *b = spawns; b && !used; b = b->sp->next)
			used = slot_used_by(b, base);
		if (!used)
			return s;
	}
	return -1;
}


/* ---- the egress gateway of a sandbox ------------------------------------- */

static void strings_into(json_t *a, struct moat_strv *out)
{
	size_t i;
	json_t *v;
	json_array_foreach(a, i, v) moat_strv_add(out, json_string_value(v));
}

/* The policy's network keys from the spec (the engine opens the gateway's
 * listeners when there is an allowlist or a secret). */
static void network_policy(json_t *net, struct moat_policy *p)
{
	if (!net)
		return;
	strings_into(json_object_get(net, "allow"), &p->net_allow);
	strings_into(json_object_get(net, "deny"), &p->net_deny);
	strings_into(json_object_get(net, "resolve"), &p->net_resolve);
	size_t i;
	json_t *s;
	json_array_foreach(json_object_get(net, "secrets"), i, s)
		moat_strv_take(&p->net_secrets, moat_strdupf("%s@x", json_string_value(json_object_get(s, "env"))));
}

static void on_ca_written(void *arg, json_t *reply, const char *data, size_t len)
{
	if (reply && json_object_get(reply, "error"))
		fprintf(stderr, "moat serve: %s: cannot place the gateway CA: %s\n", (char *)arg,
			json_string_value(json_object_get(json_object_get(reply, "error"), "message")));
	free(arg);
}

/* Serve the sandbox's listeners: its policy under the operator's
 * ceiling, its secrets from the store, its CA placed inside. */
static int attach_gate(struct box *b, int fds[2], struct moat_err *e)
{
	json_t *net = json_object_get(b->spec, "network");
	struct gate_policy *pol = calloc(1, sizeof *pol);
	if (!pol) {
		close(fds[0]);
		close(fds[1]);
		return moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "gateway");
	}
	gate_policy_init(pol);
	for (int k = 0; k < GATE_LISTS; k++) {
		size_t i;
		json_t *v;
		json_array_foreach(json_object_get(net, gate_list_keys[k]), i, v)
		{
			if (gate_policy_add(pol, (enum gate_list)k, json_string_value(v), e) < 0) {
				gate_policy_free(pol);
				free(pol);
				close(fds[0]);
				close(fds[1]);
				return -1;
			}
		}
	}
	char logpath[96];
	snprintf(logpath, sizeof logpath, "%s/net.log", b->dir);
	if (!b->netlog) {
		/* the sandbox's traffic, for the daemon's user alone */
		int lf = moat_own_file(AT_FDCWD, logpath, O_WRONLY | O_APPEND | O_CREAT, 0600, e);
		if (lf >= 0 && !(b->netlog = fdopen(lf, "a")))
			close(lf);
	}
	b->gbox = gate_box_new(cfg.gate, b->id, pol, NULL, b->netlog, e);
	if (!b->gbox) {
		gate_policy_free(pol);
		free(pol);
		close(fds[0]);
		close(fds[1]);
		return -1;
	}
	gate_box_set_ceiling(b->gbox, cfg.net_ceiling);
	if (gate_box_listen(b->gbox, fds[0], fds[1], e) < 0)
		return -1;
	json_t *ph = json_object_get(net, "placeholders");
	size_t i;
	json_t *s;
	json_array_foreach(json_object_get(net, "secrets"), i, s)
	{
		const char *name = json_string_value(json_object_get(s, "env"));
		const char *value = json_string_value(json_object_get(cfg.secrets, name));
		const char *placeholder = json_string_value(json_object_get(ph, name));
		size_t n = json_array_size(json_object_get(s, "hosts"));
		char **hosts = calloc(n + 1, sizeof *hosts);
		for (size_t k = 0; hosts && k < n; k++)
			hosts[k] = (char *)json_string_value(json_array_get(json_object_get(s, "hosts"), k));
		int rc = value && placeholder && hosts
				 ? gate_box_secret(b->gbox, placeholder, value, hosts, e)
				 : moat_err_set(e, MOAT_E_USAGE, 0, "secret %s is not in the store",
						name ? name : "?");
		free(hosts);
		if (rc < 0)
			return -1;
	}
	/* the CA goes into the sandbox, alone and with the system's */
	const char *ca = gate_box_ca_pem(b->gbox);
	if (ca) {
		FILE *f = fopen("/etc/ssl/certs/ca-certificates.crt", "re");
		char *sys = NULL;
		size_t syslen = 0;
		if (f) {
			FILE *m = open_memstream(&sys, &syslen);
			char buf[65536];
			size_t got;
			while (m && (got = fread(buf, 1, sizeof buf, f)) > 0)
				fwrite(buf, 1, got, m);
			if (m)
				fclose(m);
			fclose(f);
		}
		size_t cl = strlen(ca);
		char *bundle = malloc(syslen + cl + 1);
		if (bundle) {
			if (syslen)
				memcpy(bundle, sys, syslen);
			memcpy(bundle + syslen, ca, cl);
		}
		json_t *w1 = json_pack("{s:s,s:s}", "op", "write", "path", "/tmp/.moat/ca.pem");
		json_t *w2 = json_pack("{s:s,s:s}", "op", "write", "path", "/tmp/.moat/bundle.pem");
		box_call(b, w1, ca, cl, on_ca_written, strdup(b->id));
		if (bundle)
			box_call(b, w2, bundle, syslen + cl, on_ca_written, strdup(b->id));
		json_decref(w1);
		json_decref(w2);
		free(bundle);
		free(sys);
	}
	return 0;
}

/* The sandbox's resolver (src/base/dnsd.h) on the event loop: each name
 * refused goes to the net log once (the first MOAT_DNSD_NAMES of them). */
static void dns_logged(void *arg, const char *name)
{
	struct box *b = arg;
	if (!b->netlog)
		return;
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	struct tm tm;
	gmtime_r(&ts.tv_sec, &tm);
	char when[48];
	strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(when + strlen(when), sizeof when - strlen(when), ".%03ldZ",
		 ts.tv_nsec / 1000000);
	const char *why = b->gbox ? "direct lookups are refused: programs reach allowed "
				    "hosts through the gateway's proxy (HTTPS_PROXY)"
				  : "no network: lookups are refused (allow the name in "
				    "the sandbox's network.allow)";
	json_t *o = json_pack("{s:s,s:s,s:s,s:s,s:i,s:n,s:s,s:s,s:i,s:i}", "time", when,
			      "sandbox", b->id, "proto", "dns", "host", name, "port", 53,
			      "address", "decision", "deny", "reason", why, "bytes_up", 0,
			      "bytes_down", 0);
	char *line = o ? json_dumps(o, JSON_COMPACT) : NULL;
	if (line) {
		fprintf(b->netlog, "%s\n", line);
		fflush(b->netlog);
	}
	free(line);
	json_decref(o);
}

static void on_dns(evutil_socket_t fd, short what, void *arg)
{
	struct box *b = arg;
	moat_dnsd_serve(b->dns);
}

static int attach_dns(struct box *b, int fds[2], struct moat_err *e)
{
	if (!b->netlog) {
		char logpath[96];
		snprintf(logpath, sizeof logpath, "%s/net.log", b->dir);
		int lf = moat_own_file(AT_FDCWD, logpath, O_WRONLY | O_APPEND | O_CREAT, 0600, e);
		if (lf >= 0 && !(b->netlog = fdopen(lf, "a")))
			close(lf);
		if (!b->netlog) {
			close(fds[0]);
			close(fds[1]);
			return -1;
		}
	}
	b->dns = moat_dnsd_new(fds[0], fds[1], dns_logged, b);
	if (!b->dns)
		return moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "the sandbox's resolver");
	b->dnsev = event_new(evbase, moat_dnsd_fd(b->dns), EV_READ | EV_PERSIST, on_dns, b);
	if (!b->dnsev || event_add(b->dnsev, NULL) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "the sandbox's resolver");
	return 0;
}

/* After a restart: the agent keeps the listeners; ask it for them on a
 * connection of our own (the descriptors travel as SCM_RIGHTS): the
 * gateway's two (gate[]) and the control listener (*control), each -1
 * when the sandbox has none. -1 when nothing came. */
static int fetch_netfds(struct box *b, int gate[2], int *control)
{
	gate[0] = gate[1] = *control = -1;
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	snprintf(sa.sun_path, sizeof sa.sun_path, "%s/ctl.sock", b->dir);
	int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (s < 0)
		return -1;
	struct timeval tv = {2, 0};
	setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	static const char req[] = "{\"op\":\"netfds\",\"id\":1}";
	unsigned char h[MOAT_FRAME_HDR];
	moat_frame_hdr(h, sizeof req - 1, 0);
	char buf[512];
	int fds[3] = {-1, -1, -1};
	size_t nfds = 0;
	ssize_t n = -1;
	if (connect(s, (struct sockaddr *)&sa, sizeof sa) == 0 &&
	    send(s, h, sizeof h, MSG_NOSIGNAL) == sizeof h &&
	    send(s, req, sizeof req - 1, MSG_NOSIGNAL) == (ssize_t)(sizeof req - 1))
		n = moat_recv_some_fds(s, buf, sizeof buf, fds, 3, &nfds);
	close(s);
	if (n <= (ssize_t)MOAT_FRAME_HDR || fds[0] < 0) {
		for (int i = 0; i < 3; i++)
			if (fds[i] >= 0)
				close(fds[i]);
		return -1;
	}
	/* which ones came: the reply's flags (an agent older than the control
	 * listener sends the gateway's two and no flags) */
	json_t *r = json_loadb(buf + MOAT_FRAME_HDR, (size_t)n - MOAT_FRAME_HDR, 0, NULL);
	bool has_gate = !json_object_get(r, "gate") || json_is_true(json_object_get(r, "gate"));
	bool has_control = json_is_true(json_object_get(r, "control"));
	json_decref(r);
	int k = 0;
	if (has_gate && nfds >= 2) {
		gate[0] = fds[k++];
		gate[1] = fds[k++];
	}
	if (has_control && (size_t)k < nfds)
		*control = fds[k++];
	for (; k < 3; k++)
		if (fds[k] >= 0)
			close(fds[k]);
	return gate[0] >= 0 || *control >= 0 ? 0 : -1;
}

/* After a restart or a thaw: the gateway and the control listener back
 * from the agent. */
static void restore_listeners(struct box *b)
{
	bool want_gate = json_object_get(b->spec, "network") != NULL;
	bool want_control = box_control(b);
	if (!want_gate && !want_control)
		return;
	int gate[2], control;
	struct moat_err e = {0};
	if (fetch_netfds(b, gate, &control) < 0) {
		fprintf(stderr, "moat serve: %s: its listeners could not be restored from its agent\n",
			b->id);
		return;
	}
	if (gate[0] >= 0 && !want_gate) {
		close(gate[0]);
		close(gate[1]);
	} else if (gate[0] >= 0 && attach_gate(b, gate, &e) < 0) {
		fprintf(stderr, "moat serve: %s: its egress gateway could not be restored: %s\n",
			b->id, e.msg);
	}
	if (control >= 0 && want_control)
		control_listen(b, control);
	else if (control >= 0)
		close(control);
	else if (want_control)
		fprintf(stderr, "moat serve: %s: its control listener could not be restored\n",
			b->id);
}

static int save(struct box *b, struct moat_err *e)
{
	_cleanup_free_ char *spec = json_dumps(b->spec, JSON_COMPACT);
	json_t *cg = json_array();
	for (size_t i = 0; i < b->cgroups.n; i++)
		json_array_append_new(cg, json_string(b->cgroups.v[i]));
	_cleanup_free_ char *cgs = json_dumps(cg, JSON_COMPACT);
	json_decref(cg);
	struct store_row r = {.id = b->id, .created_at = b->created_at, .spec = spec,
			      .pid = b->pid, .pid_start = b->pid_start, .cgroups = cgs,
			      /* hibernated until a respawn has finished: a
			       * restart finds it whole or stops what started */
			      .state = b->hibernated ? "hibernated"
				       : b->creating ? (b->pooled ? "creating-pool" : "creating")
				       : !b->running ? "stopped" : b->pooled ? "pooled"
				       : b->paused ? "paused" : "running"};
	return store_put(&r, e);
}

static int listen_socket(const char *dir, struct moat_err *e)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	snprintf(sa.sun_path, sizeof sa.sun_path, "%s/ctl.sock", dir);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "socket");
	/* the daemon alone connects: 0600, set on the socket before bind
	 * (Linux gives the file the socket's mode), not by name afterwards */
	if (fchmod(fd, 0600) < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0 ||
	    listen(fd, 64) < 0) {
		moat_err_set(e, MOAT_E_SYSTEM, errno, "control socket %s", sa.sun_path);
		close(fd);
		return -1;
	}
	return fd;
}

/* The manifest's clones, in the workspace before the start: protected as
 * nested repositories however deep they lie (src/jail/protect.c). */
static void seed_repos(const struct box_spec *spec, struct moat_policy *p)
{
	size_t i;
	json_t *v;
	json_array_foreach(spec->repos, i, v) if (json_is_string(v))
		moat_strv_take(&p->protect_repos,
			       moat_strdupf("%s/%s", p->workspace, json_string_value(v)));
}

/* ---- creating a sandbox, off the event loop -------------------------------
 * spawn_start: directory, policy, control socket, the engine's start. The
 * row "creating" (pid 1's pid and start time, its cgroups; the directory
 * is named by the id) is written before the child may run, so a daemon
 * that dies from then on leaves a record that the next one sweeps
 * (restore_one). The loop then waits on the engine's error pipe, and
 * spawn_end completes: agent connected, gateway attached, row "running". */

static void spawning_unlink(struct box *b)
{
	for (struct box **pp = &spawns; *pp; pp = &(*pp)->sp->next)
		if (*pp == b) {
			*pp = b->sp->next;
			nspawns--;
			if (b->pooled)
				npool_spawns--;
			return;
		}
}

/* Undo a create at any step: nothing of it stays (process, cgroups,
 * directory, row). */
static void spawn_abandon(struct box *b)
{
	struct spawning *sp = b->sp;
	if (sp) {
		if (sp->ev)
			event_free(sp->ev);
		if (!sp->detached) {
			moat_jail_destroy(sp->j); /* kills, reaps, removes its cgroups */
			b->pid = -1;
			moat_strv_free(&b->cgroups);
		}
		if (sp->lfd >= 0)
			close(sp->lfd);
		moat_strv_free(&sp->env);
		moat_policy_free(&sp->p);
		free(sp);
		b->sp = NULL;
	}
	if (b->pid > 0) {
		if (b->pidfd >= 0)
			syscall(SYS_pidfd_send_signal, b->pidfd, SIGKILL, NULL, 0);
		else
			kill(b->pid, SIGKILL); /* our unreaped child: cannot be recycled */
		if (b->child)
			waitpid(b->pid, NULL, 0);
		moat_cgroup_remove(&b->cgroups);
	}
	if (!b->respawning) {
		rm_box_dir(b->dir);
		store_del(b->id);
		box_free(b);
	}
}

/* The engine's last call before the child runs: record it. */
static int record_creating(void *arg, struct moat_jail *j, struct moat_err *e)
{
	struct box *b = arg;
	b->pid = moat_jail_pid(j);
	b->pid_start = start_time(b->pid);
	moat_jail_cgroups(j, &b->cgroups);
	b->creating = true;
	if (!b->pid_start)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "start time of pid %d", (int)b->pid);
	if (save(b, e) < 0)
		return -1;
	crash_point("record");
	return 0;
}

/* sandboxes/<id>/fs: a fresh one (a subvolume on btrfs), with workspace/
 * in it (a seed renamed in), or fs_from (a snapshot's clone) renamed in. */
static int make_fs(struct box *b, const struct box_spec *spec, const char *ws,
		   struct moat_err *e)
{
	/* sandboxes/<id> 0700 keeps every host user out; the workspace in it
	 * is 0755 as the sandbox always saw it (the umask is 077); a seed
	 * (the manifest's clones) was made 0755 and is renamed in */
	if (mkdir(b->dir, 0700) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "sandbox directory %s", b->dir);
	if (spec->fs_from) {
		if (rename(spec->fs_from, b->fs) < 0)
			return moat_err_set(e, MOAT_E_SYSTEM, errno, "sandbox directory %s", b->fs);
		return 0;
	}
	if (moat_fsclone_mkdir(fsclone, AT_FDCWD, b->fs, 0700, e) < 0)
		return moat_err_prefix(e, "sandbox directory");
	if ((spec->seed ? rename(spec->seed, ws) : mkdir(ws, 0700) < 0 ? -1 : chmod(ws, 0755)) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "sandbox directory %s", ws);
	return 0;
}

static int spawn_into(struct box *b, const struct box_spec *spec, struct moat_err *e);

/* Start a sandbox (not registered yet); its set-up goes on in the child. */
static struct box *spawn_start(const struct box_spec *spec, bool pooled, struct moat_err *e)
{
	struct box *b = calloc(1, sizeof *b);
	if (!b) {
		moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "sandbox");
		return NULL;
	}
	b->pidfd = -1;
	b->pid = -1;
	random_id(b->id, 16);
	snprintf(b->dir, sizeof b->dir, "sandboxes/%s", b->id);
	b->spec = spec_json(spec);
	b->pooled = pooled;
	b->created_at = (int64_t)time(NULL);
	b->last_active = now_ms();
	return spawn_into(b, spec, e) < 0 ? NULL : b;
}

/* The engine's start for b (a new one, or box_respawn's: then its
 * directory and fs/ are there). -1: abandoned (a respawn's box stays). */
static int spawn_into(struct box *b, const struct box_spec *spec, struct moat_err *e)
{
	struct spawning *sp = calloc(1, sizeof *sp);
	if (!sp) {
		moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "sandbox");
		if (!b->respawning)
			box_free(b);
		return -1;
	}
	b->sp = sp;
	sp->lfd = -1;
	moat_policy_init(&sp->p);
	snprintf(b->fs, sizeof b->fs, "%s/fs", b->dir);

	struct moat_policy *p = &sp->p;
	char cwd[PATH_MAX], ws[PATH_MAX + 96], fsdir[PATH_MAX + 96];
	if (!getcwd(cwd, sizeof cwd)) {
		moat_err_set(e, MOAT_E_SYSTEM, errno, "getcwd");
		goto fail;
	}
	snprintf(fsdir, sizeof fsdir, "%s/%s", cwd, b->fs);
	snprintf(ws, sizeof ws, "%s/workspace", fsdir);
	if ((spec->seed || spec->fs_from) && spec->disk) { /* refused by the API already */
		moat_err_set(e, MOAT_E_USAGE, 0, "a seeded workspace with a disk limit");
		goto fail;
	}
	if (b->respawning) {
		/* the previous agent's socket is in the way of the new one's */
		char sock[96];
		snprintf(sock, sizeof sock, "%s/ctl.sock", b->dir);
		if (unlink(sock) < 0 && errno != ENOENT) {
			moat_err_set(e, MOAT_E_SYSTEM, errno, "%s", sock);
			goto fail;
		}
	} else if (make_fs(b, spec, ws, e) < 0) {
		goto fail;
	}
	crash_point("dir");
	p->workspace = strdup(ws);
	p->workspace_at = strdup(WORKSPACE);
	p->memory = spec->memory ? spec->memory : cfg.default_memory;
	p->pids = spec->pids ? spec->pids : cfg.default_pids;
	p->cpu_milli = spec->cpu_milli ? spec->cpu_milli : cfg.default_cpu_milli;
	if (spec->image_id) {
		/* an image of the store: its layers, top first, shared */
		struct images_resolved ir;
		struct core_err ce = {0};
		if (images_resolve(spec->image_id, &ir, &ce) <= 0) {
			moat_err_set(e, MOAT_E_USAGE, ENOENT, "image %s: %s", spec->image_id,
				     ce.msg[0] ? ce.msg : "not in the store");
			goto fail;
		}
		for (size_t i = 0; i < ir.layers.n; i++)
			moat_strv_add(&p->rootfs_layers, ir.layers.v[i]);
		images_resolved_free(&ir);
		p->rootfs_size = spec->disk;
		/* the root's changes in fs/ (upper/, work/): a snapshot, a fork
		 * and a hibernation keep them */
		if (!spec->disk)
			p->rootfs_upper = strdup(fsdir);
	} else if (spec->image && strcmp(spec->image, "host") != 0) {
		p->rootfs = strdup(spec->image);
		p->rootfs_size = spec->disk;
		/* the image root's changes on disk, in fs/ (upper/, work/): a
		 * snapshot keeps them */
		if (!spec->disk)
			p->rootfs_upper = strdup(fsdir);
	}
	if (spec->disk) {
		/* the workspace is memory then: its bytes count against the
		 * memory cgroup, so the limit covers both */
		p->workspace_tmpfs = spec->disk;
		if (p->memory)
			p->memory += spec->disk;
	}
	network_policy(spec->network, p);
	p->control = spec->control;
	/* a freezer cgroup for pause, when this daemon can make one (said
	 * at its start; else pause answers pause_unavailable) */
	p->freezer = cfg.freezer;
	for (int i = 0; i < MOAT_QUOTAS; i++)
		p->quotas[i] = quota_of(spec, i);
	const char *home = SANDBOX_HOME;
	if (spec->users) { /* root and user: docs/SECURITY.md "Users mode" */
		home = USERS_HOME;
		p->users = true;
		json_t *ib = json_object_get(b->spec, "idbase");
		if (geteuid() == 0 && ib) {
			/* a respawn keeps its range: its files are owned by it */
			p->users_slot = (int)((json_integer_value(ib) - (json_int_t)MOAT_USERS_BAND) / 65536);
		} else if (geteuid() == 0) {
			if ((p->users_slot = users_slot()) < 0) {
				moat_err_set(e, MOAT_E_USAGE, EAGAIN, "every users-mode id slot is in use");
				goto fail;
			}
			json_object_set_new(b->spec, "idbase",
					    json_integer((json_int_t)MOAT_USERS_BAND +
							 (json_int_t)p->users_slot * 65536));
		}
		moat_strv_add(&sp->env, "MOAT_AGENT_USERS=1");
	}
	if (moat_policy_finalize(p, cwd, home, e) < 0)
		goto fail;
	seed_repos(spec, p);
	moat_strv_add(&sp->env, "PATH=/usr/local/bin:/usr/bin:/bin");
	sp->lfd = listen_socket(b->dir, e);
	if (sp->lfd < 0)
		goto fail;
	sp->argv[0] = "moat-agent";
	sp->l = (struct moat_launch){
		.argv = sp->argv,
		.envp = sp->env.v,
		.home = home,
		.cwd = WORKSPACE,
		.die_with_parent = false,
		.agent = true,
		.agent_exe = cfg.agent_exe,
		.agent_fds = &sp->lfd,
		.agent_nfds = 1,
		.before_go = record_creating,
		.before_go_arg = b,
	};
	/* the sandbox starts with the usual umask, not the daemon's 077 (the
	 * child is cloned, with the umask of the moment, in the start) */
	mode_t um = umask(022);
	int started = moat_jail_spawn_start(p, &sp->l, &sp->j, e);
	umask(um);
	if (started < 0) {
		b->pid = -1; /* the engine reaped it */
		moat_strv_free(&b->cgroups);
		goto fail;
	}
	/* the child has its copy (and later creates' children need none) */
	close(sp->lfd);
	sp->lfd = -1;
	crash_point("go");
	return 0;

fail:
	spawn_abandon(b);
	return -1;
}

/* The engine's error pipe is readable: complete the create. On failure
 * the caller abandons it. */
static int spawn_end(struct box *b, struct moat_err *e)
{
	struct spawning *sp = b->sp;
	struct moat_jail *j = sp->j;
	sp->j = NULL; /* finish destroys it on failure */
	if (moat_jail_spawn_finish(j, e) < 0)
		return -1;
	crash_point("spawned");
	int gfds[2] = {-1, -1};
	bool gated = sp->p.gateway && moat_jail_gate_fds(j, gfds) == 0;
	int dfds[2] = {-1, -1};
	bool dns = moat_jail_dns_fds(j, dfds) == 0;
	int cfd = sp->p.control ? moat_jail_control_fd(j) : -1;
	moat_strv_free(&b->cgroups); /* the record's copy; detach hands them over */
	b->pid = moat_jail_detach(j, &b->cgroups);
	sp->detached = true;
	b->child = true;
	b->running = true;
	if (watch_pid(b) < 0 || connect_agent(b) < 0) {
		if (gated) {
			close(gfds[0]);
			close(gfds[1]);
		}
		if (dns) {
			close(dfds[0]);
			close(dfds[1]);
		}
		if (cfd >= 0)
			close(cfd);
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "attach to the sandbox's agent");
	}
	if (dns && attach_dns(b, dfds, e) < 0) {
		if (gated) {
			close(gfds[0]);
			close(gfds[1]);
		}
		if (cfd >= 0)
			close(cfd);
		return -1;
	}
	if (sp->p.gateway && (!gated || attach_gate(b, gfds, e) < 0)) {
		if (!gated)
			moat_err_set(e, MOAT_E_SYSTEM, 0, "the sandbox has no gateway sockets");
		if (cfd >= 0)
			close(cfd);
		return -1;
	}
	if (sp->p.control && cfd < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, 0, "the sandbox has no control listener");
	if (cfd >= 0)
		control_listen(b, cfd);
	b->creating = false;
	if (save(b, e) < 0)
		return -1;
	crash_point("saved");
	moat_strv_free(&sp->env);
	moat_policy_free(&sp->p);
	free(sp);
	b->sp = NULL;
	return 0;
}

static void on_spawned(evutil_socket_t fd, short what, void *arg);

/* Wait for the child from the loop; cb(cbarg, b or NULL, e) when done. */
static int spawn_watch(struct box *b, box_create_cb cb, void *cbarg, struct moat_err *e)
{
	struct spawning *sp = b->sp;
	sp->cb = cb;
	sp->cbarg = cbarg;
	sp->ev = event_new(evbase, moat_jail_spawn_fd(sp->j), EV_READ, on_spawned, b);
	if (!sp->ev || event_add(sp->ev, NULL) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "watch the sandbox's set-up");
	sp->next = spawns;
	spawns = b;
	nspawns++;
	if (b->pooled)
		npool_spawns++;
	return 0;
}

static void schedule_refill(void);

static void on_spawned(evutil_socket_t fd, short what, void *arg)
{
	struct box *b = arg;
	struct spawning *sp = b->sp;
	box_create_cb cb = sp->cb;
	void *cbarg = sp->cbarg;
	bool pooled = b->pooled, users = box_users(b), control = box_control(b);
	spawning_unlink(b);
	event_free(sp->ev);
	sp->ev = NULL;
	struct moat_err e = {0};
	if (spawn_end(b, &e) < 0) {
		spawn_abandon(b);
		if (pooled && users) {
			fprintf(stderr, "moat serve: pool of sandboxes with users: off: %s\n", e.msg);
			cfg.pool_users = 0;
		} else if (pooled && control) {
			fprintf(stderr, "moat serve: pool of sessions' sandboxes: off: %s\n", e.msg);
			cfg.pool_sessions = 0;
		} else if (pooled) {
			fprintf(stderr, "moat serve: pool: %s\n", e.msg);
		}
		else if (cb)
			cb(cbarg, NULL, &e);
		return;
	}
	if (pooled) {
		pool[npool++] = b;
		schedule_refill();
		return;
	}
	reg_add(b);
	if (cb)
		cb(cbarg, b, NULL);
}

/* Start a sandbox and wait for it (not registered yet): blocks the loop
 * for the child's set-up. */
static struct box *spawn_box(const struct box_spec *spec, bool pooled, struct moat_err *e)
{
	struct box *b = spawn_start(spec, pooled, e);
	if (!b)
		return NULL;
	struct pollfd pf = {.fd = moat_jail_spawn_fd(b->sp->j), .events = POLLIN};
	while (poll(&pf, 1, -1) < 0 && errno == EINTR)
		;
	if (spawn_end(b, e) < 0) {
		spawn_abandon(b);
		return NULL;
	}
	return b;
}

static void free_later(evutil_socket_t fd, short what, void *arg)
{
	box_free(arg);
}

/* A create the pool can serve: the default settings (its env, metadata,
 * timeouts and door data are the sandbox's record, applied when taken). */
static bool poolable(const struct box_spec *s)
{
	for (int i = 0; i < MOAT_QUOTAS; i++)
		if (quota_of(s, i) != cfg.quotas[i])
			return false;
	return !s->memory && !s->pids && !s->cpu_milli && !s->disk && !s->network && !s->seed &&
	       !s->fs_from && !(s->control && s->users) &&
	       (!s->image || !strcmp(s->image, "host"));
}

/* The pool holds three kinds: plain sandboxes (--pool), sandboxes with
 * users (--pool-users, the E2B door's) and sessions' sandboxes, with a
 * control listener (--pool-sessions). */
enum pool_kind { POOL_PLAIN, POOL_USERS, POOL_SESSIONS, POOL_KINDS };

static enum pool_kind kind_of(const struct box *b)
{
	return box_control(b) ? POOL_SESSIONS : box_users(b) ? POOL_USERS : POOL_PLAIN;
}

static enum pool_kind kind_of_spec(const struct box_spec *s)
{
	return s->control ? POOL_SESSIONS : s->users ? POOL_USERS : POOL_PLAIN;
}

static size_t pooled_of(enum pool_kind k, bool with_spawns)
{
	size_t n = 0;
	for (size_t i = 0; i < npool; i++)
		n += kind_of(pool[i]) == k;
	for (struct box *b = with_spawns ? spawns : NULL; b; b = b->sp->next)
		n += b->pooled && kind_of(b) == k;
	return n;
}

static bool pool_short(enum pool_kind k)
{
	uint64_t want = k == POOL_USERS ? cfg.pool_users
		      : k == POOL_SESSIONS ? cfg.pool_sessions : cfg.pool;
	return pooled_of(k, true) < want;
}

static void schedule_refill(void)
{
	/* not at once: the client's first exec usually follows its create,
	 * and building a sandbox holds the loop for milliseconds */
	struct timeval tv = {0, 50 * 1000};
	if (refill && (pool_short(POOL_PLAIN) || pool_short(POOL_USERS) ||
		       pool_short(POOL_SESSIONS)))
		event_add(refill, &tv);
}

void box_activity(void)
{
	/* requests are coming: refill when they pause (a burst is served
	 * from the pool, then by direct creates, never stalled by a refill) */
	if (refill && event_pending(refill, EV_TIMEOUT, NULL))
		schedule_refill();
}

/* 1: *out is a sandbox from the pool, 0: none fits, -1: e says why */
static int pool_take(struct box_spec *spec, struct box **out, struct moat_err *e)
{
	*out = NULL;
	if (box_at_limit()) {
		moat_err_set(e, MOAT_E_USAGE, EAGAIN, "at the limit of %llu sandboxes",
			     (unsigned long long)cfg.max_sandboxes);
		return -1;
	}
	while (npool && poolable(spec)) {
		size_t k = npool;
		while (k > 0 && kind_of(pool[k - 1]) != kind_of_spec(spec))
			k--;
		if (!k)
			break;
		struct box *b = pool[k - 1];
		memmove(pool + k - 1, pool + k, (npool - k) * sizeof *pool);
		npool--;
		schedule_refill();
		if (!b->running) {
			box_delete(b);
			continue;
		}
		/* the request's record; the engine's facts of the sandbox stay */
		json_t *idbase = json_incref(json_object_get(b->spec, "idbase"));
		json_decref(b->spec);
		b->spec = spec_json(spec);
		if (idbase)
			json_object_set_new(b->spec, "idbase", idbase);
		b->pooled = false;
		b->created_at = (int64_t)time(NULL);
		b->last_active = now_ms();
		if (save(b, e) < 0) {
			box_delete(b);
			return -1;
		}
		reg_add(b);
		*out = b;
		return 1;
	}
	return 0;
}

struct box *box_create(struct box_spec *spec, struct moat_err *e)
{
	struct box *b;
	int rc = pool_take(spec, &b, e);
	if (rc != 0)
		return b;
	b = spawn_box(spec, false, e);
	if (b)
		reg_add(b);
	return b;
}

struct box *box_create_start(struct box_spec *spec, box_create_cb cb, void *arg,
			     struct box **pending, struct moat_err *e)
{
	*pending = NULL;
	struct box *b;
	int rc = pool_take(spec, &b, e);
	if (rc != 0)
		return b;
	b = spawn_start(spec, false, e);
	if (!b)
		return NULL;
	if (spawn_watch(b, cb, arg, e) < 0) {
		spawn_abandon(b);
		return NULL;
	}
	*pending = b;
	return NULL;
}

void box_create_abort(struct box *pending)
{
	spawning_unlink(pending);
	spawn_abandon(pending);
}

static void on_refill(evutil_socket_t fd, short what, void *arg)
{
	struct box_spec def = {.idle_timeout_s = 1200};
	def.env = json_object();
	def.metadata = json_object();
	/* the kinds in turn, one sandbox at a refill (the next one follows) */
	static unsigned turn;
	enum pool_kind k = POOL_KINDS;
	for (unsigned i = 0; i < POOL_KINDS && k == POOL_KINDS; i++)
		if (pool_short((enum pool_kind)((turn + i) % POOL_KINDS)))
			k = (enum pool_kind)((turn + i) % POOL_KINDS);
	turn++;
	def.users = k == POOL_USERS;
	def.control = k == POOL_SESSIONS;
	/* one at a time, set up beside the requests (on_spawned goes on) */
	if (k != POOL_KINDS) {
		struct moat_err e = {0};
		struct box *b = spawn_start(&def, true, &e);
		if (b && spawn_watch(b, NULL, NULL, &e) < 0) {
			spawn_abandon(b);
			b = NULL;
		}
		if (!b && def.users) {
			/* users mode cannot be had here (no id range, ...): say
			 * it once, and creates report it as they come */
			fprintf(stderr, "moat serve: pool of sandboxes with users: off: %s\n", e.msg);
			cfg.pool_users = 0;
		} else if (!b && def.control) {
			fprintf(stderr, "moat serve: pool of sessions' sandboxes: off: %s\n", e.msg);
			cfg.pool_sessions = 0;
		} else if (!b) {
			fprintf(stderr, "moat serve: pool: %s\n", e.msg);
		}
	}
	json_decref(def.env);
	json_decref(def.metadata);
}

static void destroy(struct box *b, bool defer_free);

void box_delete(struct box *b)
{
	destroy(b, true);
}

/* defer_free: we may be inside one of its callbacks, free it from the loop */
static void destroy(struct box *b, bool defer_free)
{
	if (b->deleted)
		return;
	b->deleted = true;
	control_close(b);
	reg_del(b);
	drop_conn(b);
	if ((b->running || b->pid > 0) && (b->paused || moat_cgroup_frozen(&b->cgroups))) {
		/* frozen: on v1 a frozen task dies only once thawed, so every
		 * task is killed through the freezer (then thawed) first */
		struct moat_err ke = {0};
		if (moat_cgroup_kill(&b->cgroups, &ke) < 0)
			fprintf(stderr, "moat serve: %s: %s\n", b->id, ke.msg);
	}
	if (b->running || b->pid > 0) {
		/* the pidfd names exactly our pid 1, never a recycled pid */
		if (b->pidfd >= 0)
			syscall(SYS_pidfd_send_signal, b->pidfd, SIGKILL, NULL, 0);
		if (b->pidfd >= 0) {
			struct pollfd pf = {.fd = b->pidfd, .events = POLLIN};
			poll(&pf, 1, 2000);
		}
		if (b->child)
			waitpid(b->pid, NULL, 0);
	}
	moat_cgroup_remove(&b->cgroups);
	if (rm_box_dir(b->dir) < 0) /* said: the store forgets it next */
		fprintf(stderr, "moat serve: %s: could not remove all of %s: %s\n", b->id, b->dir,
			strerror(errno));
	store_del(b->id);
	b->running = false;
	if (json_is_string(json_object_get(b->spec, "image_id")))
		images_collect(); /* what only this sandbox kept of the image store */
	struct timeval now = {0, 0};
	if (!defer_free || event_base_once(evbase, -1, EV_TIMEOUT, free_later, b, &now) < 0)
		box_free(b);
}

/* ---- stop and respawn ----------------------------------------------------- */

void box_stop(struct box *b)
{
	control_close(b);
	drop_conn(b);
	if (b->pidev) {
		event_free(b->pidev);
		b->pidev = NULL;
	}
	if (b->pid > 0 && b->pidfd >= 0) {
		syscall(SYS_pidfd_send_signal, b->pidfd, SIGKILL, NULL, 0);
		struct pollfd pf = {.fd = b->pidfd, .events = POLLIN};
		while (poll(&pf, 1, 10000) < 0 && errno == EINTR)
			;
	}
	if (b->child)
		while (waitpid(b->pid, NULL, 0) < 0 && errno == EINTR)
			;
	b->child = false;
	if (b->pidfd >= 0)
		close(b->pidfd);
	b->pidfd = -1;
	moat_cgroup_remove(&b->cgroups);
	moat_strv_free(&b->cgroups);
	/* its listeners died with it: a respawn makes new ones */
	if (b->dnsev)
		event_free(b->dnsev);
	b->dnsev = NULL;
	moat_dnsd_free(b->dns);
	b->dns = NULL;
	gate_box_free(b->gbox);
	b->gbox = NULL;
	b->running = false;
	b->pid = -1;
	struct moat_err e = {0};
	if (save(b, &e) < 0)
		fprintf(stderr, "moat serve: %s: %s\n", b->id, e.msg);
}

/* fs_from takes the place of b's fs/ (one rename, RENAME_EXCHANGE), and
 * the old one, now at fs_from, goes. */
static int swap_fs(struct box *b, const char *fs_from, struct moat_err *e)
{
	if (renameat2(AT_FDCWD, fs_from, AT_FDCWD, b->fs, RENAME_EXCHANGE) < 0) {
		if (errno != ENOENT || rename(fs_from, b->fs) < 0)
			return moat_err_set(e, MOAT_E_SYSTEM, errno, "swap %s for %s", fs_from, b->fs);
		return 0;
	}
	if (moat_fsclone_remove(AT_FDCWD, fs_from) < 0)
		fprintf(stderr, "moat serve: %s: could not remove its previous %s: %s\n", b->id,
			fs_from, strerror(errno));
	return 0;
}

static void shift_end(struct box *b);

int box_respawn(struct box *b, const char *fs_from, struct moat_err *e)
{
	if (b->sp || b->deleted || b->pooled)
		return moat_err_set(e, MOAT_E_USAGE, EBUSY, "sandbox %s is being created", b->id);
	struct box_spec spec;
	box_spec_from_json(b->spec, &spec);
	box_stop(b);
	snprintf(b->fs, sizeof b->fs, "%s/fs", b->dir);
	if (fs_from && swap_fs(b, fs_from, e) < 0)
		return -1;
	crash_point("respawn-swapped");
	b->respawning = true;
	int rc = spawn_into(b, &spec, e);
	if (rc == 0) {
		struct pollfd pf = {.fd = moat_jail_spawn_fd(b->sp->j), .events = POLLIN};
		while (poll(&pf, 1, -1) < 0 && errno == EINTR)
			;
		if ((rc = spawn_end(b, e)) < 0)
			spawn_abandon(b);
	}
	b->respawning = false;
	b->creating = false;
	if (rc < 0) {
		b->running = false;
		b->pid = -1;
		struct moat_err se = {0};
		save(b, &se);
		return moat_err_prefix(e, "restart of sandbox %s", b->id);
	}
	b->last_active = now_ms();
	if (b->hibernated) {
		/* awake: recorded last, so a daemon killed before this finds it
		 * hibernated and stops what started (restore_one) */
		crash_point("wake-spawned");
		json_t *old = json_deep_copy(b->spec);
		shift_end(b);
		json_object_del(b->spec, "paused_at");
		b->hibernated = b->paused = false;
		if (!old || save(b, e) < 0) {
			b->hibernated = b->paused = true;
			if (old) {
				json_decref(b->spec);
				b->spec = old;
			}
			box_stop(b);
			return moat_err_prefix(e, "resume of sandbox %s: record", b->id);
		}
		json_decref(old);
		b->last_active = now_ms() - b->idle_used;
	}
	return 0;
}

/* ---- restart ------------------------------------------------------------ */

/* Does the agent of a sandbox whose create did not finish answer? A
 * child still in its set-up either becomes the agent and answers, or
 * sees that its daemon died and exits (the connection then ends). */
static bool agent_answers(const struct box *b)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	snprintf(sa.sun_path, sizeof sa.sun_path, "%s/ctl.sock", b->dir);
	_cleanup_close_ int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (s < 0)
		return false;
	struct timeval tv = {2, 0};
	setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	static const char req[] = "{\"op\":\"ping\",\"id\":1}";
	unsigned char h[MOAT_FRAME_HDR];
	moat_frame_hdr(h, sizeof req - 1, 0);
	if (connect(s, (struct sockaddr *)&sa, sizeof sa) < 0 ||
	    send(s, h, sizeof h, MSG_NOSIGNAL) != sizeof h ||
	    send(s, req, sizeof req - 1, MSG_NOSIGNAL) != (ssize_t)(sizeof req - 1))
		return false;
	unsigned char rh[MOAT_FRAME_HDR];
	size_t got = 0;
	while (got < sizeof rh) {
		ssize_t n = recv(s, rh + got, sizeof rh - got, 0);
		if (n <= 0)
			return false;
		got += (size_t)n;
	}
	uint32_t jl, dl;
	return moat_frame_parse(rh, &jl, &dl) == 0;
}

/* A sandbox's directory as a restarted daemon finds it: a restore's clone
 * left by a killed daemon goes; one made before fs/ existed has its
 * workspace moved into a new fs/ (its running sandbox is unaffected: its
 * mount holds the directory, not the path). */
static void adopt_fs(struct box *b)
{
	char p[128], ws[128], nws[128];
	snprintf(p, sizeof p, "%s/fs.new", b->dir);
	moat_fsclone_remove(AT_FDCWD, p);
	snprintf(ws, sizeof ws, "%s/workspace", b->dir);
	snprintf(nws, sizeof nws, "%s/workspace", b->fs);
	struct stat st;
	if (lstat(b->fs, &st) < 0 && errno == ENOENT && lstat(ws, &st) == 0 && S_ISDIR(st.st_mode) &&
	    (mkdir(b->fs, 0700) < 0 || rename(ws, nws) < 0))
		fprintf(stderr, "moat serve: %s: cannot move its workspace into %s: %s\n", b->id,
			b->fs, strerror(errno));
}

/* After a restart the record says whether the sandbox is paused; the
 * freezer is made to agree (a daemon killed between freezing and
 * recording, or between thawing and recording, left them apart): the
 * record is what its clients were last told, or what they were about
 * to be told by a call that never answered. */
static void reconcile_freezer(struct box *b, bool paused)
{
	bool frozen = moat_cgroup_frozen(&b->cgroups);
	struct moat_err e = {0};
	if (paused && !frozen && moat_cgroup_freeze(&b->cgroups, true, &e) < 0) {
		fprintf(stderr, "moat serve: %s: recorded as paused, but it cannot be frozen "
			"again (%s): adopted as running\n", b->id, e.msg);
		paused = false;
		store_set_state(b->id, "running");
	} else if (!paused && frozen) {
		if (moat_cgroup_freeze(&b->cgroups, false, &e) < 0) {
			fprintf(stderr, "moat serve: %s: frozen and cannot be thawed (%s): adopted "
				"as paused\n", b->id, e.msg);
			paused = true;
			store_set_state(b->id, "paused");
		} else
			fprintf(stderr, "moat serve: %s: recorded as running but frozen (a pause or "
				"resume the daemon did not finish): thawed\n", b->id);
	}
	b->paused = paused;
}

/* A hibernated sandbox has no process. One found alive was started by a
 * resume the daemon did not finish recording (or stopped by a
 * hibernation it did not finish): stopped, so that it is hibernated
 * whole, its files as the processes left them. */
static void adopt_hibernated(struct box *b, const struct store_row *r)
{
	b->hibernated = b->paused = true;
	b->running = false;
	if (r->pid > 1) {
		b->pidfd = (int)syscall(SYS_pidfd_open, r->pid, 0);
		/* checked after the open: the pidfd then names that very process */
		if (b->pidfd >= 0 && start_time(r->pid) != r->pid_start) {
			close(b->pidfd);
			b->pidfd = -1;
		}
		if (b->pidfd >= 0)
			fprintf(stderr, "moat serve: %s: recorded as hibernated, but its processes "
				"run (a hibernation or resume did not finish): stopped\n", b->id);
	}
	if (b->cgroups.n) {
		/* anything left in its cgroups goes, frozen or not */
		struct moat_err ke = {0};
		if (moat_cgroup_kill(&b->cgroups, &ke) < 0 && ke.errnum != ENOTSUP &&
		    ke.errnum != ENOENT)
			fprintf(stderr, "moat serve: %s: %s\n", b->id, ke.msg);
	}
	box_stop(b); /* kills by pidfd, removes the cgroups, records pid -1 */
}

struct restore_ctx {
	struct moat_strv ids; /* every id the store names: their directories stay */
	bool unsafe;          /* a row without a usable id: sweep no directory */
};

static bool valid_id(const char *id)
{
	return id && id[0] && strlen(id) < sizeof((struct box *)0)->id &&
	       strspn(id, "abcdefghijklmnopqrstuvwxyz0123456789") == strlen(id);
}

static void restore_one(void *arg, const struct store_row *r)
{
	struct restore_ctx *rc = arg;
	if (valid_id(r->id))
		moat_strv_add(&rc->ids, r->id);
	else
		rc->unsafe = true;
	struct box *b = calloc(1, sizeof *b);
	json_t *spec = r->spec ? json_loads(r->spec, 0, NULL) : NULL;
	json_t *cg = r->cgroups ? json_loads(r->cgroups, 0, NULL) : NULL;
	if (!b || !spec || !json_is_array(cg) || !valid_id(r->id) || !r->state) {
		/* said, not dropped silently: its sandbox may still run (and
		 * its directory stays: rc->ids or rc->unsafe) */
		fprintf(stderr, "moat serve: the stored record of sandbox %.64s is unreadable; "
			"it is left as it is (pid %d)\n", r->id ? r->id : "(no id)", (int)r->pid);
		json_decref(spec);
		json_decref(cg);
		free(b);
		return;
	}
	snprintf(b->id, sizeof b->id, "%s", r->id);
	snprintf(b->dir, sizeof b->dir, "sandboxes/%s", b->id);
	snprintf(b->fs, sizeof b->fs, "%s/fs", b->dir);
	adopt_fs(b);
	b->spec = spec;
	b->created_at = r->created_at;
	b->pid = r->pid;
	b->pid_start = r->pid_start;
	b->pidfd = -1;
	b->last_active = now_ms();
	size_t i;
	json_t *v;
	json_array_foreach(cg, i, v) if (json_is_string(v)) moat_strv_add(&b->cgroups,
									   json_string_value(v));
	json_decref(cg);
	if (!strcmp(r->state, "hibernated")) {
		adopt_hibernated(b, r);
		reg_add(b);
		return;
	}
	/* Is our pid 1 still there? Same pid and same start time. */
	bool creating = !strcmp(r->state, "creating") || !strcmp(r->state, "creating-pool");
	bool pooled = !strcmp(r->state, "pooled") || !strcmp(r->state, "creating-pool");
	bool paused = !strcmp(r->state, "paused");
	/* a frozen pid 1 still has its /proc entry and start time: a paused
	 * sandbox is recognised without asking its agent (which cannot
	 * answer until thawed) */
	bool alive = (pooled || creating || paused || !strcmp(r->state, "running")) &&
		     r->pid > 1 && start_time(r->pid) == r->pid_start;
	if (alive && watch_pid(b) < 0) {
		/* alive but not watchable (EMFILE, ENOMEM): neither adopted nor
		 * removed, since removing would orphan a running sandbox; its
		 * row and directory stay for the next start */
		fprintf(stderr, "moat serve: %s: pid %d cannot be watched (%s); left as it is\n",
			b->id, (int)r->pid, strerror(errno));
		box_free(b); /* closes what watch_pid got */
		return;
	}
	bool live = alive && start_time(r->pid) == r->pid_start;
	if (!live && b->pidfd >= 0) { /* it may name a process that took the pid */
		close(b->pidfd);
		b->pidfd = -1;
	}
	if (creating && (!live || pooled || !agent_answers(b))) {
		/* The daemon died during the create: kill what may still be
		 * setting up (by pidfd, checked against the start time), then
		 * the cgroups, the directory, the row. */
		fprintf(stderr, "moat serve: %s: its create did not finish; removed\n", b->id);
		if (!live)
			b->pid = -1;
		destroy(b, false);
		return;
	}
	if (creating)
		fprintf(stderr, "moat serve: %s: its create did not finish, but its agent answers; "
			"adopted\n", b->id);
	if (live) {
		b->running = true;
		reconcile_freezer(b, paused);
		if (connect_agent(b) < 0)
			mark_stopped(b);
		if (b->running && b->paused &&
		    (json_object_get(spec, "network") || box_control(b)))
			b->gate_pending = true; /* its agent answers once thawed */
		else if (b->running)
			restore_listeners(b);
		if (pooled) {
			/* a pool of the previous daemon may run an older agent:
			 * start afresh (handed-out sandboxes keep theirs) */
			box_delete(b);
			return;
		}
		if (creating && b->running)
			store_set_state(b->id, "running");
	} else {
		if (b->pidev) {
			event_free(b->pidev);
			b->pidev = NULL;
		}
		b->pid = -1;
		store_set_state(b->id, "stopped");
	}
	reg_add(b);
}

/* Directories under sandboxes/ that no row names: a daemon died between
 * making one and recording it. */
static void sweep_dirs(const struct restore_ctx *rc)
{
	if (rc->unsafe) {
		fprintf(stderr, "moat serve: a stored record has no usable id: no directory under "
			"sandboxes/ is swept\n");
		return;
	}
	DIR *d = opendir("sandboxes");
	if (!d)
		return;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		bool known = false;
		for (size_t i = 0; i < rc->ids.n && !known; i++)
			known = !strcmp(rc->ids.v[i], de->d_name);
		if (known)
			continue;
		char path[sizeof "sandboxes/" + 256];
		snprintf(path, sizeof path, "sandboxes/%s", de->d_name);
		struct stat st;
		if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		fprintf(stderr, "moat serve: %s has no record; removed\n", path);
		if (S_ISDIR(st.st_mode))
			rm_box_dir(path);
		else
			unlinkat(dirfd(d), de->d_name, 0);
	}
	closedir(d);
}

void box_restore(void)
{
	struct restore_ctx rc = {0};
	if (store_load(restore_one, &rc) == 0)
		sweep_dirs(&rc);
	else
		fprintf(stderr, "moat serve: the store could not be read to its end: no directory "
			"under sandboxes/ is swept\n");
	moat_strv_free(&rc.ids);
	schedule_refill();
}

/* ---- pause and resume ---------------------------------------------------- */

int box_hibernate(struct box *b, struct moat_err *e)
{
	if (b->paused || b->hibernated)
		return moat_err_set(e, MOAT_E_USAGE, EALREADY, "sandbox %s is already paused",
				    b->id);
	if (!b->running)
		return moat_err_set(e, MOAT_E_USAGE, EINVAL, "sandbox %s is not running", b->id);
	if (b->sp || b->pooled || b->creating)
		return moat_err_set(e, MOAT_E_USAGE, EINVAL, "sandbox %s is being created", b->id);
	if (box_workspace_tmpfs(b))
		return moat_err_set(e, MOAT_E_USAGE, EINVAL,
				    "sandbox %s keeps its workspace in memory (limits.disk): a "
				    "hibernation would lose it (pause it without release, or create "
				    "it without limits.disk)", b->id);
	int64_t idle = json_integer_value(json_object_get(b->spec, "idle_timeout_s"));
	b->idle_used = now_ms() - b->last_active;
	if (idle > 0 && b->idle_used > idle * 1000)
		b->idle_used = idle * 1000;
	/* recorded first: a daemon killed from here on finds it hibernated
	 * and finishes the stop (adopt_hibernated), never a half of it */
	b->hibernated = b->paused = true;
	json_object_set_new(b->spec, "paused_at", json_integer((json_int_t)time(NULL)));
	if (save(b, e) < 0) {
		b->hibernated = b->paused = false;
		json_object_del(b->spec, "paused_at");
		return moat_err_prefix(e, "hibernate %s: record", b->id);
	}
	crash_point("hibernate-saved");
	/* pid 1 killed: the kernel kills the rest of its pid namespace
	 * before pid 1 is gone; then its cgroups (and their memory) go. Its
	 * fs/ stays as the processes left it: that is what a resume starts */
	box_stop(b);
	crash_point("hibernate-stopped");
	return 0;
}

int box_pause(struct box *b, struct moat_err *e)
{
	if (!b->running)
		return moat_err_set(e, MOAT_E_USAGE, EINVAL, "sandbox %s is not running", b->id);
	if (b->paused)
		return moat_err_set(e, MOAT_E_USAGE, EALREADY, "sandbox %s is already paused",
				    b->id);
	if (moat_cgroup_freeze(&b->cgroups, true, e) < 0) {
		if (e->errnum == ENOTSUP && !cfg.freezer)
			return moat_err_set(e, MOAT_E_SYSTEM, ENOTSUP,
					    "pause is unavailable in this daemon: %s", cfg.freezer_why);
		if (e->errnum == ENOTSUP)
			return moat_err_set(e, MOAT_E_SYSTEM, ENOTSUP,
					    "sandbox %s has no freezer cgroup (made by a daemon "
					    "without pause)", b->id);
		return moat_err_prefix(e, "pause %s", b->id);
	}
	crash_point("pause-frozen");
	int64_t now = now_ms();
	int64_t idle = json_integer_value(json_object_get(b->spec, "idle_timeout_s"));
	b->idle_used = now - b->last_active;
	if (idle > 0 && b->idle_used > idle * 1000)
		b->idle_used = idle * 1000;
	b->paused = true;
	json_object_set_new(b->spec, "paused_at", json_integer((json_int_t)time(NULL)));
	if (save(b, e) < 0) {
		/* all or nothing: not frozen behind a record that says running */
		struct moat_err ign = {0};
		moat_cgroup_freeze(&b->cgroups, false, &ign);
		b->paused = false;
		json_object_del(b->spec, "paused_at");
		return moat_err_prefix(e, "pause %s: record", b->id);
	}
	crash_point("pause-saved");
	return 0;
}

/* The lifetime stood still while paused: the end moves by the pause. A
 * sandbox paused at its end (on_timeout "pause") gets its whole lifetime
 * again from now (E2B's connect then sets its own). */
static void shift_end(struct box *b)
{
	int64_t at = json_integer_value(json_object_get(b->spec, "paused_at"));
	int64_t end = box_end_at(b), now = (int64_t)time(NULL);
	int64_t life = json_integer_value(json_object_get(b->spec, "timeout_s"));
	if (end <= 0 || at <= 0)
		return;
	int64_t left = end - at;
	if (left <= 0)
		left = life > 0 ? life : 0;
	json_object_set_new(b->spec, "end_at", json_integer((json_int_t)(now + left)));
}

int box_resume(struct box *b, struct moat_err *e)
{
	if (b->hibernated) /* started again from its fs/, same id and spec */
		return box_respawn(b, NULL, e);
	if (!b->running)
		return moat_err_set(e, MOAT_E_USAGE, EINVAL, "sandbox %s is not running", b->id);
	if (!b->paused)
		return moat_err_set(e, MOAT_E_USAGE, EALREADY, "sandbox %s is not paused", b->id);
	if (moat_cgroup_freeze(&b->cgroups, false, e) < 0)
		return moat_err_prefix(e, "resume %s", b->id);
	crash_point("resume-thawed");
	json_t *old = json_deep_copy(b->spec);
	shift_end(b);
	json_object_del(b->spec, "paused_at");
	b->paused = false;
	if (save(b, e) < 0) {
		struct moat_err ign = {0};
		moat_cgroup_freeze(&b->cgroups, true, &ign);
		b->paused = true;
		json_decref(b->spec);
		b->spec = old;
		return moat_err_prefix(e, "resume %s: record", b->id);
	}
	json_decref(old);
	b->last_active = now_ms() - b->idle_used;
	if (b->gate_pending) {
		b->gate_pending = false;
		restore_listeners(b);
	}
	return 0;
}

int box_hold(struct box *b, bool frozen, struct moat_err *e)
{
	if (!b->running || b->paused)
		return 0;
	return moat_cgroup_freeze(&b->cgroups, frozen, e);
}

/* ---- reaping ------------------------------------------------------------ */

static void idle_reply(void *arg, json_t *reply, const char *data, size_t len)
{
	struct box *b = arg;
	b->idle_check = false;
	int64_t idle = json_integer_value(json_object_get(b->spec, "idle_timeout_s"));
	if (reply && json_integer_value(json_object_get(reply, "running")) == 0 && idle > 0 &&
	    now_ms() - b->last_active >= idle * 1000)
		box_delete(b);
	else if (reply)
		b->last_active = now_ms() - (idle * 1000) + 5000; /* ask again in 5 s */
}

static void on_reaper(evutil_socket_t fd, short what, void *arg)
{
	int64_t now = now_ms(), wall = (int64_t)time(NULL);
	for (size_t i = 0; i < nboxes; i++) {
		struct box *b = boxes[i];
		/* a paused sandbox's clocks stand still (its idle timeout and
		 * its lifetime: box_resume moves the end by the pause) */
		if (b->paused)
			continue;
		int64_t life = json_integer_value(json_object_get(b->spec, "timeout_s"));
		int64_t idle = json_integer_value(json_object_get(b->spec, "idle_timeout_s"));
		int64_t end = json_integer_value(json_object_get(b->spec, "end_at"));
		bool over = end > 0 ? wall >= end : life > 0 && wall - b->created_at >= life;
		bool idle_out = idle > 0 && now - b->last_active >= idle * 1000;
		if (over && b->running && json_object_get(b->spec, "on_timeout")) {
			/* on_timeout "pause" (E2B's autoPause): paused, not deleted */
			struct moat_err pe = {0};
			if (box_pause(b, &pe) == 0)
				continue;
			fprintf(stderr, "moat serve: %s: its end came, and it could not be paused "
				"(%s): deleted\n", b->id, pe.msg);
		}
		if (over || (idle_out && !b->running)) {
			box_delete(b);
			i--; /* the last one moved here */
			continue;
		}
		if (idle_out && !b->idle_check) {
			json_t *req = json_pack("{s:s}", "op", "ping");
			if (box_call(b, req, NULL, 0, idle_reply, b) == 0)
				b->idle_check = true;
			json_decref(req);
		}
	}
}

int box_init(struct event_base *base, const struct box_config *c, struct moat_err *e)
{
	evbase = base;
	cfg = *c;
	crash_at = getenv("MOAT_TEST_CRASH_AT");
	int sfd = moat_own_dir(AT_FDCWD, "sandboxes", 0700, e);
	if (sfd < 0)
		return moat_err_prefix(e, "%s", c->data_dir);
	close(sfd);
	if (c->pool || c->pool_users || c->pool_sessions) {
		pool = calloc(c->pool + c->pool_users + c->pool_sessions, sizeof *pool);
		refill = event_new(base, -1, 0, on_refill, NULL);
		if (!pool || !refill)
			return moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "pool");
	}
	reaper = event_new(base, -1, EV_PERSIST, on_reaper, NULL);
	struct timeval tv = {1, 0};
	if (!reaper || event_add(reaper, &tv) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, 0, "reaper timer");
	return 0;
}

void box_shutdown(void)
{
	/* creates in flight: their clients are gone (http_stop ran), and a
	 * half-made sandbox is of no use to the next daemon */
	while (spawns)
		box_create_abort(spawns);
	/* Sandboxes stay: a redeploy must not kill running agents. */
	while (nboxes) {
		struct box *b = boxes[--nboxes];
		b->child = false;
		box_free(b);
	}
	free(boxes);
	boxes = NULL;
	/* the pool does not: nobody uses it, and the next start would
	 * recycle it anyway (its agent may be older than the next daemon) */
	while (npool)
		destroy(pool[--npool], false);
	free(pool);
	pool = NULL;
	if (refill)
		event_free(refill);
	refill = NULL;
	if (reaper)
		event_free(reaper);
	reaper = NULL;
}
