/* The agent: pid 1 of a served sandbox. It runs inside every namespace and
 * under every filter of the sandbox, so what it starts and every file it
 * touches for the API gets the sandbox's confinement, with no setns and no
 * policy to re-apply. It talks to the daemon over the control socket
 * (src/proto/frame.h), keeps the output of the processes it started until
 * the daemon reads it (so a restarted daemon loses nothing), and reaps
 * everything. It holds nothing secret: it is a fresh image, not a copy of
 * the daemon.
 *
 * This header is shared by the agent's files: the reply helpers and the
 * two services (processes, files). */
#ifndef MOAT_AGENT_H
#define MOAT_AGENT_H

#include <jansson.h>
#include <poll.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

struct agent_conn;

/* A request in flight: where to answer and with which id. */
struct agent_req {
	struct agent_conn *conn;
	json_int_t id;
};

/* Answer a request: obj (stolen) gets "id"; data may be NULL. */
void agent_reply(const struct agent_req *r, json_t *obj, const void *data, size_t len);
/* Hold replies back (in the connection's buffer) until hold is false
 * again: an operation that answers before it has cleaned up (a failed
 * patch's staged files) so that no one sees the leftovers after the answer. */
void agent_hold(const struct agent_req *r, bool hold);
/* Answer with {"error":{"code","message"}}. */
void agent_fail(const struct agent_req *r, const char *code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* The error code for an errno of a file operation. */
const char *agent_errno_code(int err);
/* A connection is still open (a pending request may outlive its conn). */
bool agent_conn_alive(const struct agent_conn *c);

int64_t agent_now_ms(void);

/* ---- identity (main.c) ---- */
/* The sandbox runs in users mode (a root and a default user): learnt once
 * at start from MOAT_AGENT_USERS in the agent's environment; false by
 * default. */
bool agent_users_mode(void);
/* The request's "user" ("root" | "user", absent = the default user) is one
 * this sandbox has; else answers (forbidden / invalid_request), false. */
bool agent_user_ok(const struct agent_req *r, json_t *req);

/* ---- processes (proc.c) ---- */
void proc_exec(const struct agent_req *r, json_t *req, const void *data, size_t len);
void proc_wait(const struct agent_req *r, json_t *req);
void proc_stdin(const struct agent_req *r, json_t *req, const void *data, size_t len);
void proc_signal(const struct agent_req *r, json_t *req);
void proc_list(const struct agent_req *r);
/* {process_id, cols, rows}: TIOCSWINSZ on the process's terminal (the
 * kernel sends SIGWINCH to its foreground group). */
void proc_resize(const struct agent_req *r, json_t *req);
/* The daemon's request `call` lost its client: kill its process, forget it. */
void proc_cancel(const struct agent_req *r, json_t *req);
/* Poll set: fill fds of running processes; returns how many were added. */
size_t proc_pollfds(struct pollfd *pfd, size_t cap);
/* Handle poll results for the fds proc_pollfds returned. */
void proc_events(const struct pollfd *pfd, size_t n);
/* SIGCHLD: reap everything, finish waits. */
void proc_reap(void);
/* Deadlines (timeouts, yields): ms until the next one, -1 if none. */
int proc_next_timeout(void);
void proc_timers(void);
/* Drop waits of a closed connection. */
void proc_conn_gone(const struct agent_conn *c);
size_t proc_running(void);

/* ---- files (fsops.c) ---- */
void fs_read(const struct agent_req *r, json_t *req);
void fs_write(const struct agent_req *r, json_t *req, const void *data, size_t len);
void fs_delete(const struct agent_req *r, json_t *req);
void fs_mkdir(const struct agent_req *r, json_t *req);
void fs_list(const struct agent_req *r, json_t *req);
void fs_stat(const struct agent_req *r, json_t *req);
void fs_patch(const struct agent_req *r, json_t *req, const void *data, size_t len);
void fs_pack(const struct agent_req *r, json_t *req);
void fs_unpack(const struct agent_req *r, json_t *req, const void *data, size_t len);
/* {src, dst} -> {"entry"}: rename(2), both sides resolved, protected
 * names refused. */
void fs_rename(const struct agent_req *r, json_t *req);
/* Learn what a mask looks like (placeholders are left out of listings). */
void fs_init(void);
/* The request's path under `key` (relative: to /workspace), absolute and
 * lexically normalised, not under /proc, /sys, /dev; false after
 * answering invalid_path. */
bool fs_path(const struct agent_req *r, json_t *req, const char *key, char *out, size_t cap);
/* A mask or placeholder of the engine (hidden from listings and stat). */
bool fs_is_mask(const struct stat *st);

/* ---- entries (entry.c) ---- */
/* A new request: owner and group names are re-read (if /etc/passwd or
 * /etc/group changed) before the next entry that needs them. */
void entry_new_request(void);
/* The JSON entry of name (in the directory dir, not followed) whose lstat
 * is st, shown as `shown` at `path`: name, path, type, size, mode, mtime,
 * mtime_ns, uid, gid, owner, group, symlink_target (a symlink), metadata
 * (with_meta: the user.moat.* xattrs). A name or path that is not UTF-8 is
 * shown with U+FFFD for its bad bytes and the raw name in name_raw_b64.
 * dir may be -1 (no link target, no metadata). NULL only without memory. */
json_t *entry_make(int dir, const char *name, const char *shown, const char *path,
		   const struct stat *st, bool with_meta);
/* s as a JSON string, bytes that are not UTF-8 as U+FFFD. */
json_t *entry_string(const char *s);
/* The xattr prefix of file metadata. */
#define ENTRY_META_PREFIX "user.moat."

/* ---- directory watches (watch.c) ---- */
void watch_start(const struct agent_req *r, json_t *req);
void watch_wait(const struct agent_req *r, json_t *req);
void watch_stop(const struct agent_req *r, json_t *req);
/* A cancel of call id `call`: its pending watch_wait is dropped (no answer). */
void watch_cancel(const struct agent_conn *c, json_int_t call);
/* A closed connection: its pending waits go, and its watches. */
void watch_conn_gone(const struct agent_conn *c);
/* Poll set: the inotify descriptor, if any (0 or 1 added). */
size_t watch_pollfds(struct pollfd *pfd, size_t cap);
void watch_events(const struct pollfd *pfd, size_t n);
/* ms until the next watch_wait deadline, -1 if none. */
int watch_next_timeout(void);
void watch_timers(void);

#endif
