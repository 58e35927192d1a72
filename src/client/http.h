/* A small libcurl wrapper for talking to `moat serve`: one request at a
 * time, answers buffered (bounded) or streamed to a callback. */
#ifndef MOAT_CLIENT_HTTP_H
#define MOAT_CLIENT_HTTP_H

#include <moat/err.h>

#include <curl/curl.h>
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

struct moat_http;

/* Server from $MOAT_URL (default http://127.0.0.1:7070), bearer token from
 * $MOAT_API_TOKEN. NULL (e filled) on failure. */
struct moat_http *moat_http_new(struct moat_err *e);
void moat_http_free(struct moat_http *h);
static inline void moat_http_freep(struct moat_http **h)
{
	moat_http_free(*h);
}
#define _cleanup_http_ __attribute__((cleanup(moat_http_freep)))
const char *moat_http_url(const struct moat_http *h);
/* "Authorization: Bearer <token>" from $MOAT_API_TOKEN, or NULL (for a
 * request written by hand: moat attach's WebSocket handshake). */
const char *moat_http_auth(const struct moat_http *h);

/* For moat_http_do and for callers with their own easy handles (moat mcp's
 * multi loop). The headers every request carries, appended to *hdrs:
 * "Expect:" (no 100-continue round trip before large bodies) and the
 * bearer token; -1 when out of memory. */
int moat_http_base_headers(const struct moat_http *h, struct curl_slist **hdrs);
/* The options every request takes: url, errbuf (CURL_ERROR_SIZE), hdrs,
 * no signals, the never-proxied hosts, a 10 s connect timeout, TCP_NODELAY
 * (streamed output must arrive as it comes), http(s) only. */
CURLcode moat_http_setopts(const struct moat_http *h, CURL *c, const char *url,
			   struct curl_slist *hdrs, char *errbuf);
/* Whether the answer c is receiving is a stream: a 2xx whose Content-Type
 * starts with type (case-insensitive; any type when type is NULL). For a
 * write callback's first call, once the head is in. */
bool moat_http_is_stream(CURL *c, const char *type);
/* Append n bytes to a buffered answer (*buf NUL-terminated, *len bytes
 * not counting the NUL, *cap allocated); false, unchanged, when out of
 * memory or when the answer and its NUL would pass max bytes. */
bool moat_http_buf_add(char **buf, size_t *len, size_t *cap, const char *data, size_t n,
		       size_t max);

/* "/v1/<collection>/<id, escaped><suffix>", malloc'd; NULL on OOM. */
char *moat_http_path(struct moat_http *h, const char *collection, const char *id,
		     const char *suffix);
/* The same in /v1/sandboxes. */
char *moat_http_sandbox_path(struct moat_http *h, const char *id, const char *suffix);

/* Percent-encoded copy of s (a path segment or query value); NULL on OOM. */
char *moat_http_escape(struct moat_http *h, const char *s);

/* Receives a streamed answer's bytes; returns -1 (e filled) to abort. */
typedef int (*moat_http_sink)(void *arg, const char *data, size_t n,
			      struct moat_err *e);

struct moat_http_req {
	const char *method;
	const char *path;          /* already escaped, e.g. "/v1/sandboxes" */
	const char *const *query;  /* key, value, ..., NULL; escaped here */
	const char *body;          /* raw body (body_len bytes) or NULL */
	size_t body_len;
	FILE *upload;              /* or stream this file of upload_len bytes */
	long long upload_len;      /* -1: unknown, sent chunked */
	/* When set, called at the upload's end of file, before curl is told:
	 * -1 aborts the request (its producer failed: the server must not take
	 * a cut body as a whole one), e filled. */
	int (*upload_eof)(void *arg, struct moat_err *e);
	void *upload_arg;
	const char *content_type;
	const char *accept;
	/* When set, a 2xx answer whose Content-Type starts with stream_type
	 * (any type when stream_type is NULL) goes to sink, not to body. */
	moat_http_sink sink;
	void *sink_arg;
	const char *stream_type;
};

struct moat_http_resp {
	long status;
	char *body;     /* NUL-terminated (not counted in len); never NULL after success */
	size_t len;
	bool streamed;  /* the body went to the sink */
};

/* Perform one request. -1 (e filled) when the server cannot be reached, the
 * answer is too large or the sink failed; any HTTP status is a success. */
int moat_http_do(struct moat_http *h, const struct moat_http_req *rq,
		 struct moat_http_resp *rs, struct moat_err *e);
void moat_http_resp_free(struct moat_http_resp *rs);

/* e <- "<message> (<code>, HTTP <status>)" from an error answer. Returns -1. */
int moat_http_error(const struct moat_http_resp *rs, struct moat_err *e);

/* true when an error answer carries this error code. */
bool moat_http_error_is(const struct moat_http_resp *rs, const char *code);

/* JSON round trip: send body (may be NULL), require a 2xx answer, parse it
 * into *out when out != NULL (json null for an empty answer). Returns -1 with
 * e filled on any failure, including error answers. */
int moat_http_json(struct moat_http *h, const char *method, const char *path,
		   const char *const *query, json_t *body, json_t **out,
		   struct moat_err *e);

#endif
