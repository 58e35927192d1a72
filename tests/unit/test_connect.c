/* Unit tests for src/serve/connect.c: the Connect JSON codec (envelopes,
 * request bodies, errors, timeouts) and the proto3 JSON forms. Bodies are
 * exact heap copies, so a read past the end trips ASan. */
#include <criterion/criterion.h>

#include "serve/connect.h"

#include <stdlib.h>
#include <string.h>

#define cn_assert_has(hay, needle) \
	cr_assert(strstr((hay), (needle)) != NULL, "expected \"%s\" in \"%s\"", (needle), (hay))

/* An exact-size heap copy (freed by the caller). */
static void *cn_copy(const void *p, size_t len)
{
	void *c = malloc(len ? len : 1);
	cr_assert_not_null(c);
	memcpy(c, p, len);
	return c;
}

/* An envelope's bytes into buf; returns its size. */
static size_t cn_env(unsigned char *buf, uint8_t flags, const char *data, size_t len)
{
	buf[0] = flags;
	buf[1] = (unsigned char)(len >> 24);
	buf[2] = (unsigned char)(len >> 16);
	buf[3] = (unsigned char)(len >> 8);
	buf[4] = (unsigned char)len;
	memcpy(buf + 5, data, len);
	return len + 5;
}

static json_t *cn_stream(const void *body, size_t len, struct connect_err *e)
{
	void *c = cn_copy(body, len);
	json_t *j = connect_stream_request(c, len, e);
	free(c);
	return j;
}

static json_t *cn_unary(const char *body, struct connect_err *e)
{
	size_t len = strlen(body);
	void *c = cn_copy(body, len);
	json_t *j = connect_unary_request(c, len, e);
	free(c);
	return j;
}

/* ---- codes ---------------------------------------------------------------- */

Test(connect, code_names_and_http)
{
	static const struct {
		enum connect_code c;
		const char *name;
		int http;
	} t[] = {
		{CONNECT_CANCELED, "canceled", 499},
		{CONNECT_UNKNOWN, "unknown", 500},
		{CONNECT_INVALID_ARGUMENT, "invalid_argument", 400},
		{CONNECT_DEADLINE_EXCEEDED, "deadline_exceeded", 504},
		{CONNECT_NOT_FOUND, "not_found", 404},
		{CONNECT_ALREADY_EXISTS, "already_exists", 409},
		{CONNECT_PERMISSION_DENIED, "permission_denied", 403},
		{CONNECT_RESOURCE_EXHAUSTED, "resource_exhausted", 429},
		{CONNECT_FAILED_PRECONDITION, "failed_precondition", 400},
		{CONNECT_ABORTED, "aborted", 409},
		{CONNECT_OUT_OF_RANGE, "out_of_range", 400},
		{CONNECT_UNIMPLEMENTED, "unimplemented", 501},
		{CONNECT_INTERNAL, "internal", 500},
		{CONNECT_UNAVAILABLE, "unavailable", 503},
		{CONNECT_DATA_LOSS, "data_loss", 500},
		{CONNECT_UNAUTHENTICATED, "unauthenticated", 401},
	};
	for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
		cr_assert_str_eq(connect_code_name(t[i].c), t[i].name);
		cr_assert_eq(connect_code_http(t[i].c), t[i].http, "%s", t[i].name);
	}
	cr_assert_str_eq(connect_code_name((enum connect_code)99), "unknown");
	cr_assert_eq(connect_code_http((enum connect_code)99), 500);
}

Test(connect, codes_from_moat)
{
	static const struct {
		const char *moat;
		enum connect_code c;
	} t[] = {
		{"invalid_request", CONNECT_INVALID_ARGUMENT},
		{"invalid_path", CONNECT_INVALID_ARGUMENT},
		{"is_directory", CONNECT_INVALID_ARGUMENT},
		{"forbidden", CONNECT_PERMISSION_DENIED},
		{"not_found", CONNECT_NOT_FOUND},
		{"already_exists", CONNECT_ALREADY_EXISTS},
		{"conflict", CONNECT_FAILED_PRECONDITION},
		{"too_large", CONNECT_RESOURCE_EXHAUSTED},
		{"unsupported_media_type", CONNECT_INVALID_ARGUMENT},
		{"patch_failed", CONNECT_INVALID_ARGUMENT},
		{"limit_reached", CONNECT_RESOURCE_EXHAUSTED},
		{"timeout", CONNECT_DEADLINE_EXCEEDED},
		{"unavailable", CONNECT_UNAVAILABLE},
		{"unauthorized", CONNECT_UNAUTHENTICATED},
		{"internal", CONNECT_INTERNAL},
	};
	for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
		cr_assert_eq(connect_code_from_moat(t[i].moat, 500), t[i].c, "%s", t[i].moat);
	/* unknown codes: the status decides */
	cr_assert_eq(connect_code_from_moat("weird", 404), CONNECT_NOT_FOUND);
	cr_assert_eq(connect_code_from_moat(NULL, 401), CONNECT_UNAUTHENTICATED);
	cr_assert_eq(connect_code_from_moat("weird", 400), CONNECT_INVALID_ARGUMENT);
	cr_assert_eq(connect_code_from_moat("weird", 503), CONNECT_UNAVAILABLE);
	cr_assert_eq(connect_code_from_moat("weird", 500), CONNECT_INTERNAL);
	cr_assert_eq(connect_code_from_moat("weird", 0), CONNECT_INTERNAL);
}

Test(connect, content_types)
{
	cr_assert(connect_ct_unary("application/json"));
	cr_assert(connect_ct_unary("Application/JSON"));
	cr_assert(connect_ct_unary("application/json; charset=utf-8"));
	cr_assert(connect_ct_unary("application/json;charset=UTF-8"));
	cr_assert_not(connect_ct_unary(NULL));
	cr_assert_not(connect_ct_unary(""));
	cr_assert_not(connect_ct_unary("application/jsonx"));
	cr_assert_not(connect_ct_unary("application/connect+json"));
	cr_assert_not(connect_ct_unary("text/plain"));
	cr_assert(connect_ct_stream("application/connect+json"));
	cr_assert(connect_ct_stream("APPLICATION/Connect+Json"));
	cr_assert(connect_ct_stream("application/connect+json; charset=utf-8"));
	cr_assert_not(connect_ct_stream("application/json"));
	cr_assert_not(connect_ct_stream("application/connect+proto"));
	cr_assert_not(connect_ct_stream("application/connect+jsonp"));
}

/* ---- envelopes ------------------------------------------------------------ */

Test(connect, envelope_round_trip)
{
	struct moat_buf b = {0};
	cr_assert_eq(connect_env_put(&b, 0, "{\"a\":1}", 7), 0);
	cr_assert_eq(connect_env_json(&b, json_pack("{s:s}", "k", "v")), 0);
	cr_assert_eq(connect_end_stream(&b, CONNECT_OK, NULL), 0);
	const unsigned char want0[] = {0, 0, 0, 0, 7};
	cr_assert_eq(memcmp(b.p, want0, 5), 0);

	void *c = cn_copy(b.p, b.len);
	size_t off = 0;
	struct connect_env env;
	struct connect_err e;
	const char *want[] = {"{\"a\":1}", "{\"k\":\"v\"}", "{}"};
	const uint8_t flags[] = {0, 0, CONNECT_FLAG_END};
	for (int i = 0; i < 3; i++) {
		ssize_t r = connect_env_parse((char *)c + off, b.len - off, CONNECT_MAX_MESSAGE, &env, &e);
		cr_assert_gt(r, 0);
		cr_assert_eq(env.flags, flags[i]);
		cr_assert_eq(env.len, strlen(want[i]));
		cr_assert_eq(memcmp(env.data, want[i], env.len), 0);
		off += (size_t)r;
	}
	cr_assert_eq(off, b.len);
	cr_assert_eq(connect_env_parse((char *)c + off, 0, CONNECT_MAX_MESSAGE, &env, &e), 0);
	free(c);
	moat_buf_free(&b);
}

Test(connect, envelope_partial_input)
{
	unsigned char buf[32];
	size_t n = cn_env(buf, 0, "{\"x\":true}", 10);
	struct connect_env env;
	struct connect_err e;
	for (size_t cut = 0; cut < n; cut++) {
		void *c = cn_copy(buf, cut);
		cr_assert_eq(connect_env_parse(c, cut, CONNECT_MAX_MESSAGE, &env, &e), 0, "cut %zu", cut);
		free(c);
	}
	void *c = cn_copy(buf, n);
	cr_assert_eq(connect_env_parse(c, n, CONNECT_MAX_MESSAGE, &env, &e), (ssize_t)n);
	free(c);
}

Test(connect, envelope_oversize_and_flags)
{
	struct connect_env env;
	struct connect_err e;
	/* refused from the header alone */
	const unsigned char big[5] = {0, 0x01, 0x00, 0x00, 0x01}; /* 16 MiB + 1 */
	cr_assert_eq(connect_env_parse(big, 5, CONNECT_MAX_MESSAGE, &env, &e), -1);
	cr_assert_eq(e.code, CONNECT_RESOURCE_EXHAUSTED);
	const unsigned char at_max[5] = {0, 0x01, 0x00, 0x00, 0x00};
	cr_assert_eq(connect_env_parse(at_max, 5, CONNECT_MAX_MESSAGE, &env, &e), 0);
	const unsigned char small[6] = {0, 0, 0, 0, 1, 'x'};
	cr_assert_eq(connect_env_parse(small, 6, 0, &env, &e), -1);
	cr_assert_eq(e.code, CONNECT_RESOURCE_EXHAUSTED);

	unsigned char buf[16];
	cn_env(buf, CONNECT_FLAG_COMPRESSED, "{}", 2);
	cr_assert_eq(connect_env_parse(buf, 7, CONNECT_MAX_MESSAGE, &env, &e), -1);
	cr_assert_eq(e.code, CONNECT_INVALID_ARGUMENT);
	cn_assert_has(e.msg, "compressed");
	for (unsigned f = 4; f < 256; f <<= 1) {
		cn_env(buf, (uint8_t)f, "{}", 2);
		cr_assert_eq(connect_env_parse(buf, 7, CONNECT_MAX_MESSAGE, &env, &e), -1, "flag %u", f);
		cr_assert_eq(e.code, CONNECT_INVALID_ARGUMENT);
	}
	/* NULL error and output pointers are allowed */
	cn_env(buf, 0, "{}", 2);
	cr_assert_eq(connect_env_parse(buf, 7, CONNECT_MAX_MESSAGE, NULL, NULL), 7);
	cr_assert_eq(connect_env_parse(big, 5, CONNECT_MAX_MESSAGE, NULL, NULL), -1);
}

Test(connect, end_stream_bytes)
{
	struct moat_buf b = {0};
	cr_assert_eq(connect_end_stream(&b, CONNECT_OK, NULL), 0);
	const unsigned char ok[] = {0x02, 0, 0, 0, 2, '{', '}'};
	cr_assert_eq(b.len, sizeof ok);
	cr_assert_eq(memcmp(b.p, ok, sizeof ok), 0);
	moat_buf_free(&b);

	cr_assert_eq(connect_end_stream(&b, CONNECT_DEADLINE_EXCEEDED, "took too long"), 0);
	const char want[] = "{\"error\":{\"code\":\"deadline_exceeded\",\"message\":\"took too long\"}}";
	size_t n = strlen(want);
	cr_assert_eq(b.len, n + 5);
	cr_assert_eq((unsigned char)b.p[0], CONNECT_FLAG_END);
	cr_assert_eq(((unsigned char)b.p[3] << 8) | (unsigned char)b.p[4], (int)n);
	cr_assert_eq(memcmp(b.p + 5, want, n), 0);
	moat_buf_free(&b);
}

Test(connect, error_json_shape)
{
	json_t *j = connect_error_json(CONNECT_NOT_FOUND, "no such file \"/a\"");
	cr_assert_eq(json_object_size(j), 2);
	cr_assert_str_eq(json_string_value(json_object_get(j, "code")), "not_found");
	cr_assert_str_eq(json_string_value(json_object_get(j, "message")), "no such file \"/a\"");
	json_decref(j);
	/* invalid UTF-8 in a message (a path) still makes JSON */
	j = connect_error_json(CONNECT_INTERNAL, "bad \xff\xfe name");
	cr_assert_not_null(j);
	cr_assert_str_eq(json_string_value(json_object_get(j, "message")), "bad ?? name");
	json_decref(j);
	j = connect_error_json(CONNECT_UNIMPLEMENTED, NULL);
	cr_assert_eq(json_object_size(j), 1);
	json_decref(j);
	struct moat_buf b = {0};
	cr_assert_eq(connect_end_stream(&b, CONNECT_INTERNAL, "x\xc3"), 0);
	json_t *t = json_loadb(b.p + 5, b.len - 5, 0, NULL);
	cr_assert_str_eq(json_string_value(json_object_get(json_object_get(t, "error"), "message")),
			 "x?");
	json_decref(t);
	moat_buf_free(&b);
}

/* ---- request bodies ------------------------------------------------------- */

Test(connect, stream_request)
{
	unsigned char buf[128];
	struct connect_err e;
	const char *m = "{\"process\":{\"cmd\":\"/bin/bash\"}}";
	size_t n = cn_env(buf, 0, m, strlen(m));
	json_t *j = cn_stream(buf, n, &e);
	cr_assert(json_is_object(j));
	cr_assert_str_eq(json_string_value(json_object_get(json_object_get(j, "process"), "cmd")),
			 "/bin/bash");
	json_decref(j);

	/* a trailing empty end frame, with nothing or {} */
	size_t n2 = n + cn_env(buf + n, CONNECT_FLAG_END, "", 0);
	j = cn_stream(buf, n2, &e);
	cr_assert(json_is_object(j));
	json_decref(j);
	n2 = n + cn_env(buf + n, CONNECT_FLAG_END, "{}", 2);
	j = cn_stream(buf, n2, &e);
	cr_assert(json_is_object(j));
	json_decref(j);

	/* an end frame with content, a second message, garbage: refused */
	n2 = n + cn_env(buf + n, CONNECT_FLAG_END, "{\"a\":1}", 7);
	cr_assert_null(cn_stream(buf, n2, &e));
	cr_assert_eq(e.code, CONNECT_INVALID_ARGUMENT);
	n2 = n + cn_env(buf + n, 0, "{}", 2);
	cr_assert_null(cn_stream(buf, n2, &e));
	n2 = n + cn_env(buf + n, CONNECT_FLAG_END, "{}", 2);
	buf[n2] = 'x';
	cr_assert_null(cn_stream(buf, n2 + 1, &e));
	buf[n] = 'x';
	cr_assert_null(cn_stream(buf, n + 1, &e));
	cn_assert_has(e.msg, "after the request message");
}

Test(connect, stream_request_refusals)
{
	unsigned char buf[64];
	struct connect_err e;
	cr_assert_null(cn_stream("", 0, &e));
	cr_assert_eq(e.code, CONNECT_INVALID_ARGUMENT);
	size_t n = cn_env(buf, 0, "{}", 2);
	cr_assert_null(cn_stream(buf, n - 1, &e));
	cn_assert_has(e.msg, "truncated");
	n = cn_env(buf, 0, "[1]", 3);
	cr_assert_null(cn_stream(buf, n, &e));
	cn_assert_has(e.msg, "not a JSON object");
	n = cn_env(buf, 0, "{\"a\":", 5);
	cr_assert_null(cn_stream(buf, n, &e));
	cr_assert_eq(e.code, CONNECT_INVALID_ARGUMENT);
	cn_assert_has(e.msg, "invalid JSON");
	n = cn_env(buf, 0, "{\"a\":1,\"a\":2}", 13);
	cr_assert_null(cn_stream(buf, n, &e));
	n = cn_env(buf, CONNECT_FLAG_END, "{}", 2);
	cr_assert_null(cn_stream(buf, n, &e));
	cn_assert_has(e.msg, "end-stream");
	n = cn_env(buf, CONNECT_FLAG_COMPRESSED, "{}", 2);
	cr_assert_null(cn_stream(buf, n, &e));
	cr_assert_eq(e.code, CONNECT_INVALID_ARGUMENT);
	const unsigned char big[5] = {0, 0x7f, 0, 0, 0};
	cr_assert_null(cn_stream(big, 5, &e));
	cr_assert_eq(e.code, CONNECT_RESOURCE_EXHAUSTED);
}

Test(connect, unary_request)
{
	struct connect_err e;
	json_t *j = cn_unary("", &e);
	cr_assert(json_is_object(j));
	cr_assert_eq(json_object_size(j), 0);
	json_decref(j);
	j = cn_unary("{\"path\":\"/home/user\",\"depth\":1}", &e);
	cr_assert_str_eq(json_string_value(json_object_get(j, "path")), "/home/user");
	json_decref(j);
	cr_assert_null(cn_unary("\"s\"", &e));
	cn_assert_has(e.msg, "not a JSON object");
	cr_assert_null(cn_unary("{} x", &e));
	cr_assert_eq(e.code, CONNECT_INVALID_ARGUMENT);
	cr_assert_null(cn_unary("{\"a\":\"\xff\"}", &e));
	cr_assert_eq(e.code, CONNECT_INVALID_ARGUMENT);
	cr_assert_null(connect_unary_request("x", 1, NULL)); /* e may be NULL */
}

/* ---- timeouts ------------------------------------------------------------- */

Test(connect, timeout_header)
{
	int64_t ms = 77;
	cr_assert_eq(connect_timeout_ms(NULL, &ms), 0);
	cr_assert_eq(ms, 0);
	cr_assert_eq(connect_timeout_ms("60000", &ms), 0);
	cr_assert_eq(ms, 60000);
	cr_assert_eq(connect_timeout_ms("1", &ms), 0);
	cr_assert_eq(ms, 1);
	cr_assert_eq(connect_timeout_ms("9999999999", &ms), 0);
	cr_assert_eq(ms, 9999999999LL);
	cr_assert_eq(connect_timeout_ms("0000000001", &ms), 0);
	cr_assert_eq(ms, 1);
	const char *bad[] = {"", "10000000000", "+5", "-5", " 5", "5 ", "5s", "0x10", "1e3", "٣"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		cr_assert_eq(connect_timeout_ms(bad[i], &ms), -1, "\"%s\"", bad[i]);
}

/* ---- proto3 JSON ---------------------------------------------------------- */

Test(connect, pj_get_names)
{
	json_t *o = json_loads("{\"processId\":1,\"exist_ok\":true,\"nul\":null,\"both\":null,"
			       "\"both_x\":3}",
			       0, NULL);
	cr_assert_eq(json_integer_value(pj_get(o, "processId", "process_id")), 1);
	cr_assert(json_is_true(pj_get(o, "existOk", "exist_ok")));
	cr_assert_null(pj_get(o, "nul", NULL));
	cr_assert_null(pj_get(o, "missing", "missing_too"));
	cr_assert_eq(json_integer_value(pj_get(o, "both", "both_x")), 3);
	cr_assert_null(pj_get(NULL, "a", "b"));
	json_t *arr = json_array();
	cr_assert_null(pj_get(arr, "a", "b"));
	json_decref(arr);
	json_decref(o);
}

static int cn_i64(const char *json, int64_t *v)
{
	json_t *j = json_loads(json, JSON_DECODE_ANY, NULL);
	cr_assert_not_null(j, "%s", json);
	int r = pj_int64(j, v);
	json_decref(j);
	return r;
}

Test(connect, int64_forms)
{
	static const struct {
		const char *json;
		int64_t v;
	} ok[] = {
		{"0", 0},
		{"42", 42},
		{"-7", -7},
		{"\"123\"", 123},
		{"\"-123\"", -123},
		{"\"0\"", 0},
		{"\"-0\"", 0},
		{"\"9223372036854775807\"", INT64_MAX},
		{"\"-9223372036854775808\"", INT64_MIN},
		{"9223372036854775807", INT64_MAX},
		{"-9223372036854775808", INT64_MIN},
		{"1.0", 1},
		{"1e3", 1000},
		{"\"1e3\"", 1000},
		{"\"1.50e1\"", 15},
		{"\"10e-1\"", 1},
		{"\"0.0\"", 0},
		{"\"0e999999999\"", 0},
	};
	for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
		int64_t v = 99;
		cr_assert_eq(cn_i64(ok[i].json, &v), 0, "%s", ok[i].json);
		cr_assert_eq(v, ok[i].v, "%s: %lld", ok[i].json, (long long)v);
	}
	const char *bad[] = {"1.5", "\"1.5\"", "\"+1\"", "\" 1\"", "\"1 \"", "\"\"", "\"-\"",
			     "\"01\"", "\"1.\"", "\".5\"", "\"1e\"", "\"0x10\"", "\"9223372036854775808\"",
			     "\"-9223372036854775809\"", "\"99999999999999999999\"", "1e19", "-1e19",
			     "\"1e19\"", "\"5e-1\"", "true", "null", "[1]", "{}", "\"1\\u0000\""};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		int64_t v;
		json_t *j = json_loads(bad[i], JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
		cr_assert_not_null(j, "%s", bad[i]);
		cr_assert_eq(pj_int64(j, &v), -1, "%s accepted", bad[i]);
		json_decref(j);
	}
	int64_t v;
	cr_assert_eq(pj_int64(NULL, &v), -1);
}

Test(connect, uint32_bool_int64_out)
{
	uint32_t u;
	json_t *j = json_integer(4294967295LL);
	cr_assert_eq(pj_uint32(j, &u), 0);
	cr_assert_eq(u, UINT32_MAX);
	json_decref(j);
	j = json_integer(4294967296LL);
	cr_assert_eq(pj_uint32(j, &u), -1);
	json_decref(j);
	j = json_integer(-1);
	cr_assert_eq(pj_uint32(j, &u), -1);
	json_decref(j);
	j = json_string("420");
	cr_assert_eq(pj_uint32(j, &u), 0);
	cr_assert_eq(u, 420);
	json_decref(j);

	bool b = false;
	cr_assert_eq(pj_bool(json_true(), &b), 0);
	cr_assert(b);
	cr_assert_eq(pj_bool(json_false(), &b), 0);
	cr_assert_not(b);
	j = json_string("true");
	cr_assert_eq(pj_bool(j, &b), -1);
	json_decref(j);
	j = json_integer(1);
	cr_assert_eq(pj_bool(j, &b), -1);
	json_decref(j);

	j = pj_int64_json(INT64_MIN);
	cr_assert_str_eq(json_string_value(j), "-9223372036854775808");
	json_decref(j);
	j = pj_int64_json(3);
	cr_assert_str_eq(json_string_value(j), "3");
	json_decref(j);
}

/* pj_bytes of a JSON string: its bytes, or NULL */
static char *cn_bytes(const char *s, size_t *len)
{
	json_t *j = json_string(s);
	cr_assert_not_null(j);
	char *r = pj_bytes(j, len);
	json_decref(j);
	return r;
}

Test(connect, base64_variants)
{
	static const struct {
		const char *in, *out;
	} ok[] = {
		{"", ""},
		{"Zg==", "f"},
		{"Zm8=", "fo"},
		{"Zm9v", "foo"},
		{"Zg", "f"},
		{"Zm8", "fo"},
		{"Zm9vYmFy", "foobar"},
		{"Zm9vYg==", "foob"},
		{"Zm9vYg", "foob"},
		{"Zm9vYmE=", "fooba"},
		{"-_8=", "\xfb\xff"},   /* URL-safe, padded */
		{"-_8", "\xfb\xff"},    /* URL-safe, unpadded */
		{"+/8=", "\xfb\xff"},   /* standard */
		{"+/8", "\xfb\xff"},
		{"Zh==", "f"},          /* extra bits ignored, as Go */
	};
	for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
		size_t len = 99;
		char *r = cn_bytes(ok[i].in, &len);
		cr_assert_not_null(r, "\"%s\" refused", ok[i].in);
		cr_assert_eq(len, strlen(ok[i].out), "\"%s\"", ok[i].in);
		cr_assert_eq(memcmp(r, ok[i].out, len), 0, "\"%s\"", ok[i].in);
		cr_assert_eq(r[len], '\0');
		free(r);
	}
	const char *bad[] = {"Z",     "Zg=",   "Zg===", "Z===",  "=",      "==",    "Zm9v=",
			     "Zm 9v", "Zm9v\n", "Zm9v!", "+_8=",  "-/8=",   "Zg==Zg==", "Z=g=",
			     "Zm9vY", "é",     "Zm9vYg=", "\t"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		size_t len;
		char *r = cn_bytes(bad[i], &len);
		cr_assert_null(r, "\"%s\" accepted", bad[i]);
	}
	size_t len;
	json_t *n = json_integer(1);
	cr_assert_null(pj_bytes(n, &len));
	json_decref(n);
	/* bytes with a NUL inside, both ways */
	json_t *j = pj_bytes_json("a\0b\xff", 4);
	cr_assert_str_eq(json_string_value(j), "YQBi/w==");
	char *r = pj_bytes(j, &len);
	cr_assert_eq(len, 4);
	cr_assert_eq(memcmp(r, "a\0b\xff", 4), 0);
	free(r);
	json_decref(j);
	j = pj_bytes_json("", 0);
	cr_assert_str_eq(json_string_value(j), "");
	json_decref(j);
}

Test(connect, enums)
{
	static const char *const sig[16] = {[0] = "SIGNAL_UNSPECIFIED", [9] = "SIGNAL_SIGKILL",
					    [15] = "SIGNAL_SIGTERM"};
	int v = -5;
	json_t *j = json_string("SIGNAL_SIGKILL");
	cr_assert_eq(pj_enum(j, sig, 16, &v), 0);
	cr_assert_eq(v, 9);
	json_decref(j);
	j = json_integer(15);
	cr_assert_eq(pj_enum(j, sig, 16, &v), 0);
	cr_assert_eq(v, 15);
	json_decref(j);
	j = json_string("15");
	cr_assert_eq(pj_enum(j, sig, 16, &v), -1); /* a string is a name */
	json_decref(j);
	const char *bad[] = {"SIGNAL_SIGHUP", "signal_sigkill", "", "SIGNAL_SIGKILL "};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		j = json_string(bad[i]);
		cr_assert_eq(pj_enum(j, sig, 16, &v), -1, "%s", bad[i]);
		json_decref(j);
	}
	const long long nums[] = {1, 16, -1, 1000};
	for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++) {
		j = json_integer(nums[i]);
		cr_assert_eq(pj_enum(j, sig, 16, &v), -1, "%lld", nums[i]);
		json_decref(j);
	}
	cr_assert_eq(pj_enum(json_true(), sig, 16, &v), -1);
	cr_assert_eq(pj_enum(NULL, sig, 16, &v), -1);
}

static void cn_ts(int64_t sec, int64_t nsec, const char *want)
{
	json_t *j = pj_timestamp(sec, nsec);
	if (!want) {
		cr_assert_null(j, "%lld.%lld", (long long)sec, (long long)nsec);
		return;
	}
	cr_assert_not_null(j, "%s", want);
	cr_assert_str_eq(json_string_value(j), want);
	json_decref(j);
}

Test(connect, timestamps)
{
	cn_ts(0, 0, "1970-01-01T00:00:00Z");
	cn_ts(1787313600, 0, "2026-08-21T12:00:00Z");
	cn_ts(1787313600, 123000000, "2026-08-21T12:00:00.123Z");
	cn_ts(1787313600, 123456000, "2026-08-21T12:00:00.123456Z");
	cn_ts(1787313600, 123456789, "2026-08-21T12:00:00.123456789Z");
	cn_ts(1787313600, 1, "2026-08-21T12:00:00.000000001Z");
	cn_ts(951782400, 0, "2000-02-29T00:00:00Z"); /* leap day */
	cn_ts(-1, 0, "1969-12-31T23:59:59Z");
	cn_ts(0, -1, "1969-12-31T23:59:59.999999999Z");
	cn_ts(0, 1500000000, "1970-01-01T00:00:01.500Z");
	cn_ts(-62135596800LL, 0, "0001-01-01T00:00:00Z");
	cn_ts(253402300799LL, 999999999, "9999-12-31T23:59:59.999999999Z");
	cn_ts(253402300800LL, 0, NULL);
	cn_ts(-62135596801LL, 0, NULL);
	cn_ts(INT64_MAX, INT64_MAX, NULL);
	cn_ts(0, INT64_MIN, "1677-09-21T00:12:43.145224192Z"); /* carried, no overflow */
	cn_ts(INT64_MIN, 0, NULL);
}
