/* The Connect protocol's JSON codec: see connect.h. Everything here reads
 * bytes a client sent (request bodies, headers, JSON values): nothing reads
 * past the length it is given, and every message that may quote the input
 * is made valid UTF-8 before it can reach a JSON string. */
#include "serve/connect.h"

#include "base/utf8.h"
#include "serve/image.h" /* moat_base64 */

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

__attribute__((format(printf, 3, 4))) static void cerr(struct connect_err *e,
						       enum connect_code c, const char *fmt, ...)
{
	if (!e)
		return;
	e->code = c;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(e->msg, sizeof e->msg, fmt, ap);
	va_end(ap);
	moat_utf8_clean(e->msg); /* jansson's texts quote the input */
}

/* ---- codes ---------------------------------------------------------------- */

static const struct {
	const char *name;
	int http;
} codes[] = {
	[CONNECT_OK] = {"ok", 200},
	[CONNECT_CANCELED] = {"canceled", 499},
	[CONNECT_UNKNOWN] = {"unknown", 500},
	[CONNECT_INVALID_ARGUMENT] = {"invalid_argument", 400},
	[CONNECT_DEADLINE_EXCEEDED] = {"deadline_exceeded", 504},
	[CONNECT_NOT_FOUND] = {"not_found", 404},
	[CONNECT_ALREADY_EXISTS] = {"already_exists", 409},
	[CONNECT_PERMISSION_DENIED] = {"permission_denied", 403},
	[CONNECT_RESOURCE_EXHAUSTED] = {"resource_exhausted", 429},
	[CONNECT_FAILED_PRECONDITION] = {"failed_precondition", 400},
	[CONNECT_ABORTED] = {"aborted", 409},
	[CONNECT_OUT_OF_RANGE] = {"out_of_range", 400},
	[CONNECT_UNIMPLEMENTED] = {"unimplemented", 501},
	[CONNECT_INTERNAL] = {"internal", 500},
	[CONNECT_UNAVAILABLE] = {"unavailable", 503},
	[CONNECT_DATA_LOSS] = {"data_loss", 500},
	[CONNECT_UNAUTHENTICATED] = {"unauthenticated", 401},
};
#define NCODES (sizeof codes / sizeof codes[0])

const char *connect_code_name(enum connect_code c)
{
	return (unsigned)c < NCODES ? codes[c].name : "unknown";
}

int connect_code_http(enum connect_code c)
{
	return (unsigned)c < NCODES ? codes[c].http : 500;
}

enum connect_code connect_code_from_moat(const char *code, int status)
{
	static const struct {
		const char *moat;
		enum connect_code c;
	} t[] = {
		{"invalid_request", CONNECT_INVALID_ARGUMENT},
		{"invalid_path", CONNECT_INVALID_ARGUMENT},
		{"is_directory", CONNECT_INVALID_ARGUMENT},
		{"unsupported_media_type", CONNECT_INVALID_ARGUMENT},
		{"patch_failed", CONNECT_INVALID_ARGUMENT},
		{"forbidden", CONNECT_PERMISSION_DENIED},
		{"not_found", CONNECT_NOT_FOUND},
		{"already_exists", CONNECT_ALREADY_EXISTS},
		{"conflict", CONNECT_FAILED_PRECONDITION},
		{"too_large", CONNECT_RESOURCE_EXHAUSTED},
		{"limit_reached", CONNECT_RESOURCE_EXHAUSTED},
		{"timeout", CONNECT_DEADLINE_EXCEEDED},
		{"unavailable", CONNECT_UNAVAILABLE},
		{"unauthorized", CONNECT_UNAUTHENTICATED},
		{"method_not_allowed", CONNECT_UNIMPLEMENTED},
		{"internal", CONNECT_INTERNAL},
	};
	for (size_t i = 0; code && i < sizeof t / sizeof t[0]; i++)
		if (!strcmp(code, t[i].moat))
			return t[i].c;
	/* a code we do not know: what its HTTP status says */
	switch (status) {
	case 400:
	case 415:
	case 422:
		return CONNECT_INVALID_ARGUMENT;
	case 401:
		return CONNECT_UNAUTHENTICATED;
	case 403:
		return CONNECT_PERMISSION_DENIED;
	case 404:
		return CONNECT_NOT_FOUND;
	case 405:
	case 501:
		return CONNECT_UNIMPLEMENTED;
	case 409:
		return CONNECT_FAILED_PRECONDITION;
	case 413:
	case 429:
		return CONNECT_RESOURCE_EXHAUSTED;
	case 503:
		return CONNECT_UNAVAILABLE;
	case 504:
		return CONNECT_DEADLINE_EXCEEDED;
	default:
		return CONNECT_INTERNAL;
	}
}

/* ---- content types -------------------------------------------------------- */

/* "type/subtype" (any case), then nothing or parameters after ';'. The
 * parameters are not checked: clients send "charset=utf-8" at most. */
static bool ct_is(const char *ctype, const char *want)
{
	if (!ctype)
		return false;
	while (*ctype == ' ' || *ctype == '\t')
		ctype++;
	size_t n = strlen(want);
	if (strncasecmp(ctype, want, n))
		return false;
	const char *p = ctype + n;
	while (*p == ' ' || *p == '\t')
		p++;
	return *p == '\0' || *p == ';';
}

bool connect_ct_unary(const char *ctype)
{
	return ct_is(ctype, "application/json");
}

bool connect_ct_stream(const char *ctype)
{
	return ct_is(ctype, "application/connect+json");
}

/* ---- envelopes ------------------------------------------------------------ */

ssize_t connect_env_parse(const void *buf, size_t len, size_t max, struct connect_env *out,
			  struct connect_err *e)
{
	const unsigned char *b = buf;
	if (len < 5)
		return 0;
	uint8_t flags = b[0];
	size_t n = (size_t)b[1] << 24 | (size_t)b[2] << 16 | (size_t)b[3] << 8 | b[4];
	/* Compression is never negotiated (moat sends no
	 * Connect-Accept-Encoding and takes no Connect-Content-Encoding), so
	 * a compressed envelope is a malformed request: invalid_argument. A
	 * door that sees a Connect-Content-Encoding it lacks answers
	 * unimplemented before it gets here. */
	if (flags & CONNECT_FLAG_COMPRESSED) {
		cerr(e, CONNECT_INVALID_ARGUMENT, "compressed envelope (no compression was negotiated)");
		return -1;
	}
	if (flags & ~(CONNECT_FLAG_COMPRESSED | CONNECT_FLAG_END)) {
		cerr(e, CONNECT_INVALID_ARGUMENT, "envelope with unknown flags 0x%02x", flags);
		return -1;
	}
	/* refused from its header alone, before the bytes arrive */
	if (n > max) {
		cerr(e, CONNECT_RESOURCE_EXHAUSTED, "message of %zu bytes is over the limit of %zu", n,
		     max);
		return -1;
	}
	if (len - 5 < n)
		return 0;
	if (out)
		*out = (struct connect_env){.flags = flags, .data = (const char *)b + 5, .len = n};
	return (ssize_t)(n + 5);
}

int connect_env_put(struct moat_buf *out, uint8_t flags, const void *data, size_t len)
{
	if (len > UINT32_MAX) {
		errno = EMSGSIZE;
		return -1;
	}
	unsigned char h[5] = {flags, (unsigned char)(len >> 24), (unsigned char)(len >> 16),
			      (unsigned char)(len >> 8), (unsigned char)len};
	size_t old = out->len;
	if (moat_buf_add(out, h, sizeof h) < 0 || moat_buf_add(out, data, len) < 0) {
		out->len = old; /* no half envelope */
		return -1;
	}
	return 0;
}

int connect_env_json(struct moat_buf *out, json_t *msg)
{
	if (!msg) {
		errno = ENOMEM;
		return -1;
	}
	char *s = json_dumps(msg, JSON_COMPACT | JSON_ENCODE_ANY);
	json_decref(msg);
	if (!s) {
		errno = ENOMEM;
		return -1;
	}
	int r = connect_env_put(out, 0, s, strlen(s));
	free(s);
	return r;
}

/* A JSON string of a message that may quote anything (invalid UTF-8 made
 * '?'); NULL only without memory. */
static json_t *msg_json(const char *msg)
{
	char *m = strdup(msg);
	if (!m)
		return NULL;
	json_t *j = json_string(moat_utf8_clean(m));
	free(m);
	return j;
}

json_t *connect_error_json(enum connect_code c, const char *msg)
{
	json_t *j = json_pack("{s:s}", "code", connect_code_name(c));
	if (j && msg && json_object_set_new(j, "message", msg_json(msg)) < 0) {
		json_decref(j);
		return NULL;
	}
	return j;
}

int connect_end_stream(struct moat_buf *out, enum connect_code code, const char *msg)
{
	if (code == CONNECT_OK)
		return connect_env_put(out, CONNECT_FLAG_END, "{}", 2);
	json_t *err = connect_error_json(code, msg);
	json_t *j = err ? json_pack("{s:o}", "error", err) : NULL;
	if (!j) {
		errno = ENOMEM;
		return -1;
	}
	char *s = json_dumps(j, JSON_COMPACT);
	json_decref(j);
	if (!s) {
		errno = ENOMEM;
		return -1;
	}
	int r = connect_env_put(out, CONNECT_FLAG_END, s, strlen(s));
	free(s);
	return r;
}

/* ---- request bodies ------------------------------------------------------- */

/* A message: one JSON object (protojson refuses duplicate keys too). */
static json_t *message(const char *p, size_t len, const char *what, struct connect_err *e)
{
	json_error_t je;
	json_t *j = json_loadb(p, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &je);
	if (!j) {
		cerr(e, CONNECT_INVALID_ARGUMENT, "%s: invalid JSON at line %d column %d: %s", what,
		     je.line, je.column, je.text);
		return NULL;
	}
	if (!json_is_object(j)) {
		json_decref(j);
		cerr(e, CONNECT_INVALID_ARGUMENT, "%s is not a JSON object", what);
		return NULL;
	}
	return j;
}

json_t *connect_unary_request(const void *body, size_t len, struct connect_err *e)
{
	if (len == 0)
		return json_object();
	if (len > CONNECT_MAX_MESSAGE) {
		cerr(e, CONNECT_RESOURCE_EXHAUSTED, "message of %zu bytes is over the limit of %u", len,
		     CONNECT_MAX_MESSAGE);
		return NULL;
	}
	return message(body, len, "the request message", e);
}

/* The end frame a client may add after its one message: no content or {}. */
static bool empty_end(const struct connect_env *env)
{
	if (env->flags != CONNECT_FLAG_END)
		return false;
	if (env->len == 0)
		return true;
	json_t *j = json_loadb(env->data, env->len, 0, NULL);
	bool ok = json_is_object(j) && json_object_size(j) == 0;
	json_decref(j);
	return ok;
}

json_t *connect_stream_request(const void *body, size_t len, struct connect_err *e)
{
	struct connect_env msg, end;
	ssize_t r = connect_env_parse(body, len, CONNECT_MAX_MESSAGE, &msg, e);
	if (r < 0)
		return NULL;
	if (r == 0) {
		cerr(e, CONNECT_INVALID_ARGUMENT,
		     len ? "the request body is a truncated envelope (%zu bytes)"
			 : "the request body is empty (%zu bytes): one envelope expected",
		     len);
		return NULL;
	}
	if (msg.flags != 0) {
		cerr(e, CONNECT_INVALID_ARGUMENT, "the request's first envelope is an end-stream frame");
		return NULL;
	}
	size_t off = (size_t)r;
	if (off < len) {
		ssize_t r2 = connect_env_parse((const char *)body + off, len - off, CONNECT_MAX_MESSAGE,
					       &end, e);
		if (r2 < 0)
			return NULL;
		if (r2 == 0 || !empty_end(&end) || off + (size_t)r2 != len) {
			cerr(e, CONNECT_INVALID_ARGUMENT,
			     "%zu bytes after the request message (one message expected)", len - off);
			return NULL;
		}
	}
	return message(msg.data, msg.len, "the request message", e);
}

/* ---- timeouts ------------------------------------------------------------- */

/* A timeout of 0 is taken as none: connect-web sends no header for it. */
int connect_timeout_ms(const char *hdr, int64_t *ms)
{
	*ms = 0;
	if (!hdr)
		return 0;
	int64_t v = 0;
	size_t n = 0;
	for (; hdr[n]; n++) {
		if (hdr[n] < '0' || hdr[n] > '9' || n == 10)
			return -1;
		v = v * 10 + (hdr[n] - '0');
	}
	if (n == 0)
		return -1;
	*ms = v;
	return 0;
}

/* ---- proto3 JSON ---------------------------------------------------------- */

json_t *pj_get(const json_t *obj, const char *camel, const char *snake)
{
	if (!json_is_object(obj))
		return NULL;
	json_t *v = camel ? json_object_get(obj, camel) : NULL;
	if ((!v || json_is_null(v)) && snake)
		v = json_object_get(obj, snake);
	return v && !json_is_null(v) ? v : NULL;
}

/* A JSON number's text (as protojson takes one quoted in a string for an
 * integer field: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?) when its
 * value is an integer within int64. Exact: no floating point. */
static int int_text(const char *s, size_t len, int64_t *out)
{
	size_t i = 0;
	bool neg = false;
	if (i < len && s[i] == '-') {
		neg = true;
		i++;
	}
	size_t ib = i;
	while (i < len && s[i] >= '0' && s[i] <= '9')
		i++;
	size_t ie = i;
	if (ie == ib || (s[ib] == '0' && ie - ib > 1))
		return -1; /* no digits, or a leading zero */
	size_t fb = i, fe = i;
	if (i < len && s[i] == '.') {
		fb = ++i;
		while (i < len && s[i] >= '0' && s[i] <= '9')
			i++;
		fe = i;
		if (fe == fb)
			return -1;
	}
	int64_t ex = 0;
	if (i < len && (s[i] == 'e' || s[i] == 'E')) {
		i++;
		bool eneg = false;
		if (i < len && (s[i] == '+' || s[i] == '-'))
			eneg = s[i++] == '-';
		size_t eb = i;
		for (; i < len && s[i] >= '0' && s[i] <= '9'; i++)
			if (ex < 100000)
				ex = ex * 10 + (s[i] - '0');
		if (i == eb)
			return -1;
		if (eneg)
			ex = -ex;
	}
	if (i != len)
		return -1;
	/* The digits int..frac scaled by 10^(ex - fraction length): an integer
	 * when every digit past the point is 0. */
	int64_t scale = ex - (int64_t)(fe - fb);
	uint64_t mag = 0, lim = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
	size_t nd = (ie - ib) + (fe - fb);
	for (size_t k = 0; k < nd; k++) {
		char c = k < ie - ib ? s[ib + k] : s[fb + k - (ie - ib)];
		int d = c - '0';
		if (scale < 0 && (int64_t)(nd - k) <= -scale) {
			if (d)
				return -1; /* a fraction */
			continue;
		}
		if (mag > (lim - (uint64_t)d) / 10)
			return -1;
		mag = mag * 10 + (uint64_t)d;
	}
	for (int64_t k = 0; k < scale && mag; k++) {
		if (mag > lim / 10)
			return -1;
		mag *= 10;
	}
	*out = neg ? (mag == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)mag) : (int64_t)mag;
	return 0;
}

int pj_int64(const json_t *v, int64_t *out)
{
	if (json_is_integer(v)) {
		*out = json_integer_value(v); /* jansson refuses what overflows */
		return 0;
	}
	if (json_is_real(v)) {
		double d = json_real_value(v);
		/* 2^63 is exact as a double; what is below it converts exactly */
		if (!isfinite(d) || d != floor(d) || d < -9223372036854775808.0 ||
		    d >= 9223372036854775808.0)
			return -1;
		*out = (int64_t)d;
		return 0;
	}
	if (json_is_string(v))
		return int_text(json_string_value(v), json_string_length(v), out);
	return -1;
}

int pj_uint32(const json_t *v, uint32_t *out)
{
	int64_t x;
	if (pj_int64(v, &x) < 0 || x < 0 || x > UINT32_MAX)
		return -1;
	*out = (uint32_t)x;
	return 0;
}

int pj_bool(const json_t *v, bool *out)
{
	if (!json_is_boolean(v))
		return -1;
	*out = json_is_true(v);
	return 0;
}

json_t *pj_int64_json(int64_t v)
{
	char s[24];
	snprintf(s, sizeof s, "%" PRId64, v);
	return json_string(s);
}

static int b64_val(unsigned char c, bool url)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	if (c == (url ? '-' : '+'))
		return 62;
	if (c == (url ? '_' : '/'))
		return 63;
	return -1;
}

/* As Go's protojson: the URL-safe alphabet when the text has '-' or '_',
 * padded when its length is a multiple of 4, unpadded otherwise. (Go also
 * skips CR and LF inside; no client puts them there, so they are refused.) */
char *pj_bytes(const json_t *v, size_t *len)
{
	if (!json_is_string(v))
		return NULL;
	const unsigned char *s = (const unsigned char *)json_string_value(v);
	size_t n = json_string_length(v);
	bool url = memchr(s, '-', n) || memchr(s, '_', n);
	size_t data = n; /* characters before the padding */
	if (n % 4 == 0) {
		if (data && s[data - 1] == '=')
			data--;
		if (data && s[data - 1] == '=')
			data--;
	}
	if (data % 4 == 1)
		return NULL;
	char *out = malloc(data / 4 * 3 + 3);
	if (!out)
		return NULL;
	size_t o = 0;
	uint32_t acc = 0;
	for (size_t i = 0; i < data; i++) {
		int d = b64_val(s[i], url);
		if (d < 0) {
			free(out);
			return NULL;
		}
		acc = acc << 6 | (uint32_t)d;
		if (i % 4 == 3) {
			out[o++] = (char)(acc >> 16);
			out[o++] = (char)(acc >> 8);
			out[o++] = (char)acc;
			acc = 0;
		}
	}
	/* the last 2 or 3 characters: 1 or 2 bytes (extra bits ignored, as Go) */
	if (data % 4 == 2) {
		out[o++] = (char)(acc >> 4);
	} else if (data % 4 == 3) {
		out[o++] = (char)(acc >> 10);
		out[o++] = (char)(acc >> 2);
	}
	out[o] = '\0';
	*len = o;
	return out;
}

json_t *pj_bytes_json(const void *p, size_t len)
{
	char *s = moat_base64(p, len);
	if (!s)
		return NULL;
	json_t *j = json_string_nocheck(s);
	free(s);
	return j;
}

int pj_enum(const json_t *v, const char *const *names, size_t n, int *out)
{
	if (json_is_string(v)) {
		const char *s = json_string_value(v);
		for (size_t i = 0; i < n; i++)
			if (names[i] && !strcmp(names[i], s)) {
				*out = (int)i;
				return 0;
			}
		return -1;
	}
	int64_t x;
	if (!json_is_number(v) || pj_int64(v, &x) < 0 || x < 0 || (uint64_t)x >= n || !names[x])
		return -1;
	*out = (int)x;
	return 0;
}

/* The civil date of a day count from 1970-01-01 (H. Hinnant's algorithm). */
static void civil(int64_t days, int64_t *y, unsigned *m, unsigned *d)
{
	days += 719468;
	int64_t era = (days >= 0 ? days : days - 146096) / 146097;
	unsigned doe = (unsigned)(days - era * 146097);
	unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
	unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
	unsigned mp = (5 * doy + 2) / 153;
	*d = doy - (153 * mp + 2) / 5 + 1;
	*m = mp < 10 ? mp + 3 : mp - 9;
	*y = (int64_t)yoe + era * 400 + (*m <= 2);
}

/* As protojson: 0, 3, 6 or 9 fractional digits; years 1..9999 (else NULL). */
json_t *pj_timestamp(int64_t sec, int64_t nsec)
{
	/* 0001-01-01T00:00:00Z .. 9999-12-31T23:59:59Z */
	const int64_t lo = -62135596800LL, hi = 253402300799LL;
	if (sec < lo || sec > hi)
		return NULL;
	/* nanoseconds out of 0..999999999 carry into the seconds */
	int64_t carry = nsec / 1000000000;
	nsec %= 1000000000;
	if (nsec < 0) {
		nsec += 1000000000;
		carry--;
	}
	sec += carry; /* both small: no overflow */
	if (sec < lo || sec > hi)
		return NULL;
	int64_t days = sec / 86400, rem = sec % 86400;
	if (rem < 0) {
		rem += 86400;
		days--;
	}
	int64_t y;
	unsigned mo, d;
	civil(days, &y, &mo, &d);
	char frac[16] = "";
	if (nsec % 1000000 == 0 && nsec)
		snprintf(frac, sizeof frac, ".%03d", (int)(nsec / 1000000));
	else if (nsec % 1000 == 0 && nsec)
		snprintf(frac, sizeof frac, ".%06d", (int)(nsec / 1000));
	else if (nsec)
		snprintf(frac, sizeof frac, ".%09d", (int)nsec);
	char s[48];
	snprintf(s, sizeof s, "%04d-%02u-%02uT%02d:%02d:%02d%sZ", (int)y, mo, d, (int)(rem / 3600),
		 (int)(rem / 60 % 60), (int)(rem % 60), frac);
	return json_string(s);
}
