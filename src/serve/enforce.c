/* See limits.h. */
#define _GNU_SOURCE
#include "enforce.h"

#include "box.h"
#include "jfield.h"

#include <moat/probe.h>

#include <stdio.h>

static const char *field(unsigned bit)
{
	return bit == MOAT_LIMIT_MEMORY ? "memory" : bit == MOAT_LIMIT_PIDS ? "pids" : "cpus";
}

int limits_defaults(uint64_t *memory, uint64_t *pids, uint64_t *cpu_milli, bool allow_degraded,
		    unsigned *dropped, struct moat_err *e)
{
	uint64_t *v[] = {memory, pids, cpu_milli};
	*dropped = 0;
	for (unsigned i = 0, bit = MOAT_LIMIT_MEMORY; bit <= MOAT_LIMIT_CPU; bit <<= 1, i++) {
		unsigned failed;
		if (!*v[i] || moat_limits_check(bit, &failed, e) == 0)
			continue;
		if (!allow_degraded)
			return moat_err_prefix(e, "--%s: this daemon cannot enforce it (run without "
					       "--%s, or with --allow-degraded to run sandboxes "
					       "without it)", field(bit), field(bit));
		fprintf(stderr, "moat serve: warning: --%s: not enforced (--allow-degraded): %s\n",
			field(bit), e->msg);
		*v[i] = 0;
		*dropped |= bit;
		*e = (struct moat_err){0};
	}
	return 0;
}

bool limits_check_create(struct core_err *ce, struct box_spec *s, bool allow_degraded)
{
	uint64_t *v[] = {&s->memory, &s->pids, &s->cpu_milli};
	for (unsigned i = 0, bit = MOAT_LIMIT_MEMORY; bit <= MOAT_LIMIT_CPU; bit <<= 1, i++) {
		struct moat_err e = {0};
		unsigned failed;
		if (!*v[i] || moat_limits_check(bit, &failed, &e) == 0)
			continue;
		if (!allow_degraded) {
			cerr(ce, 422, "limit_unavailable",
			     "limits.%s: this daemon cannot enforce it: %s; create without "
			     "limits.%s (moat create: without --%s), or the operator fixes that "
			     "or starts moat serve with --allow-degraded", field(bit), e.msg,
			     field(bit), field(bit));
			return false;
		}
		fprintf(stderr, "moat serve: warning: limits.%s of a create: not enforced "
				"(--allow-degraded): %s\n", field(bit), e.msg);
		*v[i] = 0;
		s->degraded |= bit;
	}
	return true;
}
