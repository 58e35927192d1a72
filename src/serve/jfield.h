/* Checks of JSON request bodies shared by the doors and the core: each
 * error names the field (400 invalid_request in a struct core_err). */
#ifndef MOAT_SERVE_JFIELD_H
#define MOAT_SERVE_JFIELD_H

#include "core.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

/* Fill e (status, code, message; the message made valid UTF-8). */
void cerr(struct core_err *e, int status, const char *code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/* Unknown keys of o are errors naming the key (keys: NULL-terminated). */
bool jf_only_keys(struct core_err *ce, json_t *o, const char *what, const char *const *keys);
/* An optional integer field from 0 to max. */
bool jf_int(struct core_err *ce, json_t *o, const char *key, int64_t max, int64_t *out);
bool jf_bool(struct core_err *ce, json_t *o, const char *key, bool *out);
/* An optional object of strings; env: keys are variable names. */
bool jf_string_map(struct core_err *ce, json_t *v, const char *what, bool env);

#endif
