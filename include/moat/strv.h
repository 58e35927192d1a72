/* A growable NULL-terminated vector of owned strings. */
#ifndef MOAT_STRV_H
#define MOAT_STRV_H

#include <stdbool.h>
#include <stddef.h>

struct moat_strv {
	char **v; /* NULL-terminated once non-empty; NULL when empty */
	size_t n;
};

/* Append a copy of s. Aborts on OOM (tiny allocations; a sandbox CLI that
 * cannot allocate a path has nothing sensible left to do). */
void moat_strv_add(struct moat_strv *sv, const char *s);
/* Append s and take ownership of it. */
void moat_strv_take(struct moat_strv *sv, char *s);
bool moat_strv_contains(const struct moat_strv *sv, const char *s);
void moat_strv_free(struct moat_strv *sv);

#endif
