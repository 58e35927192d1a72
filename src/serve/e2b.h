/* The E2B door (docs/e2b.md): E2B's control plane (/sandboxes,
 * /v2/sandboxes, X-API-KEY) and envd (Connect-RPC process and filesystem
 * services, /files, /health; routed by E2b-Sandbox-Id or a
 * <port>-<id>.<domain> Host, X-Access-Token per sandbox), on the listener
 * of moat's own API, onto the operation core (core.h). */
#ifndef MOAT_SERVE_E2B_H
#define MOAT_SERVE_E2B_H

#include <event2/http.h>
#include <stdbool.h>
#include <stdint.h>

/* Is this request the E2B door's? (envd headers or Host, or a control
 * plane path). Asked before moat's bearer-token check: the door
 * authenticates its requests itself. */
bool e2b_claims(struct evhttp_request *req);
/* Answer it (auth included). */
void e2b_route(struct evhttp_request *req);
/* A request the HTTP layer refused (a body over its limit, ...): answered
 * in E2B's shape, to a control-plane caller only once its key is right. */
void e2b_refuse(struct evhttp_request *req, int status, const char *msg);
/* Its body limit, for http_set_body_limit (POST /files: --max-file). */
uint64_t e2b_body_limit(struct evhttp_request *req, uint64_t dflt);

#endif
