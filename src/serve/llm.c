/* The LLM proxy's upstream side (llm.h): the operator's routes and calls to
 * them over libcurl's multi-socket interface on the daemon's libevent loop
 * (curl's hiperfifo pattern: curl tells us which sockets to watch and when
 * its timer is due; libevent tells curl when they are ready). An answer is
 * handed to the door as it arrives; a door whose client reads slowly pauses
 * the transfer (CURL_WRITEFUNC_PAUSE) instead of buffering here.
 *
 * The key: read from the secret store at each call, put in one header of
 * the upstream request only, and wiped from the header list when the call
 * ends. Redirects are not followed (an upstream must not send the key
 * elsewhere) and only http/https are spoken. */
#define _GNU_SOURCE
#include "llm.h"

#include "jfield.h"

#include <curl/curl.h>
#include <errno.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define IDLE_S 120           /* a call that sends nothing this long is dropped */
#define CONNECT_MS 10000     /* connecting (DNS, TCP, TLS) at most */
#define MAX_TIMEOUT_S 86400  /* timeout= at most a day */

struct llm_call {
	CURL *easy;
	struct curl_slist *hdrs; /* holds the key: wiped before freed */
	struct llm_cbs cbs;
	void *arg;
	char route[33];
	int64_t timeout_ms;
	bool head_sent;
	bool cancelled; /* no callback any more; freed by defer */
	bool resume;    /* unpause at the next defer */
	struct event *defer; /* what may not be done inside curl's callbacks */
	char errbuf[CURL_ERROR_SIZE];
	struct llm_call *prev, *next;
};

struct sock {
	struct event *ev;
	curl_socket_t fd;
	struct sock *prev, *next;
};

static struct {
	struct event_base *base;
	CURLM *multi;
	struct event *timer;
	struct llm_route *routes;
	size_t n;
	json_t *secrets;
	struct llm_call *calls; /* in flight, for shutdown */
	struct sock *socks;
	int depth; /* > 0 while curl runs (its callbacks may be on the stack) */
	bool curl_inited;
} L;

/* ---- routes ---------------------------------------------------------------- */

static bool name_ok(const char *s, size_t len)
{
	if (!len || len > 32)
		return false;
	for (size_t i = 0; i < len; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '_' ||
		      s[i] == '-'))
			return false;
	return true;
}

static bool secret_name_ok(const char *s)
{
	if (!*s || strlen(s) > 128)
		return false;
	for (; *s; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
		      (*s >= '0' && *s <= '9') || *s == '_' || *s == '-' || *s == '.'))
			return false;
	return true;
}

/* scheme://host[:port][/prefix]: http or https, a host, no user info (a
 * password in a URL would travel with every log line), no query or
 * fragment (the request path is appended), printable ASCII only. *url is
 * rewritten without trailing slashes. */
static int url_check(const char *arg, char *url, struct moat_err *e)
{
	const char *rest;
	if (!strncasecmp(url, "http://", 7))
		rest = url + 7;
	else if (!strncasecmp(url, "https://", 8))
		rest = url + 8;
	else
		return moat_err_set(e, MOAT_E_USAGE, 0,
				    "--llm-route %s: URL %s: expected http:// or https://", arg, url);
	for (const char *p = url; *p; p++)
		if ((unsigned char)*p <= ' ' || (unsigned char)*p >= 0x7f)
			return moat_err_set(e, MOAT_E_USAGE, 0,
					    "--llm-route %s: URL %s: spaces or control characters",
					    arg, url);
	size_t hlen = strcspn(rest, "/");
	if (!hlen || rest[0] == ':')
		return moat_err_set(e, MOAT_E_USAGE, 0, "--llm-route %s: URL %s: no host", arg, url);
	if (memchr(rest, '@', hlen))
		return moat_err_set(e, MOAT_E_USAGE, 0,
				    "--llm-route %s: URL %s: user info (user:password@) is not "
				    "allowed: the key comes from key=SECRET", arg, url);
	if (strpbrk(rest, "?#"))
		return moat_err_set(e, MOAT_E_USAGE, 0,
				    "--llm-route %s: URL %s: no query or fragment (the request's "
				    "path is appended)", arg, url);
	size_t len = strlen(url);
	while (len && url[len - 1] == '/')
		url[--len] = '\0';
	return 0;
}

/* Does the URL's host end in anthropic.com? (the family's default) */
static bool anthropic_host(const char *url)
{
	const char *h = strstr(url, "://") + 3;
	size_t hlen = strcspn(h, ":/");
	static const char dom[] = "anthropic.com";
	size_t dlen = sizeof dom - 1;
	if (hlen < dlen || strncasecmp(h + hlen - dlen, dom, dlen))
		return false;
	return hlen == dlen || h[hlen - dlen - 1] == '.';
}

int llm_route_parse(const char *arg, struct llm_route *r, struct moat_err *e)
{
	*r = (struct llm_route){0};
	const char *eq = strchr(arg, '=');
	if (!eq)
		return moat_err_set(e, MOAT_E_USAGE, 0,
				    "--llm-route %s: expected NAME=URL[,family=openai|anthropic]"
				    "[,key=SECRET][,timeout=SECONDS]", arg);
	if (!name_ok(arg, (size_t)(eq - arg)))
		return moat_err_set(e, MOAT_E_USAGE, 0,
				    "--llm-route %s: the name %.*s: expected 1 to 32 of [a-z0-9_-]",
				    arg, (int)(eq - arg), arg);
	char *dup = strdup(eq + 1);
	if (!dup)
		return moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "--llm-route %s", arg);
	char *save = NULL, *url = strtok_r(dup, ",", &save);
	int family = -1;
	if (!url || !*url) {
		free(dup);
		return moat_err_set(e, MOAT_E_USAGE, 0, "--llm-route %s: no URL after NAME=", arg);
	}
	if (url_check(arg, url, e) < 0)
		goto fail;
	r->name = strndup(arg, (size_t)(eq - arg));
	r->url = strdup(url);
	if (!r->name || !r->url) {
		moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "--llm-route %s", arg);
		goto fail;
	}
	bool have_timeout = false;
	for (char *opt; (opt = strtok_r(NULL, ",", &save));) {
		char *v = strchr(opt, '=');
		if (!v) {
			moat_err_set(e, MOAT_E_USAGE, 0,
				     "--llm-route %s: option %s: expected KEY=VALUE (family=, key=, "
				     "timeout=)", arg, opt);
			goto fail;
		}
		*v++ = '\0';
		if (!strcmp(opt, "family")) {
			if (family >= 0) {
				moat_err_set(e, MOAT_E_USAGE, 0, "--llm-route %s: family= given twice", arg);
				goto fail;
			}
			if (!strcmp(v, "openai"))
				family = LLM_FAMILY_OPENAI;
			else if (!strcmp(v, "anthropic"))
				family = LLM_FAMILY_ANTHROPIC;
			else {
				moat_err_set(e, MOAT_E_USAGE, 0,
					     "--llm-route %s: family=%s: expected openai or anthropic",
					     arg, v);
				goto fail;
			}
		} else if (!strcmp(opt, "key")) {
			if (r->key_secret) {
				moat_err_set(e, MOAT_E_USAGE, 0, "--llm-route %s: key= given twice", arg);
				goto fail;
			}
			if (!secret_name_ok(v)) {
				moat_err_set(e, MOAT_E_USAGE, 0,
					     "--llm-route %s: key=%s: expected the name of a secret "
					     "([A-Za-z0-9_.-], from --secrets-file or --secret-env), "
					     "not the key itself", arg, v);
				goto fail;
			}
			if (!(r->key_secret = strdup(v))) {
				moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "--llm-route %s", arg);
				goto fail;
			}
		} else if (!strcmp(opt, "timeout")) {
			char *end;
			errno = 0;
			double s = strtod(v, &end);
			if (have_timeout || !*v || *end || errno || !(s > 0) || s > MAX_TIMEOUT_S) {
				moat_err_set(e, MOAT_E_USAGE, 0,
					     "--llm-route %s: timeout=%s: expected seconds above 0 and "
					     "at most %d (given once)", arg, v, MAX_TIMEOUT_S);
				goto fail;
			}
			have_timeout = true;
			r->timeout_ms = (int64_t)(s * 1000 + 0.5);
			if (!r->timeout_ms)
				r->timeout_ms = 1;
		} else {
			moat_err_set(e, MOAT_E_USAGE, 0,
				     "--llm-route %s: unknown option %s (family=, key=, timeout=)", arg,
				     opt);
			goto fail;
		}
	}
	r->family = family >= 0 ? (enum llm_family)family
				: anthropic_host(r->url) ? LLM_FAMILY_ANTHROPIC : LLM_FAMILY_OPENAI;
	free(dup);
	return 0;
fail:
	free(dup);
	llm_route_free(r);
	return -1;
}

void llm_route_free(struct llm_route *r)
{
	if (!r)
		return;
	free(r->name);
	free(r->url);
	free(r->key_secret);
	*r = (struct llm_route){0};
}

const struct llm_route *llm_route_find(const char *name)
{
	for (size_t i = 0; name && i < L.n; i++)
		if (!strcmp(L.routes[i].name, name))
			return &L.routes[i];
	return NULL;
}

size_t llm_route_count(void)
{
	return L.n;
}

const struct llm_route *llm_route_at(size_t i)
{
	return i < L.n ? &L.routes[i] : NULL;
}

/* ---- curl on libevent -------------------------------------------------------- */

static void check_done(void);

static void socket_action(curl_socket_t fd, int what)
{
	int running = 0;
	L.depth++;
	CURLMcode rc = curl_multi_socket_action(L.multi, fd, what, &running);
	L.depth--;
	if (rc != CURLM_OK)
		fprintf(stderr, "moat serve: llm: curl_multi_socket_action: %s\n",
			curl_multi_strerror(rc));
	check_done();
}

static void on_sock(evutil_socket_t fd, short what, void *arg)
{
	(void)arg;
	int action = (what & EV_READ ? CURL_CSELECT_IN : 0) | (what & EV_WRITE ? CURL_CSELECT_OUT : 0);
	socket_action(fd, action);
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
	(void)fd, (void)what, (void)arg;
	socket_action(CURL_SOCKET_TIMEOUT, 0);
}

static void sock_free(struct sock *s)
{
	if (s->prev)
		s->prev->next = s->next;
	else
		L.socks = s->next;
	if (s->next)
		s->next->prev = s->prev;
	if (s->ev)
		event_free(s->ev);
	free(s);
}

/* CURLMOPT_SOCKETFUNCTION: watch fd for what curl wants. */
static int sock_cb(CURL *easy, curl_socket_t fd, int what, void *userp, void *sockp)
{
	(void)easy, (void)userp;
	struct sock *s = sockp;
	if (what == CURL_POLL_REMOVE) {
		if (s) {
			curl_multi_assign(L.multi, fd, NULL);
			sock_free(s);
		}
		return 0;
	}
	if (!s) {
		if (!(s = calloc(1, sizeof *s)))
			return -1;
		s->fd = fd;
		s->next = L.socks;
		if (L.socks)
			L.socks->prev = s;
		L.socks = s;
		curl_multi_assign(L.multi, fd, s);
	}
	short kind = (short)((what & CURL_POLL_IN ? EV_READ : 0) |
			     (what & CURL_POLL_OUT ? EV_WRITE : 0) | EV_PERSIST);
	if (s->ev)
		event_free(s->ev);
	s->ev = event_new(L.base, fd, kind, on_sock, NULL);
	if (!s->ev || event_add(s->ev, NULL) < 0) {
		fprintf(stderr, "moat serve: llm: cannot watch a socket of an upstream call\n");
		return -1;
	}
	return 0;
}

/* CURLMOPT_TIMERFUNCTION: curl's one timer (never acted on inside: a due
 * time of 0 runs from the loop). */
static int timer_cb(CURLM *multi, long timeout_ms, void *userp)
{
	(void)multi, (void)userp;
	if (timeout_ms < 0)
		return evtimer_del(L.timer);
	struct timeval tv = {.tv_sec = timeout_ms / 1000, .tv_usec = (timeout_ms % 1000) * 1000};
	return evtimer_add(L.timer, &tv);
}

/* ---- calls ------------------------------------------------------------------- */

/* The headers hold the key: wiped, not just freed. */
static void hdrs_free(struct curl_slist *h)
{
	for (struct curl_slist *p = h; p; p = p->next)
		explicit_bzero(p->data, strlen(p->data));
	curl_slist_free_all(h);
}

static void call_free(struct llm_call *c)
{
	if (c->prev)
		c->prev->next = c->next;
	else if (L.calls == c)
		L.calls = c->next;
	if (c->next)
		c->next->prev = c->prev;
	if (c->easy) {
		curl_multi_remove_handle(L.multi, c->easy);
		curl_easy_cleanup(c->easy);
	}
	hdrs_free(c->hdrs);
	if (c->defer)
		event_free(c->defer);
	free(c);
}

static void head_once(struct llm_call *c)
{
	if (c->head_sent)
		return;
	c->head_sent = true;
	long status = 0;
	char *ctype = NULL;
	curl_easy_getinfo(c->easy, CURLINFO_RESPONSE_CODE, &status);
	curl_easy_getinfo(c->easy, CURLINFO_CONTENT_TYPE, &ctype);
	c->cbs.head(c->arg, (int)status, ctype && *ctype ? ctype : "application/octet-stream");
}

/* A transfer ended: the door is told (head first if the upstream answered
 * with no body), the call is freed. What reaches the door names the route
 * and curl's generic reason, never the URL (the operator's log gets the
 * detail). */
static void finish(struct llm_call *c, CURLcode res)
{
	if (c->cancelled) {
		call_free(c);
		return;
	}
	long status = 0;
	curl_easy_getinfo(c->easy, CURLINFO_RESPONSE_CODE, &status);
	struct core_err e = {0};
	bool failed = res != CURLE_OK;
	if (res == CURLE_OPERATION_TIMEDOUT) {
		/* curl's low-speed check says "Operation too slow. Less than 1
		 * bytes/sec transferred the last 120 seconds": the idle limit */
		if (c->timeout_ms && !strstr(c->errbuf, "too slow"))
			cerr(&e, 504, "timeout",
				 "the upstream of LLM route %s did not answer within %lld ms "
				 "(its timeout)", c->route, (long long)c->timeout_ms);
		else
			cerr(&e, 504, "timeout",
				 "the upstream of LLM route %s sent nothing for %d s", c->route, IDLE_S);
	} else if (failed) {
		cerr(&e, 502, "upstream_error", "the upstream of LLM route %s failed%s: %s",
			 c->route, c->head_sent || status ? " mid-answer" : "",
			 curl_easy_strerror(res));
	}
	if (failed)
		fprintf(stderr, "moat serve: llm route %s: %s (%s)\n", c->route, e.msg, c->errbuf);
	if (!failed)
		head_once(c);
	/* removed from the multi before the door runs (it may start another) */
	struct llm_cbs cbs = c->cbs;
	void *arg = c->arg;
	call_free(c);
	cbs.done(arg, failed ? &e : NULL);
}

static void check_done(void)
{
	CURLMsg *m;
	int left;
	while ((m = curl_multi_info_read(L.multi, &left))) {
		if (m->msg != CURLMSG_DONE)
			continue;
		struct llm_call *c = NULL;
		curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&c);
		if (c)
			finish(c, m->data.result);
	}
}

/* From the loop, never inside curl: a cancelled call's removal, a resume. */
static void on_defer(evutil_socket_t fd, short what, void *arg)
{
	(void)fd, (void)what;
	struct llm_call *c = arg;
	if (c->cancelled) {
		call_free(c);
		check_done();
		return;
	}
	if (c->resume) {
		c->resume = false;
		L.depth++;
		CURLcode rc = curl_easy_pause(c->easy, CURLPAUSE_CONT);
		L.depth--;
		if (rc != CURLE_OK)
			fprintf(stderr, "moat serve: llm route %s: resume: %s\n", c->route,
				curl_easy_strerror(rc));
		/* the unpause may have ended the transfer (or a cancel came
		 * meanwhile): let curl and the queue catch up */
		socket_action(CURL_SOCKET_TIMEOUT, 0);
	}
}

static size_t on_write(char *p, size_t size, size_t nmemb, void *arg)
{
	struct llm_call *c = arg;
	size_t n = size * nmemb;
	if (c->cancelled)
		return 0; /* aborts the transfer; the defer frees it */
	/* the door's client is behind: keep the bytes in curl (it hands the
	 * same ones again after the unpause) */
	if (c->cbs.backlog && c->cbs.backlog(c->arg) > CORE_BACKLOG_HIGH)
		return CURL_WRITEFUNC_PAUSE;
	head_once(c);
	if (c->cancelled)
		return 0;
	if (n)
		c->cbs.data(c->arg, p, n);
	return c->cancelled ? 0 : n;
}

/* Is "Name: value" a header the caller may pass on? (never one that
 * carries credentials or that curl or this file sets) */
static bool header_ok(const char *h)
{
	static const char *const deny[] = {"authorization", "x-api-key", "proxy-authorization",
					   "cookie", "host", "content-length", "content-type",
					   "transfer-encoding", "connection", "expect",
					   "accept-encoding", "te", "upgrade", "keep-alive"};
	const char *colon = strchr(h, ':');
	if (!colon || colon == h || strpbrk(h, "\r\n") || strlen(h) > 4096)
		return false;
	for (const char *p = h; p < colon; p++)
		if ((unsigned char)*p <= ' ' || *p == '(' || *p == ')' || *p == '"')
			return false;
	size_t nlen = (size_t)(colon - h);
	for (size_t i = 0; i < sizeof deny / sizeof *deny; i++)
		if (strlen(deny[i]) == nlen && !strncasecmp(h, deny[i], nlen))
			return false;
	return true;
}

static bool add_hdr(struct curl_slist **l, const char *h)
{
	struct curl_slist *n = curl_slist_append(*l, h);
	if (!n)
		return false;
	*l = n;
	return true;
}

/* The request's headers: the key's, the client's allowed ones, JSON. */
static int build_headers(struct llm_call *c, const struct llm_route *r,
			 const char *const *headers, struct core_err *e)
{
	const char *key = NULL;
	if (r->key_secret) {
		json_t *v = json_object_get(L.secrets, r->key_secret);
		key = json_string_value(v);
		if (!key) { /* llm_init checked it: the store changed under us */
			cerr(e, 502, "upstream_error",
				 "LLM route %s: its key (secret %s) is not in the secret store", r->name,
				 r->key_secret);
			return -1;
		}
	}
	bool version = false;
	bool ok = add_hdr(&c->hdrs, "Content-Type: application/json") &&
		  add_hdr(&c->hdrs, "Expect:") && add_hdr(&c->hdrs, "Accept-Encoding:");
	for (size_t i = 0; ok && headers && headers[i]; i++) {
		if (!header_ok(headers[i]))
			continue;
		if (!strncasecmp(headers[i], "anthropic-version:", 18))
			version = true;
		ok = add_hdr(&c->hdrs, headers[i]);
	}
	if (ok && r->family == LLM_FAMILY_ANTHROPIC && !version)
		ok = add_hdr(&c->hdrs, "anthropic-version: 2023-06-01");
	if (ok && key) {
		size_t klen = strlen(key);
		char *h = malloc(klen + 32);
		if (!h || strpbrk(key, "\r\n")) {
			free(h);
			cerr(e, 500, "internal", "LLM route %s: its key is unusable", r->name);
			return -1;
		}
		snprintf(h, klen + 32, "%s%s",
			 r->family == LLM_FAMILY_ANTHROPIC ? "x-api-key: " : "Authorization: Bearer ",
			 key);
		ok = add_hdr(&c->hdrs, h);
		explicit_bzero(h, strlen(h));
		free(h);
	}
	if (!ok) {
		cerr(e, 500, "internal", "out of memory");
		return -1;
	}
	return 0;
}

struct llm_call *llm_call_start(const struct llm_route *r, const char *path, const char *body,
				size_t len, const char *const *headers, const struct llm_cbs *cbs,
				void *arg, struct core_err *e)
{
	if (!L.multi) {
		cerr(e, 500, "internal", "the LLM proxy is not initialised");
		return NULL;
	}
	if (!path || path[0] != '/' || strpbrk(path, " \r\n?#")) {
		cerr(e, 400, "invalid_request", "bad upstream path");
		return NULL;
	}
	struct llm_call *c = calloc(1, sizeof *c);
	if (!c) {
		cerr(e, 500, "internal", "out of memory");
		return NULL;
	}
	c->cbs = *cbs;
	c->arg = arg;
	c->timeout_ms = r->timeout_ms;
	snprintf(c->route, sizeof c->route, "%s", r->name);
	char *url = NULL;
	if (asprintf(&url, "%s%s", r->url, path) < 0) {
		url = NULL;
		cerr(e, 500, "internal", "out of memory");
		goto fail;
	}
	if (build_headers(c, r, headers, e) < 0)
		goto fail;
	if (!(c->easy = curl_easy_init()) || !(c->defer = event_new(L.base, -1, 0, on_defer, c))) {
		cerr(e, 500, "internal", "cannot start an upstream call");
		goto fail;
	}
	CURL *h = c->easy;
	/* each setopt can only fail for want of memory or an option this curl
	 * lacks; one check of the lot */
	CURLcode rc = CURLE_OK;
#define SET(opt, val) \
	do { \
		if (rc == CURLE_OK) \
			rc = curl_easy_setopt(h, opt, val); \
	} while (0)
	SET(CURLOPT_URL, url);
	SET(CURLOPT_PROTOCOLS_STR, "http,https");
	SET(CURLOPT_FOLLOWLOCATION, 0L);
	SET(CURLOPT_NOSIGNAL, 1L);
	SET(CURLOPT_POST, 1L);
	SET(CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
	SET(CURLOPT_COPYPOSTFIELDS, body ? body : "");
	SET(CURLOPT_HTTPHEADER, c->hdrs);
	SET(CURLOPT_WRITEFUNCTION, on_write);
	SET(CURLOPT_WRITEDATA, c);
	SET(CURLOPT_PRIVATE, c);
	SET(CURLOPT_ERRORBUFFER, c->errbuf);
	SET(CURLOPT_CONNECTTIMEOUT_MS,
	    (long)(r->timeout_ms && r->timeout_ms < CONNECT_MS ? r->timeout_ms : CONNECT_MS));
	SET(CURLOPT_TIMEOUT_MS, (long)r->timeout_ms);
	SET(CURLOPT_LOW_SPEED_LIMIT, 1L);
	SET(CURLOPT_LOW_SPEED_TIME, (long)IDLE_S);
	SET(CURLOPT_TCP_NODELAY, 1L);
	SET(CURLOPT_TCP_KEEPALIVE, 1L);
#undef SET
	if (rc != CURLE_OK) {
		cerr(e, 500, "internal", "cannot set up an upstream call: %s",
			 curl_easy_strerror(rc));
		goto fail;
	}
	free(url);
	url = NULL;
	CURLMcode mrc = curl_multi_add_handle(L.multi, h);
	if (mrc != CURLM_OK) {
		cerr(e, 500, "internal", "cannot start an upstream call: %s",
			 curl_multi_strerror(mrc));
		curl_easy_cleanup(c->easy);
		c->easy = NULL;
		goto fail;
	}
	c->next = L.calls;
	if (L.calls)
		L.calls->prev = c;
	L.calls = c;
	return c;
fail:
	free(url);
	if (c->easy) {
		curl_easy_cleanup(c->easy);
		c->easy = NULL;
	}
	hdrs_free(c->hdrs);
	if (c->defer)
		event_free(c->defer);
	free(c);
	return NULL;
}

void llm_call_cancel(struct llm_call *c)
{
	if (!c || c->cancelled)
		return;
	c->cancelled = true;
	if (L.depth == 0) {
		call_free(c);
		return;
	}
	/* inside one of curl's callbacks: removing the handle now is not
	 * allowed; nothing more reaches the door meanwhile */
	event_active(c->defer, EV_TIMEOUT, 0);
}

void llm_call_resume(struct llm_call *c)
{
	if (!c || c->cancelled || c->resume)
		return;
	c->resume = true;
	event_active(c->defer, EV_TIMEOUT, 0);
}

/* ---- life ------------------------------------------------------------------- */

int llm_init(struct event_base *base, const struct llm_route *routes, size_t n, json_t *secrets,
	     struct moat_err *e)
{
	L.base = base;
	L.secrets = secrets;
	for (size_t i = 0; i < n; i++) {
		if (routes[i].key_secret &&
		    !json_is_string(json_object_get(secrets, routes[i].key_secret)))
			return moat_err_set(e, MOAT_E_USAGE, 0,
					    "--llm-route %s: key=%s is not in the secret store "
					    "(--secrets-file FILE with a %s=... line, or --secret-env %s)",
					    routes[i].name, routes[i].key_secret, routes[i].key_secret,
					    routes[i].key_secret);
		for (size_t j = 0; j < i; j++)
			if (!strcmp(routes[i].name, routes[j].name))
				return moat_err_set(e, MOAT_E_USAGE, 0,
						    "--llm-route %s: the name is given twice",
						    routes[i].name);
	}
	if (n && !(L.routes = calloc(n, sizeof *L.routes)))
		return moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "--llm-route");
	for (size_t i = 0; i < n; i++) {
		struct llm_route *d = &L.routes[i];
		d->name = strdup(routes[i].name);
		d->url = strdup(routes[i].url);
		d->key_secret = routes[i].key_secret ? strdup(routes[i].key_secret) : NULL;
		d->family = routes[i].family;
		d->timeout_ms = routes[i].timeout_ms;
		L.n = i + 1;
		if (!d->name || !d->url || (routes[i].key_secret && !d->key_secret)) {
			llm_shutdown();
			return moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "--llm-route");
		}
	}
	if (!n)
		return 0;
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
		llm_shutdown();
		return moat_err_set(e, MOAT_E_SYSTEM, 0, "the LLM proxy: cannot initialise libcurl");
	}
	L.curl_inited = true;
	L.multi = curl_multi_init();
	L.timer = evtimer_new(base, on_timer, NULL);
	if (!L.multi || !L.timer ||
	    curl_multi_setopt(L.multi, CURLMOPT_SOCKETFUNCTION, sock_cb) != CURLM_OK ||
	    curl_multi_setopt(L.multi, CURLMOPT_TIMERFUNCTION, timer_cb) != CURLM_OK) {
		llm_shutdown();
		return moat_err_set(e, MOAT_E_SYSTEM, 0, "the LLM proxy: cannot set up libcurl");
	}
	return 0;
}

void llm_shutdown(void)
{
	while (L.calls) {
		L.calls->cancelled = true;
		call_free(L.calls);
	}
	if (L.multi)
		curl_multi_cleanup(L.multi);
	L.multi = NULL;
	while (L.socks)
		sock_free(L.socks);
	if (L.timer)
		event_free(L.timer);
	L.timer = NULL;
	for (size_t i = 0; i < L.n; i++)
		llm_route_free(&L.routes[i]);
	free(L.routes);
	L.routes = NULL;
	L.n = 0;
	if (L.curl_inited)
		curl_global_cleanup();
	L.curl_inited = false;
}
