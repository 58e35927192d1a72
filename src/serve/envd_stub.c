/* TEMPORARY (delete at merge): weak stand-ins for the operation core, the
 * Connect codec, multipart and e2b.c, so that e2b_envd.c links before
 * those land. Every real definition overrides these. */
#include "connect.h"
#include "core.h"
#include "e2b_int.h"
#include "multipart.h"

#include <stdio.h>
#include <string.h>

#define WEAK __attribute__((weak))

static void nope(struct core_err *e)
{
	if (!e)
		return;
	e->status = 503;
	snprintf(e->code, sizeof e->code, "unavailable");
	snprintf(e->msg, sizeof e->msg, "the operation core is not linked (envd_stub.c)");
}

WEAK const struct core_config *core_config(void) { return NULL; }
WEAK void core_op_cancel(struct core_op *op) { (void)op; }
WEAK struct core_op *core_exec(struct box *b, const struct core_exec_req *r,
			       const struct core_exec_cbs *cbs, void *arg, struct core_err *e)
{ nope(e); return NULL; }
WEAK struct core_op *core_attach(struct box *b, int64_t pid, bool stream, int64_t yield_ms,
				 const struct core_exec_cbs *cbs, void *arg, struct core_err *e)
{ nope(e); return NULL; }
WEAK struct core_op *core_stdin(struct box *b, int64_t pid, const void *data, size_t len,
				bool close, core_done_cb cb, void *arg, struct core_err *e)
{ nope(e); return NULL; }
WEAK struct core_op *core_signal(struct box *b, int64_t pid, const char *sig, core_done_cb cb,
				 void *arg, struct core_err *e)
{ nope(e); return NULL; }
WEAK struct core_op *core_resize(struct box *b, int64_t pid, unsigned cols, unsigned rows,
				 core_done_cb cb, void *arg, struct core_err *e)
{ nope(e); return NULL; }
WEAK struct core_op *core_ps(struct box *b, core_done_cb cb, void *arg, struct core_err *e)
{ nope(e); return NULL; }
WEAK struct core_op *core_read(struct box *b, const char *path, const char *user, uint64_t max,
			       core_done_cb cb, void *arg, struct core_err *e)
{ nope(e); return NULL; }
WEAK struct core_op *core_write(struct box *b, const char *path, const void *data, size_t len,
				const struct core_write_opts *o, core_done_cb cb, void *arg,
				struct core_err *e)
{ nope(e); return NULL; }
WEAK struct core_op *core_remove(struct box *b, const char *path, const char *user,
				 bool recursive, core_done_cb cb, void *arg, struct core_err *e)
{ nope(e); return NULL; }
WEAK struct core_op *core_mkdir(struct box *b, const char *path, const char *user, bool parents,
				bool exist_ok, core_done_cb cb, void *arg, struct core_err *e)
{ nope(e); return NULL; }
WEAK struct core_op *core_list(struct box *b, const char *path, const char *user, int depth,
			       core_done_cb cb, void *arg, struct core_err *e)
{ nope(e); return NULL; }
WEAK struct core_op *core_stat(struct box *b, const char *path, const char *user,
			       core_done_cb cb, void *arg, struct core_err *e)
{ nope(e); return NULL; }
WEAK struct core_op *core_move(struct box *b, const char *src, const char *dst,
			       const char *user, core_done_cb cb, void *arg, struct core_err *e)
{ nope(e); return NULL; }
WEAK struct core_op *core_watch(struct box *b, const char *path, const char *user,
				bool recursive, bool include_entry,
				const struct core_watch_cbs *cbs, void *arg, struct core_err *e)
{ nope(e); return NULL; }
WEAK struct core_op *core_watch_create(struct box *b, const char *path, const char *user,
				       bool recursive, bool include_entry, core_done_cb cb,
				       void *arg, struct core_err *e)
{ nope(e); return NULL; }
WEAK struct core_op *core_watch_events(struct box *b, int64_t watch_id, core_done_cb cb,
				       void *arg, struct core_err *e)
{ nope(e); return NULL; }
WEAK struct core_op *core_watch_remove(struct box *b, int64_t watch_id, core_done_cb cb,
				       void *arg, struct core_err *e)
{ nope(e); return NULL; }

WEAK const char *connect_code_name(enum connect_code c) { (void)c; return "unknown"; }
WEAK int connect_code_http(enum connect_code c) { (void)c; return 500; }
WEAK enum connect_code connect_code_from_moat(const char *code, int status)
{ return CONNECT_UNKNOWN; }
WEAK bool connect_ct_unary(const char *ctype) { return ctype && !strncmp(ctype, "application/json", 16); }
WEAK bool connect_ct_stream(const char *ctype) { return ctype && !strncmp(ctype, "application/connect+json", 24); }
WEAK int connect_env_json(struct moat_buf *out, json_t *msg) { json_decref(msg); return -1; }
WEAK int connect_end_stream(struct moat_buf *out, enum connect_code code, const char *msg)
{ return -1; }
WEAK json_t *connect_unary_request(const void *body, size_t len, struct connect_err *e)
{ e->code = CONNECT_UNIMPLEMENTED; return NULL; }
WEAK json_t *connect_stream_request(const void *body, size_t len, struct connect_err *e)
{ e->code = CONNECT_UNIMPLEMENTED; return NULL; }
WEAK json_t *connect_error_json(enum connect_code c, const char *msg)
{ return json_pack("{s:s,s:s}", "code", "unknown", "message", msg ? msg : ""); }
WEAK int connect_timeout_ms(const char *h, int64_t *ms) { *ms = 0; return 0; }

WEAK json_t *pj_get(const json_t *obj, const char *camel, const char *snake)
{ return json_object_get(obj, camel); }
WEAK int pj_uint32(const json_t *v, uint32_t *out) { return -1; }
WEAK int pj_bool(const json_t *v, bool *out) { return -1; }
WEAK json_t *pj_int64_json(int64_t v) { return json_integer(v); }
WEAK char *pj_bytes(const json_t *v, size_t *len) { return NULL; }
WEAK json_t *pj_bytes_json(const void *p, size_t len) { return json_string(""); }
WEAK int pj_enum(const json_t *v, const char *const *names, size_t n, int *out) { return -1; }
WEAK json_t *pj_timestamp(int64_t sec, int64_t nsec) { return json_string(""); }

WEAK int mp_boundary(const char *ctype, char *out, size_t cap, struct moat_err *e) { return -1; }
WEAK int mp_parse(const char *body, size_t len, const char *boundary, size_t max_parts,
		  struct mp_parts *out, struct moat_err *e)
{ return -1; }
WEAK void mp_free(struct mp_parts *p) { (void)p; }

WEAK const char *e2b_access_token(const struct box *b) { return NULL; }
WEAK bool e2b_equal(const char *a, const char *b) { return a && b && !strcmp(a, b); }
WEAK void e2b_api_error(struct evhttp_request *req, int status, const char *fmt, ...)
{ evhttp_send_reply(req, status, "Error", NULL); }
WEAK void e2b_not_found_502(struct evhttp_request *req, const char *id)
{ evhttp_send_reply(req, 502, "Bad Gateway", NULL); }
