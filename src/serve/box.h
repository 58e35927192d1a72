/* Sandboxes of the daemon: create (policy + engine in agent mode), find,
 * delete, re-attach after a restart, and the channel to each sandbox's
 * agent (frames over its control socket, replies matched by id).
 * Sandboxes outlive the daemon: pid 1 is detached, its cgroups and
 * identity (pid + start time) are in the store. */
#ifndef MOAT_SERVE_BOX_H
#define MOAT_SERVE_BOX_H

#include <moat/err.h>
#include <moat/policy.h>

struct gate;
struct gate_policy;

#include <event2/event.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

struct box;

/* Daemon-wide settings every sandbox is made with. */
struct box_config {
	const char *data_dir;        /* <data>/sandboxes/<id>/ per sandbox */
	int agent_exe;               /* O_PATH fd of moat-agent */
	char *const *host_paths;     /* --allow-host-path dirs (realpath'd), NULL-terminated */
	uint64_t default_memory, default_pids, default_cpu_milli;
	uint64_t max_sandboxes;
	uint64_t pool;               /* pre-started sandboxes to keep ready */
	uint64_t pool_users;         /* the same with users (core_create_opts.users) */
	uint64_t pool_sessions;      /* the same with a control listener (sessions) */
	struct gate *gate;           /* the egress gateway of every sandbox */
	const struct gate_policy *net_ceiling; /* --net-allow: what any sandbox may reach at most */
	json_t *secrets;             /* the secret store: NAME -> value */
	int64_t quotas[MOAT_QUOTAS]; /* --quota: every sandbox's ceilings, at most */
	bool freezer;                /* sandboxes get a freezer cgroup (pause) */
	const char *freezer_why;     /* else why not (moat_freezer_check's message) */
};

/* What a create request asked for, validated. */
struct box_spec {
	json_t *env;        /* object of strings (sandbox env + manifest environment) */
	json_t *metadata;   /* object of strings */
	char *image;        /* "host", a rootfs dir, or an image name (image_id set) */
	char *image_id;     /* an image of the store (images.h): its manifest digest;
			     * the layers come from it at every spawn */
	json_t *image_config; /* the image's defaults kept with the sandbox: env, user,
			       * workdir (when it exists), entrypoint, cmd; or NULL */
	uint64_t memory, pids, cpu_milli, disk;
	int64_t timeout_s, idle_timeout_s;
	uint32_t quota_set;           /* bit i: quotas[i] was asked for (else the operator's) */
	int64_t quotas[MOAT_QUOTAS];  /* limits.quotas, each <= the operator's ceiling */
	json_t *network;    /* validated {"allow","deny","resolve","secrets":[{"env","hosts"}]}
			     * with "placeholders": {NAME: placeholder}, or NULL */
	const char *seed;   /* a directory (relative to the data dir) that becomes the
			     * workspace (moved in: the manifest's clones), or NULL */
	const char *fs_from; /* a directory (relative to the data dir) that becomes the
			      * sandbox's fs/ (moved in: a clone of a snapshot), or NULL */
	json_t *repos;      /* the repositories in it (relative paths), protected as
			     * nested ones whatever their depth, or NULL */
	bool users;         /* a computer with users (core_create_opts.users) */
	unsigned degraded;  /* MOAT_LIMIT_* bits not enforced (serve --allow-degraded) */
	const char *door;   /* door data to keep (box_door), or NULL */
	json_t *door_data;
	bool on_timeout_pause; /* at its end: paused (box_pause), not deleted */
	bool control;       /* a control listener inside (core_create_opts.control),
			     * kept in the spec ("control": true) across restarts */
};

int box_init(struct event_base *base, const struct box_config *cfg, struct moat_err *e);
/* Re-attach to the sandboxes in the store (after a restart). */
void box_restore(void);
void box_shutdown(void);

/* Create and start a sandbox (synchronous: a few milliseconds). The spec
 * stays the caller's. e->errnum: EAGAIN when at --max-sandboxes. */
struct box *box_create(struct box_spec *spec, struct moat_err *e);
/* The same off the event loop: returns a sandbox from the pool at once;
 * else NULL, and either *pending is set (cb runs later from the loop with
 * the registered sandbox, or NULL and the error) or e says why now. */
typedef void (*box_create_cb)(void *arg, struct box *b, const struct moat_err *e);
struct box *box_create_start(struct box_spec *spec, box_create_cb cb, void *arg,
			     struct box **pending, struct moat_err *e);
/* The client left: kill and remove the sandbox being made (cb never runs). */
void box_create_abort(struct box *pending);
struct box *box_find(const char *id);
/* Kill everything, remove cgroups, files and the record. */
void box_delete(struct box *b);
/* Visit every sandbox (for listings). */
void box_each(void (*fn)(struct box *b, void *arg), void *arg);
size_t box_count(void);
/* At --max-sandboxes: a create would be refused (429). */
bool box_at_limit(void);

const char *box_id(const struct box *b);
/* Its directory, relative to the data directory (net.log lives there). */
const char *box_dir(const struct box *b);
/* Not stopped: running, paused, or hibernated (box_hibernated: no
 * process then, but a door sees a paused sandbox that resumes). */
bool box_running(const struct box *b);
/* Frozen by box_pause (box_running stays true: pid 1 lives on). */
bool box_paused(const struct box *b);
/* Freeze every process of the sandbox (its freezer cgroup) and record
 * "paused": its idle and lifetime clocks stop, and the core refuses every
 * operation that needs its agent (409 paused). e->errnum: EALREADY when
 * paused already, EINVAL when not running, ENOTSUP when it has no freezer
 * (the message says why). box_resume thaws (EALREADY: not paused). Both
 * are all or nothing, and a restarted daemon finds the state recorded. */
int box_pause(struct box *b, struct moat_err *e);
/* NULL when this daemon's sandboxes can be paused, else why not. */
const char *box_pause_unavailable(void);
/* Hibernate (pause "release"): its processes stopped (box_stop: pid 1
 * killed, cgroups removed, so its memory is released), its fs/ kept as
 * they left it, state "paused" with "released": true; box_resume starts
 * it again from that fs/ (box_respawn: same id, spec, network). Recorded
 * before the stop, cleared after the respawn: a restarted daemon finds it
 * hibernated (and stops what a half-done step left running) or running.
 * e->errnum: EALREADY paused already; EINVAL not running, being created,
 * or a workspace in memory (limits.disk, lost by a stop). */
int box_hibernate(struct box *b, struct moat_err *e);
/* Hibernated by box_hibernate (box_paused is true too, box_running false). */
bool box_hibernated(const struct box *b);
/* Thaw a paused sandbox, or start a hibernated one again (box_respawn). */
int box_resume(struct box *b, struct moat_err *e);
/* For a moment's copy of its files (snap.c): frozen true freezes every
 * process, false thaws; a sandbox not running or paused by its user is
 * left as it is (it stays paused). Nothing recorded: a daemon killed
 * while holding it thaws it at its restart (the record says running).
 * ENOTSUP when it has no freezer. */
int box_hold(struct box *b, bool frozen, struct moat_err *e);
json_t *box_json(const struct box *b); /* the API's sandbox object (new ref) */
const json_t *box_metadata(const struct box *b);
/* An image sandbox's defaults (box_spec.image_config), or NULL. */
const json_t *box_image_config(const struct box *b);
/* The environment of an exec: the sandbox's, then extra (object) on top. */
json_t *box_env(const struct box *b, json_t *extra);
/* Some API request arrived: a pending pool refill waits for a pause. */
void box_activity(void);
/* API activity: postpones idle reaping. */
void box_touch(struct box *b);

/* Door data: what a door keeps with a sandbox (E2B's access token,
 * template, ...), persisted with it. Borrowed / copied. */
const json_t *box_door(const struct box *b, const char *door);
int box_set_door(struct box *b, const char *door, json_t *data);
/* Unix seconds: when it was made; when it will be killed (0: never).
 * box_set_end moves the deadline (E2B's setTimeout), persisted. */
int64_t box_created_at(const struct box *b);
int64_t box_end_at(const struct box *b);
int box_set_end(struct box *b, int64_t end_unix);
/* A computer with users (root and user): see core_create_opts. */
bool box_users(const struct box *b);
/* Limits as asked (0: none): memory and disk bytes, cpu in thousandths. */
void box_limits(const struct box *b, uint64_t *memory, uint64_t *disk, uint64_t *cpu_milli);
/* Usage from its cgroups: cpu time (usec), memory in use (bytes); -1 unknown. */
void box_usage(const struct box *b, int64_t *cpu_usec, int64_t *mem_bytes);

/* Its writable state, relative to the data directory: <dir>/fs, holding
 * workspace/ (shown at /workspace) and, for an image sandbox, upper/ and
 * work/ (the image root's changes: policy.rootfs_upper). */
const char *box_fs(const struct box *b);
/* Its stored spec (the record's JSON: env, limits, image, ...). */
const json_t *box_spec_json(const struct box *b);
/* A sandbox keeping its workspace in memory (limits.disk). */
bool box_workspace_tmpfs(const struct box *b);
/* The sandbox's cgroup directories (for the freezer). */
const struct moat_strv *box_cgroups(const struct box *b);

/* Stop it: pid 1 killed (the kernel kills the rest), waited for, cgroups
 * removed, its agent channel closed (pending calls fail); state
 * "stopped". Its id, record and fs/ stay. */
void box_stop(struct box *b);
/* Start it again with the same id, spec and network, from fs_from (a
 * directory relative to the data dir: swapped in for its fs/ atomically,
 * the old fs/ removed) or, NULL, its current fs/. Stops it first when it
 * runs. Synchronous (the set-up, a few ms). On failure the sandbox is
 * stopped (its fs/ already swapped when the swap succeeded) and e says
 * why. Used by restore and by hibernation (pause "release"). */
int box_respawn(struct box *b, const char *fs_from, struct moat_err *e);
/* The spec a stored record (box_spec_json) describes, borrowing from it
 * (no seed, door or fs_from). */
void box_spec_from_json(const json_t *j, struct box_spec *s);
/* The fs/ backend chosen at start (src/base/fsclone.h). */
void box_set_fsclone(int backend);

/* Call the agent. cb gets the reply object (borrowed) and its data, or
 * reply == NULL when the sandbox went away first; cb may be NULL (no
 * interest in the reply). Returns -1 when the
 * agent is not reachable (cb is not called). */
typedef void (*box_reply_cb)(void *arg, json_t *reply, const char *data, size_t len);
/* The control plane's hooks (cp.c sets them once): listen(b, fd) gets
 * the listening socket of a sandbox made with spec.control, after its
 * start, after a daemon restart (asked again from the agent, which keeps
 * a copy) and after a respawn; the callee owns fd. closed(b) runs when the
 * sandbox stops or is deleted (before it is freed): stop accepting. */
struct box_control_ops {
	void (*listen)(struct box *b, int fd);
	void (*closed)(struct box *b);
};
void box_set_control_ops(const struct box_control_ops *ops);
/* Made with spec.control. */
bool box_control(const struct box *b);
int box_call(struct box *b, json_t *req, const void *data, size_t len, box_reply_cb cb,
	     void *arg);
/* Forget a pending call (its HTTP client went away): cb will not run. */
void box_cancel(struct box *b, void *arg);
/* The same, and tell the agent to kill the process a pending wait or
 * exec call is waiting for (and forget it). */
void box_abort(struct box *b, void *arg);
/* The same without the kill: the agent drops the pending wait of a
 * process that runs on (a detached exec whose client left). */
void box_detach(struct box *b, void *arg);

#endif
