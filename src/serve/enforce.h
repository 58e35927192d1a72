/* The resource limits a daemon can enforce (docs/API.md limit_unavailable,
 * docs/policy.md "Limits for a normal user"): checked with the engine's
 * moat_limits_check before anything of a sandbox is made. */
#ifndef MOAT_SERVE_ENFORCE_H
#define MOAT_SERVE_ENFORCE_H

#include "core.h"

#include <moat/err.h>

#include <stdbool.h>
#include <stdint.h>

struct box_spec;

/* At start, the operator's --memory/--pids/--cpus: one this daemon cannot
 * enforce fails the start; with allow_degraded it is dropped (set to 0),
 * logged, and its bit (MOAT_LIMIT_*) set in *dropped. */
int limits_defaults(uint64_t *memory, uint64_t *pids, uint64_t *cpu_milli, bool allow_degraded,
		    unsigned *dropped, struct moat_err *e);

/* A create's limits (s->memory, pids, cpu_milli, already validated): one
 * this daemon cannot enforce is a 422 limit_unavailable naming
 * limits.<name>, the reason and what to do; with allow_degraded it is
 * dropped (0), logged, and its bit set in s->degraded. */
bool limits_check_create(struct core_err *ce, struct box_spec *s, bool allow_degraded);

#endif
