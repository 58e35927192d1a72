/* The LLM proxy's upstream side: the operator's routes (--llm-route) and
 * one HTTP call to an upstream whose answer is relayed as it arrives
 * (libcurl's multi interface on the daemon's event loop, so a streamed
 * answer costs no thread and no buffering). The key of a route comes from
 * the daemon's secret store and goes only into the upstream request's
 * header: never into a sandbox, a log line or an answer. What the bodies
 * mean (model, stream, usage) is llm_dialect.h's. */
#ifndef MOAT_SERVE_LLM_H
#define MOAT_SERVE_LLM_H

#include "core.h"

#include <moat/err.h>

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct event_base;

/* Which API a route speaks: its key header (Authorization: Bearer, or
 * x-api-key + anthropic-version) and the paths it accepts. */
enum llm_family { LLM_FAMILY_OPENAI, LLM_FAMILY_ANTHROPIC };

struct llm_route {
	char *name;       /* [a-z0-9_-]{1,32} */
	char *url;        /* the upstream's base: scheme://host[:port][/prefix], no
			   * trailing slash; a request's path (e.g. /v1/messages) is
			   * appended */
	enum llm_family family;
	char *key_secret; /* the secret store's name of its key, or NULL (no key) */
	int64_t timeout_ms; /* whole call, 0: none (idle: 120 s without a byte) */
};

/* "NAME=URL[,family=openai|anthropic][,key=SECRET][,timeout=SECONDS]"
 * (family defaults from the host: anthropic for *.anthropic.com, else
 * openai). Errors name the part that is wrong. */
int llm_route_parse(const char *arg, struct llm_route *r, struct moat_err *e);
void llm_route_free(struct llm_route *r);

/* The routes are copied; every key_secret must be in secrets (which is
 * borrowed for the daemon's life). */
int llm_init(struct event_base *base, const struct llm_route *routes, size_t n, json_t *secrets,
	     struct moat_err *e);
void llm_shutdown(void);
const struct llm_route *llm_route_find(const char *name);
/* Every route, for listings (moat doctor, GET /v1/llm/routes). */
size_t llm_route_count(void);
const struct llm_route *llm_route_at(size_t i);

struct llm_call;
struct llm_cbs {
	/* once, before any data: the upstream's status and Content-Type */
	void (*head)(void *arg, int status, const char *ctype);
	/* body bytes as they arrive (a stream's events as they come) */
	void (*data)(void *arg, const char *p, size_t n);
	/* final, exactly once (unless cancelled): err NULL when the upstream's
	 * answer was complete; else why not: 502 upstream_error (refused,
	 * reset, bad TLS, cut mid-answer), 504 timeout. After head() an
	 * error means the answer the client got so far is incomplete. */
	void (*done)(void *arg, const struct core_err *err);
	/* optional: bytes the door has not yet got to its client; above
	 * CORE_BACKLOG_HIGH the upstream is not read until llm_call_resume */
	size_t (*backlog)(void *arg);
};

/* POST body to the route's url + path with the route's key. headers: the
 * client's headers worth passing on ("anthropic-version: ...",
 * "anthropic-beta: ...", "openai-beta: ..."), NULL-terminated, or NULL; a
 * client's Authorization / x-api-key is never among them. NULL with *e
 * set when it cannot start (no callback then). */
struct llm_call *llm_call_start(const struct llm_route *r, const char *path, const char *body,
				size_t len, const char *const *headers, const struct llm_cbs *cbs,
				void *arg, struct core_err *e);
/* The client left: the upstream request is dropped, no callback runs. */
void llm_call_cancel(struct llm_call *c);
/* The backlog fell under CORE_BACKLOG_LOW: read the upstream again. */
void llm_call_resume(struct llm_call *c);

#endif
