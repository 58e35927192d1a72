/* The Connect protocol's JSON codec (connectrpc.com/docs/protocol), as
 * E2B's envd speaks it: unary calls (application/json), server streams
 * (application/connect+json: 5-byte envelopes, a final end-stream frame),
 * errors, timeouts, and the proto3 JSON forms of int64, bytes, enums and
 * timestamps. Pure: no I/O, no libevent; fuzzed (tests/fuzz/fuzz_connect.c). */
#ifndef MOAT_SERVE_CONNECT_H
#define MOAT_SERVE_CONNECT_H

#include "../proto/entries.h" /* struct moat_buf */

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define CONNECT_FLAG_COMPRESSED 0x01
#define CONNECT_FLAG_END 0x02
#define CONNECT_MAX_MESSAGE (16u << 20)

enum connect_code {
	CONNECT_OK = 0,
	CONNECT_CANCELED = 1,
	CONNECT_UNKNOWN = 2,
	CONNECT_INVALID_ARGUMENT = 3,
	CONNECT_DEADLINE_EXCEEDED = 4,
	CONNECT_NOT_FOUND = 5,
	CONNECT_ALREADY_EXISTS = 6,
	CONNECT_PERMISSION_DENIED = 7,
	CONNECT_RESOURCE_EXHAUSTED = 8,
	CONNECT_FAILED_PRECONDITION = 9,
	CONNECT_ABORTED = 10,
	CONNECT_OUT_OF_RANGE = 11,
	CONNECT_UNIMPLEMENTED = 12,
	CONNECT_INTERNAL = 13,
	CONNECT_UNAVAILABLE = 14,
	CONNECT_DATA_LOSS = 15,
	CONNECT_UNAUTHENTICATED = 16,
};

/* A decode error: the code to answer with and a message naming the culprit. */
struct connect_err {
	enum connect_code code;
	char msg[256];
};

const char *connect_code_name(enum connect_code c); /* "not_found" */
int connect_code_http(enum connect_code c);         /* unary status: 404 */
/* moat's core error code ("not_found", "invalid_path", ...) -> Connect's */
enum connect_code connect_code_from_moat(const char *code, int status);

/* Content types: application/json (params allowed) / application/connect+json */
bool connect_ct_unary(const char *ctype);
bool connect_ct_stream(const char *ctype);

/* One envelope at the start of buf. Returns the bytes it takes (> 0), 0
 * when buf holds less than a whole envelope, -1 on a bad one (over max,
 * compressed, unknown flags). */
struct connect_env {
	uint8_t flags;
	const char *data;
	size_t len;
};
ssize_t connect_env_parse(const void *buf, size_t len, size_t max, struct connect_env *out,
			  struct connect_err *e);
int connect_env_put(struct moat_buf *out, uint8_t flags, const void *data, size_t len);
/* An envelope of a JSON object (stolen), flags 0. */
int connect_env_json(struct moat_buf *out, json_t *msg);
/* The end-stream frame: {} or {"error":{"code","message"}}. */
int connect_end_stream(struct moat_buf *out, enum connect_code code, const char *msg);

/* Request bodies: a unary one (empty = {}) / a stream's (exactly one data
 * envelope, an optional empty end frame, nothing else). The message must
 * be a JSON object. NULL with *e set otherwise. */
json_t *connect_unary_request(const void *body, size_t len, struct connect_err *e);
json_t *connect_stream_request(const void *body, size_t len, struct connect_err *e);
/* The unary error body {"code":"not_found","message":...} (new ref). */
json_t *connect_error_json(enum connect_code c, const char *msg);

/* Connect-Timeout-Ms: absent (NULL) -> 0 and *ms = 0; 1..10 digits -> 0;
 * otherwise -1. ("0" gives *ms = 0 too, as none: no SDK sends it.) */
int connect_timeout_ms(const char *hdr, int64_t *ms);

/* ---- proto3 JSON ---- */
/* A field by its lowerCamel or its snake_case name (NULL: absent or null). */
json_t *pj_get(const json_t *obj, const char *camel, const char *snake);
/* Numbers or decimal strings; -1 when out of range or malformed. */
int pj_int64(const json_t *v, int64_t *out);
int pj_uint32(const json_t *v, uint32_t *out);
int pj_bool(const json_t *v, bool *out);
json_t *pj_int64_json(int64_t v); /* a decimal string */
/* bytes: standard or URL-safe base64, padded or not. malloc'd (NUL after). */
char *pj_bytes(const json_t *v, size_t *len);
json_t *pj_bytes_json(const void *p, size_t len); /* standard, padded */
/* An enum: its name or its number; -1 unknown. names[i] = name of value i
 * (NULL holes allowed). */
int pj_enum(const json_t *v, const char *const *names, size_t n, int *out);
/* RFC 3339 UTC, with nanoseconds when not 0 */
json_t *pj_timestamp(int64_t sec, int64_t nsec);

#endif
