/* Sessions of the control plane (docs/control-plane.md): an agent that
 * lives in a sandbox, holding only a session token that is valid on the
 * control listener of that one sandbox. A session outlives its sandboxes
 * (restart, a daemon restart): its record, conversation, usage and
 * artifacts are the daemon's, in SQLite and under the data dir.
 *
 * Host side: /v1/sessions (session_route). Sandbox side: cp.c finds the
 * session of a request with session_auth, and the proxy's handlers
 * account through the rest of this interface. */
#ifndef MOAT_SERVE_SESSION_H
#define MOAT_SERVE_SESSION_H

#include "core.h"
#include "llm_dialect.h"

#include <moat/err.h>

#include <event2/http.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

struct box;
struct event_base;
struct session;

struct session_config {
	struct event_base *base;
	const char *data_dir;
};
/* Its tables (store_db()); call after store_open and before box_restore. */
int session_init(const struct session_config *c, struct moat_err *e);
/* After box_restore: re-attach to each live session's agent process; a
 * session whose sandbox is gone gets a fresh one (as restart). */
void session_restore(void);
void session_shutdown(void);

/* /v1/sessions[/{id}[/restart|/usage|/artifacts[/{name}]|/conversation]]:
 * seg[0] "v1", seg[1] "sessions", n segments (percent-encoded). */
void session_route(struct evhttp_request *req, char **seg, int n);

struct session *session_find(const char *id);
/* The live session whose current sandbox is b and whose token is token
 * (its hash compared in constant time); NULL for anything else: no such
 * token, revoked, ended, or issued to another sandbox. */
struct session *session_auth(const struct box *b, const char *token);
const char *session_id(const struct session *s);
/* The live session whose current sandbox is b, token or not (for the
 * one-time file URLs, whose ticket is their authority); NULL if none. */
struct session *session_of_box(const struct box *b);
/* What GET {CONTROL_PLANE_URL}/v1/session shows the agent (new ref):
 * {"id","routes":[{"route","family","models"}],"budget","usage","budget_left"}. */
json_t *session_json(const struct session *s);
/* Its current sandbox (NULL between sandboxes). */
struct box *session_box(const struct session *s);

/* Before a model call: may the session use route and ask for model?
 * 403 forbidden naming the route or model when its llm.routes does not
 * allow it; 429 budget_exceeded naming the budget (tokens, requests,
 * wall_s, cpu_s) when one is used up (the session records why). */
int session_llm_check(struct session *s, const char *route, const char *model,
		      struct core_err *e);
/* After a model call (complete or not): its usage (fields -1 unknown),
 * bytes from and to the agent; requests is counted here. Persisted. */
void session_account(struct session *s, const struct llm_usage *u, uint64_t bytes_in,
		     uint64_t bytes_out);
/* Other metered traffic of the control plane (artifacts, MCP relays). */
void session_account_bytes(struct session *s, uint64_t bytes_in, uint64_t bytes_out);

/* Prometheus lines for /metrics (appended to f). */
void session_metrics(FILE *f);

#endif
