/* The control plane's door inside each session's sandbox (cp.h). One
 * evhttp per sandbox, accepting on the listener the engine made in the
 * sandbox's own network namespace: a connection can only have come from
 * that sandbox, so the sandbox of a request is the listener's, and a
 * session token is accepted only there (session_auth). Nothing in the
 * request can name another sandbox. */
#include "cp.h"

#include "artifacts.h"
#include "box.h"
#include "http.h"
#include "http_guard.h"
#include "session.h"

#include "../base/cleanup.h"

#include <moat/jail.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <event2/http.h>
#include <event2/keyvalq_struct.h>

struct cpb {
	struct box *b;
	struct evhttp *http;
	struct cpb *next;
};

static struct event_base *evbase;
static struct cpb *cpbs;

const char *cp_url(void)
{
	return "http://127.0.0.1:7878";
}

/* The token of a request: Authorization: Bearer (OpenAI's SDKs, moat's
 * own), else x-api-key (Anthropic's). Borrowed from the headers. */
static const char *request_token(struct evhttp_request *req)
{
	struct evkeyvalq *h = evhttp_request_get_input_headers(req);
	const char *a = evhttp_find_header(h, "Authorization");
	if (a && !strncasecmp(a, "Bearer ", 7)) {
		a += 7;
		while (*a == ' ')
			a++;
		return *a ? a : NULL;
	}
	const char *k = evhttp_find_header(h, "x-api-key");
	return k && *k ? k : NULL;
}

static bool starts(const char *s, const char *prefix)
{
	return !strncmp(s, prefix, strlen(prefix));
}

static void on_request(struct evhttp_request *req, void *arg)
{
	struct cpb *c = arg;
	struct guard_refusal r;
	if (guard_refused(req, &r)) {
		if (r.close)
			evhttp_add_header(evhttp_request_get_output_headers(req), "Connection",
					  "close");
		http_error(req, r.status, r.code, "%s", r.msg);
		return;
	}
	const struct evhttp_uri *u = evhttp_request_get_evhttp_uri(req);
	const char *raw = u ? evhttp_uri_get_path(u) : NULL;
	size_t len = 0;
	_cleanup_free_ char *path = raw ? evhttp_uridecode(raw, 0, &len) : NULL;
	if (!path || len != strlen(path) || path[0] != '/') {
		http_error(req, 400, "invalid_request", "the request's path is not a valid path");
		return;
	}
	/* a one-time URL carries its own authority (its ticket), checked
	 * against this sandbox's session by the artifact store */
	if (starts(path, "/files/")) {
		artifacts_cp_route(req, session_of_box(c->b), path);
		return;
	}
	const char *tok = request_token(req);
	struct session *s = tok ? session_auth(c->b, tok) : NULL;
	if (!s) {
		evhttp_add_header(evhttp_request_get_output_headers(req), "WWW-Authenticate",
				  "Bearer");
		http_error(req, 401, "unauthorized",
			   tok ? "this session token is not valid in this sandbox (revoked, ended, "
				 "or issued to another)"
			       : "missing session token (Authorization: Bearer $MOAT_SESSION_TOKEN)");
		return;
	}
	if (starts(path, "/llm/")) {
		cp_llm_route(req, s, path);
	} else if (starts(path, "/v1/conversations/")) {
		cp_conv_route(req, s, path);
	} else if (starts(path, "/v1/files/")) {
		artifacts_cp_route(req, s, path);
	} else if (!strcmp(path, "/v1/session")) {
		if (evhttp_request_get_command(req) != EVHTTP_REQ_GET) {
			http_error(req, 405, "method_not_allowed", "/v1/session takes GET");
			return;
		}
		json_t *j = session_json(s);
		if (!j)
			http_error(req, 500, "internal", "out of memory");
		else
			http_json(req, 200, j);
	} else {
		http_error(req, 404, "not_found", "no such route on the control plane: %.200s "
			   "(docs/control-plane.md)", path);
	}
}

static struct cpb **find(const struct box *b)
{
	struct cpb **p = &cpbs;
	while (*p && (*p)->b != b)
		p = &(*p)->next;
	return p;
}

static void on_closed(struct box *b)
{
	struct cpb **p = find(b);
	struct cpb *c = *p;
	if (!c)
		return;
	*p = c->next;
	/* its connections go with it (each one's close callback runs, so
	 * calls in flight are cancelled by their owners) */
	evhttp_free(c->http);
	free(c);
}

static void on_listen(struct box *b, int fd)
{
	on_closed(b); /* a respawn: the old listener is gone */
	struct cpb *c = calloc(1, sizeof *c);
	struct evhttp *http = evbase ? evhttp_new(evbase) : NULL;
	if (!c || !http) {
		fprintf(stderr, "moat serve: %s: out of memory for its control plane\n", box_id(b));
		free(c);
		if (http)
			evhttp_free(http);
		close(fd);
		return;
	}
	c->b = b;
	c->http = http;
	evhttp_set_max_body_size(http, (ev_ssize_t)CP_MAX_BODY);
	evhttp_set_max_headers_size(http, GUARD_MAX_HEAD);
	evhttp_set_bevcb(http, guard_bevcb, NULL);
	/* a streamed model answer may take long; an idle connection not */
	evhttp_set_timeout(http, 900);
	evhttp_set_allowed_methods(http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_PUT |
						 EVHTTP_REQ_DELETE | EVHTTP_REQ_HEAD |
						 EVHTTP_REQ_OPTIONS | EVHTTP_REQ_PATCH);
	evhttp_set_gencb(http, on_request, c);
	/* evconnlistener accepts until EAGAIN: a blocking fd would stall the
	 * daemon's loop in accept() after the first connection */
	if (evutil_make_socket_nonblocking(fd) < 0 || !evhttp_accept_socket_with_handle(http, fd)) {
		fprintf(stderr, "moat serve: %s: cannot serve its control listener: %s\n", box_id(b),
			strerror(errno));
		evhttp_free(http);
		free(c);
		close(fd);
		return;
	}
	c->next = cpbs;
	cpbs = c;
}

static const struct box_control_ops ops = {.listen = on_listen, .closed = on_closed};

int cp_init(struct event_base *base, struct moat_err *e)
{
	evbase = base;
	box_set_control_ops(&ops);
	return 0;
}

void cp_shutdown(void)
{
	while (cpbs)
		on_closed(cpbs->b);
	box_set_control_ops(NULL);
}
