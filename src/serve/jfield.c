/* JSON body checks: see jfield.h. */
#define _GNU_SOURCE
#include "jfield.h"

#include "../base/utf8.h"

#include <stdarg.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

void cerr_va(struct core_err *e, int status, const char *code, const char *fmt, va_list ap)
{
	if (!e)
		return;
	e->status = status;
	snprintf(e->code, sizeof e->code, "%s", code);
	vsnprintf(e->msg, sizeof e->msg, fmt, ap);
	/* a message quotes the client (a path, a key, cut at a byte count) */
	moat_utf8_clean(e->msg);
}

void cerr(struct core_err *e, int status, const char *code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	cerr_va(e, status, code, fmt, ap);
	va_end(ap);
}

/* Unknown keys are errors naming the key. */
bool jf_only_keys(struct core_err *ce, json_t *o, const char *what,
		      const char *const *keys)
{
	const char *k;
	json_t *v;
	json_object_foreach(o, k, v)
	{
		bool known = false;
		for (size_t i = 0; keys[i] && !known; i++)
			known = !strcmp(k, keys[i]);
		if (!known) {
			cerr(ce, 400, "invalid_request", "%s: unknown field \"%.64s\"", what, k);
			return false;
		}
	}
	return true;
}

/* An optional non-negative integer field. */
bool jf_int(struct core_err *ce, json_t *o, const char *key, int64_t max,
		    int64_t *out)
{
	json_t *v = json_object_get(o, key);
	if (!v || json_is_null(v))
		return true;
	if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > max) {
		cerr(ce, 400, "invalid_request", "%s must be an integer from 0 to %lld", key,
			   (long long)max);
		return false;
	}
	*out = json_integer_value(v);
	return true;
}

bool jf_bool(struct core_err *ce, json_t *o, const char *key, bool *out)
{
	json_t *v = json_object_get(o, key);
	if (!v || json_is_null(v))
		return true;
	if (!json_is_boolean(v)) {
		cerr(ce, 400, "invalid_request", "%s must be true or false", key);
		return false;
	}
	*out = json_is_true(v);
	return true;
}

/* An object of strings (env, metadata); NULL key = allowed missing. */
bool jf_string_map(struct core_err *ce, json_t *v, const char *what, bool env)
{
	if (!v || json_is_null(v))
		return true;
	if (!json_is_object(v)) {
		cerr(ce, 400, "invalid_request", "%s must be an object of strings", what);
		return false;
	}
	const char *k;
	json_t *x;
	json_object_foreach(v, k, x)
	{
		if (!json_is_string(x) || strlen(json_string_value(x)) != json_string_length(x)) {
			cerr(ce, 400, "invalid_request", "%s.%.64s must be a string", what, k);
			return false;
		}
		if (env && (!*k || strchr(k, '=') || strlen(k) > 256)) {
			cerr(ce, 400, "invalid_request", "%s: bad variable name \"%.64s\"",
				   what, k);
			return false;
		}
	}
	return true;
}


json_t *jf_text(const char *s, size_t n)
{
	const unsigned char *p = (const unsigned char *)(s ? s : "");
	size_t o = 0;
	char *out = malloc(n * 3 + 1);
	if (!out)
		return json_string("");
	for (size_t i = 0; i < n;) {
		size_t len = p[i] ? moat_utf8_seq(p + i, n - i) : 0;
		if (len) {
			memcpy(out + o, p + i, len);
			o += len;
			i += len;
		} else {
			memcpy(out + o, "\xef\xbf\xbd", 3);
			o += 3;
			i++;
		}
	}
	json_t *j = json_stringn(out, o);
	free(out);
	return j ? j : json_string("");
}

json_t *jf_exit(const struct core_exit *x, bool with_process)
{
	json_t *o = json_object();
	if (with_process) {
		json_object_set_new(o, "running", json_false());
		json_object_set_new(o, "process_id", json_integer(x->pid));
	}
	json_object_set_new(o, "exit_code", json_integer(x->exit_code));
	json_object_set_new(o, "signal", json_integer(x->signal));
	json_object_set_new(o, "duration_ms", json_integer(x->duration_ms));
	json_object_set_new(o, "timed_out", json_boolean(x->timed_out));
	return o;
}
