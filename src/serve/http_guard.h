/* A request-head check in front of evhttp (libevent 2.1 answers an
 * oversized or malformed request itself, with an HTML page, and has no hook
 * before it does). Every connection's input passes through a framer that
 * holds back what it has not checked: a request head is handed to evhttp
 * only once it is complete and valid, a body only within the route's limit.
 * A refused request reaches evhttp as a small stand-in request (or, for a
 * chunked body already under way, as its end), and the router answers it in
 * the API's JSON shape and closes the connection; what the client sends
 * after that is dropped, never buffered. */
#ifndef MOAT_SERVE_HTTP_GUARD_H
#define MOAT_SERVE_HTTP_GUARD_H

#include <event2/bufferevent.h>
#include <event2/http.h>
#include <stdbool.h>
#include <stdint.h>

#define GUARD_MAX_HEAD (64u << 10)

/* The body limit of a route, from the method and the path. */
typedef uint64_t (*guard_limit_fn)(enum evhttp_cmd_type m, const char *path);

void guard_set_limit(guard_limit_fn fn);

/* evhttp_set_bevcb callback: a socket bufferevent with the framer on its
 * input. */
struct bufferevent *guard_bevcb(struct event_base *base, void *arg);

struct guard_refusal {
	int status;
	const char *code;
	const char *msg;
	bool after_auth; /* answered only to an authenticated caller */
	bool close;      /* the connection ends after the answer */
};

/* Called once per request the router sees, in order: true when this one
 * was refused by the framer (then *r says how to answer). */
bool guard_refused(struct evhttp_request *req, struct guard_refusal *r);

/* The connection leaves HTTP (a WebSocket upgrade, answered by its
 * door): the framer stops and moves what it still held (the bytes that
 * followed the request, if any) to the end of to. -1 when out of memory. */
int guard_release(struct bufferevent *bev, struct evbuffer *to);

/* evhttp_connection_set_closecb, shared with the guard's own use. */
void guard_set_closecb(struct evhttp_connection *c,
		       void (*cb)(struct evhttp_connection *, void *), void *arg);

#endif
