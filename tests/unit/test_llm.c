/* Unit tests for src/serve/llm.c: --llm-route parsing, and upstream calls
 * over libcurl's multi interface on a libevent loop, against an evhttp
 * server on the same loop that plays the upstream (JSON, a chunked stream,
 * an error, a hang, a cut, a redirect, a refused port). */
#include <criterion/criterion.h>

#include "serve/llm.h"

#include <arpa/inet.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* ---- parsing ---- */

Test(llm_route, parses_every_option)
{
	struct llm_route r;
	struct moat_err e = {0};
	cr_assert_eq(llm_route_parse("oa=https://api.example.com/,key=OA_KEY,timeout=1.5", &r, &e),
		     0, "%s", e.msg);
	cr_assert_str_eq(r.name, "oa");
	cr_assert_str_eq(r.url, "https://api.example.com"); /* trailing slash gone */
	cr_assert_str_eq(r.key_secret, "OA_KEY");
	cr_assert_eq(r.timeout_ms, 1500);
	cr_assert_eq(r.family, LLM_FAMILY_OPENAI);
	llm_route_free(&r);
	cr_assert_eq(llm_route_parse("an=https://api.anthropic.com", &r, &e), 0, "%s", e.msg);
	cr_assert_eq(r.family, LLM_FAMILY_ANTHROPIC); /* from the host */
	cr_assert_null(r.key_secret);
	cr_assert_eq(r.timeout_ms, 0);
	llm_route_free(&r);
	cr_assert_eq(llm_route_parse("x=http://127.0.0.1:9/p,family=anthropic", &r, &e), 0);
	cr_assert_eq(r.family, LLM_FAMILY_ANTHROPIC);
	cr_assert_str_eq(r.url, "http://127.0.0.1:9/p");
	llm_route_free(&r);
	/* notanthropic.com is not anthropic.com */
	cr_assert_eq(llm_route_parse("y=https://notanthropic.com", &r, &e), 0);
	cr_assert_eq(r.family, LLM_FAMILY_OPENAI);
	llm_route_free(&r);
}

static void refused(const char *arg, const char *culprit)
{
	struct llm_route r;
	struct moat_err e = {0};
	cr_assert_eq(llm_route_parse(arg, &r, &e), -1, "%s accepted", arg);
	cr_assert(strstr(e.msg, culprit), "%s: the error \"%s\" does not name %s", arg, e.msg,
		  culprit);
	cr_assert_null(r.name);
	cr_assert_null(r.url);
}

Test(llm_route, errors_name_the_culprit)
{
	refused("oa", "NAME=URL");
	refused("OA=http://x", "the name OA");
	refused("=http://x", "the name");
	refused("a-very-long-name-of-more-than-32-chars=http://x", "the name");
	refused("oa=", "no URL");
	refused("oa=ftp://x", "ftp://x");
	refused("oa=file:///etc/passwd", "file:///etc/passwd");
	refused("oa=http://", "no host");
	refused("oa=http://u:p@host", "user info");
	refused("oa=http://host/?api-key=1", "query");
	refused("oa=http://host,family=google", "family=google");
	refused("oa=http://host,family=openai,family=openai", "family= given twice");
	refused("oa=http://host,key=sk-ant 123", "key=sk-ant 123");
	refused("oa=http://host,timeout=0", "timeout=0");
	refused("oa=http://host,timeout=abc", "timeout=abc");
	refused("oa=http://host,timeout=999999", "timeout=999999");
	refused("oa=http://host,colour=red", "colour");
	refused("oa=http://host,verbose", "verbose");
}

Test(llm_route, init_checks_the_secret_store)
{
	struct event_base *base = event_base_new();
	json_t *secrets = json_pack("{s:s}", "HAVE", "k");
	struct llm_route r[2];
	struct moat_err e = {0};
	cr_assert_eq(llm_route_parse("a=http://h,key=HAVE", &r[0], &e), 0);
	cr_assert_eq(llm_route_parse("b=http://h,key=MISSING", &r[1], &e), 0);
	cr_assert_eq(llm_init(base, r, 2, secrets, &e), -1);
	cr_assert(strstr(e.msg, "MISSING") && strstr(e.msg, "--llm-route b"), "%s", e.msg);
	cr_assert_eq(llm_init(base, r, 1, secrets, &e), 0, "%s", e.msg);
	cr_assert_eq(llm_route_count(), 1);
	cr_assert_str_eq(llm_route_find("a")->url, "http://h");
	cr_assert_null(llm_route_find("b"));
	cr_assert_null(llm_route_at(1));
	llm_shutdown();
	llm_route_free(&r[0]);
	llm_route_free(&r[1]);
	/* a name twice */
	cr_assert_eq(llm_route_parse("a=http://h", &r[0], &e), 0);
	cr_assert_eq(llm_route_parse("a=http://g", &r[1], &e), 0);
	cr_assert_eq(llm_init(base, r, 2, secrets, &e), -1);
	cr_assert(strstr(e.msg, "twice"), "%s", e.msg);
	llm_route_free(&r[0]);
	llm_route_free(&r[1]);
	json_decref(secrets);
	event_base_free(base);
}

/* ---- calls, against an upstream on the same loop ---- */

static struct {
	struct event_base *base;
	struct evhttp *http;
	int port;
	int requests;
	char auth[256], xkey[256], version[64], beta[64], ctype[64], body[256], path[64];
	struct evhttp_request *held; /* /hang's, /stream-slow's */
	bool upstream_closed;
	/* the door's side */
	int heads, dones, status;
	char got_ctype[64];
	char data[1 << 17];
	size_t dlen, dcalls;
	struct core_err err;
	bool has_err;
	size_t backlog;
	bool cancel_on_data;
	struct llm_call *call;
} T;

static void up_closed(struct evhttp_connection *c, void *arg)
{
	T.upstream_closed = true;
}

static void copy_hdr(char *dst, size_t n, struct evkeyvalq *h, const char *name)
{
	const char *v = evhttp_find_header(h, name);
	snprintf(dst, n, "%s", v ? v : "");
}

static void send_chunk(struct evhttp_request *req, const char *s)
{
	struct evbuffer *b = evbuffer_new();
	evbuffer_add(b, s, strlen(s));
	evhttp_send_reply_chunk(req, b);
	evbuffer_free(b);
}

static void on_upstream(struct evhttp_request *req, void *arg)
{
	T.requests++;
	struct evkeyvalq *h = evhttp_request_get_input_headers(req);
	copy_hdr(T.auth, sizeof T.auth, h, "Authorization");
	copy_hdr(T.xkey, sizeof T.xkey, h, "x-api-key");
	copy_hdr(T.version, sizeof T.version, h, "anthropic-version");
	copy_hdr(T.beta, sizeof T.beta, h, "openai-beta");
	copy_hdr(T.ctype, sizeof T.ctype, h, "Content-Type");
	struct evbuffer *in = evhttp_request_get_input_buffer(req);
	size_t n = evbuffer_get_length(in);
	if (n >= sizeof T.body)
		n = sizeof T.body - 1;
	evbuffer_copyout(in, T.body, n);
	T.body[n] = '\0';
	const char *uri = evhttp_request_get_uri(req);
	snprintf(T.path, sizeof T.path, "%s", uri);
	evhttp_connection_set_closecb(evhttp_request_get_connection(req), up_closed, NULL);
	struct evkeyvalq *out = evhttp_request_get_output_headers(req);
	if (strstr(uri, "/json")) {
		evhttp_add_header(out, "Content-Type", "application/json");
		struct evbuffer *b = evbuffer_new();
		evbuffer_add_printf(b, "{\"ok\":true}");
		evhttp_send_reply(req, 200, "OK", b);
		evbuffer_free(b);
	} else if (strstr(uri, "/err")) {
		evhttp_add_header(out, "Content-Type", "application/json");
		struct evbuffer *b = evbuffer_new();
		evbuffer_add_printf(b, "{\"error\":{\"message\":\"boom\"}}");
		evhttp_send_reply(req, 500, "Internal Server Error", b);
		evbuffer_free(b);
	} else if (strstr(uri, "/stream")) {
		evhttp_add_header(out, "Content-Type", "text/event-stream");
		evhttp_send_reply_start(req, 200, "OK");
		send_chunk(req, "data: one\n\n");
		send_chunk(req, "data: two\n\n");
		send_chunk(req, "data: [DONE]\n\n");
		evhttp_send_reply_end(req);
	} else if (strstr(uri, "/big")) {
		/* 64 chunks of 1 KiB: the door pauses after the first */
		evhttp_add_header(out, "Content-Type", "text/event-stream");
		evhttp_send_reply_start(req, 200, "OK");
		char chunk[1025];
		memset(chunk, 'x', 1024);
		chunk[1024] = '\0';
		for (int i = 0; i < 64; i++)
			send_chunk(req, chunk);
		evhttp_send_reply_end(req);
	} else if (strstr(uri, "/cut")) {
		evhttp_add_header(out, "Content-Type", "text/event-stream");
		evhttp_send_reply_start(req, 200, "OK");
		send_chunk(req, "data: one\n\n");
		T.held = req; /* cut by the test's timer */
	} else if (strstr(uri, "/redirect")) {
		evhttp_add_header(out, "Location", "/json");
		evhttp_send_reply(req, 307, "Temporary Redirect", NULL);
	} else { /* /hang */
		T.held = req;
	}
}

static void on_head(void *arg, int status, const char *ctype)
{
	T.heads++;
	T.status = status;
	snprintf(T.got_ctype, sizeof T.got_ctype, "%s", ctype);
}

static void on_data(void *arg, const char *p, size_t n)
{
	T.dcalls++;
	if (T.dlen + n < sizeof T.data) {
		memcpy(T.data + T.dlen, p, n);
		T.dlen += n;
	}
	if (T.cancel_on_data) {
		llm_call_cancel(T.call); /* inside curl's write callback */
		T.call = NULL;
		struct timeval tv = {0, 200000};
		event_base_loopexit(T.base, &tv);
	}
}

static void on_done(void *arg, const struct core_err *e)
{
	T.dones++;
	T.call = NULL;
	T.has_err = e != NULL;
	if (e)
		T.err = *e;
	event_base_loopbreak(T.base);
}

static size_t on_backlog(void *arg)
{
	return T.backlog;
}

static const struct llm_cbs cbs = {.head = on_head, .data = on_data, .done = on_done,
				   .backlog = on_backlog};

static json_t *secrets;

static void setup(void)
{
	memset(&T, 0, sizeof T);
	T.base = event_base_new();
	T.http = evhttp_new(T.base);
	evhttp_set_gencb(T.http, on_upstream, NULL);
	struct evhttp_bound_socket *s = evhttp_bind_socket_with_handle(T.http, "127.0.0.1", 0);
	cr_assert_not_null(s);
	struct sockaddr_in sa;
	socklen_t sl = sizeof sa;
	getsockname(evhttp_bound_socket_get_fd(s), (struct sockaddr *)&sa, &sl);
	T.port = ntohs(sa.sin_port);
	secrets = json_pack("{s:s,s:s}", "OA", "sk-openai-secret", "AN", "sk-ant-secret");
	char a[4][128];
	snprintf(a[0], sizeof a[0], "oa=http://127.0.0.1:%d/base,key=OA", T.port);
	snprintf(a[3], sizeof a[3], "short=http://127.0.0.1:%d,timeout=0.3", T.port);
	snprintf(a[1], sizeof a[1], "an=http://127.0.0.1:%d,family=anthropic,key=AN", T.port);
	/* a port nobody listens on: the upstream's own, once it is closed */
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in z = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	bind(fd, (struct sockaddr *)&z, sizeof z);
	sl = sizeof z;
	getsockname(fd, (struct sockaddr *)&z, &sl);
	snprintf(a[2], sizeof a[2], "down=http://127.0.0.1:%d", ntohs(z.sin_port));
	close(fd);
	struct llm_route r[4];
	struct moat_err e = {0};
	for (int i = 0; i < 4; i++)
		cr_assert_eq(llm_route_parse(a[i], &r[i], &e), 0, "%s", e.msg);
	cr_assert_eq(llm_init(T.base, r, 4, secrets, &e), 0, "%s", e.msg);
	for (int i = 0; i < 4; i++)
		llm_route_free(&r[i]);
}

static void teardown(void)
{
	llm_shutdown();
	evhttp_free(T.http);
	event_base_free(T.base);
	json_decref(secrets);
}

static void call(const char *route, const char *path, const char *const *hdrs)
{
	struct core_err e = {0};
	const char body[] = "{\"model\":\"m\"}";
	T.call = llm_call_start(llm_route_find(route), path, body, sizeof body - 1, hdrs, &cbs,
				NULL, &e);
	cr_assert_not_null(T.call, "%s", e.msg);
	struct timeval tv = {10, 0}; /* a hung call fails the test, not the run */
	event_base_loopexit(T.base, &tv);
	event_base_dispatch(T.base);
}

TestSuite(llm_call, .init = setup, .fini = teardown);

Test(llm_call, json_answer_with_the_key_and_only_allowed_headers)
{
	const char *const hdrs[] = {"openai-beta: assistants=v2", "Authorization: Bearer moat_st_x",
				    "x-api-key: moat_st_x", "Host: evil", NULL};
	call("oa", "/v1/json", hdrs);
	cr_assert_eq(T.dones, 1);
	cr_assert_eq(T.heads, 1);
	cr_assert(!T.has_err, "%s", T.err.msg);
	cr_assert_eq(T.status, 200);
	cr_assert_str_eq(T.got_ctype, "application/json");
	cr_assert_eq(T.dlen, strlen("{\"ok\":true}"));
	cr_assert_str_eq(T.path, "/base/v1/json");
	cr_assert_str_eq(T.auth, "Bearer sk-openai-secret"); /* the route's key, not the token */
	cr_assert_str_eq(T.xkey, "");
	cr_assert_str_eq(T.beta, "assistants=v2");
	cr_assert_str_eq(T.ctype, "application/json");
	cr_assert_str_eq(T.body, "{\"model\":\"m\"}");
	cr_assert_str_eq(T.version, "");
}

Test(llm_call, anthropic_key_and_version)
{
	call("an", "/v1/messages/json", NULL);
	cr_assert_eq(T.dones, 1);
	cr_assert_str_eq(T.xkey, "sk-ant-secret");
	cr_assert_str_eq(T.auth, "");
	cr_assert_str_eq(T.version, "2023-06-01");
	const char *const hdrs[] = {"anthropic-version: 2024-01-01", NULL};
	call("an", "/v1/messages/json", hdrs);
	cr_assert_str_eq(T.version, "2024-01-01"); /* the client's, once */
}

Test(llm_call, stream_relayed_and_complete)
{
	call("oa", "/v1/stream", NULL);
	cr_assert_eq(T.dones, 1);
	cr_assert(!T.has_err, "%s", T.err.msg);
	cr_assert_str_eq(T.got_ctype, "text/event-stream");
	T.data[T.dlen] = '\0';
	cr_assert_str_eq(T.data, "data: one\n\ndata: two\n\ndata: [DONE]\n\n");
}

Test(llm_call, upstream_error_status_passed_on)
{
	call("oa", "/v1/err", NULL);
	cr_assert_eq(T.dones, 1);
	cr_assert(!T.has_err);
	cr_assert_eq(T.status, 500);
	T.data[T.dlen] = '\0';
	cr_assert(strstr(T.data, "boom"));
}

Test(llm_call, redirect_not_followed)
{
	call("oa", "/v1/redirect", NULL);
	cr_assert_eq(T.dones, 1);
	cr_assert_eq(T.heads, 1);
	cr_assert_eq(T.status, 307);
	cr_assert_eq(T.requests, 1); /* the key went nowhere else */
}

Test(llm_call, down_is_502)
{
	call("down", "/v1/chat/completions", NULL);
	cr_assert_eq(T.dones, 1);
	cr_assert_eq(T.heads, 0);
	cr_assert(T.has_err);
	cr_assert_eq(T.err.status, 502);
	cr_assert_str_eq(T.err.code, "upstream_error");
	cr_assert(strstr(T.err.msg, "route down"), "%s", T.err.msg);
	cr_assert_null(strstr(T.err.msg, "127.0.0.1"), "the URL in %s", T.err.msg);
}

Test(llm_call, hang_is_504_after_the_route_timeout)
{
	call("short", "/v1/hang", NULL);
	cr_assert_eq(T.dones, 1);
	cr_assert_eq(T.heads, 0);
	cr_assert_eq(T.err.status, 504);
	cr_assert_str_eq(T.err.code, "timeout");
	cr_assert(strstr(T.err.msg, "300 ms"), "%s", T.err.msg);
}

static void cut_now(evutil_socket_t fd, short what, void *arg)
{
	evhttp_connection_free(evhttp_request_get_connection(T.held));
	T.held = NULL;
}

Test(llm_call, cut_mid_stream_is_502_after_head)
{
	struct event *ev = evtimer_new(T.base, cut_now, NULL);
	struct timeval tv = {0, 100000};
	evtimer_add(ev, &tv);
	call("an", "/v1/cut", NULL);
	event_free(ev);
	cr_assert_eq(T.dones, 1);
	cr_assert_eq(T.heads, 1);
	cr_assert_eq(T.err.status, 502);
	cr_assert(strstr(T.err.msg, "mid-answer"), "%s", T.err.msg);
	T.data[T.dlen] = '\0';
	cr_assert_str_eq(T.data, "data: one\n\n");
}

Test(llm_call, cancel_inside_a_callback_closes_the_upstream_and_calls_nothing)
{
	T.cancel_on_data = true;
	call("an", "/v1/cut", NULL);
	cr_assert_eq(T.dcalls, 1);
	cr_assert_eq(T.dones, 0);
	cr_assert(T.upstream_closed, "the upstream connection stayed open");
}

static void unpause(evutil_socket_t fd, short what, void *arg)
{
	struct llm_call *c = arg;
	cr_assert_eq(T.dcalls, 0, "data while the backlog was high");
	T.backlog = 0;
	llm_call_resume(c);
}

Test(llm_call, high_backlog_pauses_until_resumed)
{
	T.backlog = CORE_BACKLOG_HIGH + 1;
	struct core_err e = {0};
	T.call = llm_call_start(llm_route_find("oa"), "/v1/big", "{}", 2, NULL, &cbs, NULL, &e);
	cr_assert_not_null(T.call);
	struct event *ev = evtimer_new(T.base, unpause, T.call);
	struct timeval tv = {0, 150000};
	evtimer_add(ev, &tv);
	struct timeval lim = {10, 0};
	event_base_loopexit(T.base, &lim);
	event_base_dispatch(T.base);
	event_free(ev);
	cr_assert_eq(T.dones, 1);
	cr_assert(!T.has_err, "%s", T.err.msg);
	cr_assert_eq(T.dlen, 64 * 1024);
}
