/* libcurl wrapper: see http.h. */
#define _GNU_SOURCE
#include "http.h"

#include "../base/cleanup.h"

#include <curl/curl.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define DEFAULT_URL "http://127.0.0.1:7070"
/* Buffered answers are JSON or one file; anything bigger is a bug or abuse. */
#define MAX_ANSWER ((size_t)1 << 30)

struct moat_http {
	CURL *curl;
	char *url;      /* base URL without trailing '/' */
	char *auth;     /* "Authorization: Bearer ..." or NULL */
	char *noproxy;  /* loopback plus $no_proxy: never proxy the local daemon */
	char errbuf[CURL_ERROR_SIZE];
};

static const char *env_nonempty(const char *name)
{
	const char *v = getenv(name);
	return v && *v ? v : NULL;
}

struct moat_http *moat_http_new(struct moat_err *e)
{
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
		moat_err_set(e, MOAT_E_SYSTEM, 0, "cannot initialise libcurl");
		return NULL;
	}
	struct moat_http *h = calloc(1, sizeof *h);
	if (!h) {
		curl_global_cleanup();
		moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "moat_http_new");
		return NULL;
	}
	const char *url = env_nonempty("MOAT_URL");
	h->url = strdup(url ? url : DEFAULT_URL);
	const char *tok = env_nonempty("MOAT_API_TOKEN");
	const char *np = env_nonempty("no_proxy");
	if (!np)
		np = env_nonempty("NO_PROXY");
	int r1 = tok ? asprintf(&h->auth, "Authorization: Bearer %s", tok) : 0;
	int r2 = asprintf(&h->noproxy, "localhost,127.0.0.1,::1%s%s",
			  np ? "," : "", np ? np : "");
	if (r1 < 0)
		h->auth = NULL;
	if (r2 < 0)
		h->noproxy = NULL;
	h->curl = curl_easy_init();
	if (!h->url || r1 < 0 || r2 < 0 || !h->curl) {
		moat_http_free(h);
		moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "moat_http_new");
		return NULL;
	}
	size_t n = strlen(h->url);
	while (n > 0 && h->url[n - 1] == '/')
		h->url[--n] = '\0';
	/* A header line must stay one line. */
	if (tok && strpbrk(tok, "\r\n")) {
		moat_http_free(h);
		moat_err_set(e, MOAT_E_USAGE, 0, "MOAT_API_TOKEN contains a line break");
		return NULL;
	}
	return h;
}

void moat_http_free(struct moat_http *h)
{
	if (!h)
		return;
	if (h->curl)
		curl_easy_cleanup(h->curl);
	free(h->url);
	free(h->auth);
	free(h->noproxy);
	free(h);
	curl_global_cleanup();
}

const char *moat_http_auth(const struct moat_http *h)
{
	return h->auth;
}

const char *moat_http_url(const struct moat_http *h)
{
	return h->url;
}

int moat_http_base_headers(const struct moat_http *h, struct curl_slist **hdrs)
{
	struct curl_slist *nl = curl_slist_append(*hdrs, "Expect:");
	if (!nl)
		return -1;
	*hdrs = nl;
	if (h->auth) {
		nl = curl_slist_append(*hdrs, h->auth);
		if (!nl)
			return -1;
		*hdrs = nl;
	}
	return 0;
}

CURLcode moat_http_setopts(const struct moat_http *h, CURL *c, const char *url,
			   struct curl_slist *hdrs, char *errbuf)
{
	CURLcode rc = CURLE_OK;
#define SET(opt, val) \
	do { if (rc == CURLE_OK) rc = curl_easy_setopt(c, opt, val); } while (0)
	SET(CURLOPT_URL, url);
	SET(CURLOPT_ERRORBUFFER, errbuf);
	SET(CURLOPT_NOSIGNAL, 1L);
	SET(CURLOPT_NOPROXY, h->noproxy);
	SET(CURLOPT_CONNECTTIMEOUT, 10L);
	SET(CURLOPT_HTTPHEADER, hdrs);
	SET(CURLOPT_TCP_NODELAY, 1L);
	SET(CURLOPT_PROTOCOLS_STR, "http,https");
#undef SET
	return rc;
}

bool moat_http_buf_add(char **buf, size_t *len, size_t *cap, const char *data, size_t n,
		       size_t max)
{
	if (n > max - *len - 1)
		return false;
	if (*len + n + 1 > *cap) {
		size_t nc = *cap ? *cap : 4096;
		while (nc < *len + n + 1)
			nc *= 2;
		char *nb = realloc(*buf, nc);
		if (!nb)
			return false;
		*buf = nb;
		*cap = nc;
	}
	memcpy(*buf + *len, data, n);
	*len += n;
	(*buf)[*len] = '\0';
	return true;
}

char *moat_http_escape(struct moat_http *h, const char *s)
{
	char *c = curl_easy_escape(h->curl, s, (int)strlen(s));
	if (!c)
		return NULL;
	/* Hand back malloc'd memory so callers can use _cleanup_free_. */
	char *r = strdup(c);
	curl_free(c);
	return r;
}

/* ---- one transfer ------------------------------------------------------- */

struct xfer {
	struct moat_http *h;
	const struct moat_http_req *rq;
	struct moat_http_resp *rs;
	struct moat_err *e;
	size_t cap;
	bool decided;
	bool stream;
	bool sink_failed;
	bool too_large;
	bool read_failed;
	bool upload_refused; /* upload_eof said no: e is filled */
};

bool moat_http_is_stream(CURL *c, const char *type)
{
	long st = 0;
	char *ct = NULL;
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &st);
	curl_easy_getinfo(c, CURLINFO_CONTENT_TYPE, &ct);
	return st >= 200 && st < 300 &&
	       (!type || (ct && strncasecmp(ct, type, strlen(type)) == 0));
}

static size_t on_data(char *data, size_t size, size_t nmemb, void *arg)
{
	struct xfer *x = arg;
	size_t n = size * nmemb;
	if (!x->decided) {
		x->decided = true;
		x->stream = x->rq->sink && moat_http_is_stream(x->h->curl, x->rq->stream_type);
		x->rs->streamed = x->stream;
	}
	if (x->stream) {
		if (x->rq->sink(x->rq->sink_arg, data, n, x->e) < 0) {
			x->sink_failed = true;
			return 0;
		}
		return n;
	}
	if (!moat_http_buf_add(&x->rs->body, &x->rs->len, &x->cap, data, n, MAX_ANSWER)) {
		x->too_large = true;
		return 0;
	}
	return n;
}

static size_t on_read(char *buf, size_t size, size_t nitems, void *arg)
{
	struct xfer *x = arg;
	size_t n = fread(buf, 1, size * nitems, x->rq->upload);
	if (n == 0 && ferror(x->rq->upload)) {
		x->read_failed = true;
		return CURL_READFUNC_ABORT;
	}
	if (n == 0 && x->rq->upload_eof && x->rq->upload_eof(x->rq->upload_arg, x->e) < 0) {
		x->upload_refused = true;
		return CURL_READFUNC_ABORT;
	}
	return n;
}

static char *build_url(struct moat_http *h, const struct moat_http_req *rq,
		       struct moat_err *e)
{
	char *s = NULL;
	size_t len = 0;
	_cleanup_fclose_ FILE *f = open_memstream(&s, &len);
	if (!f) {
		moat_err_set(e, MOAT_E_SYSTEM, errno, "open_memstream");
		return NULL;
	}
	fputs(h->url, f);
	fputs(rq->path, f);
	for (size_t i = 0; rq->query && rq->query[i]; i += 2) {
		_cleanup_free_ char *k = moat_http_escape(h, rq->query[i]);
		_cleanup_free_ char *v = moat_http_escape(h, rq->query[i + 1] ? rq->query[i + 1] : "");
		if (!k || !v) {
			moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "escape");
			fclose(steal_ptr(&f));
			free(s);
			return NULL;
		}
		fprintf(f, "%c%s=%s", i == 0 ? '?' : '&', k, v);
	}
	if (fclose(steal_ptr(&f)) != 0) {
		moat_err_set(e, MOAT_E_SYSTEM, errno, "building the URL");
		free(s);
		return NULL;
	}
	return s;
}

static void free_slist(struct curl_slist **l)
{
	curl_slist_free_all(*l);
}

static int add_header(struct curl_slist **l, const char *name, const char *value,
		      struct moat_err *e)
{
	char line[512];
	int n = snprintf(line, sizeof line, "%s: %s", name, value);
	if (n < 0 || (size_t)n >= sizeof line)
		return moat_err_set(e, MOAT_E_SYSTEM, 0, "header %s too long", name);
	struct curl_slist *nl = curl_slist_append(*l, line);
	if (!nl)
		return moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "curl_slist_append");
	*l = nl;
	return 0;
}

static bool is_connect_error(CURLcode c)
{
	return c == CURLE_COULDNT_CONNECT || c == CURLE_COULDNT_RESOLVE_HOST ||
	       c == CURLE_COULDNT_RESOLVE_PROXY || c == CURLE_URL_MALFORMAT ||
	       c == CURLE_UNSUPPORTED_PROTOCOL || c == CURLE_OPERATION_TIMEDOUT;
}

int moat_http_do(struct moat_http *h, const struct moat_http_req *rq,
		 struct moat_http_resp *rs, struct moat_err *e)
{
	memset(rs, 0, sizeof *rs);
	_cleanup_free_ char *url = build_url(h, rq, e);
	if (!url)
		return -1;
	__attribute__((cleanup(free_slist))) struct curl_slist *hdrs = NULL;
	if (moat_http_base_headers(h, &hdrs) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "curl_slist_append");
	if (rq->content_type && add_header(&hdrs, "Content-Type", rq->content_type, e) < 0)
		return -1;
	if (rq->accept && add_header(&hdrs, "Accept", rq->accept, e) < 0)
		return -1;

	struct xfer x = {.h = h, .rq = rq, .rs = rs, .e = e};
	CURL *c = h->curl;
	curl_easy_reset(c); /* keeps the connection for the next request */
	h->errbuf[0] = '\0';
	CURLcode rc = moat_http_setopts(h, c, url, hdrs, h->errbuf);
#define SET(opt, val) \
	do { if (rc == CURLE_OK) rc = curl_easy_setopt(c, opt, val); } while (0)
	SET(CURLOPT_WRITEFUNCTION, on_data);
	SET(CURLOPT_WRITEDATA, &x);
	if (rq->upload) {
		SET(CURLOPT_UPLOAD, 1L);
		SET(CURLOPT_READFUNCTION, on_read);
		SET(CURLOPT_READDATA, &x);
		SET(CURLOPT_INFILESIZE_LARGE, (curl_off_t)rq->upload_len);
		if (strcmp(rq->method, "PUT") != 0)
			SET(CURLOPT_CUSTOMREQUEST, rq->method);
	} else if (rq->body || strcmp(rq->method, "POST") == 0 ||
		   strcmp(rq->method, "PUT") == 0) {
		SET(CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)rq->body_len);
		SET(CURLOPT_POSTFIELDS, rq->body ? rq->body : "");
		if (strcmp(rq->method, "POST") != 0)
			SET(CURLOPT_CUSTOMREQUEST, rq->method);
	} else if (strcmp(rq->method, "GET") != 0) {
		SET(CURLOPT_CUSTOMREQUEST, rq->method);
	}
#undef SET
	if (rc != CURLE_OK)
		return moat_err_set(e, MOAT_E_SYSTEM, 0, "libcurl: %s",
				    curl_easy_strerror(rc));

	rc = curl_easy_perform(c);
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &rs->status);
	if (rc != CURLE_OK) {
		int r;
		const char *why = h->errbuf[0] ? h->errbuf : curl_easy_strerror(rc);
		if (x.sink_failed || x.upload_refused)
			r = -1; /* the sink or upload_eof filled e */
		else if (x.too_large)
			r = moat_err_set(e, MOAT_E_SYSTEM, 0,
					 "the answer from %s is too large", h->url);
		else if (x.read_failed)
			r = moat_err_set(e, MOAT_E_SYSTEM, errno, "reading the upload");
		else if (is_connect_error(rc) && rs->status == 0)
			r = moat_err_set(e, MOAT_E_SYSTEM, 0,
					 "cannot reach moat serve at %s: %s", h->url, why);
		else
			r = moat_err_set(e, MOAT_E_SYSTEM, 0,
					 "connection to moat serve at %s failed: %s", h->url, why);
		moat_http_resp_free(rs);
		return r;
	}
	if (!rs->body) {
		rs->body = calloc(1, 1);
		if (!rs->body)
			return moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "answer");
	}
	return 0;
}

void moat_http_resp_free(struct moat_http_resp *rs)
{
	free(rs->body);
	rs->body = NULL;
	rs->len = 0;
}

int moat_http_error(const struct moat_http_resp *rs, struct moat_err *e)
{
	json_error_t jerr;
	json_t *j = rs->body && rs->len ? json_loadb(rs->body, rs->len, 0, &jerr) : NULL;
	const char *code = NULL, *msg = NULL;
	if (j && json_unpack(j, "{s:{s?s, s?s}}", "error", "code", &code,
			     "message", &msg) != 0) {
		code = NULL;
		msg = NULL;
	}
	if (msg || code) {
		moat_err_set(e, MOAT_E_SYSTEM, 0, "%s (%s, HTTP %ld)",
			     msg ? msg : "error", code ? code : "?", rs->status);
	} else if (rs->body && rs->len) {
		/* Not our daemon's error shape (a proxy?): show its first line. */
		size_t n = strcspn(rs->body, "\r\n");
		if (n > 200)
			n = 200;
		moat_err_set(e, MOAT_E_SYSTEM, 0, "%.*s (HTTP %ld)", (int)n, rs->body,
			     rs->status);
	} else {
		moat_err_set(e, MOAT_E_SYSTEM, 0, "unexpected answer (HTTP %ld)", rs->status);
	}
	json_decref(j);
	return -1;
}

bool moat_http_error_is(const struct moat_http_resp *rs, const char *code)
{
	json_error_t jerr;
	json_t *j = rs->body && rs->len ? json_loadb(rs->body, rs->len, 0, &jerr) : NULL;
	const char *c = NULL;
	bool r = j && json_unpack(j, "{s:{s:s}}", "error", "code", &c) == 0 &&
		 strcmp(c, code) == 0;
	json_decref(j);
	return r;
}

int moat_http_json(struct moat_http *h, const char *method, const char *path,
		   const char *const *query, json_t *body, json_t **out,
		   struct moat_err *e)
{
	_cleanup_free_ char *text = NULL;
	if (body) {
		text = json_dumps(body, JSON_COMPACT);
		if (!text)
			return moat_err_set(e, MOAT_E_SYSTEM, 0, "cannot encode the request as JSON");
	}
	struct moat_http_req rq = {
		.method = method, .path = path, .query = query,
		.body = text, .body_len = text ? strlen(text) : 0,
		.content_type = text ? "application/json" : NULL,
		.accept = "application/json",
	};
	struct moat_http_resp rs;
	if (moat_http_do(h, &rq, &rs, e) < 0)
		return -1;
	int r = 0;
	if (rs.status < 200 || rs.status >= 300) {
		r = moat_http_error(&rs, e);
	} else if (out) {
		json_error_t jerr;
		*out = rs.len ? json_loadb(rs.body, rs.len, 0, &jerr) : json_null();
		if (!*out)
			r = moat_err_set(e, MOAT_E_SYSTEM, 0,
					 "invalid JSON answer from %s: %s", h->url, jerr.text);
	}
	moat_http_resp_free(&rs);
	return r;
}

char *moat_http_path(struct moat_http *h, const char *collection, const char *id,
		     const char *suffix)
{
	_cleanup_free_ char *eid = moat_http_escape(h, id);
	char *p;
	if (!eid || asprintf(&p, "/v1/%s/%s%s", collection, eid, suffix) < 0)
		return NULL;
	return p;
}

char *moat_http_sandbox_path(struct moat_http *h, const char *id, const char *suffix)
{
	return moat_http_path(h, "sandboxes", id, suffix);
}
