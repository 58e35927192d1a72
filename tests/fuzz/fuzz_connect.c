/* libFuzzer target: the Connect JSON codec (src/serve/connect.c), which
 * reads what an E2B SDK sends to envd: stream and unary request bodies,
 * envelopes, the Connect-Timeout-Ms header, and proto3 JSON values
 * (base64 bytes, int64 strings, enums). The whole input is each of these
 * in turn. Checks: every refusal says why with a non-OK code; envelopes
 * stay within the input; a decoded base64 re-encodes and decodes to the
 * same bytes; a timeout taken is 1..10 digits; error bodies are JSON
 * whatever bytes their message holds. Seeds: tests/fuzz/corpus/fuzz_connect
 * (envelopes as the SDKs write them, JSON messages, base64 and numbers). */
#include "serve/connect.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void refused(const json_t *j, const struct connect_err *e)
{
	if (!j && (e->code == CONNECT_OK || !e->msg[0]))
		abort();
}

/* every field a handler reads, on whatever object came */
static void walk(const json_t *o)
{
	static const char *const names[] = {"SIGNAL_UNSPECIFIED", NULL, NULL, "X", NULL};
	const char *k;
	json_t *v;
	json_object_foreach((json_t *)o, k, v)
	{
		int64_t i;
		uint32_t u;
		bool b;
		int en;
		size_t n;
		if (pj_int64(v, &i) == 0 && json_is_string(v) && !json_string_length(v))
			abort();
		(void)pj_uint32(v, &u);
		(void)pj_bool(v, &b);
		if (pj_enum(v, names, 5, &en) == 0 && (en < 0 || en >= 5 || !names[en]))
			abort();
		free(pj_bytes(v, &n));
		if (pj_get(o, k, k) != (json_is_null(v) ? NULL : v))
			abort();
	}
}

static void bytes_check(const uint8_t *data, size_t size)
{
	json_t *s = json_stringn_nocheck((const char *)data, size);
	if (!s)
		return;
	size_t n = 0;
	char *b = pj_bytes(s, &n);
	json_decref(s);
	if (!b)
		return;
	if (n > size || b[n] != '\0')
		abort();
	json_t *again = pj_bytes_json(b, n);
	size_t n2 = 0;
	char *b2 = pj_bytes(again, &n2);
	if (!b2 || n2 != n || memcmp(b, b2, n))
		abort();
	free(b2);
	json_decref(again);
	free(b);

	int64_t i;
	s = json_stringn_nocheck((const char *)data, size);
	if (s && pj_int64(s, &i) == 0) {
		/* a decimal string that says the same: it must read back */
		json_t *t = pj_int64_json(i);
		int64_t i2;
		if (!t || pj_int64(t, &i2) < 0 || i2 != i)
			abort();
		json_decref(t);
	}
	json_decref(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct connect_err e = {0};
	json_t *j = connect_stream_request(data, size, &e);
	refused(j, &e);
	if (j && !json_is_object(j))
		abort();
	if (j)
		walk(j);
	json_decref(j);

	e = (struct connect_err){0};
	j = connect_unary_request(data, size, &e);
	refused(j, &e);
	if (j)
		walk(j);
	json_decref(j);

	/* a stream of envelopes, under two limits */
	static const size_t maxes[] = {CONNECT_MAX_MESSAGE, 8};
	for (size_t m = 0; m < 2; m++) {
		size_t off = 0;
		for (;;) {
			struct connect_env env;
			e = (struct connect_err){0};
			ssize_t r = connect_env_parse(data + off, size - off, maxes[m], &env, &e);
			if (r == 0)
				break;
			if (r < 0) {
				if (e.code == CONNECT_OK)
					abort();
				break;
			}
			if ((size_t)r > size - off || env.len != (size_t)r - 5 ||
			    env.data != (const char *)data + off + 5 || env.len > maxes[m] ||
			    (env.flags & ~CONNECT_FLAG_END))
				abort();
			off += (size_t)r;
		}
	}

	/* an envelope of the input reads back as itself */
	struct moat_buf out = {0};
	if (size <= 4096) {
		if (connect_env_put(&out, CONNECT_FLAG_END, data, size) < 0)
			abort();
		struct connect_env env;
		if (connect_env_parse(out.p, out.len, CONNECT_MAX_MESSAGE, &env, &e) !=
			    (ssize_t)(size + 5) ||
		    env.len != size || (size && memcmp(env.data, data, size)))
			abort();
	}
	moat_buf_free(&out);

	bytes_check(data, size);

	/* the input as a header value, and as an error message */
	char *s = malloc(size + 1);
	memcpy(s, data, size);
	s[size] = '\0';
	int64_t ms = -1;
	if (connect_timeout_ms(s, &ms) == 0) {
		size_t n = strlen(s);
		if (n < 1 || n > 10 || strspn(s, "0123456789") != n || ms < 0 || ms > 9999999999LL)
			abort();
	}
	j = connect_error_json(CONNECT_NOT_FOUND, s);
	if (!j || !json_is_string(json_object_get(j, "message")))
		abort();
	json_decref(j);
	if (connect_end_stream(&out, CONNECT_INTERNAL, s) < 0)
		abort();
	struct connect_env env;
	if (connect_env_parse(out.p, out.len, CONNECT_MAX_MESSAGE, &env, &e) != (ssize_t)out.len ||
	    env.flags != CONNECT_FLAG_END)
		abort();
	j = json_loadb(env.data, env.len, 0, NULL);
	if (!json_is_object(json_object_get(j, "error")))
		abort();
	json_decref(j);
	moat_buf_free(&out);
	free(s);
	return 0;
}
