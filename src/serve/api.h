/* moat's own door, /v1 (docs/API.md): HTTP in, the operation core
 * (core.h) behind. */
#ifndef MOAT_SERVE_API_H
#define MOAT_SERVE_API_H

#include <event2/http.h>
#include <stdint.h>

struct event_base;
struct gate_policy;
#include <jansson.h>

struct api_config {
	struct event_base *base;
	char *const *host_paths; /* --allow-host-path dirs, NULL-terminated */
	uint64_t max_file;       /* PUT files body limit */
	uint64_t max_archive;    /* unpacked archive limit */
	const struct gate_policy *net_ceiling; /* --net-allow, or NULL: no network */
	char *const *net_allow;  /* the same patterns as given (for manifest clones) */
	json_t *secrets;         /* the secret store: NAME -> value */
	const int64_t *quotas;   /* the operator's ceilings (MOAT_QUOTAS of them) */
	uint64_t default_memory, default_pids, default_cpu_milli; /* --memory etc. (0: none) */
};

void api_init(const struct api_config *c);
/* The body limit of a route (see http_set_body_limit). */
uint64_t api_body_limit(enum evhttp_cmd_type m, const char *path);
/* /v1/images (api_images.c): seg[0] "v1", seg[1] "images", n segments
 * (still percent-encoded). */
void api_images_route(struct evhttp_request *req, struct event_base *base, char **seg, int n);
/* One server-sent event "event: <event>\ndata: <data as compact JSON>" on a
 * streaming reply; takes data's reference. */
void api_sse_event(struct evhttp_request *req, const char *event, json_t *data);
/* Route one authenticated request. */
void api_route(struct evhttp_request *req);

#endif
