/* The operation core of the daemon: every sandbox operation, independent of
 * the protocol that asked for it. A door (api.c: moat's /v1; e2b*.c: E2B's
 * control plane and envd; later MCP and the control plane) parses its wire
 * format, calls these, and shapes the answers. No door builds an agent
 * request or interprets an agent reply itself: that is this module's job,
 * so exec and file logic exist once.
 *
 * Every asynchronous call returns a struct core_op (or NULL with *e set when
 * refused at once, and then no callback runs). Exactly one final callback
 * runs later from the event loop, unless the door cancels first. */
#ifndef MOAT_SERVE_CORE_H
#define MOAT_SERVE_CORE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct box;
struct event_base;
struct gate_policy;

/* An error of the core: an HTTP-like status and moat's API code
 * (docs/API.md: invalid_request 400, invalid_path 400, is_directory 400,
 * forbidden 403, not_found 404, already_exists 409, conflict 409,
 * too_large 413, unsupported_media_type 415, patch_failed 422,
 * limit_unavailable 422, limit_reached 429, internal 500, timeout 504, unavailable 503). The
 * message names the culprit. Doors map status/code onto their own shape. */
struct core_err {
	int status;
	char code[32];
	char msg[1024];
};

/* The daemon's settings the core needs (set once by main). */
struct core_config {
	struct event_base *base;
	char *const *host_paths; /* --allow-host-path dirs, NULL-terminated */
	uint64_t max_file;       /* largest file read or written */
	uint64_t max_archive;    /* unpacked archive limit */
	const struct gate_policy *net_ceiling; /* --net-allow, or NULL: no network */
	char *const *net_allow;  /* the same patterns as given (for manifest clones) */
	json_t *secrets;         /* the secret store: NAME -> value */
	const int64_t *quotas;   /* the operator's ceilings (MOAT_QUOTAS of them) */
	uint64_t default_memory, default_pids, default_cpu_milli;
	bool allow_degraded;     /* --allow-degraded: run without a limit not enforceable */
	unsigned degraded;       /* the defaults dropped at start (MOAT_LIMIT_* bits) */
	char *const *templates;  /* --template NAME=ROOTFS_DIR, NULL-terminated */
};
void core_init(const struct core_config *c);
const struct core_config *core_config(void);
/* The root filesystem directory of a --template NAME, or NULL. */
const char *core_template(const char *name);
/* The status of one of moat's API codes (500 for an unknown one). */
int core_status_of(const char *code);

struct core_op;
/* The door's client went away: no callback runs after this. An exec or
 * attach that is not detached kills its process; a create in flight is
 * undone (nobody learnt the id). */
void core_op_cancel(struct core_op *op);

/* ---- sandboxes ---------------------------------------------------------------- */

/* Options a door adds to a create (all optional). */
struct core_create_opts {
	bool users;           /* a computer with users: root (uid 0) and user (1000,
			       * home /home/user, the default); else the one sandbox user */
	bool control;         /* a control listener (policy.control: sessions,
			       * docs/control-plane.md); needs the sandbox's own
			       * network (network "host" is refused) */
	const char *door;     /* the door's name for door_data, e.g. "e2b" */
	json_t *door_data;    /* kept with the sandbox (and across restarts), borrowed */
};
typedef void (*core_create_cb)(void *arg, struct box *b, const struct core_err *e);
/* body: a /v1 create body (docs/API.md; borrowed). Validation errors name
 * its fields. The sandbox is running when cb gets it (manifest unpacked). */
struct core_op *core_create(json_t *body, const struct core_create_opts *o, core_create_cb cb,
			    void *arg, struct core_err *e);
/* Kill everything and remove the sandbox. */
void core_delete(struct box *b);

/* ---- processes ----------------------------------------------------------------- */

enum core_stdin { CORE_STDIN_CLOSED, /* stdin_data, then EOF (default) */
		  CORE_STDIN_PIPE,   /* stdin_data, then kept open for core_stdin */
		  CORE_STDIN_NULL }; /* /dev/null */

struct core_exec_req {
	json_t *argv;         /* array of strings, borrowed */
	json_t *env;          /* object: added over the sandbox's environment, or NULL */
	const char *cwd;      /* absolute or relative to the workspace; NULL: workspace
			       * (users mode: the user's home) */
	const char *user;     /* NULL: the default user; "root" or "user" (users mode) */
	bool tty;
	unsigned cols, rows;  /* tty size (0: 80x24) */
	enum core_stdin stdin_mode;
	const void *stdin_data;
	size_t stdin_len;
	int64_t timeout_ms;   /* 0: none; the process group is killed at the deadline */
	int64_t max_output;   /* bytes per stream kept before the answer; 0: default */
	const char *tag;      /* an optional name, listed by core_ps */
	bool stream;          /* output callbacks as it comes; else all of it at the end */
	int64_t yield_ms;     /* not streaming: answer "yielded" when still running
			       * after this long (-1: wait for the exit) */
	bool detached;        /* core_op_cancel does not kill it (and it is listed until
			       * its exit is collected) */
};

struct core_exit {
	int64_t pid;
	int exit_code;        /* 128+N for signal N */
	int signal;           /* 0 unless killed by a signal */
	bool timed_out, truncated;
	int64_t duration_ms;
};

struct core_exec_cbs {
	void (*started)(void *arg, int64_t pid);                      /* optional */
	/* out is stdout (or the pty), err stderr; either may be empty */
	void (*output)(void *arg, const char *out, size_t olen, const char *err, size_t elen);
	/* final: exactly one of these three */
	void (*yielded)(void *arg, const struct core_exit *x); /* still running at yield_ms
								* (pid and truncated set) */
	void (*ended)(void *arg, const struct core_exit *x);
	void (*failed)(void *arg, const struct core_err *e);
	/* optional, streams: the bytes the door still has queued for its
	 * client. Above CORE_BACKLOG_HIGH the core asks the agent for no more
	 * (it holds, and the agent drops beyond max_output, reported as
	 * truncated) until it is below CORE_BACKLOG_LOW. */
	size_t (*backlog)(void *arg);
};
#define CORE_BACKLOG_HIGH ((size_t)1 << 20)
#define CORE_BACKLOG_LOW ((size_t)256 << 10)

struct core_op *core_exec(struct box *b, const struct core_exec_req *r,
			  const struct core_exec_cbs *cbs, void *arg, struct core_err *e);
/* Follow a process the sandbox runs: its output from now on (stream) or
 * collected until it ends or yield_ms passes (-1: until it ends). */
struct core_op *core_attach(struct box *b, int64_t pid, bool stream, int64_t yield_ms,
			    const struct core_exec_cbs *cbs, void *arg, struct core_err *e);

/* Simple operations answer once: result is the agent's reply object
 * (borrowed, may be NULL on error), data its bytes. */
typedef void (*core_done_cb)(void *arg, json_t *result, const char *data, size_t len,
			     const struct core_err *e);

struct core_op *core_stdin(struct box *b, int64_t pid, const void *data, size_t len, bool close,
			   core_done_cb cb, void *arg, struct core_err *e);
/* sig: a name ("KILL", "TERM", "SIGKILL", ...) or a number */
struct core_op *core_signal(struct box *b, int64_t pid, const char *sig, core_done_cb cb,
			    void *arg, struct core_err *e);
struct core_op *core_resize(struct box *b, int64_t pid, unsigned cols, unsigned rows,
			    core_done_cb cb, void *arg, struct core_err *e);
/* result: {"processes":[{"process_id","cmd":[...],"running","tty","tag"?,"cwd"?,"env"?}]} */
struct core_op *core_ps(struct box *b, core_done_cb cb, void *arg, struct core_err *e);

/* ---- files ------------------------------------------------------------------- */
/* path: absolute inside the sandbox, or relative to the workspace (users
 * mode: to the user's home). user: as for exec (ownership and
 * permission checks), NULL for the default. Entries are objects
 * {"name","path","type":"file|dir|symlink|other","size","mode","mtime",
 *  "uid","gid","owner","group","symlink_target"?,"metadata"?}. */

/* data = the bytes; result {"size":N} */
struct core_op *core_read(struct box *b, const char *path, const char *user, uint64_t max,
			  core_done_cb cb, void *arg, struct core_err *e);
struct core_write_opts {
	const char *user;
	json_t *metadata;     /* object of strings kept as user xattrs, or NULL */
	bool no_parents;      /* do not create missing parent directories */
};
/* result {"entry":{...}} */
struct core_op *core_write(struct box *b, const char *path, const void *data, size_t len,
			   const struct core_write_opts *o, core_done_cb cb, void *arg,
			   struct core_err *e);
struct core_op *core_remove(struct box *b, const char *path, const char *user, bool recursive,
			    core_done_cb cb, void *arg, struct core_err *e);
/* parents: mkdir -p; exist_ok false: an existing directory is
 * already_exists (409). result {"created":bool,"entry":{...}} */
struct core_op *core_mkdir(struct box *b, const char *path, const char *user, bool parents,
			   bool exist_ok, core_done_cb cb, void *arg, struct core_err *e);
/* result {"entries":[...],"truncated":bool}; depth 1..64 */
struct core_op *core_list(struct box *b, const char *path, const char *user, int depth,
			  core_done_cb cb, void *arg, struct core_err *e);
/* result {"entry":{...}} */
struct core_op *core_stat(struct box *b, const char *path, const char *user, core_done_cb cb,
			  void *arg, struct core_err *e);
/* rename(2), dst replaced; result {"entry":{...}} (the moved entry) */
struct core_op *core_move(struct box *b, const char *src, const char *dst, const char *user,
			  core_done_cb cb, void *arg, struct core_err *e);
/* apply_patch; result {"files":[{"path","op"}]} */
struct core_op *core_patch(struct box *b, const char *patch, size_t len, core_done_cb cb,
			   void *arg, struct core_err *e);
/* the workspace as a tar: data = the tar */
struct core_op *core_pack(struct box *b, core_done_cb cb, void *arg, struct core_err *e);
/* tar (optionally compressed) replaces the workspace */
struct core_op *core_unpack(struct box *b, const void *tar, size_t len, core_done_cb cb,
			    void *arg, struct core_err *e);
/* An image file: result {"mime","width","height","data":base64} */
struct core_op *core_image(struct box *b, const char *path, core_done_cb cb, void *arg,
			   struct core_err *e);

/* ---- watching a directory -------------------------------------------------- */
/* Events: {"name": path relative to the watched dir, "type":
 * "create|write|remove|rename|chmod", "entry"?: {...}} */
struct core_watch_cbs {
	void (*started)(void *arg);                     /* the watch is in place */
	void (*event)(void *arg, json_t *ev);           /* borrowed */
	void (*failed)(void *arg, const struct core_err *e); /* final */
	size_t (*backlog)(void *arg); /* optional: as core_exec_cbs' */
};
/* A stream of events until core_op_cancel (which removes the watch). */
struct core_op *core_watch(struct box *b, const char *path, const char *user, bool recursive,
			   bool include_entry, const struct core_watch_cbs *cbs, void *arg,
			   struct core_err *e);
/* Polled watches: result {"watch_id":N} / {"events":[...]} (at once, maybe
 * empty) / {} */
struct core_op *core_watch_create(struct box *b, const char *path, const char *user,
				  bool recursive, bool include_entry, core_done_cb cb, void *arg,
				  struct core_err *e);
struct core_op *core_watch_events(struct box *b, int64_t watch_id, core_done_cb cb, void *arg,
				  struct core_err *e);
struct core_op *core_watch_remove(struct box *b, int64_t watch_id, core_done_cb cb, void *arg,
				  struct core_err *e);

#endif
