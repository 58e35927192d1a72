/* JSON shared by the doors and the core: checks of request bodies (each
 * error names the field: 400 invalid_request in a struct core_err), and
 * process output as the answers carry it. */
#ifndef MOAT_SERVE_JFIELD_H
#define MOAT_SERVE_JFIELD_H

#include "core.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>

/* Fill e (status, code, message; the message made valid UTF-8). */
void cerr(struct core_err *e, int status, const char *code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
void cerr_va(struct core_err *e, int status, const char *code, const char *fmt, va_list ap)
	__attribute__((format(printf, 4, 0)));
/* Unknown keys of o are errors naming the key (keys: NULL-terminated). */
bool jf_only_keys(struct core_err *ce, json_t *o, const char *what, const char *const *keys);
/* An optional integer field from 0 to max. */
bool jf_int(struct core_err *ce, json_t *o, const char *key, int64_t max, int64_t *out);
bool jf_bool(struct core_err *ce, json_t *o, const char *key, bool *out);
/* An optional object of strings; env: keys are variable names. */
bool jf_string_map(struct core_err *ce, json_t *v, const char *what, bool env);

/* Process output (n bytes at p; p may be NULL when n is 0) as /v1 shapes
 * it: a JSON string, UTF-8 with each invalid byte (and NUL, which jansson
 * strings cannot hold) as U+FFFD. A new reference, "" when out of memory. */
json_t *jf_text(const char *p, size_t n);
/* /v1's answer for a process that ended, up to "timed_out" (the caller
 * adds "stdout", "stderr" and "truncated", in that order, as it has them);
 * with_process (write_stdin's answer): "running": false and "process_id"
 * first. A new reference. */
json_t *jf_exit(const struct core_exit *x, bool with_process);

#endif
