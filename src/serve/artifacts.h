/* A session's artifacts and the one-time URLs that move them
 * (docs/control-plane.md "Files"). The agent asks for a URL; the URL
 * works once, expires, is bounded in size, and belongs to its session's
 * control listener; the bytes go straight to the store. The store is a
 * backend behind a small ops table (a directory under the data dir
 * today: <data>/artifacts/<session>/<name>; an S3-compatible one fits
 * the same table, and the agent's side would not change). */
#ifndef MOAT_SERVE_ARTIFACTS_H
#define MOAT_SERVE_ARTIFACTS_H

#include "core.h"

#include <moat/err.h>

#include <event2/http.h>
#include <stdbool.h>
#include <stdint.h>

struct event_base;
struct session;

struct artifacts_config {
	struct event_base *base;
	const char *data_dir;
	uint64_t max_size;     /* --artifact-max: one artifact at most */
	int64_t url_ttl_s;     /* a URL's life (default 300 s) */
};
int artifacts_init(const struct artifacts_config *c, struct moat_err *e);
void artifacts_shutdown(void);

/* A name: 1..255 bytes, no '/', no NUL, not "." or "..", no control
 * characters. 400 invalid_request naming it. */
int artifacts_name_check(const char *name, struct core_err *e);

/* Sandbox side (cp.c): POST /v1/files/upload-url {name, size_max?},
 * POST /v1/files/download-url {name} -> {"url","expires_at","size_max"};
 * PUT or GET /files/<ticket> (the URL itself). s: the authenticated
 * session for /v1/files/...; for /files/<ticket> the session of the
 * listener's sandbox (session_of_box, no token; NULL: 404), which must be
 * the ticket's (else 404, the ticket not consumed). */
void artifacts_cp_route(struct evhttp_request *req, struct session *s, const char *path);
/* Host side (session.c's router): GET /v1/sessions/{id}/artifacts and
 * GET|DELETE /v1/sessions/{id}/artifacts/{name}; seg/n as session_route's. */
void artifacts_host_route(struct evhttp_request *req, const char *session_id, char **seg,
			  int n);
/* The session ended: its URLs stop working. purge: its files go too. */
void artifacts_session_ended(const char *session_id, bool purge);

#endif
