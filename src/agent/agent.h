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
#include <sys/types.h>

struct agent_conn;

/* A request in flight: where to answer and with which id. */
struct agent_req {
	struct agent_conn *conn;
	json_int_t id;
};

/* Answer a request: obj (stolen) gets "id"; data may be NULL. */
void agent_reply(const struct agent_req *r, json_t *obj, const void *data, size_t len);
/* Answer with {"error":{"code","message"}}. */
void agent_fail(const struct agent_req *r, const char *code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* The error code for an errno of a file operation. */
const char *agent_errno_code(int err);
/* A connection is still open (a pending request may outlive its conn). */
bool agent_conn_alive(const struct agent_conn *c);

int64_t agent_now_ms(void);

/* ---- processes (proc.c) ---- */
void proc_exec(const struct agent_req *r, json_t *req, const void *data, size_t len);
void proc_wait(const struct agent_req *r, json_t *req);
void proc_stdin(const struct agent_req *r, json_t *req, const void *data, size_t len);
void proc_signal(const struct agent_req *r, json_t *req);
void proc_list(const struct agent_req *r);
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
/* Learn what a mask looks like (placeholders are left out of listings). */
void fs_init(void);

#endif
