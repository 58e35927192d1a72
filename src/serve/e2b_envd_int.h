/* Shared by the envd files of the E2B door: e2b_envd.c (routing, auth,
 * the life of a request, Connect answers), e2b_envd_proc.c
 * (process.Process), e2b_envd_fs.c (filesystem.Filesystem and /files).
 * Not an interface of the daemon. */
#ifndef MOAT_SERVE_E2B_ENVD_INT_H
#define MOAT_SERVE_E2B_ENVD_INT_H

#include "connect.h"
#include "http.h"
#include "multipart.h"

#include <event2/event.h>
#include <event2/http.h>
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/time.h>

struct box;
struct core_err;
struct core_op;

#define ENVD_PATH_CAP 4096
#define PATH_CAP ENVD_PATH_CAP
#define ENVD_DEADLINE_MSG "context deadline exceeded"

/* A request waiting for the core: from its parse until its answer went out
 * (envd_ok, envd_fail, envd_rest_fail, envd_stream_end free it) or its
 * client left (the core op is cancelled: a detached exec keeps running). */
enum envd_kind { K_START, K_CONNECT, K_WATCH, K_PLIST, K_INPUT, K_SIGNAL, K_CLOSE, K_UPDATE,
	    K_STREAMIN, K_STAT, K_MKDIR, K_MOVE, K_LIST, K_REMOVE, K_WCREATE, K_WEVENTS,
	    K_WREMOVE, K_FREAD, K_FWRITE };

struct envd_upload {
	char path[PATH_CAP];
	const char *data; /* into the request body (alive until the reply) */
	size_t len;
};

struct envd_call {
	struct evhttp_request *req;
	struct box *b;
	enum envd_kind kind;
	bool stream;      /* a server stream (Start, Connect, WatchDir) */
	bool first_sent;  /* its first event (start) went out */
	bool by_ps;       /* waiting for core_ps to resolve the selector */
	bool tty;         /* the process has a pty: output is "pty" */
	struct core_op *op;
	struct http_wait wait; /* the client leaving; .streaming: its 200 and headers went out */
	struct event *keepalive, *deadline;
	struct timeval ka;
	char user[8];
	char path[PATH_CAP];
	json_t *msg;      /* the request message, kept for what the core borrows */
	json_t *argv;
	int64_t pid;
	const char *tag;  /* into msg */
	unsigned cols, rows;
	char *data;       /* SendInput bytes */
	size_t len;
	const char *sig;
	struct mp_parts parts;
	struct envd_upload *up;
	size_t nup, next;
	json_t *meta;     /* X-Metadata-* of an upload */
	json_t *out;      /* the upload's answer */
};


/* Answers; each frees c. Streams: errors go in the end-stream frame. */
void envd_ok(struct envd_call *c, json_t *msg); /* 200 application/json, msg stolen */
void envd_fail(struct envd_call *c, enum connect_code code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* /files: {"code":status,"message"} */
void envd_rest_fail(struct envd_call *c, int status, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* One data frame (msg stolen; the keepalive silence restarts). */
void envd_stream_send(struct envd_call *c, json_t *msg);
/* core_exec_cbs/core_watch_cbs .backlog: what the call's client has not
 * read yet (arg: the envd_call). */
size_t envd_backlog(void *arg);
/* The end-stream frame (CONNECT_OK: {}), then the end of the body. */
void envd_stream_end(struct envd_call *c, enum connect_code code, const char *msg);
void envd_keepalive_start(struct envd_call *c); /* Keepalive-Ping-Interval */
void envd_deadline_start(struct envd_call *c, int64_t ms); /* ends with deadline_exceeded */
/* Detach from the connection before answering by hand; then free. */
void envd_call_detach(struct envd_call *c);
void envd_call_free(struct envd_call *c);
enum connect_code envd_code_of(const struct core_err *e);

/* Request fields: 0 absent, 1 present, -1 after answering invalid_argument. */
int envd_opt_str(struct envd_call *c, const json_t *o, const char *camel, const char *snake,
		 const char **out);
int envd_opt_bool(struct envd_call *c, const json_t *o, const char *camel, const char *snake,
		  bool *out);
int envd_opt_u32(struct envd_call *c, const json_t *o, const char *camel, const char *snake,
		 uint32_t *out);
/* A path field resolved for c->user into out (ENVD_PATH_CAP); -1 answered. */
int envd_path_field(struct envd_call *c, const json_t *o, const char *camel, const char *snake,
		    char *out);
int envd_timeout_header(struct envd_call *c, int64_t *ms); /* Connect-Timeout-Ms */

/* Paths: envd's ExpandAndResolve ("", "~", relative: from the user's home). */
int envd_resolve(const char *user, const char *in, char *out, size_t cap, char *msg,
		 size_t mcap);
int envd_path_clean(const char *in, char *out, size_t cap);
bool envd_user_known(const char *user); /* "user" or "root" */
const char *envd_base_name(const char *path);
const char *envd_hdr(struct evhttp_request *req, const char *name);
const char *envd_jstr(const json_t *o, const char *k);
int64_t envd_jint(const json_t *o, const char *k);

/* The RPCs (msg is c->msg). */
void envd_p_start(struct envd_call *c, json_t *msg);
void envd_p_connect(struct envd_call *c, json_t *msg);
void envd_p_list(struct envd_call *c, json_t *msg);
void envd_p_input(struct envd_call *c, json_t *msg);
void envd_p_signal(struct envd_call *c, json_t *msg);
void envd_p_close(struct envd_call *c, json_t *msg);
void envd_p_update(struct envd_call *c, json_t *msg);
void envd_f_stat(struct envd_call *c, json_t *msg);
void envd_f_mkdir(struct envd_call *c, json_t *msg);
void envd_f_move(struct envd_call *c, json_t *msg);
void envd_f_list(struct envd_call *c, json_t *msg);
void envd_f_remove(struct envd_call *c, json_t *msg);
void envd_f_watch(struct envd_call *c, json_t *msg);
void envd_f_wcreate(struct envd_call *c, json_t *msg);
void envd_f_wevents(struct envd_call *c, json_t *msg);
void envd_f_wremove(struct envd_call *c, json_t *msg);
/* GET/POST /files for an authenticated-or-signed request is checked inside. */
void envd_files(struct evhttp_request *req, struct box *b);
/* A new call bound to req's connection (client-gone detection). */
struct envd_call *envd_call_new(struct evhttp_request *req, struct box *b, enum envd_kind k);

#endif
