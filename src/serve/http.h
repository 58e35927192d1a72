/* The HTTP side of the daemon (libevent's evhttp): listening, bearer-token
 * auth, JSON and error replies in the API's one error shape, bodies and
 * query parameters with limits. Routes live in api.c. */
#ifndef MOAT_SERVE_HTTP_H
#define MOAT_SERVE_HTTP_H

#include <moat/err.h>

#include <event2/event.h>
#include <event2/http.h>
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define HTTP_MAX_JSON_BODY (16u << 20)
#define HTTP_MAX_BODY ((uint64_t)1 << 30) /* archives and files; JSON is smaller */

/* The body limit of each route, known from the request head: a body
 * announced (or, chunked, grown) over it is refused with a JSON 413 before
 * it is read. Without one every route gets HTTP_MAX_BODY. */
void http_set_body_limit(uint64_t (*fn)(enum evhttp_cmd_type m, const char *path));

/* evhttp_connection_set_closecb for the router (the head check keeps its
 * own close callback on each connection and chains this one). */
void http_set_closecb(struct evhttp_connection *c,
		      void (*cb)(struct evhttp_connection *, void *), void *arg);

/* Listen on "HOST:PORT" and route every request to handler after auth.
 * token may be NULL (no auth; loopback only, checked by the caller). */
int http_start(struct event_base *base, const char *listen, const char *token,
	       void (*handler)(struct evhttp_request *req), struct moat_err *e);
void http_stop(void);
/* Origins a browser page may come from besides loopback and the listen
 * host (--allow-origin; browser.h), NULL-terminated, kept as given. */
void http_allow_origins(char *const *origins);
/* Is got the daemon's API token? (constant time; with no token configured,
 * a loopback daemon without auth, anything is, NULL included). For doors
 * that take the token in their own header (the E2B door's X-API-KEY). */
bool http_token_equal(const char *got);

/* A request answered later (a call in flight). evhttp does not read a
 * connection whose request is being answered, so it would not see the
 * client leave: this watches for the peer's close (EV_CLOSED) as well as
 * for the connection's end. When the client goes, gone(arg) runs once and
 * must free the owner (cancelling its call) without answering; then the
 * request is ended here: a started stream closed, a request libevent
 * handed back detached finished. Embed it in the owner; it allocates only
 * the event. */
struct http_wait {
	struct evhttp_request *req;
	struct event *hangup;
	bool streaming; /* http_wait_stream started a chunked reply */
	void (*gone)(void *arg);
	void *arg;
};
/* Start watching req (w is all written here). Without base (or a
 * connection) only the connection's end is watched. */
void http_wait_start(struct http_wait *w, struct event_base *base, struct evhttp_request *req,
		     void (*gone)(void *arg), void *arg);
/* Stop watching: before answering (the connection's close must not run
 * gone after the owner is freed), and when the owner is freed. Idempotent. */
void http_wait_stop(struct http_wait *w);
/* Start a streamed reply of type ctype (200, no-store), once. */
void http_wait_stream(struct http_wait *w, const char *ctype);
/* What the client has not read yet (back-pressure of a stream). */
size_t http_wait_backlog(const struct http_wait *w);

/* Replies. body is stolen. */
void http_json(struct evhttp_request *req, int status, json_t *body);
void http_error(struct evhttp_request *req, int status, const char *code,
		const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* An error whose status follows from its API code ("not_found" -> 404). */
void http_error_code(struct evhttp_request *req, const char *code, const char *msg);
void http_raw(struct evhttp_request *req, int status, const char *ctype, const void *data,
	      size_t len);
void http_no_content(struct evhttp_request *req);
/* 202 without a body (the MCP door's answer to a notification). */
void http_accepted(struct evhttp_request *req);
/* 405 naming the request's path. */
void http_not_allowed(struct evhttp_request *req);
/* A collection's own path (/v1/sandboxes, /v1/sessions): POST is create,
 * GET is list, any other method 405. */
void http_collection(struct evhttp_request *req, void (*create)(struct evhttp_request *req),
		     void (*list)(struct evhttp_request *req));

/* The body as JSON (an object); NULL after answering 400/413. An empty
 * body is {} when empty_ok. */
json_t *http_body_json(struct evhttp_request *req, bool empty_ok);
/* The same with jansson's decoding flags (JSON_REJECT_DUPLICATES and
 * flags, e.g. JSON_ALLOW_NUL). */
json_t *http_body_json_flags(struct evhttp_request *req, bool empty_ok, size_t flags);
/* The raw body: pointer into a linearised buffer (valid until reply). */
const char *http_body(struct evhttp_request *req, size_t *len);

/* A query parameter (decoded, malloc'd) or NULL. */
char *http_query(struct evhttp_request *req, const char *key);
/* Every "metadata.K=V" of the query, as an object. */
json_t *http_query_prefixed(struct evhttp_request *req, const char *prefix);

/* Counters for /metrics. */
struct http_stats {
	unsigned long long requests[6]; /* by status class: 1xx..5xx, [0] other */
	unsigned long long bytes_in, bytes_out;
};
const struct http_stats *http_stats(void);

#endif
