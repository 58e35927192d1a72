/* Shared by the E2B door's files (e2b.c routing and auth, e2b_api.c the
 * control plane, e2b_envd.c envd). Not an interface of the daemon. */
#ifndef MOAT_SERVE_E2B_INT_H
#define MOAT_SERVE_E2B_INT_H

#include <event2/http.h>
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

struct box;

#define E2B_ENVD_PORT 49983
#define E2B_ENVD_VERSION "0.6.4" /* lower it to what is implemented in full */
#define E2B_CLIENT_ID "6532622b"

/* What the door keeps with each of its sandboxes: box_door(b, "e2b") =
 * {"token": envdAccessToken, "template": templateID, "alias"?: ...}. */
const char *e2b_access_token(const struct box *b);
const char *e2b_template(const struct box *b);
bool e2b_equal(const char *a, const char *b); /* constant time */

/* Control-plane errors: {"code":status,"message":...} */
void e2b_api_error(struct evhttp_request *req, int status, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* envd REST errors (/files): {"code":status,"message":...} too */
#define e2b_envd_error e2b_api_error
/* The 502 of a sandbox that is not there: {"sandboxId","message","code":502} */
void e2b_not_found_502(struct evhttp_request *req, const char *id);

/* A /files request's credentials for a sandbox whose token is tok: the
 * X-Access-Token header or a signed URL (op "read" or "write"). 0, or the
 * status to answer (msg says why). */
int e2b_files_auth(struct evhttp_request *req, const char *tok, const char *op, char *msg,
		   size_t mcap);

/* e2b_api.c: the control plane (after X-API-KEY was checked). */
void e2b_api_route(struct evhttp_request *req, const char *path);
/* e2b_snap.c: E2B's snapshot calls onto snap.h. POST
 * /sandboxes/{id}/snapshots for the door's running sandbox b, body its
 * JSON ({"name"?}). */
void e2b_snap_create(struct evhttp_request *req, struct box *b, json_t *body);
/* GET /snapshots and DELETE /templates/{id} (seg: the path's n segments,
 * after any /v2): true when answered. */
bool e2b_snap_route(struct evhttp_request *req, char **seg, int n);
/* A create's templateID naming a snapshot (id or name): 1 with image =
 * "snapshot:<sid>" (for the /v1 create body) and *host = its sandbox ran
 * on the host's system; 0: not a snapshot; -1: the store failed. */
int e2b_snap_template(const char *tpl, char *image, size_t cap, bool *host);
/* e2b_envd.c: envd traffic for sandbox id (b NULL: unknown or dead: 502).
 * Checks X-Access-Token itself (not for /health; /files may be signed). */
void e2b_envd_route(struct evhttp_request *req, struct box *b, const char *id, int port,
		    const char *path);

#endif
