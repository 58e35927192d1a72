/* Pause and resume: part of the operation core (core.h), the one place
 * every door (/v1, E2B) calls. A paused sandbox's processes are frozen by
 * its freezer cgroup; every operation that needs its agent is refused
 * with 409 "paused" (core.c), and its idle and lifetime clocks stop. */
#ifndef MOAT_SERVE_LIFE_H
#define MOAT_SERVE_LIFE_H

#include "core.h"

#include <stdbool.h>

struct box;

/* 0, or -1 with e: 409 conflict (already paused; not running), 422
 * pause_unavailable (no freezer: the message says why), 500 internal.
 * release: hibernate (snapshot, stop, memory released; resume starts it
 * again from the snapshot with the same id). */
int core_pause(struct box *b, bool release, struct core_err *e);
/* 0, or -1 with e: 409 conflict (not paused), 500 internal. */
int core_resume(struct box *b, struct core_err *e);

#endif
