/* The attach door: GET /v1/sandboxes/{id}/processes/{pid}/attach with
 * Upgrade: websocket (docs/API.md, "Attach"). A thin layer onto the core's
 * core_attach (output), core_stdin, core_resize and core_signal: binary
 * frames carry a process's bytes both ways, text frames JSON control
 * messages. One attach per process at a time; closing it leaves the
 * process running. */
#ifndef MOAT_SERVE_ATTACH_H
#define MOAT_SERVE_ATTACH_H

#include <event2/http.h>

struct box;

/* Limits of the door. */
#define ATTACH_MAX_MESSAGE ((size_t)1 << 20) /* a client message over it: close 1009 */
#define ATTACH_CLOSE_WAIT_S 5                /* for the client's close after ours */
#define ATTACH_STDIN_HIGH ((size_t)1 << 20)  /* stdin in flight to the agent: stop reading */
#define ATTACH_OUT_HIGH ((size_t)1 << 20)    /* our frames unsent (pongs...): stop reading */
#define ATTACH_PING_S 30                     /* a ping when... */
#define ATTACH_QUIET_TICKS 3                 /* ...and the end after this many unanswered */

void attach_route(struct evhttp_request *req, struct box *b, const char *pid);

#endif
