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
 * release: hibernate (box_hibernate: its processes stopped and its memory
 * released, its fs/ kept on disk as they left it; resume starts it again
 * from there with the same id). Needs no freezer; 409 conflict for a
 * workspace in memory (limits.disk). */
int core_pause(struct box *b, bool release, struct core_err *e);
/* 0, or -1 with e: 409 conflict (not paused), 500 internal (a hibernated
 * sandbox that could not start again: it stays hibernated). */
int core_resume(struct box *b, struct core_err *e);

#endif
