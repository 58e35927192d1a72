/* /v1's POST /v1/sandboxes/{id}/pause and .../resume (api_life.c). */
#ifndef MOAT_SERVE_API_LIFE_H
#define MOAT_SERVE_API_LIFE_H

#include <event2/http.h>

struct box;

/* what: "pause" or "resume" */
void api_life_route(struct evhttp_request *req, struct box *b, const char *what);

#endif
