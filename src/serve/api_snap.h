/* /v1's snapshot routes (docs/API.md "Snapshots"), a door onto snap.h. */
#ifndef MOAT_SERVE_API_SNAP_H
#define MOAT_SERVE_API_SNAP_H

#include <event2/http.h>
#include <stdbool.h>

struct box;

/* /v1/snapshots[/{sid}[/export]]: seg[0]="v1", seg[1]="snapshots". */
void api_snap_route(struct evhttp_request *req, char **seg, int n);
/* /v1/sandboxes/{id}/{snapshots|restore|fork}: true when what is one. */
bool api_snap_box_route(struct evhttp_request *req, struct box *b, const char *what, int n);

#endif
